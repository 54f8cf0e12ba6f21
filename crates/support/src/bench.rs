//! What the benches share: the loopback upstream and the hand-written baselines (`baselines`,
//! shared with `token-resolver load`), token names, runtimes, and the baseline caches' key and
//! value types, shaped like the resolver's own (which are crate-private) so that a baseline pays
//! for the same hashing and cloning.

pub use crate::baselines::*;

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use token_resolver::Resolver;

/// A multi-thread runtime with one worker per core of this 2-core machine.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A 43-byte `b64token` (the length of 32 random bytes in base64url), distinct for each
/// `(set, i)`: `set` is one letter naming the set the bench draws from.
pub fn token(set: char, i: u64) -> String {
    format!("{set}{i:042}")
}

/// A resolver for `base` as a game server would build one, with a cache big enough for the
/// bench and a `cache_ttl` longer than any bench run.
pub fn resolver(base: &str) -> Resolver {
    Resolver::builder()
        .default_auth_url(base)
        .cache_ttl(Duration::from_secs(3600))
        .build()
        .expect("a valid resolver configuration")
}

// The baseline caches' key: the resolver's `CacheKey` is (Arc<Endpoint>, the token inline up to
// 48 bytes), hashed as the endpoint's precomputed hash and the token, with a randomly seeded
// foldhash, and looked up in moka from a borrowed `KeyRef` through `moka::Equivalent`, without
// building a key; this is the same, with the endpoint as an `Arc<str>` beside its hash. Maps
// without `Equivalent` (std's, quick_cache's) look up through `Borrow<dyn KeyView>`.

/// The endpoint URL's hash, computed once per key set as the resolver does once per endpoint.
pub fn endpoint_hash(endpoint: &str) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::LazyLock<foldhash::quality::RandomState> =
        std::sync::LazyLock::new(Default::default);
    SEED.hash_one(endpoint)
}

/// Both parts of a key, owned or borrowed.
pub trait KeyView {
    fn endpoint(&self) -> &str;
    fn endpoint_hash(&self) -> u64;
    fn token(&self) -> &[u8];
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.endpoint_hash());
        state.write(self.token());
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.token() == other.token() && self.endpoint() == other.endpoint()
    }
}

impl Eq for dyn KeyView + '_ {}

/// The owned key the baselines store.
#[derive(Clone)]
pub struct Key {
    pub endpoint: Arc<str>,
    pub endpoint_hash: u64,
    pub token: smallvec::SmallVec<[u8; 48]>,
}

impl Key {
    pub fn new(endpoint: &Arc<str>, token: &str) -> Key {
        Key {
            endpoint: endpoint.clone(),
            endpoint_hash: endpoint_hash(endpoint),
            token: token.as_bytes().into(),
        }
    }
}

impl KeyView for Key {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }
    fn endpoint_hash(&self) -> u64 {
        self.endpoint_hash
    }
    fn token(&self) -> &[u8] {
        &self.token
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn KeyView).hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn KeyView) == (other as &dyn KeyView)
    }
}

impl Eq for Key {}

/// A borrowed key: what a look-up builds instead of a `Key`.
pub struct KeyRef<'a> {
    pub endpoint: &'a str,
    pub endpoint_hash: u64,
    pub token: &'a str,
}

impl<'a> KeyRef<'a> {
    pub fn new(endpoint: &'a str, token: &'a str) -> KeyRef<'a> {
        KeyRef {
            endpoint,
            endpoint_hash: endpoint_hash(endpoint),
            token,
        }
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn KeyView).hash(state);
    }
}

impl moka::Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        (self as &dyn KeyView) == (key as &dyn KeyView)
    }
}

impl KeyView for KeyRef<'_> {
    fn endpoint(&self) -> &str {
        self.endpoint
    }
    fn endpoint_hash(&self) -> u64 {
        self.endpoint_hash
    }
    fn token(&self) -> &[u8] {
        self.token.as_bytes()
    }
}

/// The user a baseline cache holds, shaped like `token_resolver::User`.
#[derive(Debug, Clone)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub extra: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    pub stale: bool,
}

/// A baseline cache's value, shaped like the resolver's `Cached`: cloning it is an `Arc` clone,
/// and the deadline is nanoseconds since an origin, as the resolver's `Deadline`.
#[derive(Debug, Clone)]
pub enum Value {
    User { user: Arc<User>, fresh_until: u64 },
    Rejected { status: u16, fresh_until: u64 },
}

/// `instant` in nanoseconds since the first call.
fn nanos(instant: Instant) -> u64 {
    static ORIGIN: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
    instant.saturating_duration_since(*ORIGIN).as_nanos() as u64
}

impl Value {
    pub fn user(id: i64) -> Value {
        Value::answered(id, name(id as u64))
    }

    /// The entry for an answer of `id` and `name`, fresh for an hour.
    pub fn answered(id: i64, name: String) -> Value {
        Value::User {
            user: Arc::new(User {
                id,
                name,
                extra: None,
                stale: false,
            }),
            fresh_until: nanos(Instant::now() + Duration::from_secs(3600)),
        }
    }

    /// The user alone, as a bare cache holds it; `None` for a rejection.
    pub fn user_alone(&self) -> Option<Arc<User>> {
        match self {
            Value::User { user, .. } => Some(user.clone()),
            Value::Rejected { .. } => None,
        }
    }

    fn fresh_until(&self) -> u64 {
        match self {
            Value::User { fresh_until, .. } | Value::Rejected { fresh_until, .. } => *fresh_until,
        }
    }
}

/// Derives each entry's lifetime from its deadline, as the resolver's cache did before it
/// moved to one time to live per cache (moka's per-entry expiry costs every read).
pub struct PerEntryTtl;

impl moka::Expiry<Key, Value> for PerEntryTtl {
    fn expire_after_create(&self, _: &Key, value: &Value, now: Instant) -> Option<Duration> {
        Some(Duration::from_nanos(
            value.fresh_until().saturating_sub(nanos(now)),
        ))
    }
}

/// The resolver cache's hasher: foldhash, randomly seeded per cache.
pub type KeyHasher = foldhash::fast::RandomState;

/// A bare moka cache configured as the resolver configures its users' cache: capacity, one
/// time to live, the same hasher. The resolver's users fresh for the whole time to live are
/// kept as the `Arc<User>` and their token's expiry (two words); `Value` is shaped like its
/// other entries.
pub fn moka_cache<V>(capacity: u64) -> moka::sync::Cache<Key, V, KeyHasher>
where
    V: Clone + Send + Sync + 'static,
{
    moka::sync::Cache::builder()
        .max_capacity(capacity)
        .time_to_live(Duration::from_secs(3600))
        .build_with_hasher(KeyHasher::default())
}
