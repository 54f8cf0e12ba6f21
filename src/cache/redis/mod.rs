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
//!
//! - `tier`: [`RedisTier`], the configuration; `error`: [`RedisTierError`].
//! - `connect`: the connection forms (one server, Sentinel, Cluster); `conn`: one connection
//!   whatever the form.
//! - `entry`: values and key digests.
//! - `invalidation`: deleting and telling the other nodes; `subscriber`: hearing them.
//!
//! Key layout, the same on every form (on a cluster each key lives in its own slot):
//! `<prefix>tok:<digest>` (a string with a TTL) and `<prefix>user:<digest>` (a set of a user's
//! token keys, for `invalidate_user`). No command needs two keys in one slot: see
//! `docs/redis.md`.

mod conn;
mod connect;
mod entry;
mod error;
mod invalidation;
mod subscriber;
mod tier;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub use error::RedisTierError;
pub use tier::RedisTier;

use super::{Cached, TokenFingerprint};
use crate::error::ConfigError;
use crate::telemetry;
use conn::Conn;
use connect::Backend;
use entry::{hex, token_digest, SharedEntry};

/// How long the tier stands aside after a Redis error before trying again.
const BACK_OFF: Duration = Duration::from_secs(1);

/// The shared tier of one resolver.
pub(crate) struct SharedCache {
    /// The connection form and its connection.
    backend: Arc<Backend>,
    mac: Hmac<Sha256>,
    prefix: String,
    channel: String,
    op_timeout: Duration,
    /// How long a user's index of keys lives: the longest any answer is kept (`cache_ttl`).
    index_ttl: Duration,
    /// Errors so far, and the rest after the last one; shared with background writes.
    health: Arc<Health>,
    /// The channel subscriber, started on first use.
    subscriber: OnceLock<tokio::task::JoinHandle<()>>,
    /// The runtime the subscriber runs on: background work started from a thread outside any
    /// runtime (an admin thread calling `invalidate`) runs there.
    runtime: OnceLock<tokio::runtime::Handle>,
    subscribed: Arc<AtomicBool>,
    hits: AtomicU64,
}

/// Failures of the tier: counted, logged (without secrets) and followed by a rest.
struct Health {
    /// After an error, Redis is skipped on the resolve path until then.
    resting_until: Mutex<Option<Instant>>,
    errors: AtomicU64,
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
        let backend = Backend::new(&tier)?;
        let mac = Hmac::<Sha256>::new_from_slice(&tier.secret).expect("HMAC takes any key length");
        Ok(SharedCache {
            backend: Arc::new(backend),
            mac,
            channel: format!("{}invalidate", tier.key_prefix),
            prefix: tier.key_prefix,
            op_timeout: tier.op_timeout,
            index_ttl,
            health: Arc::new(Health {
                resting_until: Mutex::new(None),
                errors: AtomicU64::new(0),
            }),
            subscriber: OnceLock::new(),
            runtime: OnceLock::new(),
            subscribed: Arc::new(AtomicBool::new(false)),
            hits: AtomicU64::new(0),
        })
    }

    /// The hex HMAC naming (endpoint, token).
    fn digest(&self, endpoint: &str, token: impl AsRef<[u8]>) -> String {
        token_digest(&self.mac, endpoint, token.as_ref())
    }

    /// The name revocations give (endpoint, token): the same HMAC on every node.
    pub(crate) fn fingerprint(&self, endpoint: &str, token: &str) -> TokenFingerprint {
        TokenFingerprint::from_digest(self.digest(endpoint, token))
    }

    /// Local misses answered here, and operations that failed.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.health.errors.load(Ordering::Relaxed),
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

    /// Runs one Redis operation on the resolve path under the deadline; `None` when Redis is
    /// resting after an error, or fails now (then it rests).
    async fn run<T, Fut>(&self, op: &'static str, work: impl Fn(Conn) -> Fut) -> Option<T>
    where
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        if self.health.is_resting() {
            return None;
        }
        attempt(&self.backend, &self.health, self.op_timeout, op, work)
            .await
            .ok()
    }

    /// The shared answer for (endpoint, token), fresh for what it has left in Redis, if Redis
    /// has one: a `GET` and a `PTTL`, sent together.
    pub(crate) async fn get(&self, endpoint: &str, token: &str) -> Option<Cached> {
        let key = self.key(&self.digest(endpoint, token));
        let (value, pttl): (Option<Vec<u8>>, i64) = self
            .run("get", |mut conn| {
                let (key, mut other) = (key.clone(), conn.clone());
                async move {
                    let (mut get, mut pttl) = (redis::cmd("GET"), redis::cmd("PTTL"));
                    get.arg(&key);
                    pttl.arg(&key);
                    let (value, pttl) = futures_util::future::join(
                        get.query_async(&mut conn),
                        pttl.query_async(&mut other),
                    )
                    .await;
                    Ok((value?, pttl?))
                }
            })
            .await?;
        let Some(value) = value else {
            metrics::counter!(telemetry::SHARED_CACHE_MISSES_TOTAL).increment(1);
            return None;
        };
        let Some(entry) = SharedEntry::decode(&value) else {
            self.health.failed(
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
    ///
    /// Every command here, as in [`get`](Self::get), goes on its own but at once: the
    /// multiplexed connection still writes them back to back, and on a cluster each is routed
    /// (and redirected during a resharding, where `ASKING` covers one command, not a pipeline)
    /// by its own key.
    pub(crate) fn put(&self, endpoint: &str, token: &str, cached: &Cached) {
        if self.health.is_resting() {
            return;
        }
        let (entry, ttl) = (SharedEntry::of(cached), cached.fresh_until().left());
        let key = self.key(&self.digest(endpoint, token));
        let mut set = redis::cmd("SET");
        set.arg(&key)
            .arg(entry.encode())
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64);
        let index = match &entry {
            SharedEntry::User(user) => Some(self.user_index(endpoint, user.id)),
            SharedEntry::Rejected(_) => None,
        };
        let index_ttl = self.index_ttl.as_millis().max(1) as u64;
        self.spawn("put", false, self.op_timeout, move |conn| {
            let (set, index, key) = (set.clone(), index.clone(), key.clone());
            let mut conns = [conn.clone(), conn.clone(), conn];
            async move {
                let [c1, c2, c3] = &mut conns;
                let indexed = async {
                    let Some(index) = index else { return Ok(()) };
                    let (mut add, mut expire) = (redis::cmd("SADD"), redis::cmd("PEXPIRE"));
                    add.arg(&index).arg(&key);
                    expire.arg(&index).arg(index_ttl);
                    let (added, expired) = futures_util::future::join(
                        add.query_async::<()>(c2),
                        expire.query_async::<()>(c3),
                    )
                    .await;
                    added.and(expired)
                };
                let (stored, indexed) =
                    futures_util::future::join(set.query_async::<()>(c1), indexed).await;
                stored.and(indexed)
            }
        });
    }

    /// Runs a write in the background, each try within `timeout`. A cache write (`insist`
    /// false) is skipped while Redis rests and tried once; an invalidation (`insist` true) is
    /// tried until it succeeds or [`INSIST_FOR`] passes, since a lost one leaves other nodes
    /// serving what was revoked. Called outside a runtime, it runs on the subscriber's; with
    /// neither (this node has resolved nothing yet) it is skipped, with a warning.
    fn spawn<Fut>(
        &self,
        op: &'static str,
        insist: bool,
        timeout: Duration,
        work: impl Fn(Conn) -> Fut + Send + Sync + 'static,
    ) where
        Fut: std::future::Future<Output = redis::RedisResult<()>> + Send,
    {
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.get().cloned());
        let Some(runtime) = runtime else {
            tracing::warn!(
                op,
                "no tokio runtime here: the shared cache write is skipped"
            );
            return;
        };
        let (backend, health) = (self.backend.clone(), self.health.clone());
        runtime.spawn(async move {
            let deadline = Instant::now() + INSIST_FOR;
            let mut pause = Duration::from_millis(50);
            while attempt(&backend, &health, timeout, op, &work)
                .await
                .is_err()
                && insist
                && Instant::now() + pause < deadline
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }
}

/// How long an invalidation keeps trying to reach Redis.
const INSIST_FOR: Duration = Duration::from_secs(10);

/// One operation: a connection, then `work` on it, all within `timeout`; a failure is
/// counted, logged and rested on, and tells the backend its connection may be gone. When the
/// backend's connection turned out to be stale (a Sentinel master that died), `work` runs once
/// more on a fresh one within the same deadline.
async fn attempt<T, Fut>(
    backend: &Backend,
    health: &Health,
    timeout: Duration,
    op: &'static str,
    work: impl Fn(Conn) -> Fut,
) -> Result<T, ()>
where
    Fut: std::future::Future<Output = redis::RedisResult<T>>,
{
    let outcome = tokio::time::timeout(timeout, async {
        let conn = backend.connection().await.map_err(|e| ("connect", e))?;
        match work(conn).await {
            Err(e) if backend.lost(Some(&e)) => {
                let conn = backend.connection().await.map_err(|e| ("connect", e))?;
                work(conn).await.map_err(|e| (op, e))
            }
            done => done.map_err(|e| (op, e)),
        }
    })
    .await;
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err((op, e))) => {
            backend.lost(Some(&e));
            health.failed(op, &error::describe(&e));
            Err(())
        }
        Err(_) => {
            backend.lost(None);
            health.failed(op, "timed out");
            Err(())
        }
    }
}

impl Health {
    fn is_resting(&self) -> bool {
        let resting = self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        resting.is_some_and(|until| Instant::now() < until)
    }

    /// Counts and logs a failure (`detail` never holds a password or a token: Redis's errors
    /// name addresses and replies) and rests. One warning per rest: failures while resting
    /// (background writes, invalidations insisting) log at debug level.
    fn failed(&self, op: &'static str, detail: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => op).increment(1);
        let mut resting = self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if resting.is_some_and(|until| now < until) {
            tracing::debug!(op, detail, "shared cache (Redis) still unavailable");
        } else {
            tracing::warn!(
                op,
                detail,
                "shared cache (Redis) unavailable; going on without it"
            );
        }
        *resting = Some(now + BACK_OFF);
    }
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
    fn config_refuses_what_cannot_work() {
        let minute = Duration::from_secs(60);
        let secret = "0123456789abcdef";
        let refused = [
            RedisTier::new("redis://127.0.0.1", "short"),
            RedisTier::new("not a url", secret),
            RedisTier::new("http://127.0.0.1:6379", secret),
            RedisTier::new("rediss://127.0.0.1", secret).root_certificate("not a PEM"),
            RedisTier::sentinel(Vec::<String>::new(), "m", secret),
            RedisTier::sentinel(["redis://127.0.0.1:26379"], "", secret),
            RedisTier::cluster(Vec::<String>::new(), secret),
            RedisTier::cluster(
                ["redis://a:1@127.0.0.1:1", "redis://a:2@127.0.0.1:2"],
                secret,
            ),
        ];
        for tier in refused {
            let shown = format!("{tier:?}");
            assert!(SharedCache::new(tier, minute).is_err(), "{shown}");
        }
        let accepted = [
            RedisTier::new("rediss://u:p%40ss@127.0.0.1:6380/1", secret),
            RedisTier::sentinel(
                ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"],
                "m",
                secret,
            ),
            RedisTier::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"], secret),
        ];
        for tier in accepted {
            let shown = format!("{tier:?}");
            assert!(SharedCache::new(tier, minute).is_ok(), "{shown}");
        }
    }
}
