//! The local tier's storage: entries that are a user or a rejection, each with its deadline, in
//! two moka caches ([`Cache`]) of one time to live each. Keys and their hashing are `key`'s;
//! what to cache and for how long is decided by the resolver; which concurrent look-ups share
//! one call is the resolver's `flight`'s business.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::key::{CacheKey, KeyHasher, KeyView};
use crate::user::User;

/// How far past its deadline moka's time to live may keep an entry that is not checked on
/// reading: the time between an answer and its insertion, not a policy.
const UNCHECKED_SLACK: Duration = Duration::from_millis(10);

/// The local tier's storage: two moka caches, users and rejections, each with one time to
/// live for all its entries, which moka checks on every read at no extra cost.
///
/// moka's per-entry expiry (`Expiry`) would give each entry its own lifetime, but it converts
/// clocks and calls back into the policy on every read: it made a bare `get` 1.35x the
/// hand-written one. Here an entry whose deadline comes before the cache's time to live (an
/// answer with a shorter `max-age`, a rejection read through from the shared tier) says so
/// (`checked`), and only such entries read the clock on a hit. Rejections apart also mean a
/// flood of bad tokens cannot evict the players' entries.
pub(crate) struct Cache {
    /// Users, kept `cache_ttl + stale_for`.
    users: moka::sync::Cache<CacheKey, UserEntry, KeyHasher>,
    /// Rejections, kept `negative_cache_ttl`.
    rejections: moka::sync::Cache<CacheKey, RejectionEntry, KeyHasher>,
    /// The users' time to live.
    user_ttl: Duration,
    /// The rejections' time to live.
    rejection_ttl: Duration,
    /// How long a user outlives its freshness, as a fallback.
    stale_for: Duration,
}

/// A cached user.
#[derive(Clone)]
struct UserEntry {
    user: Arc<User>,
    fresh_until: Deadline,
    /// Whether the entry dies before moka's time to live would end it: read the clock then.
    checked: bool,
}

/// A cached rejection.
#[derive(Clone)]
struct RejectionEntry {
    status: u16,
    fresh_until: Deadline,
    /// As [`UserEntry::checked`].
    checked: bool,
}

impl Cache {
    /// Users kept for `cache_ttl` (plus `stale_for` past their freshness), rejections for
    /// `negative_ttl`, at most `capacity` of each.
    pub(crate) fn new(
        capacity: u64,
        cache_ttl: Duration,
        negative_ttl: Duration,
        stale_for: Duration,
    ) -> Cache {
        // moka wants a time to live above zero; a zero one caches nothing anyway (`store`
        // refuses what has no freshness).
        let at_least = |ttl: Duration| ttl.max(Duration::from_millis(1));
        let user_ttl = at_least(cache_ttl.saturating_add(stale_for));
        let rejection_ttl = at_least(negative_ttl);
        Cache {
            users: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(user_ttl)
                .build_with_hasher(KeyHasher::default()),
            rejections: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(rejection_ttl)
                .build_with_hasher(KeyHasher::default()),
            user_ttl,
            rejection_ttl,
            stale_for,
        }
    }

    /// The answer for `key`, if its lifetime (for a user: freshness plus the stale window)
    /// has not run out. The hit path: one hash, and a clock read only for a checked entry.
    #[inline]
    pub(crate) fn get(&self, key: &dyn KeyView) -> Option<Cached> {
        if let Some(entry) = self.users.get(key) {
            if entry.checked && entry.fresh_until.later(self.stale_for).has_passed() {
                return None;
            }
            return Some(Cached::User {
                user: entry.user,
                fresh_until: entry.fresh_until,
            });
        }
        let entry = self.rejections.get(key)?;
        if entry.checked && entry.fresh_until.has_passed() {
            return None;
        }
        Some(Cached::Rejected {
            status: entry.status,
            fresh_until: entry.fresh_until,
        })
    }

    /// Whether either cache holds `key`; records no read.
    pub(crate) fn contains_key(&self, key: &dyn KeyView) -> bool {
        self.users.contains_key(key) || self.rejections.contains_key(key)
    }

    /// Stores `cached` under `key`, replacing whatever `key` had.
    pub(crate) fn insert(&self, key: CacheKey, cached: &Cached) {
        match cached {
            Cached::User { user, fresh_until } => {
                let lifetime = fresh_until.left().saturating_add(self.stale_for);
                self.rejections.invalidate(&key as &dyn KeyView);
                let entry = UserEntry {
                    user: user.clone(),
                    fresh_until: *fresh_until,
                    checked: lifetime + UNCHECKED_SLACK < self.user_ttl,
                };
                self.users.insert(key, entry);
            }
            Cached::Rejected {
                status,
                fresh_until,
            } => {
                let lifetime = fresh_until.left();
                self.users.invalidate(&key as &dyn KeyView);
                let entry = RejectionEntry {
                    status: *status,
                    fresh_until: *fresh_until,
                    checked: lifetime + UNCHECKED_SLACK < self.rejection_ttl,
                };
                self.rejections.insert(key, entry);
            }
        }
    }

    /// Drops `key`'s answer.
    pub(crate) fn invalidate(&self, key: &dyn KeyView) {
        self.users.invalidate(key);
        self.rejections.invalidate(key);
    }

    /// Drops every answer.
    pub(crate) fn invalidate_all(&self) {
        self.users.invalidate_all();
        self.rejections.invalidate_all();
    }

    /// Every key and answer held now (expired ones moka has not dropped yet included).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Arc<CacheKey>, Cached)> + '_ {
        let users = self.users.iter().map(|(key, entry)| {
            let cached = Cached::User {
                user: entry.user,
                fresh_until: entry.fresh_until,
            };
            (key, cached)
        });
        let rejections = self.rejections.iter().map(|(key, entry)| {
            let cached = Cached::Rejected {
                status: entry.status,
                fresh_until: entry.fresh_until,
            };
            (key, cached)
        });
        users.chain(rejections)
    }

    /// Entries in both caches, as moka counts them.
    pub(crate) fn entry_count(&self) -> u64 {
        self.users.entry_count() + self.rejections.entry_count()
    }

    /// Applies moka's pending work, so that [`entry_count`](Self::entry_count) is current.
    pub(crate) fn run_pending_tasks(&self) {
        self.users.run_pending_tasks();
        self.rejections.run_pending_tasks();
    }
}

/// A cached answer, as the tiers hand it around: the user or the rejection, with its deadline.
#[derive(Clone, Debug)]
pub(crate) enum Cached {
    /// The API vouched for this user.
    User {
        /// The user, shared with every caller that gets it.
        user: Arc<User>,
        /// Until when it is fresh: `min(cache_ttl, max-age)` after the answer. With stale
        /// serving on, the entry is kept `serve_stale_for` longer, used only when the API is
        /// unavailable; otherwise it dies here.
        fresh_until: Deadline,
    },
    /// The API answered 401 or 403.
    Rejected {
        /// The status it answered.
        status: u16,
        /// When the entry dies: `negative_cache_ttl` after the answer.
        fresh_until: Deadline,
    },
}

impl Cached {
    /// `user`, fresh for `fresh` from now.
    pub(crate) fn user(user: Arc<User>, fresh: Duration) -> Cached {
        Cached::User {
            user,
            fresh_until: Deadline::after(fresh),
        }
    }

    /// A rejection with `status`, kept for `fresh` from now.
    pub(crate) fn rejected(status: u16, fresh: Duration) -> Cached {
        Cached::Rejected {
            status,
            fresh_until: Deadline::after(fresh),
        }
    }

    pub(crate) fn fresh_until(&self) -> Deadline {
        match self {
            Cached::User { fresh_until, .. } | Cached::Rejected { fresh_until, .. } => *fresh_until,
        }
    }

    pub(crate) fn user_id(&self) -> Option<i64> {
        match self {
            Cached::User { user, .. } => Some(user.id),
            Cached::Rejected { .. } => None,
        }
    }
}

/// A moment in 8 bytes rather than an [`Instant`]'s 16: nanoseconds since the first deadline
/// this process made, saturating some 580 years on. Every entry holds one, and the 8 bytes
/// take moka's value node down a size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Deadline(u64);

impl Deadline {
    /// `fresh` from now.
    pub(crate) fn after(fresh: Duration) -> Deadline {
        let at = Deadline::at(Instant::now()).0;
        Deadline(at.saturating_add(u64::try_from(fresh.as_nanos()).unwrap_or(u64::MAX)))
    }

    /// `instant`, or the origin for an instant before it.
    fn at(instant: Instant) -> Deadline {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let since = instant.saturating_duration_since(*ORIGIN.get_or_init(Instant::now));
        Deadline(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Whether this moment has come.
    pub(crate) fn has_passed(self) -> bool {
        Deadline::at(Instant::now()) >= self
    }

    /// `extra` after this moment.
    pub(crate) fn later(self, extra: Duration) -> Deadline {
        let extra = u64::try_from(extra.as_nanos()).unwrap_or(u64::MAX);
        Deadline(self.0.saturating_add(extra))
    }

    /// How long from now this moment is; zero once it has passed.
    pub(crate) fn left(self) -> Duration {
        self.left_after(Instant::now())
    }

    /// How long after `now` this moment is; zero once it has passed.
    fn left_after(self, now: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(Deadline::at(now).0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth_url::Endpoint;
    use crate::cache::key::KeyRef;

    fn key(endpoint: &str, token: &str) -> CacheKey {
        CacheKey::new(Arc::new(Endpoint::parse(endpoint, false).unwrap()), token)
    }

    fn user(id: i64, fresh: Duration) -> Cached {
        let user = Arc::new(User {
            id,
            name: format!("u{id}"),
            extra: Default::default(),
            stale: false,
            expires_at: None,
        });
        Cached::user(user, fresh)
    }

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::parse(url, false).unwrap()
    }

    /// Users for 60 s, rejections for 5 s, `stale_for` past a user's freshness.
    fn cache(stale_for: Duration) -> Cache {
        Cache::new(
            10,
            Duration::from_secs(60),
            Duration::from_secs(5),
            stale_for,
        )
    }

    /// The entry for `token` at `https://a.example`, looked up by a borrowed key.
    fn at_a(cache: &Cache, token: &str) -> Option<Cached> {
        cache.get(&KeyRef {
            endpoint: &endpoint("https://a.example"),
            token,
        } as &dyn KeyView)
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
        } as &dyn KeyView);
        assert_eq!(found.and_then(|c| c.user_id()), Some(1));
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
        assert!(cache.get(&other as &dyn KeyView).is_none());
        let a = endpoint("https://a.example");
        let prefix = KeyRef {
            endpoint: &a,
            token: "to",
        };
        assert!(cache.get(&prefix as &dyn KeyView).is_none());
    }

    #[test]
    fn each_entry_expires_after_its_own_ttl() {
        let cache = cache(Duration::ZERO);
        cache.insert(
            key("https://a.example", "short"),
            &user(1, Duration::from_millis(50)),
        );
        cache.insert(
            key("https://a.example", "long"),
            &user(2, Duration::from_secs(60)),
        );
        std::thread::sleep(Duration::from_millis(120));
        let get = |t| at_a(&cache, t);
        assert!(get("short").is_none());
        assert!(get("long").is_some());
    }

    #[test]
    fn users_outlive_their_freshness_by_the_stale_window_and_rejections_do_not() {
        let cache = cache(Duration::from_secs(60));
        let fresh = Duration::from_millis(50);
        cache.insert(key("https://a.example", "user"), &user(1, fresh));
        cache.insert(
            key("https://a.example", "rejected"),
            &Cached::rejected(401, fresh),
        );
        std::thread::sleep(Duration::from_millis(120));
        let get = |t| at_a(&cache, t);
        let kept = get("user").expect("a user is kept through the stale window");
        assert!(kept.fresh_until().has_passed(), "and is no longer fresh");
        assert!(get("rejected").is_none());
    }

    #[test]
    fn an_entry_is_three_words() {
        // Each of a million entries pays this beside moka's own bookkeeping: the `Arc<User>`
        // and the deadline, with no lifetime stored besides (it was 40 bytes with one, 32
        // with an `Instant`).
        assert_eq!(std::mem::size_of::<Cached>(), 24);
    }

    #[test]
    fn a_deadline_leaves_what_remains_of_its_lifetime() {
        let now = Instant::now();
        let left = Deadline::after(Duration::from_secs(60)).left_after(now);
        // `after` reads the clock after `now` did: the deadline is that much later.
        assert!(left <= Duration::from_millis(60_100), "{left:?}");
        assert!(left > Duration::from_secs(59), "{left:?}");
        let later = now + Duration::from_secs(61);
        assert_eq!(
            Deadline::after(Duration::from_secs(60)).left_after(later),
            Duration::ZERO
        );
    }

    #[test]
    fn a_lifetime_too_long_for_the_clock_saturates() {
        let far = user(1, Duration::MAX);
        let five_centuries = Duration::from_secs(500 * 365 * 24 * 3600);
        assert!(far.fresh_until() > Deadline::after(five_centuries));
        assert!(!far.fresh_until().has_passed());
        assert!(far.fresh_until().left_after(Instant::now()) > five_centuries);
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
        } as &dyn KeyView);
        assert_eq!(found.and_then(|c| c.user_id()), Some(1));
    }

    #[test]
    fn only_entries_dying_before_the_time_to_live_read_the_clock() {
        let cache = cache(Duration::ZERO);
        cache.insert(
            key("https://a.example", "full"),
            &user(1, Duration::from_secs(60)),
        );
        cache.insert(
            key("https://a.example", "short"),
            &user(2, Duration::from_secs(30)),
        );
        cache.insert(
            key("https://a.example", "no"),
            &Cached::rejected(401, Duration::from_secs(5)),
        );
        let checked = |t: &str| {
            let k = key("https://a.example", t);
            let user = cache.users.get(&k as &dyn KeyView).map(|e| e.checked);
            user.or_else(|| cache.rejections.get(&k as &dyn KeyView).map(|e| e.checked))
        };
        assert_eq!(checked("full"), Some(false));
        assert_eq!(checked("short"), Some(true));
        assert_eq!(checked("no"), Some(false));
    }

    #[test]
    fn a_user_replaces_a_rejection_of_the_same_key_and_back() {
        let cache = cache(Duration::ZERO);
        let k = || key("https://a.example", "tok");
        cache.insert(k(), &Cached::rejected(401, Duration::from_secs(5)));
        cache.insert(k(), &user(1, Duration::from_secs(60)));
        assert_eq!(at_a(&cache, "tok").and_then(|c| c.user_id()), Some(1));
        cache.insert(k(), &Cached::rejected(403, Duration::from_secs(5)));
        assert!(matches!(
            at_a(&cache, "tok"),
            Some(Cached::Rejected { status: 403, .. })
        ));
        cache.run_pending_tasks();
        assert_eq!(cache.entry_count(), 1);
    }

    #[test]
    fn rejections_die_after_the_negative_time_to_live() {
        let cache = Cache::new(
            10,
            Duration::from_secs(60),
            Duration::from_millis(50),
            Duration::ZERO,
        );
        cache.insert(
            key("https://a.example", "no"),
            &Cached::rejected(401, Duration::from_millis(50)),
        );
        assert!(at_a(&cache, "no").is_some());
        std::thread::sleep(Duration::from_millis(120));
        assert!(at_a(&cache, "no").is_none());
    }
}
