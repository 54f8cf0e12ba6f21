//! The resolver's cache as one type, [`Tiers`]: the local moka cache of this process and, with
//! the `redis` feature and a configured [`RedisTier`], the shared tier behind it.
//!
//! It owns where answers are kept and how they are dropped: looking an answer up, storing a
//! fresh one in every tier, reading through to the shared tier on a local miss, and applying
//! invalidations here, in Redis and (through Redis's channel) on every other node. The
//! resolver decides what to cache and for how long; it never needs to know which tiers exist.
//!
//! - [`key`]: keys and their keyed hashing.
//! - [`local`]: entries and their lifetimes, in three moka caches (users fresh for the whole
//!   time to live, users with a deadline of their own, rejections).
//! - `redis` (feature `redis`): the shared tier, its connection forms (one server, Sentinel,
//!   Cluster), its keys, and the invalidation channel; without the feature, `without_redis`
//!   stands in its place with types that have no value.

pub(crate) mod key;
pub(crate) mod local;
#[cfg(feature = "redis")]
mod redis;
#[cfg(not(feature = "redis"))]
mod without_redis;
#[cfg(not(feature = "redis"))]
use without_redis as redis;
mod revocation;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use key::{CacheKey, KeyHasher, KeyRef, KeyView};
pub(crate) use local::Cached;
#[cfg(not(feature = "redis"))]
pub(crate) use redis::RedisTier;
use redis::SharedCache;
#[cfg(feature = "redis")]
pub use redis::{RedisTier, RedisTierError};
use revocation::Revocations;
pub use revocation::{Revocation, TokenFingerprint};

use crate::auth_url::Endpoint;
use crate::error::ConfigError;
use crate::telemetry::{self, Scope};
use crate::user::User;

/// What the local tier holds for a key.
pub(crate) enum Lookup {
    /// An answer to use as it is.
    Fresh(Verdict),
    /// A user past its freshness, kept to serve if the API turns out to be unavailable.
    Stale(Arc<User>),
    /// Nothing.
    Absent,
}

/// What an answer says: the user the API vouched for, or the status it rejected the token
/// with. A [`Cached`] answer is one with its deadline.
#[derive(Clone, Debug)]
pub(crate) enum Verdict {
    /// The API vouched for this user.
    User(Arc<User>),
    /// The API answered 401 or 403.
    Rejected(u16),
}

/// How many invalidations had happened when a call began; see [`Tiers::generation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Generation(u64);

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
    /// The shared tier, if any.
    pub(crate) shared: Option<RedisTier>,
}

/// The local tier and what must reach it from elsewhere: shared with the shared tier's
/// subscriber, which applies other nodes' invalidations to it.
pub(crate) struct Local {
    /// Answers (users and rejections), each with its own time to live.
    cache: local::Cache,
    /// Bumped by every invalidation: a call that started before one does not cache its answer,
    /// so an invalidation cannot be undone by a call already in flight.
    generation: AtomicU64,
    /// Where every invalidation applied here is told, local or remote.
    revocations: Revocations,
}

/// Every tier of one resolver.
pub(crate) struct Tiers {
    local: Arc<Local>,
    /// The second tier, shared by every node, if configured.
    shared: Option<SharedCache>,
}

impl Tiers {
    pub(crate) fn new(settings: TierSettings) -> Result<Tiers, ConfigError> {
        let local = Arc::new(Local {
            cache: local::Cache::new(
                settings.capacity,
                settings.cache_ttl,
                settings.negative_ttl,
                settings.stale_for,
            ),
            generation: AtomicU64::new(0),
            revocations: Revocations::new(),
        });
        let shared = settings
            .shared
            .map(|tier| SharedCache::new(tier, settings.cache_ttl))
            .transpose()?;
        Ok(Tiers { local, shared })
    }

    /// The local tier's answer for `key`, telling fresh entries from ones kept only as a
    /// fallback. The hit path: the clock is read only for entries that end before the cache's
    /// time to live (a shorter `max-age`, an `exp`, a read-through) or with stale serving on.
    #[inline(always)]
    pub(crate) fn lookup(&self, key: &KeyRef<'_>) -> Lookup {
        self.local.cache.get(key)
    }

    /// A fresh answer another resolution stored since the caller's [`lookup`](Self::lookup)
    /// missed. `contains_key` first: unlike a `get` it records no read, so the usual case
    /// (nothing there) costs a probe of the map and nothing more.
    pub(crate) fn recheck(&self, key: &KeyRef<'_>) -> Option<Verdict> {
        if !self.local.cache.contains_key(key as &dyn KeyView) {
            return None;
        }
        match self.lookup(key) {
            Lookup::Fresh(verdict) => Some(verdict),
            Lookup::Stale(_) | Lookup::Absent => None,
        }
    }

    /// The invalidations so far: read it before fetching an answer, and give it back to
    /// [`store`](Self::store), which drops the answer if an invalidation came in between.
    pub(crate) fn generation(&self) -> Generation {
        Generation(self.local.generation.load(Ordering::Acquire))
    }

    /// The shared tier's answer for a local miss, completed by `complete` (Redis does not keep
    /// what the token itself says, such as a JWT's expiry) and stored locally so, with the
    /// lifetime it has left there; `None` without a shared tier, when it has none, or when Redis
    /// fails.
    pub(crate) async fn read_through(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        generation: Generation,
        complete: impl FnOnce(Cached) -> Cached,
    ) -> Option<Cached> {
        let shared = self.shared.as_ref()?;
        self.start_subscriber();
        let cached = complete(shared.get(endpoint.as_str(), token).await?);
        self.local.store(endpoint, token, &cached, generation);
        Some(cached)
    }

    /// Stores a fresh answer in every tier, unless it has no freshness or an invalidation came
    /// after `generation`.
    pub(crate) fn store(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        cached: &Cached,
        generation: Generation,
    ) {
        if !self.local.store(endpoint, token, cached, generation) {
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
        self.local.evict_token(endpoint, token);
        self.local.revocations.publish(Revocation::Token {
            endpoint: endpoint.as_str().to_owned(),
            token: self.fingerprint(endpoint.as_str(), token),
        });
        if let Some(shared) = &self.shared {
            shared.delete(endpoint.as_str(), token);
        }
    }

    /// Drops every answer of user `user_id` at `endpoint` in every tier and on every node.
    pub(crate) fn invalidate_user(&self, endpoint: &str, user_id: i64) {
        telemetry::count_invalidation(Scope::User, "local");
        self.local.evict_user(endpoint, user_id);
        self.local.revocations.publish(Revocation::User {
            endpoint: endpoint.to_owned(),
            user_id,
        });
        if let Some(shared) = &self.shared {
            shared.delete_user(endpoint, user_id);
        }
    }

    /// Drops every answer in every tier and on every node.
    pub(crate) fn invalidate_all(&self) {
        telemetry::count_invalidation(Scope::All, "local");
        self.local.evict_all();
        self.local.revocations.publish(Revocation::All);
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
        self.local.revocations.subscribe()
    }

    /// Entries in the local tier, once moka has applied what is pending.
    pub(crate) fn entries(&self) -> u64 {
        self.local.cache.run_pending_tasks();
        self.local.cache.entry_count()
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

impl Local {
    /// Caches `cached` unless it must not live (no freshness) or an invalidation happened since
    /// `generation`; says whether it did.
    fn store(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        cached: &Cached,
        generation: Generation,
    ) -> bool {
        let invalidated_since = || self.generation.load(Ordering::Acquire) != generation.0;
        if cached.fresh_until().has_passed() || invalidated_since() {
            return false;
        }
        self.cache
            .insert(CacheKey::new(endpoint.clone(), token), cached);
        // An invalidation between the check and the insert may have walked the cache before
        // the entry was there: look again, and take the entry back if one came.
        if invalidated_since() {
            self.cache
                .invalidate(&KeyRef { endpoint, token } as &dyn KeyView);
            return false;
        }
        self.publish_entries();
        true
    }

    fn evict_token(&self, endpoint: &Endpoint, token: &str) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.cache
            .invalidate(&KeyRef { endpoint, token } as &dyn KeyView);
        self.publish_entries();
    }

    fn evict_user(&self, endpoint: &str, user_id: i64) {
        self.evict_where(|key, id| id == Some(user_id) && key.endpoint.as_str() == endpoint);
    }

    fn evict_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.cache.invalidate_all();
        self.publish_entries();
    }

    /// Walks the cache and drops the entries `doomed` picks, given each key and its user's id
    /// (`None` for a rejection): O(entries), for rare administrative use.
    fn evict_where(&self, doomed: impl Fn(&CacheKey, Option<i64>) -> bool) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let keys: Vec<Arc<CacheKey>> = self
            .cache
            .iter()
            .filter(|(key, id)| doomed(key, *id))
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            self.cache.invalidate(&*key as &dyn KeyView);
        }
        self.publish_entries();
    }

    /// Empties the local tier because invalidations may have been missed (the shared tier's
    /// channel came back), and tells the subscribers to re-check what they hold.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    fn resync(&self) {
        telemetry::count_invalidation(Scope::All, "remote");
        self.evict_all();
        self.revocations.publish(Revocation::Recheck);
    }

    fn publish_entries(&self) {
        metrics::gauge!(telemetry::CACHE_ENTRIES).set(self.cache.entry_count() as f64);
    }
}
