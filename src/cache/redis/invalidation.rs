//! Invalidation across nodes: deleting answers from Redis and publishing what was deleted on
//! the `<prefix>invalidate` channel, for `subscriber` to apply on every other node.
//!
//! Deleting comes first and publishing second, each as its own command (on a cluster the keys
//! and the channel live in different slots), so a node told to forget an answer cannot read it
//! back from Redis. An invalidation keeps trying for a while when Redis fails, rest or not: a
//! lost one leaves other nodes serving what was revoked until it expires.

use hmac::Hmac;
use sha2::Sha256;

use super::entry::token_digest;
use super::SharedCache;
use crate::cache::{KeyView, Local, Revocation, TokenFingerprint};
use crate::telemetry::{self, Scope};

/// An invalidation as published on the channel, for every node to apply locally.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum Invalidation {
    /// One token at one endpoint, named by its Redis key digest (never the token).
    Key { endpoint: String, digest: String },
    /// Every token of one user at one endpoint.
    User { endpoint: String, user_id: i64 },
    /// Everything.
    All,
}

impl Invalidation {
    /// Applies another node's invalidation to this node's local tier, and tells the local
    /// subscribers.
    pub(super) fn apply(self, local: &Local, mac: &Hmac<Sha256>) {
        let revocation = match self {
            Invalidation::Key { endpoint, digest } => {
                telemetry::count_invalidation(Scope::Token, "remote");
                local.evict_where(|key, _| {
                    key.endpoint.as_str() == endpoint
                        && token_digest(mac, &endpoint, key.token()) == digest
                });
                Revocation::Token {
                    endpoint,
                    token: TokenFingerprint::from_digest(digest),
                }
            }
            Invalidation::User { endpoint, user_id } => {
                telemetry::count_invalidation(Scope::User, "remote");
                local.evict_user(&endpoint, user_id);
                Revocation::User { endpoint, user_id }
            }
            Invalidation::All => {
                telemetry::count_invalidation(Scope::All, "remote");
                local.evict_all();
                Revocation::All
            }
        };
        local.publish(revocation);
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
        self.broadcast("invalidate", vec![key], None, message);
    }

    /// Deletes every entry of one user (the keys its index names, and the index) and tells
    /// every node, in the background.
    pub(crate) fn delete_user(&self, endpoint: &str, user_id: i64) {
        let index = self.user_index(endpoint, user_id);
        let message = Invalidation::User {
            endpoint: endpoint.to_owned(),
            user_id,
        };
        self.broadcast("invalidate_user", vec![index.clone()], Some(index), message);
    }

    /// Deletes every entry under the prefix (on a cluster, on every master) and tells every
    /// node, in the background, insisting. The nodes are told even when the scan fails (they
    /// empty their caches whatever Redis still holds), and the whole is tried again until the
    /// scan succeeds too.
    pub(crate) fn delete_all(&self) {
        let pattern = format!("{}*", self.prefix);
        let channel = self.channel.clone();
        let payload = serde_json::to_string(&Invalidation::All).unwrap_or_default();
        let scanning = self.backend.clone();
        // A scan may take many round trips: it runs under its own, longer, deadline.
        self.spawn(
            "invalidate_all",
            true,
            self.op_timeout * 100,
            move |mut conn| {
                let (scanning, pattern) = (scanning.clone(), pattern.clone());
                let (channel, payload) = (channel.clone(), payload.clone());
                async move {
                    let scanned = scanning.delete_matching(&pattern).await;
                    redis::cmd("PUBLISH")
                        .arg(&channel)
                        .arg(payload)
                        .query_async::<()>(&mut conn)
                        .await?;
                    scanned
                }
            },
        );
    }

    /// Deletes `keys`, and the members of the set `members_of` first if given, then publishes
    /// `message`; in the background, insisting.
    fn broadcast(
        &self,
        op: &'static str,
        keys: Vec<String>,
        members_of: Option<String>,
        message: Invalidation,
    ) {
        let channel = self.channel.clone();
        let payload = serde_json::to_string(&message).unwrap_or_default();
        self.spawn(op, true, self.op_timeout, move |mut conn| {
            let (mut keys, members_of) = (keys.clone(), members_of.clone());
            let (channel, payload) = (channel.clone(), payload.clone());
            async move {
                if let Some(index) = members_of {
                    let members: Vec<String> = redis::cmd("SMEMBERS")
                        .arg(&index)
                        .query_async(&mut conn)
                        .await?;
                    keys.extend(members);
                }
                // One DEL; on a cluster the crate splits it by slot.
                redis::cmd("DEL")
                    .arg(&keys)
                    .query_async::<()>(&mut conn)
                    .await?;
                redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(&payload)
                    .query_async::<()>(&mut conn)
                    .await
            }
        });
    }
}
