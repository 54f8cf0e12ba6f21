//! The local tier, [`Local`]: this process's store of answers, the index that finds what a
//! revocation names in it, the log a look-up in flight is checked against, and where every
//! revocation applied here is told. The shared tier's subscriber holds it too, to apply what
//! other nodes revoke.
//!
//! Every revocation costs what it names: a token is dropped by its key, or found by its
//! fingerprint in the index when it comes from another node without the token; a user's or a
//! session's tokens are found by the user in the index. Nothing walks the store.

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

use super::entry::{Cached, Lookup, Verdict};
use super::index::Index;
use super::key::{CacheKey, KeyRef, KeyView};
use super::revocation::{DatedRevocation, Revocation, RevocationFeed, Revocations};
use super::revoked::{Mark, Named, RevocationLog};
use super::store::Store;
use crate::auth_url::Endpoint;
use crate::telemetry;
use crate::user::User;

/// A token's fingerprint as the index and the revocation log know it: the first eight bytes of
/// the shared tier's HMAC (the same on every node), or of this process's own keyed hash.
pub(crate) type Fingerprint = Arc<dyn Fn(&Endpoint, &[u8]) -> u64 + Send + Sync>;

/// The local tier and what must reach it from elsewhere: shared with the shared tier's
/// subscriber, which applies other nodes' invalidations to it.
pub(crate) struct Local {
    /// Answers (users and rejections), each with its own time to live. The tiers read it
    /// directly on a hit ([`Tiers::lookup`](super::Tiers::lookup)); everything that writes
    /// goes through `Local`, which keeps the index and the revocation log beside it.
    pub(super) store: Store,
    /// Every cached user's key, by user and, with a shared tier, by token fingerprint.
    index: Arc<Index>,
    /// The revocations applied lately: a look-up begun before one that names its answer
    /// neither caches nor hands it out.
    log: RevocationLog,
    /// A token's fingerprint.
    fingerprint: Fingerprint,
    /// Where every invalidation applied here is told, local or remote.
    revocations: Revocations,
    /// Held shared by a store from its check against the log to its entry in the index, and
    /// alone by a revocation from its record in the log to its last drop: a store either sees
    /// the revocation and keeps nothing, or is done before it and is dropped by it. Without it,
    /// a revocation landing between a store's check and its insert left the entry visible to
    /// a cache hit until the store looked again (found by `model_checks`). Misses and
    /// revocations only; the hit path never takes it.
    applying: RwLock<()>,
}

/// A revocation to tell, with the time it was made when known.
pub(crate) struct Timed(pub(crate) Revocation, pub(crate) Option<SystemTime>);

impl From<Revocation> for Timed {
    fn from(revocation: Revocation) -> Timed {
        Timed(revocation, None)
    }
}

impl From<(Revocation, Option<SystemTime>)> for Timed {
    fn from((revocation, made_at): (Revocation, Option<SystemTime>)) -> Timed {
        Timed(revocation, made_at)
    }
}

/// What a revocation names, as [`Local::revoke`] applies it.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    /// One token, carried: its key is known.
    Token {
        endpoint: &'a Endpoint,
        token: &'a str,
    },
    /// One token, by fingerprint only (from another node): found in the index. The
    /// fingerprint is 64 bits of a MAC keyed with the tier's secret, which nobody without it
    /// can aim at a token; should another cached token share it anyway (a chance of about
    /// the entries cached in 2^64), both are dropped, which costs a look-up and admits nobody.
    /// No MAC is computed to apply one.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Fingerprint {
        endpoint: &'a Endpoint,
        fingerprint: u64,
    },
    /// Every token of one user.
    User { endpoint: &'a Endpoint, user: i64 },
    /// Every token of one of the integrator's sessions of one user.
    Session {
        endpoint: &'a Endpoint,
        user: i64,
        session: &'a str,
    },
}

impl Local {
    /// An empty tier over an empty `store` and `index`, each revocation remembered for
    /// `horizon` (longer than any look-up lasts); `margin` is how much older than its
    /// resolution a session's answer may be (see [`DatedRevocation::spares`]).
    pub(super) fn new(
        store: Store,
        index: Arc<Index>,
        fingerprint: Fingerprint,
        horizon: Duration,
        margin: Duration,
    ) -> Local {
        Local {
            store,
            index,
            log: RevocationLog::new(horizon),
            fingerprint,
            revocations: Revocations::new(margin),
            applying: RwLock::new(()),
        }
    }

    /// The lock a store holds while it checks and inserts.
    fn storing(&self) -> RwLockReadGuard<'_, ()> {
        self.applying.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock a revocation holds while it records and drops.
    fn revoking(&self) -> RwLockWriteGuard<'_, ()> {
        self.applying
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh answer for `key`, if one is there. `contains_key` first: unlike a `get` it
    /// records no read, so the usual case (nothing there) costs a probe of the map and nothing
    /// more.
    pub(super) fn recheck(&self, key: &KeyRef<'_>) -> Option<Verdict> {
        if !self.store.contains_key(key as &dyn KeyView) {
            return None;
        }
        match self.store.get(key) {
            Lookup::Fresh(verdict) => Some(verdict),
            Lookup::Stale(_) | Lookup::Absent => None,
        }
    }

    /// Where revocations stand now: take it before a look-up begins.
    pub(super) fn mark(&self) -> Mark {
        self.log.mark()
    }

    /// Whether something `user`, the answer for `token` at `endpoint`, stands for was revoked
    /// since `since`.
    pub(super) fn revoked_since(
        &self,
        since: Mark,
        endpoint: &Endpoint,
        token: &str,
        user: &User,
    ) -> bool {
        let token = (self.fingerprint)(endpoint, token.as_bytes());
        self.revoked_for(since, endpoint, token, user)
    }

    /// [`revoked_since`](Self::revoked_since) for a token whose fingerprint is known.
    fn revoked_for(&self, since: Mark, endpoint: &Endpoint, token: u64, user: &User) -> bool {
        self.log.revoked_since(since, names(endpoint, token, user))
    }

    /// Caches `cached` under `key`, the key of `token` (the key value itself is what the store
    /// and the index hold), unless it must not live (no freshness) or something it names was
    /// revoked since `since`; says whether it did.
    pub(super) fn store(&self, key: &CacheKey, token: &str, cached: &Cached, since: Mark) -> bool {
        debug_assert_eq!(key.token(), token.as_bytes(), "the key is the token's");
        let endpoint = key.endpoint();
        if cached.fresh_until().has_passed() {
            return false;
        }
        // A user's fingerprint, computed once for both checks and the index (with a shared
        // tier it is an HMAC).
        let user = match cached {
            Cached::User { user, .. } => {
                Some((user, (self.fingerprint)(endpoint, token.as_bytes())))
            }
            Cached::Rejected { .. } => None,
        };
        // From the check to the index, no revocation: one that lands before is seen, one that
        // lands after finds the entry in the index.
        let storing = self.storing();
        if user.is_some_and(|(user, fp)| self.revoked_for(since, endpoint, fp, user)) {
            return false;
        }
        self.store.insert(key.clone(), cached);
        if let Some((user, fingerprint)) = user {
            let held = |key: &CacheKey| self.store.holds_user(key as &dyn KeyView);
            let users_held = self.store.users_held();
            (self.index).insert(key, user.id, fingerprint, users_held, held);
        }
        drop(storing);
        self.publish_entries();
        true
    }

    /// Drops what `target` names, remembers the revocation for look-ups in flight, and tells
    /// the subscribers `revocation`, made at `made_at`.
    pub(crate) fn revoke(
        &self,
        target: Target<'_>,
        revocation: Revocation,
        made_at: Option<SystemTime>,
    ) {
        self.drop_named(target);
        self.tell([Timed(revocation, made_at)]);
    }

    /// Drops what `target` names and remembers the revocation for look-ups in flight; telling
    /// the subscribers is the caller's ([`tell`](Self::tell)).
    pub(crate) fn drop_named(&self, target: Target<'_>) {
        let _revoking = self.revoking();
        match target {
            Target::Token { endpoint, token } => {
                let fingerprint = (self.fingerprint)(endpoint, token.as_bytes());
                self.log.record(Some(Named::Token {
                    endpoint: endpoint.key_hash(),
                    token: fingerprint,
                }));
                // Whatever the index took goes from the store too (a key sharing the token's
                // fingerprint included), so that the store holds nothing the index lost.
                // Without a shared tier tokens are not indexed: the key stays in the index
                // until the sweep finds it gone.
                let at = |key: &CacheKey| key.is_at(endpoint);
                for key in self.index.take_token(fingerprint, at) {
                    self.store.invalidate_user(&key as &dyn KeyView);
                }
                self.store
                    .invalidate_held(&KeyRef { endpoint, token } as &dyn KeyView);
            }
            Target::Fingerprint {
                endpoint,
                fingerprint,
            } => {
                self.log.record(Some(Named::Token {
                    endpoint: endpoint.key_hash(),
                    token: fingerprint,
                }));
                let at = |key: &CacheKey| key.is_at(endpoint);
                for key in self.index.take_token(fingerprint, at) {
                    self.store.invalidate_user(&key as &dyn KeyView);
                }
            }
            Target::User { endpoint, user } => {
                self.log.record(Some(Named::User {
                    endpoint: endpoint.key_hash(),
                    user,
                }));
                let at = |key: &CacheKey| key.is_at(endpoint);
                for key in (self.index).take_user(endpoint.key_hash(), user, at) {
                    self.store.invalidate_user(&key as &dyn KeyView);
                }
            }
            Target::Session {
                endpoint,
                user,
                session,
            } => {
                self.log.record(Some(Named::Session {
                    endpoint: endpoint.key_hash(),
                    session: session_hash(session),
                }));
                // Keys the store no longer holds go too: they were left behind.
                let is = |key: &CacheKey| {
                    key.is_at(endpoint)
                        && (self.store.user(key)).is_none_or(|u| u.session() == Some(session))
                };
                for key in (self.index).take_user(endpoint.key_hash(), user, is) {
                    self.store.invalidate_user(&key as &dyn KeyView);
                }
            }
        }
    }

    /// Drops everything, remembers it for look-ups in flight, and tells the subscribers
    /// `revocation` ([`Revocation::All`], or a re-check when revocations may have been missed).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn revoke_all(&self, revocation: Revocation) {
        self.revoke_all_at(revocation, None);
    }

    /// [`revoke_all`](Self::revoke_all) of a revocation made at `made_at`.
    pub(crate) fn revoke_all_at(&self, revocation: Revocation, made_at: Option<SystemTime>) {
        self.drop_all();
        self.tell([Timed(revocation, made_at)]);
    }

    /// Drops everything and remembers it for look-ups in flight; telling the subscribers is the
    /// caller's.
    pub(crate) fn drop_all(&self) {
        let _revoking = self.revoking();
        self.log.record(None);
        self.store.invalidate_all();
        self.index.clear();
    }

    /// Tells the subscribers `revocations`, applied already, in order. Applying a batch first
    /// and telling it in one go wakes a subscriber that keeps up once for the batch rather than
    /// once for each (a wake-up is a system call when it sleeps on another thread).
    /// Each is a [`Revocation`], or one with the time it was made (`(revocation, made_at)`).
    pub(crate) fn tell<T: Into<Timed>>(&self, revocations: impl IntoIterator<Item = T>) {
        self.publish_entries();
        for revocation in revocations {
            let Timed(revocation, made_at) = revocation.into();
            self.revocations.publish(revocation, made_at);
        }
    }

    /// A subscriber to every revocation from now on.
    pub(super) fn subscribe(&self) -> RevocationFeed<Revocation> {
        self.revocations.subscribe()
    }

    /// A subscriber to every revocation from now on, with the time each was made.
    pub(super) fn subscribe_dated(&self) -> RevocationFeed<DatedRevocation> {
        self.revocations.subscribe_dated()
    }

    /// Entries in the store, once moka has applied what is pending.
    pub(super) fn entries(&self) -> u64 {
        self.store.run_pending_tasks();
        self.store.entry_count()
    }

    /// The heap the revocation index holds, for the benches.
    pub(super) fn index_heap_bytes(&self) -> usize {
        self.index.heap_bytes()
    }

    fn publish_entries(&self) {
        metrics::gauge!(telemetry::CACHE_ENTRIES).set(self.store.entry_count() as f64);
    }
}

/// Everything a revocation may name `user`, the answer at `endpoint` for the token whose
/// fingerprint is `token`, by.
fn names(endpoint: &Endpoint, token: u64, user: &User) -> impl Iterator<Item = Named> {
    let at = endpoint.key_hash();
    let session = user.session().map(|sid| Named::Session {
        endpoint: at,
        session: session_hash(sid),
    });
    [
        Some(Named::Token {
            endpoint: at,
            token,
        }),
        Some(Named::User {
            endpoint: at,
            user: user.id,
        }),
        session,
    ]
    .into_iter()
    .flatten()
}

/// A session id's hash in the revocation log: the same for the same id in this process.
fn session_hash(session: &str) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::LazyLock<foldhash::quality::RandomState> =
        std::sync::LazyLock::new(Default::default);
    SEED.hash_one(session)
}
