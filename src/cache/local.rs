//! The local tier, [`Local`]: this process's store of answers, the count of invalidations that
//! keeps a call in flight from undoing one, and where every revocation applied here is told. The
//! shared tier's subscriber holds it too, to apply what other nodes revoke.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::broadcast;

use super::entry::{Cached, Generation, Lookup, Verdict};
use super::key::{CacheKey, KeyRef, KeyView};
use super::revocation::{Revocation, Revocations};
use super::store::Store;
use crate::auth_url::Endpoint;
use crate::telemetry::{self, Scope};

/// The local tier and what must reach it from elsewhere: shared with the shared tier's
/// subscriber, which applies other nodes' invalidations to it.
pub(crate) struct Local {
    /// Answers (users and rejections), each with its own time to live.
    store: Store,
    /// Bumped by every invalidation: a call that started before one does not cache its answer,
    /// so an invalidation cannot be undone by a call already in flight.
    generation: AtomicU64,
    /// Where every invalidation applied here is told, local or remote.
    revocations: Revocations,
}

impl Local {
    /// An empty tier around `store`.
    pub(super) fn new(store: Store) -> Local {
        Local {
            store,
            generation: AtomicU64::new(0),
            revocations: Revocations::new(),
        }
    }

    /// What the store says for `key`: the hit path.
    #[inline(always)]
    pub(super) fn lookup(&self, key: &KeyRef<'_>) -> Lookup {
        self.store.get(key)
    }

    /// A fresh answer for `key`, if one is there. `contains_key` first: unlike a `get` it
    /// records no read, so the usual case (nothing there) costs a probe of the map and nothing
    /// more.
    pub(super) fn recheck(&self, key: &KeyRef<'_>) -> Option<Verdict> {
        if !self.store.contains_key(key as &dyn KeyView) {
            return None;
        }
        match self.lookup(key) {
            Lookup::Fresh(verdict) => Some(verdict),
            Lookup::Stale(_) | Lookup::Absent => None,
        }
    }

    /// The invalidations so far.
    pub(super) fn generation(&self) -> Generation {
        Generation(self.generation.load(Ordering::Acquire))
    }

    /// Tells every subscriber; nobody listening is fine.
    pub(crate) fn publish(&self, revocation: Revocation) {
        self.revocations.publish(revocation);
    }

    /// A subscriber to every revocation from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Revocation> {
        self.revocations.subscribe()
    }

    /// Entries in the store, once moka has applied what is pending.
    pub(super) fn entries(&self) -> u64 {
        self.store.run_pending_tasks();
        self.store.entry_count()
    }

    /// Caches `cached` unless it must not live (no freshness) or an invalidation happened since
    /// `generation`; says whether it did.
    pub(super) fn store(
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
        self.store
            .insert(CacheKey::new(endpoint.clone(), token), cached);
        // An invalidation between the check and the insert may have walked the cache before
        // the entry was there: look again, and take the entry back if one came.
        if invalidated_since() {
            self.store
                .invalidate(&KeyRef { endpoint, token } as &dyn KeyView);
            return false;
        }
        self.publish_entries();
        true
    }

    pub(crate) fn evict_token(&self, endpoint: &Endpoint, token: &str) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.store
            .invalidate(&KeyRef { endpoint, token } as &dyn KeyView);
        self.publish_entries();
    }

    pub(crate) fn evict_user(&self, endpoint: &str, user_id: i64) {
        self.evict_where(|key, id| id == Some(user_id) && key.endpoint.as_str() == endpoint);
    }

    pub(crate) fn evict_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.store.invalidate_all();
        self.publish_entries();
    }

    /// Walks the cache and drops the entries `doomed` picks, given each key and its user's id
    /// (`None` for a rejection): O(entries), for rare administrative use.
    pub(crate) fn evict_where(&self, doomed: impl Fn(&CacheKey, Option<i64>) -> bool) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let keys: Vec<Arc<CacheKey>> = self
            .store
            .iter()
            .filter(|(key, id)| doomed(key, *id))
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            self.store.invalidate(&*key as &dyn KeyView);
        }
        self.publish_entries();
    }

    /// Empties the local tier because invalidations may have been missed (the shared tier's
    /// channel came back), and tells the subscribers to re-check what they hold.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn resync(&self) {
        telemetry::count_invalidation(Scope::All, "remote");
        self.evict_all();
        self.revocations.publish(Revocation::Recheck);
    }

    fn publish_entries(&self) {
        metrics::gauge!(telemetry::CACHE_ENTRIES).set(self.store.entry_count() as f64);
    }
}
