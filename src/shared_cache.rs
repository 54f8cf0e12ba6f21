//! The optional second cache tier on Redis (feature `redis`), shared by the game-server nodes of
//! one title: answers one node got from the API serve the others, and invalidations on one
//! node reach all of them.
//!
//! What it owns: the Redis keys and values, their derivation, the invalidation channel and its
//! subscriber, and keeping Redis off the critical path. Every Redis operation runs under
//! [`RedisTier::op_timeout`]; a failed one counts in `token_resolver_shared_cache_errors_total`,
//! makes the tier stand aside for a second, and never fails a resolution: the node falls back
//! to its local cache and the API. What to cache and for how long stays the resolver's call.
//!
//! No token reaches Redis: keys are `prefix + hex(HMAC-SHA256(secret, endpoint 0x00 token))`,
//! values hold only the user's id, name and extra fields (or the rejection's status), and the
//! expiry is Redis's own TTL.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use sha2::Sha256;

use crate::answer::parse_user;
use crate::error::ConfigError;
use crate::telemetry;
use crate::user::User;

/// How long the tier stands aside after a Redis error before trying again.
const BACK_OFF: Duration = Duration::from_secs(1);
/// Longest pause between attempts to re-subscribe to the invalidation channel.
const MAX_RESUBSCRIBE_DELAY: Duration = Duration::from_secs(2);

/// Where and how to reach the shared Redis tier; give it to
/// [`ResolverBuilder::shared_cache`](crate::ResolverBuilder::shared_cache).
///
/// `Debug` never shows the secret.
#[derive(Clone)]
#[must_use]
pub struct RedisTier {
    /// `redis://host:port/db`.
    url: String,
    /// Prepended to every key and to the channel name, so several titles can share a Redis.
    key_prefix: String,
    /// The HMAC key that turns (endpoint, token) into a Redis key.
    secret: Vec<u8>,
    /// Deadline for each Redis operation.
    op_timeout: Duration,
}

impl RedisTier {
    /// The Redis at `url` (e.g. `redis://127.0.0.1:6379`), with `secret` (at least 16 bytes,
    /// the same on every node) for key derivation. Key prefix `token-resolver:`, operation
    /// timeout 50 ms.
    pub fn new(url: impl Into<String>, secret: impl AsRef<[u8]>) -> Self {
        RedisTier {
            url: url.into(),
            key_prefix: "token-resolver:".to_owned(),
            secret: secret.as_ref().to_vec(),
            op_timeout: Duration::from_millis(50),
        }
    }

    /// Prefix of every key and of the invalidation channel. Default: `token-resolver:`.
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        RedisTier {
            key_prefix: prefix.into(),
            ..self
        }
    }

    /// Deadline for each Redis operation; past it the node goes on without Redis.
    /// Default: 50 ms.
    pub fn op_timeout(self, timeout: Duration) -> Self {
        RedisTier {
            op_timeout: timeout,
            ..self
        }
    }
}

impl fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTier")
            .field("url", &self.url)
            .field("key_prefix", &self.key_prefix)
            .field("secret", &"[redacted]")
            .field("op_timeout", &self.op_timeout)
            .finish()
    }
}

/// An answer as Redis holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SharedEntry {
    /// A user.
    User(User),
    /// A rejection (401 or 403).
    Rejected(u16),
}

impl SharedEntry {
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

/// An invalidation as published on the channel, for every node to apply locally.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Invalidation {
    /// One token at one endpoint, named by its Redis key digest (never the token).
    Key { endpoint: String, digest: String },
    /// Every token of one user at one endpoint.
    User { endpoint: String, user_id: i64 },
    /// Everything.
    All,
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
    /// After an error, Redis is skipped until then.
    resting_until: Mutex<Option<Instant>>,
    /// The channel subscriber, started on first use.
    subscriber: OnceLock<tokio::task::JoinHandle<()>>,
    subscribed: Arc<AtomicBool>,
    pub(crate) hits: AtomicU64,
    pub(crate) errors: Arc<AtomicU64>,
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
    pub(crate) fn new(tier: RedisTier) -> Result<Self, ConfigError> {
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
            resting_until: Mutex::new(None),
            subscriber: OnceLock::new(),
            subscribed: Arc::new(AtomicBool::new(false)),
            hits: AtomicU64::new(0),
            errors: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The hex HMAC naming (endpoint, token).
    pub(crate) fn digest(&self, endpoint: &str, token: impl AsRef<[u8]>) -> String {
        let mut mac = self.mac.clone();
        mac.update(endpoint.as_bytes());
        mac.update(&[0]);
        mac.update(token.as_ref());
        hex(&mac.finalize().into_bytes())
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

    /// The shared answer for (endpoint, token) and how long it has left, if Redis has one.
    pub(crate) async fn get(&self, endpoint: &str, token: &str) -> Option<(SharedEntry, Duration)> {
        let mut conn = self.conn()?;
        let key = self.key(&self.digest(endpoint, token));
        let (value, pttl): (Option<Vec<u8>>, i64) = self
            .run(
                "get",
                redis::pipe().get(&key).pttl(&key).query_async(&mut conn),
            )
            .await?;
        let value = value?;
        let Some(entry) = SharedEntry::decode(&value) else {
            self.failed(
                "decode",
                "a value in Redis is not an answer this crate wrote",
            );
            return None;
        };
        let left = Duration::from_millis(u64::try_from(pttl).ok().filter(|&ms| ms > 0)?);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some((entry, left))
    }

    /// Stores an answer for `ttl`, in the background; a user's key joins its user index so
    /// that `invalidate_user` finds it. `index_ttl` bounds every entry's life (`cache_ttl`).
    pub(crate) fn put(
        &self,
        endpoint: &str,
        token: &str,
        entry: &SharedEntry,
        ttl: Duration,
        index_ttl: Duration,
    ) {
        let Some(mut conn) = self.conn() else { return };
        let key = self.key(&self.digest(endpoint, token));
        let mut pipe = redis::pipe();
        pipe.set(&key, entry.encode())
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .ignore();
        if let SharedEntry::User(user) = entry {
            let index = self.user_index(endpoint, user.id);
            pipe.sadd(&index, &key).ignore();
            pipe.pexpire(&index, index_ttl.as_millis().max(1) as i64)
                .ignore();
        }
        self.spawn(
            "put",
            async move { pipe.query_async::<()>(&mut conn).await },
        );
    }

    /// Deletes one token's entry and tells every node, in the background.
    pub(crate) fn delete(&self, endpoint: &str, token: &str) {
        let digest = self.digest(endpoint, token);
        let key = self.key(&digest);
        let message = Invalidation::Key {
            endpoint: endpoint.to_owned(),
            digest,
        };
        self.broadcast(redis::pipe().del(key).ignore(), &message);
    }

    /// Deletes every entry of one user and tells every node, in the background.
    pub(crate) fn delete_user(&self, endpoint: &str, user_id: i64) {
        let index = self.user_index(endpoint, user_id);
        let Some(mut conn) = self.conn() else { return };
        let message = Invalidation::User {
            endpoint: endpoint.to_owned(),
            user_id,
        };
        let channel = self.channel.clone();
        let payload = serde_json::to_string(&message).unwrap_or_default();
        self.spawn("invalidate_user", async move {
            let keys: Vec<String> = redis::cmd("SMEMBERS")
                .arg(&index)
                .query_async(&mut conn)
                .await?;
            let mut pipe = redis::pipe();
            for key in keys {
                pipe.del(key).ignore();
            }
            pipe.del(&index)
                .ignore()
                .publish(&channel, payload)
                .ignore();
            pipe.query_async::<()>(&mut conn).await
        });
    }

    /// Deletes every entry under the prefix and tells every node, in the background.
    pub(crate) fn delete_all(&self) {
        let Some(mut conn) = self.conn() else { return };
        let pattern = format!("{}*", self.prefix);
        let channel = self.channel.clone();
        let payload = serde_json::to_string(&Invalidation::All).unwrap_or_default();
        let timeout = self.op_timeout;
        let errors = self.errors.clone();
        // A scan may take many round trips: it runs under its own, longer, deadline.
        tokio::spawn(async move {
            let work = async {
                let mut cursor: u64 = 0;
                loop {
                    let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await?;
                    if !keys.is_empty() {
                        redis::cmd("UNLINK")
                            .arg(keys)
                            .query_async::<()>(&mut conn)
                            .await?;
                    }
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
                redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(payload)
                    .query_async::<()>(&mut conn)
                    .await
            };
            if !matches!(tokio::time::timeout(timeout * 100, work).await, Ok(Ok(()))) {
                errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => "invalidate_all")
                    .increment(1);
            }
        });
    }

    fn broadcast(&self, pipe: &mut redis::Pipeline, message: &Invalidation) {
        let Some(mut conn) = self.conn() else { return };
        let payload = serde_json::to_string(message).unwrap_or_default();
        let mut pipe = pipe.clone();
        pipe.publish(&self.channel, payload).ignore();
        self.spawn("invalidate", async move {
            pipe.query_async::<()>(&mut conn).await
        });
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

    /// Whether the invalidation subscriber is listening now.
    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }

    /// Starts, once, the task that applies other nodes' invalidations with `apply`. It
    /// re-subscribes after Redis restarts; since messages sent meanwhile are lost, `apply` gets
    /// an [`Invalidation::All`] after every re-subscription.
    pub(crate) fn start_subscriber(&self, apply: impl Fn(Invalidation) + Send + Sync + 'static) {
        if self.subscriber.get().is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let channel = self.channel.clone();
        let subscribed = self.subscribed.clone();
        let timeout = self.op_timeout;
        let _ = self.subscriber.set(runtime.spawn(async move {
            use futures_util::StreamExt;
            let mut delay = Duration::from_millis(50);
            let mut first = true;
            loop {
                let connected = tokio::time::timeout(timeout * 20, async {
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.subscribe(&channel).await?;
                    redis::RedisResult::Ok(pubsub)
                })
                .await;
                if let Ok(Ok(pubsub)) = connected {
                    if !first {
                        apply(Invalidation::All);
                    }
                    first = false;
                    delay = Duration::from_millis(50);
                    subscribed.store(true, Ordering::Release);
                    let mut messages = pubsub.into_on_message();
                    while let Some(msg) = messages.next().await {
                        match msg
                            .get_payload::<String>()
                            .ok()
                            .and_then(|p| serde_json::from_str(&p).ok())
                        {
                            Some(invalidation) => apply(invalidation),
                            None => tracing::warn!("ignoring a malformed invalidation message"),
                        }
                    }
                    subscribed.store(false, Ordering::Release);
                    metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => "subscribe")
                        .increment(1);
                    tracing::warn!("lost the shared cache invalidation channel; re-subscribing");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RESUBSCRIBE_DELAY);
            }
        }));
    }
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
        SharedCache::new(RedisTier::new("redis://127.0.0.1:1", "0123456789abcdef")).unwrap()
    }

    #[test]
    fn digest_depends_on_endpoint_token_and_secret_and_hides_the_token() {
        let a = tier();
        let d = a.digest("https://a.example/api/user", "tok");
        assert_eq!(d.len(), 64);
        assert!(!d.contains("tok"));
        assert_ne!(d, a.digest("https://b.example/api/user", "tok"));
        assert_ne!(d, a.digest("https://a.example/api/user", "tok2"));
        let b =
            SharedCache::new(RedisTier::new("redis://127.0.0.1:1", "another-secret-16b")).unwrap();
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
        assert!(SharedCache::new(RedisTier::new("redis://127.0.0.1", "short")).is_err());
        assert!(SharedCache::new(RedisTier::new("not a url", "0123456789abcdef")).is_err());
    }

    #[test]
    fn debug_hides_the_secret() {
        let shown = format!("{:?}", RedisTier::new("redis://h", "SECRET-SECRET-SECRET"));
        assert!(!shown.contains("SECRET"), "{shown}");
    }
}
