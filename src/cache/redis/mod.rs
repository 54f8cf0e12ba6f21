//! The shared tier on Redis (feature `redis`), behind the local one, shared by the game-server
//! nodes of one title: answers one node got from the API serve the others, and invalidations on
//! one node reach all of them.
//!
//! What it owns: the Redis keys and values, their derivation, the invalidation channel and its
//! subscriber, and keeping Redis off the critical path. Every Redis operation runs under
//! [`RedisTier::op_timeout`]; a failed one counts in `token_resolver_shared_cache_errors_total`,
//! makes the tier stand aside for a second, and never fails a resolution: the node falls back
//! to its local cache and the API. What to cache and for how long stays the resolver's call;
//! when to ask this tier is [`Tiers`](super::Tiers)'s.
//!
//! No token reaches Redis: keys are `prefix + hex(HMAC-SHA256(secret, endpoint 0x00 token))`,
//! values hold only the user's id, name and extra fields (or the rejection's status), and the
//! expiry is Redis's own TTL.

mod invalidation;
mod tier;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use sha2::Sha256;

pub use tier::RedisTier;

use super::Cached;
use crate::answer::parse_user;
use crate::error::ConfigError;
use crate::telemetry;
use crate::user::User;

/// How long the tier stands aside after a Redis error before trying again.
const BACK_OFF: Duration = Duration::from_secs(1);
/// Longest pause between attempts to re-subscribe to the invalidation channel.
const MAX_RESUBSCRIBE_DELAY: Duration = Duration::from_secs(2);

/// An answer as Redis holds it.
#[derive(Debug, Clone, PartialEq)]
enum SharedEntry {
    /// A user.
    User(User),
    /// A rejection (401 or 403).
    Rejected(u16),
}

impl SharedEntry {
    fn of(cached: &Cached) -> SharedEntry {
        match cached {
            Cached::User { user, .. } => SharedEntry::User(User::clone(user)),
            Cached::Rejected { status, .. } => SharedEntry::Rejected(*status),
        }
    }

    /// The local entry for this answer, fresh for `left`.
    fn cached(self, left: Duration) -> Cached {
        match self {
            SharedEntry::User(user) => Cached::user(Arc::new(user), left),
            SharedEntry::Rejected(status) => Cached::rejected(status, left),
        }
    }

    fn encode(&self) -> String {
        match self {
            SharedEntry::User(user) => {
                format!("u{}", serde_json::to_string(user).unwrap_or_default())
            }
            SharedEntry::Rejected(status) => format!("r{status}"),
        }
    }

    fn decode(value: &[u8]) -> Option<SharedEntry> {
        match value.split_first()? {
            (b'u', json) => parse_user(json).ok().map(SharedEntry::User),
            (b'r', status) => {
                let status = std::str::from_utf8(status).ok()?.parse().ok()?;
                matches!(status, 401 | 403).then_some(SharedEntry::Rejected(status))
            }
            _ => None,
        }
    }
}
/// The shared tier of one resolver.
pub(crate) struct SharedCache {
    client: redis::Client,
    /// Made on first use, inside the runtime; reconnects by itself.
    conn: OnceLock<ConnectionManager>,
    mac: Hmac<Sha256>,
    prefix: String,
    channel: String,
    op_timeout: Duration,
    /// How long a user's index of keys lives: the longest any answer is kept (`cache_ttl`).
    index_ttl: Duration,
    /// After an error, Redis is skipped until then.
    resting_until: Mutex<Option<Instant>>,
    /// The channel subscriber, started on first use.
    subscriber: OnceLock<tokio::task::JoinHandle<()>>,
    subscribed: Arc<AtomicBool>,
    hits: AtomicU64,
    errors: Arc<AtomicU64>,
}

impl fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedCache")
            .field("prefix", &self.prefix)
            .field("subscribed", &self.subscribed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for SharedCache {
    fn drop(&mut self) {
        if let Some(task) = self.subscriber.get() {
            task.abort();
        }
    }
}

impl SharedCache {
    pub(crate) fn new(tier: RedisTier, index_ttl: Duration) -> Result<Self, ConfigError> {
        if tier.secret.len() < 16 {
            return Err(ConfigError::new(
                "shared_cache",
                "the key-derivation secret must be at least 16 bytes",
            ));
        }
        if tier.op_timeout.is_zero() {
            return Err(ConfigError::new(
                "shared_cache",
                "op_timeout must be greater than zero",
            ));
        }
        let client = redis::Client::open(tier.url.as_str())
            .map_err(|e| ConfigError::new("shared_cache", format!("not a Redis URL: {e}")))?;
        let mac = Hmac::<Sha256>::new_from_slice(&tier.secret).expect("HMAC takes any key length");
        Ok(SharedCache {
            client,
            conn: OnceLock::new(),
            mac,
            channel: format!("{}invalidate", tier.key_prefix),
            prefix: tier.key_prefix,
            op_timeout: tier.op_timeout,
            index_ttl,
            resting_until: Mutex::new(None),
            subscriber: OnceLock::new(),
            subscribed: Arc::new(AtomicBool::new(false)),
            hits: AtomicU64::new(0),
            errors: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The hex HMAC naming (endpoint, token).
    fn digest(&self, endpoint: &str, token: impl AsRef<[u8]>) -> String {
        token_digest(&self.mac, endpoint, token.as_ref())
    }

    /// Local misses answered here, and operations that failed.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }

    fn user_index(&self, endpoint: &str, user_id: i64) -> String {
        let mut mac = self.mac.clone();
        mac.update(endpoint.as_bytes());
        mac.update(&[0]);
        mac.update(&user_id.to_be_bytes());
        format!("{}user:{}", self.prefix, hex(&mac.finalize().into_bytes()))
    }

    fn key(&self, digest: &str) -> String {
        format!("{}tok:{digest}", self.prefix)
    }

    /// The connection, unless Redis is resting after an error.
    fn conn(&self) -> Option<ConnectionManager> {
        let resting = self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if resting.is_some_and(|until| Instant::now() < until) {
            return None;
        }
        drop(resting);
        if let Some(conn) = self.conn.get() {
            return Some(conn.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.op_timeout))
            .set_response_timeout(Some(self.op_timeout))
            .set_number_of_retries(1)
            .set_max_delay(self.op_timeout);
        match ConnectionManager::new_lazy_with_config(self.client.clone(), config) {
            Ok(conn) => Some(self.conn.get_or_init(|| conn).clone()),
            Err(e) => {
                self.failed("connect", &e.to_string());
                None
            }
        }
    }

    fn failed(&self, op: &'static str, detail: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => op).increment(1);
        tracing::warn!(
            op,
            detail,
            "shared cache (Redis) unavailable; going on without it"
        );
        *self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + BACK_OFF);
    }

    /// Runs one Redis operation under the deadline; `None` (and a rest) when it fails.
    async fn run<T>(
        &self,
        op: &'static str,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(Ok(value)) => Some(value),
            Ok(Err(e)) => {
                self.failed(op, &e.to_string());
                None
            }
            Err(_) => {
                self.failed(op, "timed out");
                None
            }
        }
    }

    /// The shared answer for (endpoint, token), fresh for what it has left in Redis, if Redis
    /// has one.
    pub(crate) async fn get(&self, endpoint: &str, token: &str) -> Option<Cached> {
        let mut conn = self.conn()?;
        let key = self.key(&self.digest(endpoint, token));
        let (value, pttl): (Option<Vec<u8>>, i64) = self
            .run(
                "get",
                redis::pipe().get(&key).pttl(&key).query_async(&mut conn),
            )
            .await?;
        let Some(value) = value else {
            metrics::counter!(telemetry::SHARED_CACHE_MISSES_TOTAL).increment(1);
            return None;
        };
        let Some(entry) = SharedEntry::decode(&value) else {
            self.failed(
                "decode",
                "a value in Redis is not an answer this crate wrote",
            );
            return None;
        };
        let left = Duration::from_millis(u64::try_from(pttl).ok().filter(|&ms| ms > 0)?);
        self.hits.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::SHARED_CACHE_HITS_TOTAL).increment(1);
        Some(entry.cached(left))
    }

    /// Stores an answer for what is left of its freshness, in the background; a user's key
    /// joins its user index so that `invalidate_user` finds it.
    pub(crate) fn put(&self, endpoint: &str, token: &str, cached: &Cached) {
        let Some(mut conn) = self.conn() else { return };
        let (entry, ttl) = (SharedEntry::of(cached), cached.fresh_until().left());
        let key = self.key(&self.digest(endpoint, token));
        let mut pipe = redis::pipe();
        pipe.set(&key, entry.encode())
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .ignore();
        if let SharedEntry::User(user) = &entry {
            let index = self.user_index(endpoint, user.id);
            pipe.sadd(&index, &key).ignore();
            pipe.pexpire(&index, self.index_ttl.as_millis().max(1) as i64)
                .ignore();
        }
        self.spawn(
            "put",
            async move { pipe.query_async::<()>(&mut conn).await },
        );
    }

    /// Runs a write in the background under the deadline; without a runtime it is skipped.
    fn spawn(
        &self,
        op: &'static str,
        fut: impl std::future::Future<Output = redis::RedisResult<()>> + Send + 'static,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                op,
                "no tokio runtime here: the shared cache write is skipped"
            );
            return;
        };
        let timeout = self.op_timeout;
        let errors = self.errors.clone();
        runtime.spawn(async move {
            if !matches!(tokio::time::timeout(timeout, fut).await, Ok(Ok(()))) {
                errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => op).increment(1);
            }
        });
    }
}

/// The hex HMAC naming (endpoint, token): the separator keeps `("ab", "c")` from `("a", "bc")`.
fn token_digest(mac: &Hmac<Sha256>, endpoint: &str, token: &[u8]) -> String {
    let mut mac = mac.clone();
    mac.update(endpoint.as_bytes());
    mac.update(&[0]);
    mac.update(token);
    hex(&mac.finalize().into_bytes())
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| {
            [
                DIGITS[usize::from(b >> 4)] as char,
                DIGITS[usize::from(b & 15)] as char,
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier() -> SharedCache {
        SharedCache::new(
            RedisTier::new("redis://127.0.0.1:1", "0123456789abcdef"),
            Duration::from_secs(60),
        )
        .unwrap()
    }

    #[test]
    fn digest_depends_on_endpoint_token_and_secret_and_hides_the_token() {
        let a = tier();
        let d = a.digest("https://a.example/api/user", "tok");
        assert_eq!(d.len(), 64);
        assert!(!d.contains("tok"));
        assert_ne!(d, a.digest("https://b.example/api/user", "tok"));
        assert_ne!(d, a.digest("https://a.example/api/user", "tok2"));
        let b = SharedCache::new(
            RedisTier::new("redis://127.0.0.1:1", "another-secret-16b"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_ne!(d, b.digest("https://a.example/api/user", "tok"));
    }

    #[test]
    fn the_separator_keeps_endpoint_and_token_apart() {
        let t = tier();
        assert_ne!(t.digest("ab", "c"), t.digest("a", "bc"));
    }

    #[test]
    fn entries_round_trip_and_garbage_is_refused() {
        let user = User {
            id: 5,
            name: "n".into(),
            extra: Default::default(),
            stale: false,
        };
        for entry in [SharedEntry::User(user), SharedEntry::Rejected(401)] {
            assert_eq!(SharedEntry::decode(entry.encode().as_bytes()), Some(entry));
        }
        for garbage in [&b""[..], b"x", b"u{", b"r200", b"r", b"u[1]"] {
            assert_eq!(SharedEntry::decode(garbage), None);
        }
    }

    #[test]
    fn config_refuses_a_short_secret_and_a_bad_url() {
        let minute = Duration::from_secs(60);
        assert!(SharedCache::new(RedisTier::new("redis://127.0.0.1", "short"), minute).is_err());
        assert!(SharedCache::new(RedisTier::new("not a url", "0123456789abcdef"), minute).is_err());
    }
}
