//! The subscriber: one task per resolver that listens on the `<prefix>invalidate` channel and
//! applies every other node's invalidations to this node's local tier.
//!
//! The channel is plain pub/sub on every form. On a cluster a `PUBLISH` reaches every node over
//! the cluster bus, so the subscriber listens on any one configured node and moves to the next
//! when that one goes; sharded pub/sub would pin the channel to one shard and make the
//! subscriber chase that shard through failovers and resharding, for a channel that carries a
//! few messages a minute. Behind Sentinel it listens on the master the sentinels name, and
//! follows a failover by asking them again.
//!
//! A node that is not subscribed when a message is published misses it, so a subscriber that
//! re-subscribes empties its local tier and tells the revocation subscribers to re-check
//! what they hold.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use futures_util::StreamExt;

use super::invalidation::Invalidation;
use super::SharedCache;
use crate::cache::Local;
use crate::telemetry;

/// Longest pause between attempts to re-subscribe to the invalidation channel.
const MAX_RESUBSCRIBE_DELAY: Duration = Duration::from_secs(2);

impl SharedCache {
    /// Whether the invalidation subscriber is listening now.
    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }

    /// Starts, once, the task that applies other nodes' invalidations to `local`. It
    /// re-subscribes after Redis restarts or fails over; since messages sent meanwhile are
    /// lost, `local` is emptied after every re-subscription.
    pub(crate) fn start_subscriber(&self, local: Weak<Local>) {
        if self.subscriber.get().is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let _ = self.runtime.set(runtime.clone());
        let mac = self.mac.clone();
        let resubscribed = local.clone();
        let apply = move |invalidation: Invalidation| {
            if let Some(local) = local.upgrade() {
                invalidation.apply(&local, &mac);
            }
        };
        let backend = self.backend.clone();
        let channel = self.channel.clone();
        let subscribed = self.subscribed.clone();
        let timeout = self.op_timeout * 20;
        let _ = self.subscriber.set(runtime.spawn(async move {
            let mut delay = Duration::from_millis(50);
            let mut first = true;
            for attempt in 0usize.. {
                let connected = tokio::time::timeout(timeout, async {
                    let mut pubsub = backend.pubsub(attempt).await?;
                    pubsub.subscribe(&channel).await?;
                    redis::RedisResult::Ok(pubsub)
                })
                .await;
                let pubsub = match connected {
                    Ok(Ok(pubsub)) => pubsub,
                    Ok(Err(e)) => {
                        let detail = super::error::describe(&e);
                        tracing::debug!(detail, "cannot subscribe to the invalidation channel yet");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(MAX_RESUBSCRIBE_DELAY);
                        continue;
                    }
                    Err(_) => {
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(MAX_RESUBSCRIBE_DELAY);
                        continue;
                    }
                };
                if !first {
                    if let Some(local) = resubscribed.upgrade() {
                        local.resync();
                    }
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
                // The server went: behind Sentinel the master may be another one now.
                backend.lost(None);
                metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => "subscribe")
                    .increment(1);
                tracing::warn!("lost the shared cache invalidation channel; re-subscribing");
                tokio::time::sleep(delay).await;
            }
        }));
    }
}
