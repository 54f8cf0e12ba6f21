//! Invalidation across nodes: deleting answers from Redis and publishing what was deleted on
//! the `<prefix>invalidate` channel, and the subscriber that applies every other node's
//! invalidations to this node's local tier.
//!
//! The channel is plain pub/sub: a node that is not subscribed when a message is published
//! misses it, so a subscriber that re-subscribes empties its local tier.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use hmac::Hmac;
use sha2::Sha256;

use super::{token_digest, SharedCache, MAX_RESUBSCRIBE_DELAY};
use crate::cache::{KeyView, Local};
use crate::telemetry::{self, Scope};

/// An invalidation as published on the channel, for every node to apply locally.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Invalidation {
    /// One token at one endpoint, named by its Redis key digest (never the token).
    Key { endpoint: String, digest: String },
    /// Every token of one user at one endpoint.
    User { endpoint: String, user_id: i64 },
    /// Everything.
    All,
}

impl Invalidation {
    /// Applies another node's invalidation to this node's local tier.
    fn apply(self, local: &Local, mac: &Hmac<Sha256>) {
        match self {
            Invalidation::Key { endpoint, digest } => {
                telemetry::count_invalidation(Scope::Token, "remote");
                local.evict_where(|key, _| {
                    key.endpoint.as_str() == endpoint
                        && token_digest(mac, &endpoint, key.token()) == digest
                });
            }
            Invalidation::User { endpoint, user_id } => {
                telemetry::count_invalidation(Scope::User, "remote");
                local.evict_user(&endpoint, user_id);
            }
            Invalidation::All => {
                telemetry::count_invalidation(Scope::All, "remote");
                local.evict_all();
            }
        }
    }
}

impl SharedCache {
    /// Deletes one token's entry and tells every node, in the background.
    pub(crate) fn delete(&self, endpoint: &str, token: &str) {
        let digest = self.digest(endpoint, token);
        let key = self.key(&digest);
        let message = Invalidation::Key {
            endpoint: endpoint.to_owned(),
            digest,
        };
        self.broadcast(redis::pipe().del(key).ignore(), &message);
    }

    /// Deletes every entry of one user and tells every node, in the background.
    pub(crate) fn delete_user(&self, endpoint: &str, user_id: i64) {
        let index = self.user_index(endpoint, user_id);
        let Some(mut conn) = self.conn() else { return };
        let message = Invalidation::User {
            endpoint: endpoint.to_owned(),
            user_id,
        };
        let channel = self.channel.clone();
        let payload = serde_json::to_string(&message).unwrap_or_default();
        self.spawn("invalidate_user", async move {
            let keys: Vec<String> = redis::cmd("SMEMBERS")
                .arg(&index)
                .query_async(&mut conn)
                .await?;
            let mut pipe = redis::pipe();
            for key in keys {
                pipe.del(key).ignore();
            }
            pipe.del(&index)
                .ignore()
                .publish(&channel, payload)
                .ignore();
            pipe.query_async::<()>(&mut conn).await
        });
    }

    /// Deletes every entry under the prefix and tells every node, in the background.
    pub(crate) fn delete_all(&self) {
        let Some(mut conn) = self.conn() else { return };
        let pattern = format!("{}*", self.prefix);
        let channel = self.channel.clone();
        let payload = serde_json::to_string(&Invalidation::All).unwrap_or_default();
        let timeout = self.op_timeout;
        let errors = self.errors.clone();
        // A scan may take many round trips: it runs under its own, longer, deadline.
        tokio::spawn(async move {
            let work = async {
                let mut cursor: u64 = 0;
                loop {
                    let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await?;
                    if !keys.is_empty() {
                        redis::cmd("UNLINK")
                            .arg(keys)
                            .query_async::<()>(&mut conn)
                            .await?;
                    }
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
                redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(payload)
                    .query_async::<()>(&mut conn)
                    .await
            };
            if !matches!(tokio::time::timeout(timeout * 100, work).await, Ok(Ok(()))) {
                errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => "invalidate_all")
                    .increment(1);
            }
        });
    }

    fn broadcast(&self, pipe: &mut redis::Pipeline, message: &Invalidation) {
        let Some(mut conn) = self.conn() else { return };
        let payload = serde_json::to_string(message).unwrap_or_default();
        let mut pipe = pipe.clone();
        pipe.publish(&self.channel, payload).ignore();
        self.spawn("invalidate", async move {
            pipe.query_async::<()>(&mut conn).await
        });
    }

    /// Whether the invalidation subscriber is listening now.
    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }

    /// Starts, once, the task that applies other nodes' invalidations to `local`. It
    /// re-subscribes after Redis restarts; since messages sent meanwhile are lost, `local` is
    /// emptied after every re-subscription.
    pub(crate) fn start_subscriber(&self, local: Weak<Local>) {
        if self.subscriber.get().is_some() {
            return;
        }
        let mac = self.mac.clone();
        let apply = move |invalidation: Invalidation| {
            if let Some(local) = local.upgrade() {
                invalidation.apply(&local, &mac);
            }
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let channel = self.channel.clone();
        let subscribed = self.subscribed.clone();
        let timeout = self.op_timeout;
        let _ = self.subscriber.set(runtime.spawn(async move {
            use futures_util::StreamExt;
            let mut delay = Duration::from_millis(50);
            let mut first = true;
            loop {
                let connected = tokio::time::timeout(timeout * 20, async {
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.subscribe(&channel).await?;
                    redis::RedisResult::Ok(pubsub)
                })
                .await;
                if let Ok(Ok(pubsub)) = connected {
                    if !first {
                        apply(Invalidation::All);
                    }
                    first = false;
                    delay = Duration::from_millis(50);
                    subscribed.store(true, Ordering::Release);
                    let mut messages = pubsub.into_on_message();
                    while let Some(msg) = messages.next().await {
                        match msg
                            .get_payload::<String>()
                            .ok()
                            .and_then(|p| serde_json::from_str(&p).ok())
                        {
                            Some(invalidation) => apply(invalidation),
                            None => tracing::warn!("ignoring a malformed invalidation message"),
                        }
                    }
                    subscribed.store(false, Ordering::Release);
                    metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => "subscribe")
                        .increment(1);
                    tracing::warn!("lost the shared cache invalidation channel; re-subscribing");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RESUBSCRIBE_DELAY);
            }
        }));
    }
}
