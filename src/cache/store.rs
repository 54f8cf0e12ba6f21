//! The local tier's storage: entries that are a user or a rejection, in two moka caches of one
//! time to live each, which share the one bound `max_cache_entries` sets. Keys and their
//! hashing are `key`'s; what to cache and for how long is decided by the resolver; which concurrent look-ups share one call is the
//! resolver's `flight`'s business.

use std::sync::Arc;
use std::time::Duration;

use super::entry::{Cached, Deadline, Lookup, Verdict};
use super::key::{CacheKey, KeyHasher, KeyRef, KeyView};
use crate::user::{Expiry, Resolution, User};

/// How far past its deadline moka's time to live may keep an entry that is not checked on
/// reading: the time between an answer and its insertion, not a policy.
const UNCHECKED_SLACK: Duration = Duration::from_millis(10);

/// The local tier's storage: two moka caches, each with one time to live for all its entries,
/// which moka checks on every read at no extra cost.
///
/// - `users`: what the API vouched for. A user fresh for the whole `cache_ttl` (its expiry, if
///   any, further off), with stale serving off (the usual case) is [`Held::Lasting`]: moka's
///   time to live is its deadline, so a hit reads no clock. Any other is [`Held::Timed`], with
///   a deadline read on every hit: fresh for less than `cache_ttl` (a shorter `max-age`, an
///   expiry sooner, a read-through from the shared tier), or kept `serve_stale_for` past its
///   freshness.
/// - `rejections`: 401 and 403 answers, for `negative_cache_ttl`; apart, so that a flood of bad
///   tokens cannot evict the players' entries.
///
/// `max_cache_entries` bounds the two together: rejections get an eighth of it
/// ([`REJECTIONS_SHARE`]), users the rest. A key is in one of them at most: storing an answer
/// drops the key from the other. moka's per-entry expiry (`Expiry`) would give each entry its
/// own lifetime in one cache, but it converts clocks and calls back into the policy on every
/// read, which a hit would pay for.
pub(crate) struct Store {
    /// Users, kept `cache_ttl + stale_for`.
    users: moka::sync::Cache<CacheKey, Held, KeyHasher>,
    /// Rejections, kept `negative_cache_ttl`.
    rejections: moka::sync::Cache<CacheKey, Rejection, KeyHasher>,
    /// The users' time to live when nothing outlives its freshness: an answer fresh for at
    /// least this long is [`Held::Lasting`].
    lasting_ttl: Duration,
    /// How long a user outlives its freshness, as a fallback; zero when stale serving is off,
    /// and only then is a user [`Held::Lasting`].
    stale_for: Duration,
}

/// The part of `max_cache_entries` that rejections may hold, as a divisor: an eighth.
const REJECTIONS_SHARE: u64 = 8;

/// A cached user, as `users` holds it: two words, so that a hit copies little.
#[derive(Clone)]
enum Held {
    /// Fresh until moka's time to live ends it, with its token's expiry (later than that).
    Lasting(Arc<User>, Option<Expiry>),
    /// With its own deadline, and its token's expiry.
    Timed(Arc<TimedUser>),
}

/// moka wants a time to live above zero; a zero one caches nothing anyway (`store` refuses
/// what has no freshness).
fn at_least(ttl: Duration) -> Duration {
    ttl.max(Duration::from_millis(1))
}

/// One of the two caches: at most `capacity` entries, each kept `ttl`. No eviction
/// listener: the index keeps itself (see `index`), and a listener would make moka lock every
/// key it removes.
fn moka_cache<V>(capacity: u64, ttl: Duration) -> moka::sync::Cache<CacheKey, V, KeyHasher>
where
    V: Clone + Send + Sync + 'static,
{
    moka::sync::Cache::builder()
        .max_capacity(capacity)
        .time_to_live(at_least(ttl))
        .build_with_hasher(KeyHasher::default())
}

/// A user with its token's expiry and its deadline.
struct TimedUser {
    user: Resolution,
    fresh_until: Deadline,
}

/// A cached rejection: the API's status, and when it dies.
#[derive(Clone)]
struct Rejection {
    status: u16,
    fresh_until: Deadline,
}

impl Store {
    /// Users kept for `cache_ttl` (plus `stale_for` past their freshness), rejections for
    /// `negative_ttl`, at most `capacity` entries in all.
    pub(crate) fn new(
        capacity: u64,
        cache_ttl: Duration,
        negative_ttl: Duration,
        stale_for: Duration,
    ) -> Store {
        // At least one rejection when the bound has room for a user beside it: a bound under
        // eight would otherwise leave the negative cache no room at all.
        let rejections = (capacity / REJECTIONS_SHARE).max(u64::from(capacity >= 2));
        Store {
            users: moka_cache(capacity - rejections, cache_ttl.saturating_add(stale_for)),
            rejections: moka_cache(rejections, negative_ttl),
            lasting_ttl: at_least(cache_ttl),
            stale_for,
        }
    }

    /// What the cache says for `key`: a fresh answer, a user kept past its freshness (stale
    /// serving on), or nothing. The hit path: one hash and two words for a lasting user; the
    /// clock is read for the others only.
    #[inline(always)]
    pub(crate) fn get(&self, key: &KeyRef<'_>) -> Lookup {
        match self.users.get(key) {
            Some(Held::Lasting(user, expires_at)) => {
                Lookup::Fresh(Verdict::User(Resolution::new(user, expires_at)))
            }
            Some(Held::Timed(entry)) => self.timed(&entry),
            None => self.get_rejection(key),
        }
    }

    /// What a user with a deadline is now: fresh, kept stale, or (past both) nothing.
    #[inline(never)]
    fn timed(&self, entry: &TimedUser) -> Lookup {
        let now = Deadline::now();
        if now < entry.fresh_until {
            return Lookup::Fresh(Verdict::User(entry.user.clone()));
        }
        if now < entry.fresh_until.later(self.stale_for) {
            return Lookup::Stale(entry.user.clone());
        }
        Lookup::Absent
    }

    /// [`get`](Self::get) for a key no user is cached under: a rejection, or nothing.
    #[inline(never)]
    fn get_rejection(&self, key: &KeyRef<'_>) -> Lookup {
        match self.rejections.get(key) {
            Some(entry) if !entry.fresh_until.has_passed() => {
                Lookup::Fresh(Verdict::Rejected(entry.status))
            }
            _ => Lookup::Absent,
        }
    }

    /// The user cached for `key`, fresh or kept stale; `None` for a rejection or nothing.
    pub(crate) fn user(&self, key: &CacheKey) -> Option<Arc<User>> {
        match self.users.get(key as &dyn KeyView)? {
            Held::Lasting(user, _) => Some(user),
            Held::Timed(entry) => Some(entry.user.user().clone()),
        }
    }

    /// Whether `key` is held as a user, fresh or not; records no read.
    pub(crate) fn holds_user(&self, key: &dyn KeyView) -> bool {
        self.users.contains_key(key)
    }

    /// Whether any of the caches holds `key`; records no read.
    pub(crate) fn contains_key(&self, key: &dyn KeyView) -> bool {
        self.users.contains_key(key) || self.rejections.contains_key(key)
    }

    /// Stores `cached` under `key`, replacing whatever `key` had in any of the caches.
    pub(crate) fn insert(&self, key: CacheKey, cached: &Cached) {
        let view = &key as &dyn KeyView;
        match cached {
            Cached::User { user, fresh_until } => {
                self.rejections.invalidate(view);
                let lasts = self.stale_for.is_zero()
                    && fresh_until.left() + UNCHECKED_SLACK >= self.lasting_ttl;
                let held = if lasts {
                    Held::Lasting(user.user().clone(), user.expires_at())
                } else {
                    Held::Timed(Arc::new(TimedUser {
                        user: user.clone(),
                        fresh_until: *fresh_until,
                    }))
                };
                self.users.insert(key, held);
            }
            Cached::Rejected {
                status,
                fresh_until,
            } => {
                self.users.invalidate(view);
                let entry = Rejection {
                    status: *status,
                    fresh_until: *fresh_until,
                };
                self.rejections.insert(key, entry);
            }
        }
    }

    /// Drops `key`'s answer from the caches that hold it: a probe of each, which records no
    /// read, and a removal (moka's costly part: a lock on the key, a write to apply) only where
    /// it is. For a revocation: an insert cannot race with it, as
    /// [`Local::store`](super::local::Local::store) inserts under the lock revocations take.
    pub(crate) fn invalidate_held(&self, key: &dyn KeyView) {
        if self.users.contains_key(key) {
            self.users.invalidate(key);
        }
        if self.rejections.contains_key(key) {
            self.rejections.invalidate(key);
        }
    }

    /// [`invalidate_held`](Self::invalidate_held) for a key the index found: a user, so in
    /// `users` if anywhere, removed without a probe first.
    pub(crate) fn invalidate_user(&self, key: &dyn KeyView) {
        self.users.invalidate(key);
    }

    /// Drops every answer.
    pub(crate) fn invalidate_all(&self) {
        self.users.invalidate_all();
        self.rejections.invalidate_all();
    }

    /// Users held, as moka counts them: behind by the writes it has not applied yet, and
    /// ahead by the expired entries it has not removed.
    pub(crate) fn users_held(&self) -> u64 {
        self.users.entry_count()
    }

    /// Entries in the two caches, as moka counts them.
    pub(crate) fn entry_count(&self) -> u64 {
        self.users_held() + self.rejections.entry_count()
    }

    /// Applies moka's pending work, so that [`entry_count`](Self::entry_count) is current.
    pub(crate) fn run_pending_tasks(&self) {
        self.users.run_pending_tasks();
        self.rejections.run_pending_tasks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth_url::Endpoint;
    use crate::cache::key::KeyRef;
    use crate::PlainHttp;

    fn key(endpoint: &str, token: &str) -> CacheKey {
        CacheKey::new(
            Arc::new(Endpoint::parse(endpoint, PlainHttp::LoopbackOnly).unwrap()),
            token,
        )
    }

    fn user(id: i64, fresh: Duration) -> Cached {
        let user = Arc::new(User {
            id,
            name: format!("u{id}"),
            extra: Default::default(),
        });
        Cached::user(Resolution::new(user, None), fresh)
    }

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::parse(url, PlainHttp::LoopbackOnly).unwrap()
    }

    /// Users for 60 s, rejections for 5 s, `stale_for` past a user's freshness.
    fn cache(stale_for: Duration) -> Store {
        Store::new(
            10,
            Duration::from_secs(60),
            Duration::from_secs(5),
            stale_for,
        )
    }

    /// What the cache says for `token` at `https://a.example`, looked up by a borrowed key.
    fn at_a(cache: &Store, token: &str) -> Lookup {
        cache.get(&KeyRef {
            endpoint: &endpoint("https://a.example"),
            token,
        })
    }

    /// The user id of a fresh user, `None` for anything else.
    fn fresh_id(lookup: Lookup) -> Option<i64> {
        match lookup {
            Lookup::Fresh(Verdict::User(user)) => Some(user.id),
            _ => None,
        }
    }

    /// How `key` is held: as a lasting or a timed user, as a rejection (a key is in one cache
    /// at most).
    fn held_in(cache: &Store, key: &CacheKey) -> Vec<&'static str> {
        let view = key as &dyn KeyView;
        let mut held = Vec::new();
        match cache.users.get(view) {
            Some(Held::Lasting(..)) => held.push("lasting"),
            Some(Held::Timed(_)) => held.push("timed"),
            None => {}
        }
        if cache.rejections.contains_key(view) {
            held.push("rejections");
        }
        held
    }

    #[test]
    fn a_cached_user_is_two_words() {
        // moka hands the value back through the stack on every hit, and keeps one per entry.
        assert_eq!(std::mem::size_of::<Held>(), 16);
    }

    #[test]
    fn borrowed_key_finds_the_owned_key() {
        let cache = cache(Duration::ZERO);
        cache.insert(
            key("https://a.example", "tok"),
            &user(1, Duration::from_secs(60)),
        );
        let found = cache.get(&KeyRef {
            endpoint: &endpoint("https://a.example/api/user"),
            token: "tok",
        });
        assert_eq!(fresh_id(found), Some(1));
    }

    #[test]
    fn same_token_at_another_endpoint_is_another_entry() {
        let cache = cache(Duration::ZERO);
        cache.insert(
            key("https://a.example", "tok"),
            &user(1, Duration::from_secs(60)),
        );
        let b = endpoint("https://b.example");
        let other = KeyRef {
            endpoint: &b,
            token: "tok",
        };
        assert!(matches!(cache.get(&other), Lookup::Absent));
        let a = endpoint("https://a.example");
        let prefix = KeyRef {
            endpoint: &a,
            token: "to",
        };
        assert!(matches!(cache.get(&prefix), Lookup::Absent));
    }

    // The lifetimes below pass on tokio's paused clock, which the entries' deadlines read.
    #[tokio::test(start_paused = true)]
    async fn each_entry_expires_after_its_own_ttl() {
        let cache = cache(Duration::ZERO);
        cache.insert(
            key("https://a.example", "short"),
            &user(1, Duration::from_millis(50)),
        );
        cache.insert(
            key("https://a.example", "long"),
            &user(2, Duration::from_secs(60)),
        );
        let get = |t| at_a(&cache, t);
        tokio::time::advance(Duration::from_millis(49)).await;
        assert_eq!(fresh_id(get("short")), Some(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(get("short"), Lookup::Absent));
        assert_eq!(fresh_id(get("long")), Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn users_outlive_their_freshness_by_the_stale_window_and_rejections_do_not() {
        let cache = cache(Duration::from_secs(60));
        let fresh = Duration::from_millis(50);
        cache.insert(key("https://a.example", "user"), &user(1, fresh));
        cache.insert(
            key("https://a.example", "rejected"),
            &Cached::rejected(401, fresh),
        );
        tokio::time::advance(Duration::from_millis(120)).await;
        let get = |t| at_a(&cache, t);
        assert!(
            matches!(get("user"), Lookup::Stale(user) if user.id == 1),
            "a user is kept through the stale window, no longer fresh"
        );
        assert!(matches!(get("rejected"), Lookup::Absent));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(
            matches!(get("user"), Lookup::Absent),
            "and no longer than the stale window"
        );
    }

    #[test]
    fn an_endpoint_parsed_again_finds_the_same_entry() {
        let cache = cache(Duration::ZERO);
        cache.insert(
            key("https://a.example", "tok"),
            &user(1, Duration::from_secs(60)),
        );
        // Another `Endpoint` value, written differently: equal by its URL, not its address.
        let again = endpoint("HTTPS://A.example:443/");
        let found = cache.get(&KeyRef {
            endpoint: &again,
            token: "tok",
        });
        assert_eq!(fresh_id(found), Some(1));
    }

    #[test]
    fn only_users_fresh_for_the_whole_time_to_live_are_kept_without_a_deadline() {
        let (cache, stale) = (cache(Duration::ZERO), cache(Duration::from_secs(60)));
        let k = |t: &str| key("https://a.example", t);
        cache.insert(k("full"), &user(1, Duration::from_secs(60)));
        cache.insert(k("short"), &user(2, Duration::from_secs(30)));
        cache.insert(k("no"), &Cached::rejected(401, Duration::from_secs(5)));
        assert_eq!(held_in(&cache, &k("full")), ["lasting"]);
        assert_eq!(held_in(&cache, &k("short")), ["timed"]);
        assert_eq!(held_in(&cache, &k("no")), ["rejections"]);
        assert_eq!(fresh_id(at_a(&cache, "full")), Some(1));
        assert_eq!(fresh_id(at_a(&cache, "short")), Some(2));

        // With stale serving on, every user needs its deadline, to tell fresh from stale.
        stale.insert(k("full"), &user(1, Duration::from_secs(60)));
        assert_eq!(held_in(&stale, &k("full")), ["timed"]);
        assert_eq!(fresh_id(at_a(&stale, "full")), Some(1));
    }

    #[test]
    fn a_lasting_user_hands_back_its_tokens_expiry() {
        // An answer fresh for the whole time to live whose token expires later still needs no
        // deadline, but a session that holds it needs the expiry.
        let cache = cache(Duration::ZERO);
        let k = key("https://a.example", "tok");
        let exp = Expiry::from_unix_seconds(4_000_000_000);
        let user = Arc::new(User {
            id: 1,
            name: "u1".to_owned(),
            extra: Default::default(),
        });
        cache.insert(
            k.clone(),
            &Cached::user(Resolution::new(user, Some(exp)), Duration::from_secs(60)),
        );
        assert_eq!(held_in(&cache, &k), ["lasting"]);
        match at_a(&cache, "tok") {
            Lookup::Fresh(Verdict::User(found)) => assert_eq!(found.expires_at(), Some(exp)),
            _ => panic!("the user is fresh"),
        }
    }

    #[test]
    fn a_user_replaces_a_rejection_of_the_same_key_and_back() {
        let cache = cache(Duration::ZERO);
        let k = || key("https://a.example", "tok");
        cache.insert(k(), &Cached::rejected(401, Duration::from_secs(5)));
        cache.insert(k(), &user(1, Duration::from_secs(60)));
        assert_eq!(fresh_id(at_a(&cache, "tok")), Some(1));
        // From lasting to timed and back: a key is in one cache at most.
        cache.insert(k(), &user(2, Duration::from_secs(30)));
        assert_eq!(held_in(&cache, &k()), ["timed"]);
        assert_eq!(fresh_id(at_a(&cache, "tok")), Some(2));
        cache.insert(k(), &user(3, Duration::from_secs(60)));
        assert_eq!(held_in(&cache, &k()), ["lasting"]);
        cache.insert(k(), &Cached::rejected(403, Duration::from_secs(5)));
        assert!(matches!(
            at_a(&cache, "tok"),
            Lookup::Fresh(Verdict::Rejected(403))
        ));
        assert_eq!(held_in(&cache, &k()), ["rejections"]);
        cache.run_pending_tasks();
        assert_eq!(cache.entry_count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn rejections_die_after_the_negative_time_to_live() {
        let cache = Store::new(
            10,
            Duration::from_secs(60),
            Duration::from_millis(50),
            Duration::ZERO,
        );
        cache.insert(
            key("https://a.example", "no"),
            &Cached::rejected(401, Duration::from_millis(50)),
        );
        assert!(matches!(
            at_a(&cache, "no"),
            Lookup::Fresh(Verdict::Rejected(401))
        ));
        tokio::time::advance(Duration::from_millis(120)).await;
        assert!(matches!(at_a(&cache, "no"), Lookup::Absent));
    }
}
