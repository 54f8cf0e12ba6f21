//! The resolver's cache: keys of (normalised endpoint, token), entries that are a user or a
//! rejection, and each entry's own time to live, on top of `moka::sync::Cache`.
//!
//! A look-up builds no key: [`KeyRef`] borrows the endpoint and the token, and moka finds the
//! owned [`CacheKey`] through `Borrow<dyn KeyView>`. Keys hold the whole token, so two tokens
//! never share an entry. What to cache and for how long is decided by the resolver; which
//! concurrent look-ups share one call is `flight`'s business.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::Expiry;

use crate::auth_url::Endpoint;
use crate::user::User;

/// The cache itself.
pub(crate) type Cache = moka::sync::Cache<CacheKey, Cached>;

/// A cache holding at most `capacity` entries, each expiring after its own [`Cached::ttl`].
pub(crate) fn new_cache(capacity: u64) -> Cache {
    moka::sync::Cache::builder()
        .max_capacity(capacity)
        .expire_after(PerEntryTtl)
        .build()
}

/// The two parts of a key, whether owned or borrowed.
pub(crate) trait KeyView {
    /// The normalised endpoint URL.
    fn endpoint(&self) -> &str;
    /// The access token.
    fn token(&self) -> &str;
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.endpoint().hash(state);
        self.token().hash(state);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.token() == other.token() && self.endpoint() == other.endpoint()
    }
}

impl Eq for dyn KeyView + '_ {}

/// An owned key, stored in the cache and the in-flight map.
#[derive(Clone)]
pub(crate) struct CacheKey {
    /// Shared with every key of the same endpoint.
    pub(crate) endpoint: Arc<Endpoint>,
    /// The whole token: a hash alone could let two tokens collide.
    token: Box<str>,
}

impl CacheKey {
    pub(crate) fn new(endpoint: Arc<Endpoint>, token: &str) -> Self {
        CacheKey {
            endpoint,
            token: token.into(),
        }
    }
}

impl KeyView for CacheKey {
    fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }
    fn token(&self) -> &str {
        &self.token
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for CacheKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn KeyView).hash(state);
    }
}

impl PartialEq for CacheKey {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn KeyView) == (other as &dyn KeyView)
    }
}

impl Eq for CacheKey {}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheKey")
            .field("endpoint", &self.endpoint.as_str())
            .field("token", &"[redacted]")
            .finish()
    }
}

/// A borrowed key, for look-ups that allocate nothing.
pub(crate) struct KeyRef<'a> {
    pub(crate) endpoint: &'a str,
    pub(crate) token: &'a str,
}

impl KeyView for KeyRef<'_> {
    fn endpoint(&self) -> &str {
        self.endpoint
    }
    fn token(&self) -> &str {
        self.token
    }
}

/// A cached answer.
#[derive(Clone, Debug)]
pub(crate) enum Cached {
    /// The API vouched for this user.
    User {
        /// The user, shared with every caller that gets it.
        user: Arc<User>,
        /// How long the entry lives: `min(cache_ttl, max-age)`, plus the `serve_stale_for`
        /// window during which it is kept only as a fallback.
        ttl: Duration,
        /// Until when it is fresh; after, it is served only when the API is unavailable.
        /// `None` when stale serving is off (the entry then dies when it stops being fresh).
        fresh_until: Option<Instant>,
    },
    /// The API answered 401 or 403.
    Rejected {
        /// The status it answered.
        status: u16,
        /// `negative_cache_ttl`.
        ttl: Duration,
    },
}

impl Cached {
    pub(crate) fn ttl(&self) -> Duration {
        match self {
            Cached::User { ttl, .. } | Cached::Rejected { ttl, .. } => *ttl,
        }
    }

    pub(crate) fn user_id(&self) -> Option<i64> {
        match self {
            Cached::User { user, .. } => Some(user.id),
            Cached::Rejected { .. } => None,
        }
    }
}

/// Gives each entry the time to live it carries.
struct PerEntryTtl;

impl Expiry<CacheKey, Cached> for PerEntryTtl {
    fn expire_after_create(&self, _: &CacheKey, value: &Cached, _: Instant) -> Option<Duration> {
        Some(value.ttl())
    }

    fn expire_after_update(
        &self,
        _: &CacheKey,
        value: &Cached,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.ttl())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(endpoint: &str, token: &str) -> CacheKey {
        CacheKey::new(Arc::new(Endpoint::parse(endpoint, false).unwrap()), token)
    }

    fn user(id: i64, ttl: Duration) -> Cached {
        let user = Arc::new(User {
            id,
            name: format!("u{id}"),
            extra: Default::default(),
            stale: false,
        });
        Cached::User {
            user,
            ttl,
            fresh_until: None,
        }
    }

    #[test]
    fn borrowed_key_finds_the_owned_key() {
        let cache = new_cache(10);
        cache.insert(
            key("https://a.example", "tok"),
            user(1, Duration::from_secs(60)),
        );
        let found = cache.get(&KeyRef {
            endpoint: "https://a.example/api/user",
            token: "tok",
        } as &dyn KeyView);
        assert_eq!(found.and_then(|c| c.user_id()), Some(1));
    }

    #[test]
    fn same_token_at_another_endpoint_is_another_entry() {
        let cache = new_cache(10);
        cache.insert(
            key("https://a.example", "tok"),
            user(1, Duration::from_secs(60)),
        );
        let other = KeyRef {
            endpoint: "https://b.example/api/user",
            token: "tok",
        };
        assert!(cache.get(&other as &dyn KeyView).is_none());
        let prefix = KeyRef {
            endpoint: "https://a.example/api/user",
            token: "to",
        };
        assert!(cache.get(&prefix as &dyn KeyView).is_none());
    }

    #[test]
    fn each_entry_expires_after_its_own_ttl() {
        let cache = new_cache(10);
        cache.insert(
            key("https://a.example", "short"),
            user(1, Duration::from_millis(50)),
        );
        cache.insert(
            key("https://a.example", "long"),
            user(2, Duration::from_secs(60)),
        );
        std::thread::sleep(Duration::from_millis(120));
        let get = |t| {
            cache.get(&KeyRef {
                endpoint: "https://a.example/api/user",
                token: t,
            } as &dyn KeyView)
        };
        assert!(get("short").is_none());
        assert!(get("long").is_some());
    }

    #[test]
    fn debug_of_a_key_is_redacted() {
        let shown = format!("{:?}", key("https://a.example", "SECRET-TOKEN"));
        assert!(!shown.contains("SECRET-TOKEN"), "{shown}");
    }
}
