//! The resolver's cache as one type, [`Tiers`]: the local moka cache of this process and, with
//! the `redis` feature and a configured [`RedisTier`], the shared tier behind it.
//!
//! It owns where answers are kept and how they are dropped: looking an answer up, storing a
//! fresh one in every tier, reading through to the shared tier on a local miss, and applying
//! invalidations here, in Redis and (through Redis's channel) on every other node. The
//! resolver decides what to cache and for how long; it never needs to know which tiers exist.
//!
//! - `entry`: what an entry is: an answer with its deadline, what a look-up finds.
//! - [`key`]: keys and their keyed hashing.
//! - `local`: the local tier: its store, the count of invalidations that keeps a call in flight
//!   from undoing one, and where revocations are told.
//! - `store`: the local tier's storage, three moka caches (users fresh for the whole time to
//!   live, users with a deadline of their own, rejections).
//! - `revocation`: [`Revocation`]s as events, and the [`TokenFingerprint`] that names a token.
//! - `redis` (feature `redis`): the shared tier, its connection forms (one server, Sentinel,
//!   Cluster), its keys, and the invalidation channel; without the feature, `without_redis`
//!   stands in its place with types that have no value.

mod entry;
mod index;
pub(crate) mod key;
mod local;
#[cfg(feature = "redis")]
mod redis;
#[cfg(not(feature = "redis"))]
mod without_redis;
#[cfg(not(feature = "redis"))]
use without_redis as redis;
mod revocation;
mod revoked;
mod store;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use entry::{Cached, Lookup, Verdict};
use index::Index;
pub(crate) use key::{CacheKey, KeyHasher, KeyRef, KeyView};
use local::{Fingerprint, Local};
#[cfg(not(feature = "redis"))]
pub(crate) use redis::RedisTier;
use redis::SharedCache;
#[cfg(feature = "redis")]
pub use redis::{RedisTier, RedisTierError};
pub use revocation::{Revocation, TokenFingerprint};
pub(crate) use revoked::Mark;
use store::Store;

use crate::auth_url::Endpoint;
use crate::error::ConfigError;
use crate::telemetry::{self, Scope};
use crate::user::User;

/// How the tiers are set up, from the resolver's builder.
pub(crate) struct TierSettings {
    /// Entries the local tier holds at most.
    pub(crate) capacity: u64,
    /// How long a user outlives its freshness locally, as a fallback (`serve_stale_for`).
    pub(crate) stale_for: Duration,
    /// The longest a user is fresh (`cache_ttl`): the local tier's time to live for users, and
    /// the bound of the shared tier's user indexes.
    pub(crate) cache_ttl: Duration,
    /// How long a rejection is kept (`negative_cache_ttl`).
    pub(crate) negative_ttl: Duration,
    /// Longer than any look-up lasts: how long a revocation is remembered for look-ups that
    /// began before it.
    pub(crate) horizon: Duration,
    /// The shared tier, if any.
    pub(crate) shared: Option<RedisTier>,
}

/// Every tier of one resolver.
pub(crate) struct Tiers {
    local: Arc<Local>,
    /// The second tier, shared by every node, if configured.
    shared: Option<SharedCache>,
}

impl Tiers {
    pub(crate) fn new(settings: TierSettings) -> Result<Tiers, ConfigError> {
        let shared = settings
            .shared
            .map(|tier| SharedCache::new(tier, settings.cache_ttl))
            .transpose()?;
        let fingerprint = match &shared {
            Some(shared) => shared.token_fingerprint(),
            None => local_fingerprint(),
        };
        let index = Arc::new(Index::new(shared.is_some()));
        let store = Store::new(
            settings.capacity,
            settings.cache_ttl,
            settings.negative_ttl,
            settings.stale_for,
        );
        let local = Arc::new(Local::new(store, index, fingerprint, settings.horizon));
        Ok(Tiers { local, shared })
    }

    /// The local tier's answer for `key`, telling fresh entries from ones kept only as a
    /// fallback. The hit path: the clock is read only for entries that end before the cache's
    /// time to live (a shorter `max-age`, an `exp`, a read-through) or with stale serving on.
    #[inline(always)]
    pub(crate) fn lookup(&self, key: &KeyRef<'_>) -> Lookup {
        self.local.lookup(key)
    }

    /// A fresh answer another resolution stored since the caller's [`lookup`](Self::lookup)
    /// missed.
    pub(crate) fn recheck(&self, key: &KeyRef<'_>) -> Option<Verdict> {
        self.local.recheck(key)
    }

    /// Where revocations stand: take it before fetching an answer, and give it back to
    /// [`store`](Self::store) and [`revoked_since`](Self::revoked_since).
    pub(crate) fn mark(&self) -> Mark {
        self.local.mark()
    }

    /// Whether something `user`, the answer for `token` at `endpoint`, stands for (the token,
    /// the user, the user's session) was revoked since `since`: such an answer is handed to
    /// no one.
    pub(crate) fn revoked_since(
        &self,
        since: Mark,
        endpoint: &Endpoint,
        token: &str,
        user: &User,
    ) -> bool {
        self.local.revoked_since(since, endpoint, token, user)
    }

    /// The shared tier's answer for a local miss, completed by `complete` (Redis does not keep
    /// what the token itself says, such as a JWT's expiry) and stored locally so, with the
    /// lifetime it has left there; `None` without a shared tier, when it has none, or when Redis
    /// fails.
    pub(crate) async fn read_through(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        since: Mark,
        complete: impl FnOnce(Cached) -> Cached,
    ) -> Option<Cached> {
        let shared = self.shared.as_ref()?;
        self.start_subscriber();
        let cached = complete(shared.get(endpoint.as_str(), token).await?);
        self.local.store(endpoint, token, &cached, since);
        Some(cached)
    }

    /// Stores a fresh answer in every tier, unless it has no freshness or something it names
    /// was revoked since `since`.
    pub(crate) fn store(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        cached: &Cached,
        since: Mark,
    ) {
        if !self.local.store(endpoint, token, cached, since) {
            return;
        }
        if let Some(shared) = &self.shared {
            shared.put(endpoint.as_str(), token, cached);
        }
    }

    /// Drops one token's answer at `endpoint` in every tier and on every node, and tells the
    /// subscribers.
    pub(crate) fn invalidate_token(&self, endpoint: &Endpoint, token: &str) {
        telemetry::count_invalidation(Scope::Token, "local");
        let revocation = Revocation::Token {
            endpoint: endpoint.as_str().to_owned(),
            token: self.fingerprint(endpoint.as_str(), token),
        };
        self.local
            .revoke(local::Target::Token { endpoint, token }, revocation);
        if let Some(shared) = &self.shared {
            shared.delete(endpoint.as_str(), token);
        }
    }

    /// Drops every answer of user `user_id` at `endpoint` in every tier and on every node.
    pub(crate) fn invalidate_user(&self, endpoint: &Endpoint, user_id: i64) {
        telemetry::count_invalidation(Scope::User, "local");
        let revocation = Revocation::User {
            endpoint: endpoint.as_str().to_owned(),
            user_id,
        };
        let target = local::Target::User {
            endpoint,
            user: user_id,
        };
        self.local.revoke(target, revocation);
        if let Some(shared) = &self.shared {
            shared.delete_user(endpoint.as_str(), user_id);
        }
    }

    /// Drops every answer of one of the integrator's sessions (of user `user_id`) at
    /// `endpoint` in every tier and on every node.
    pub(crate) fn invalidate_session(&self, endpoint: &Endpoint, user_id: i64, session: &str) {
        telemetry::count_invalidation(Scope::Session, "local");
        let revocation = Revocation::Session {
            endpoint: endpoint.as_str().to_owned(),
            user_id,
            session: session.to_owned(),
        };
        let target = local::Target::Session {
            endpoint,
            user: user_id,
            session,
        };
        self.local.revoke(target, revocation);
        if let Some(shared) = &self.shared {
            shared.delete_session(endpoint.as_str(), user_id, session);
        }
    }

    /// Drops every answer in every tier and on every node.
    pub(crate) fn invalidate_all(&self) {
        telemetry::count_invalidation(Scope::All, "local");
        self.local.revoke_all(Revocation::All);
        if let Some(shared) = &self.shared {
            shared.delete_all();
        }
    }

    /// The name revocations give `token` at `endpoint`: the shared tier's HMAC when there is
    /// one (every node computes the same), else this process's own keyed hash.
    pub(crate) fn fingerprint(&self, endpoint: &str, token: &str) -> TokenFingerprint {
        match &self.shared {
            Some(shared) => shared.fingerprint(endpoint, token),
            None => TokenFingerprint::local(endpoint, token),
        }
    }

    /// A subscriber to every revocation from now on.
    pub(crate) fn revocations(&self) -> tokio::sync::broadcast::Receiver<Revocation> {
        self.local.subscribe()
    }

    /// Entries in the local tier, once moka has applied what is pending.
    pub(crate) fn entries(&self) -> u64 {
        self.local.entries()
    }

    /// Local misses the shared tier answered, and shared-tier operations that failed.
    pub(crate) fn shared_counts(&self) -> (u64, u64) {
        self.shared.as_ref().map_or((0, 0), SharedCache::counts)
    }

    /// Whether there is a shared tier.
    pub(crate) fn has_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Whether the shared tier's invalidation channel is subscribed now; `false` without one.
    /// Starts the subscriber if it is not running yet.
    pub(crate) fn shared_subscribed(&self) -> bool {
        self.start_subscriber();
        self.shared.as_ref().is_some_and(SharedCache::is_subscribed)
    }

    /// Starts, once, the task that applies other nodes' invalidations to the local tier.
    fn start_subscriber(&self) {
        if let Some(shared) = &self.shared {
            shared.start_subscriber(Arc::downgrade(&self.local));
        }
    }
}

/// Without a shared tier, a token's fingerprint in the index and the revocation log: a hash
/// keyed at random for this process (it never leaves it).
fn local_fingerprint() -> Fingerprint {
    use std::hash::BuildHasher;
    let seed = foldhash::quality::RandomState::default();
    Arc::new(move |endpoint: &Endpoint, token: &[u8]| seed.hash_one((endpoint.key_hash(), token)))
}
