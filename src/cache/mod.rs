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
//! - `store`: the local tier's storage, two moka caches under one bound (users, lasting or with
//!   a deadline of their own; rejections).
//! - `revocation`: [`Revocation`]s as events, and the [`TokenFingerprint`] that names a token.
//! - `redis` (feature `redis`): the shared tier, its connection forms (one server, Sentinel,
//!   Cluster), its keys, and the invalidation channel; without the feature, `without_redis`
//!   stands in its place with types that have no value.
//! - `model_checks` (tests only): the races between a store, a look-up in flight and a
//!   revocation, explored by shuttle.

mod entry;
mod index;
pub(crate) mod key;
mod local;
#[cfg(test)]
mod model_checks;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
pub(crate) use redis::fuzzing as redis_fuzzing;
#[cfg(not(feature = "redis"))]
mod without_redis;
#[cfg(not(feature = "redis"))]
use without_redis as redis;
mod revocation;
mod revoked;
mod store;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

pub(crate) use entry::{Cached, Lookup, Verdict};
use index::Index;
pub(crate) use key::{CacheKey, KeyHasher, KeyRef, KeyView};
use local::{Fingerprint, Local};
#[cfg(not(feature = "redis"))]
pub(crate) use redis::RedisTier;
use redis::SharedCache;
#[cfg(feature = "redis")]
pub use redis::{RedisTier, RedisTierError};
pub use revocation::{DatedRevocation, Revocation, RevocationFeed, TokenFingerprint};
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
    /// How much older than its resolution a session's answer may be: `cache_ttl` plus the
    /// clock skew (see [`DatedRevocation::spares`]).
    pub(crate) late_margin: Duration,
    /// The shared tier, if any.
    pub(crate) shared: Option<RedisTier>,
}

/// A revocation's way to the shared tier: `true` once it is there (its script ran and its
/// message is on the stream); closed without `true` if the tier gave up on it.
pub(crate) type Ack = watch::Receiver<bool>;

/// Revocations on their way to the shared tier at most at once: past it, what comes next is
/// folded into one revocation of everything, which covers it, so that an outage of Redis holds
/// a bounded outbox however many revocations are made meanwhile.
const OUTBOX_CAP: usize = 1024;

/// The revocations not yet in the shared tier: the background tasks insisting on each (see
/// `redis::invalidation`) are the outbox; this is its bound.
#[derive(Default)]
struct Outbox {
    /// Each pending revocation's way there.
    pending: Vec<Ack>,
    /// The revocation of everything that what came past the cap was folded into, and its
    /// date: the latest made_at folded into it (unix ms), read as it is told.
    folded: Option<(Ack, Arc<AtomicU64>)>,
}

/// Whether `ack` still waits: not there yet, and not given up.
fn waiting(ack: &Ack) -> bool {
    !*ack.borrow() && ack.has_changed().is_ok()
}

/// Every tier of one resolver.
pub(crate) struct Tiers {
    local: Arc<Local>,
    /// The second tier, shared by every node, if configured.
    shared: Option<SharedCache>,
    /// Whether this node hears every revocation now: always without a shared tier; with one,
    /// while the shared tier's stream is read and caught up. While not, nothing cached admits
    /// anyone (another node's revocation may be missing): look-ups go to the API.
    trusted: Arc<AtomicBool>,
    /// What is on its way to the shared tier.
    outbox: Mutex<Outbox>,
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
        let local = Arc::new(Local::new(
            store,
            index,
            fingerprint,
            settings.horizon,
            settings.late_margin,
        ));
        let trusted = match &shared {
            Some(shared) => shared.trusted_flag(),
            None => Arc::new(AtomicBool::new(true)),
        };
        Ok(Tiers {
            local,
            shared,
            trusted,
            outbox: Mutex::default(),
        })
    }

    /// The local tier's answer for `key`, telling fresh entries from ones kept only as a
    /// fallback. The hit path: the clock is read only for entries that end before the cache's
    /// time to live (a shorter `max-age`, an `exp`, a read-through) or with stale serving on;
    /// one relaxed load says whether this node hears every revocation now.
    ///
    /// While it does not (the shared tier's stream is lost, or not caught up yet), a user is
    /// [`Lookup::Absent`], fresh or stale: whoever asks is verified by the API, as another
    /// node's revocation may be what this node has not heard. A rejection still refuses.
    #[inline(always)]
    pub(crate) fn lookup(&self, key: &KeyRef<'_>) -> Lookup {
        let found = self.local.store.get(key);
        if self.trusted.load(Ordering::Relaxed) {
            return found;
        }
        distrusted(found)
    }

    /// A fresh answer another resolution stored since the caller's [`lookup`](Self::lookup)
    /// missed; as [`lookup`](Self::lookup), no user while this node may have missed a
    /// revocation.
    pub(crate) fn recheck(&self, key: &KeyRef<'_>) -> Option<Verdict> {
        let verdict = self.local.recheck(key)?;
        match verdict {
            Verdict::User(_) if !self.trusted.load(Ordering::Relaxed) => None,
            verdict => Some(verdict),
        }
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
        // What Redis holds was written before revocations this node may not have heard of.
        if !self.trusted.load(Ordering::Acquire) {
            return None;
        }
        let got = shared.get(endpoint.as_str(), token).await?;
        // Trust may have been lost while Redis answered: revocations told meanwhile unheard.
        if !self.trusted.load(Ordering::Acquire) {
            return None;
        }
        let cached = complete(got);
        let key = CacheKey::new(Arc::clone(endpoint), token);
        self.local.store(&key, token, &cached, since);
        Some(cached)
    }

    /// Stores a fresh answer for `token` in every tier, under `key` (its key) locally, unless it
    /// has no freshness or something it names was revoked since `since`.
    pub(crate) fn store(&self, key: &CacheKey, token: &str, cached: &Cached, since: Mark) {
        if !self.local.store(key, token, cached, since) {
            return;
        }
        if let Some(shared) = &self.shared {
            shared.put(key.endpoint().as_str(), token, cached);
        }
    }

    /// Drops one token's answer at `endpoint` in every tier and on every node, and tells the
    /// subscribers; the revocation was made at `made_at`. Its way to the shared tier, if
    /// there is one.
    pub(crate) fn invalidate_token(
        &self,
        endpoint: &Endpoint,
        token: &str,
        made_at: SystemTime,
    ) -> Option<Ack> {
        telemetry::count_invalidation(Scope::Token, "local");
        let revocation = Revocation::Token {
            endpoint: endpoint.as_str().to_owned(),
            token: self.fingerprint(endpoint.as_str(), token),
        };
        let target = local::Target::Token { endpoint, token };
        self.local.revoke(target, revocation, Some(made_at));
        let shared = self.shared.as_ref()?;
        self.send(made_at, |at| shared.delete(endpoint.as_str(), token, at))
    }

    /// Drops every answer of user `user_id` at `endpoint` in every tier and on every node, as
    /// [`invalidate_token`](Self::invalidate_token).
    pub(crate) fn invalidate_user(
        &self,
        endpoint: &Endpoint,
        user_id: i64,
        made_at: SystemTime,
    ) -> Option<Ack> {
        telemetry::count_invalidation(Scope::User, "local");
        let revocation = Revocation::User {
            endpoint: endpoint.as_str().to_owned(),
            user_id,
        };
        let target = local::Target::User {
            endpoint,
            user: user_id,
        };
        self.local.revoke(target, revocation, Some(made_at));
        let shared = self.shared.as_ref()?;
        self.send(made_at, |at| {
            shared.delete_user(endpoint.as_str(), user_id, at)
        })
    }

    /// Drops every answer of one of the integrator's sessions (of user `user_id`) at
    /// `endpoint` in every tier and on every node, as
    /// [`invalidate_token`](Self::invalidate_token).
    pub(crate) fn invalidate_session(
        &self,
        endpoint: &Endpoint,
        user_id: i64,
        session: &str,
        made_at: SystemTime,
    ) -> Option<Ack> {
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
        self.local.revoke(target, revocation, Some(made_at));
        let shared = self.shared.as_ref()?;
        self.send(made_at, |at| {
            shared.delete_session(endpoint.as_str(), user_id, session, at)
        })
    }

    /// Drops every answer in every tier and on every node, as
    /// [`invalidate_token`](Self::invalidate_token).
    pub(crate) fn invalidate_all(&self, made_at: SystemTime) -> Option<Ack> {
        telemetry::count_invalidation(Scope::All, "local");
        self.local.revoke_all_at(Revocation::All, Some(made_at));
        let shared = self.shared.as_ref()?;
        self.send(made_at, |at| shared.delete_all(at))
    }

    /// Puts a revocation made at `made_at` in the outbox with `send` (given the time in unix
    /// ms), or, when the outbox is full, folds it into one revocation of everything.
    fn send(&self, made_at: SystemTime, send: impl FnOnce(u64) -> Ack) -> Option<Ack> {
        let shared = self.shared.as_ref()?;
        let at = made_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        let mut outbox = self.outbox.lock().unwrap_or_else(PoisonError::into_inner);
        outbox.pending.retain(waiting);
        if outbox.pending.len() < OUTBOX_CAP {
            let ack = send(at);
            outbox.pending.push(ack.clone());
            return Some(ack);
        }
        if let Some((folded, date)) = outbox.folded.as_ref().filter(|(ack, _)| waiting(ack)) {
            // Dated with the latest revocation in it: dated with the first, it would spare
            // what the later ones revoke. Raised before the check: one told meanwhile is told
            // again with this date, or, done already, not joined.
            date.fetch_max(at, Ordering::SeqCst);
            if waiting(folded) {
                return Some(folded.clone());
            }
        }
        metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => "outbox_full").increment(1);
        tracing::warn!(
            pending = outbox.pending.len(),
            "revocations pile up while the shared tier is out of reach: \
             the next ones go as one revocation of everything"
        );
        let date = Arc::new(AtomicU64::new(at));
        let folded = shared.delete_all_folding(date.clone());
        outbox.folded = Some((folded.clone(), date));
        Some(folded)
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
    pub(crate) fn revocations(&self) -> RevocationFeed<Revocation> {
        self.local.subscribe()
    }

    /// A subscriber to every revocation from now on, with the time each was made.
    pub(crate) fn dated_revocations(&self) -> RevocationFeed<DatedRevocation> {
        self.local.subscribe_dated()
    }

    /// Entries in the local tier, once moka has applied what is pending.
    pub(crate) fn entries(&self) -> u64 {
        self.local.entries()
    }

    /// The heap the local tier's revocation index holds, for the benches.
    pub(crate) fn index_heap_bytes(&self) -> usize {
        self.local.index_heap_bytes()
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

/// [`Tiers::lookup`]'s answer while this node may have missed a revocation: no user.
#[cold]
fn distrusted(found: Lookup) -> Lookup {
    match found {
        Lookup::Fresh(Verdict::Rejected(status)) => Lookup::Fresh(Verdict::Rejected(status)),
        Lookup::Fresh(Verdict::User(_)) | Lookup::Stale(_) | Lookup::Absent => Lookup::Absent,
    }
}

/// Without a shared tier, a token's fingerprint in the index and the revocation log: a hash
/// keyed at random for this process (it never leaves it).
fn local_fingerprint() -> Fingerprint {
    use std::hash::BuildHasher;
    let seed = foldhash::quality::RandomState::default();
    Arc::new(move |endpoint: &Endpoint, token: &[u8]| seed.hash_one((endpoint.key_hash(), token)))
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;
    use crate::PlainHttp;

    /// Tiers whose shared tier is a Redis nobody listens for: every revocation stays pending.
    fn unreachable() -> Tiers {
        Tiers::new(TierSettings {
            capacity: 100,
            stale_for: Duration::ZERO,
            cache_ttl: Duration::from_secs(60),
            negative_ttl: Duration::from_secs(5),
            horizon: Duration::from_secs(30),
            late_margin: Duration::from_secs(90),
            shared: Some(RedisTier::new("redis://127.0.0.1:1", "0123456789abcdef")),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn the_outbox_is_bounded_and_what_comes_past_it_is_one_revocation_of_everything() {
        let tiers = unreachable();
        let endpoint = Endpoint::parse("https://a.example", PlainHttp::LoopbackOnly).unwrap();
        let now = SystemTime::now();
        for user in 0..OUTBOX_CAP as i64 {
            let ack = tiers.invalidate_user(&endpoint, user, now).unwrap();
            assert!(!*ack.borrow(), "Redis is out of reach");
        }
        let past = tiers.invalidate_user(&endpoint, -1, now).unwrap();
        let later = now + Duration::from_secs(30);
        let further = tiers.invalidate_token(&endpoint, "t", later).unwrap();
        let earlier = tiers.invalidate_user(&endpoint, -2, now).unwrap();
        assert!(
            past.same_channel(&further) && past.same_channel(&earlier),
            "folded into the same revocation"
        );
        let outbox = tiers.outbox.lock().unwrap();
        assert_eq!(outbox.pending.len(), OUTBOX_CAP);
        let (all, date) = outbox.folded.as_ref().unwrap();
        assert!(all.same_channel(&past));
        let later_ms = later
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert_eq!(
            date.load(Ordering::SeqCst),
            later_ms,
            "dated with the latest revocation folded into it"
        );
    }
}
