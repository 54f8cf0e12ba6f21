//! The shared tier on Redis (feature `redis`), behind the local one, shared by the game-server
//! nodes of one title: answers one node got from the API serve the others, and revocations on
//! one node reach all of them.
//!
//! What it owns: the Redis keys and values, their derivation, the revocation stream and its
//! reader, and keeping Redis off the critical path. Every Redis operation runs under
//! [`RedisTier::op_timeout`]; a failed one counts in `token_resolver_shared_cache_errors_total`,
//! makes the tier stand aside for a second, and never fails a resolution: the node falls back
//! to its local cache and the API. What to cache and for how long stays the resolver's call;
//! when to ask this tier is [`Tiers`](super::Tiers)'s.
//!
//! No token reaches Redis: keys name tokens, users and sessions by HMACs of the tier's secret,
//! values hold only the user's id, name and extra fields (or the rejection's status) and their
//! absolute expiry, sealed with a MAC of the same secret over the key (which names the
//! generation) too. A value the MAC does not match (forged, altered, moved) is a miss and a
//! warning, never a user; so is one past its sealed expiry (whatever TTL Redis keeps), and one
//! under its token's tombstone (written back after a revocation by someone: the tier never
//! writes there). Revocations on the stream are authenticated with a key derived from the same
//! secret; what a writer without the secret adds there is dropped, and counted in
//! `token_resolver_shared_forged_total`.
//!
//! A revocation wins every race with a write: it leaves a tombstone (of the token, the user or
//! the session) before it deletes, and a write is a Lua script that refuses to store under a
//! tombstone, so an answer fetched before a revocation is never written after it, by any node.
//! `invalidate_all` moves the tier to a new generation of keys with one `INCR`.
//!
//! - `tier`: [`RedisTier`], the configuration; `error`: [`RedisTierError`].
//! - `connect`: the connection forms (one server, Sentinel, Cluster); `conn`: one connection
//!   whatever the form.
//! - `entry`: values, their seal, and the names of keys.
//! - `invalidation`: revoking in Redis and telling the other nodes; `subscriber`: hearing them,
//!   on a Redis Stream read from where this node left off.
//!
//! See `docs/redis.md` for the key layout and why no script needs two slots on a cluster.

mod conn;
mod connect;
mod entry;
mod error;
// The readers of what Redis hands a node, for the fuzzers: see `crate::fuzzing`.
pub(crate) mod fuzzing;
mod invalidation;
mod scripts;
mod subscriber;
mod tier;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub use error::RedisTierError;
pub use tier::RedisTier;

use super::local::Fingerprint;
use super::{Cached, TokenFingerprint};
use crate::auth_url::Endpoint;
use crate::clock::{self, Instant};
use crate::error::ConfigError;
use crate::telemetry;
use conn::Conn;
use connect::Backend;
use entry::{token_digest, Keys, SharedEntry, Unsealed};
use scripts::Scripts;

/// How long the tier stands aside after a Redis error before trying again.
const BACK_OFF: Duration = Duration::from_secs(1);

/// How far past its sealed expiry a value still in Redis may be before it counts as written
/// back by someone rather than kept a little longer under the nodes' differing clocks.
const REPLAY_SLACK: Duration = Duration::from_secs(60);

/// Counts and logs a sealed value someone wrote back.
fn replayed(what: &'static str) {
    metrics::counter!(telemetry::SHARED_FORGED_TOTAL, "what" => "replayed_value").increment(1);
    tracing::warn!("{what}");
}

/// The generation before the reader has read it from Redis: the tier is not used until then,
/// since keys of an older generation hold what `invalidate_all` revoked.
const UNKNOWN: u64 = u64::MAX;

/// The shared tier of one resolver.
pub(crate) struct SharedCache {
    /// The connection form and its connection.
    backend: Arc<Backend>,
    /// What background work needs too: names, the seal, the scripts, the generation.
    core: Arc<Core>,
    op_timeout: Duration,
    /// How long a user's index of keys lives: the longest any answer is kept (`cache_ttl`).
    index_ttl: Duration,
    /// Errors so far, and the rest after the last one; shared with background writes.
    health: Arc<Health>,
    /// The stream reader, started on first use.
    subscriber: OnceLock<tokio::task::JoinHandle<()>>,
    /// The runtime the reader runs on: background work started from a thread outside any
    /// runtime (an admin thread calling `invalidate`) runs there.
    runtime: OnceLock<tokio::runtime::Handle>,
    /// Whether the reader is caught up and its connection answers.
    subscribed: Arc<AtomicBool>,
    /// Whether this node may trust what it cached: `true` from the start (nothing is cached
    /// yet) until the reader loses the stream or cannot reach it, and again once it is caught
    /// up. While `false`, cached answers admit nobody.
    trusted: Arc<AtomicBool>,
    hits: AtomicU64,
}

/// What the tier's background work (writes, revocations, the stream reader) shares with it.
struct Core {
    mac: Hmac<Sha256>,
    keys: Keys,
    /// The Lua scripts that write and revoke.
    scripts: Scripts,
    /// The tier's generation, [`UNKNOWN`] until the reader has read it.
    generation: AtomicU64,
    /// How long a tombstone, and an insisting revocation, lasts: at least as long as any
    /// answer it could be about is kept.
    tombstone_ttl: Duration,
    /// Revocations the stream keeps for nodes catching up.
    stream_len: u64,
    /// This node in the revocations it writes, so that its reader skips them.
    node: u64,
    /// The key that authenticates the stream's messages: derived from the secret apart from
    /// the one that seals values and names keys.
    stream_mac: Hmac<Sha256>,
    /// See [`RedisTier::node_clock_offset_ms`].
    clock_offset_ms: i64,
}

impl Core {
    /// The generation the tier is at, once the reader has read it.
    fn generation(&self) -> Option<u64> {
        Some(self.generation.load(Ordering::Acquire)).filter(|&g| g != UNKNOWN)
    }

    /// This node as its messages name it, in hex.
    fn node_id(&self) -> String {
        format!("{:016x}", self.node)
    }

    /// Moves this node to `generation` if it is further than the one it knows, or it knows
    /// none yet: never back.
    fn advance(&self, generation: u64) {
        let _ = self
            .generation
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |known| {
                (known == UNKNOWN || known < generation).then_some(generation)
            });
    }

    /// This node's wall clock, unix ms.
    fn now_ms(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        now.saturating_add_signed(self.clock_offset_ms)
    }

    /// A tombstone's lifetime, in milliseconds.
    fn tombstone_ms(&self) -> u64 {
        self.tombstone_ttl.as_millis().max(1) as u64
    }
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
            .field("keys", &self.core.keys)
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
            core: Arc::new(Core {
                mac,
                keys: Keys::new(&tier.key_prefix),
                scripts: Scripts::new(),
                generation: AtomicU64::new(UNKNOWN),
                tombstone_ttl: index_ttl.max(Duration::from_secs(60)),
                stream_len: tier.stream_len,
                node: fastrand::u64(..),
                stream_mac: invalidation::stream_mac(&tier.secret),
                clock_offset_ms: tier.clock_offset_ms,
            }),
            op_timeout: tier.op_timeout,
            index_ttl,
            health: Arc::new(Health {
                resting_until: Mutex::new(None),
                errors: AtomicU64::new(0),
            }),
            subscriber: OnceLock::new(),
            runtime: OnceLock::new(),
            subscribed: Arc::new(AtomicBool::new(false)),
            trusted: Arc::new(AtomicBool::new(true)),
            hits: AtomicU64::new(0),
        })
    }

    /// The hex HMAC naming (endpoint, token).
    fn digest(&self, endpoint: &str, token: impl AsRef<[u8]>) -> String {
        token_digest(&self.core.mac, endpoint, token.as_ref())
    }

    /// The name revocations give (endpoint, token): the same HMAC on every node.
    pub(crate) fn fingerprint(&self, endpoint: &str, token: &str) -> TokenFingerprint {
        TokenFingerprint::from_digest(self.digest(endpoint, token))
    }

    /// A token's fingerprint in the local index and revocation log: the first eight bytes of
    /// the same HMAC, so that another node's revocation names what this node indexed.
    pub(crate) fn token_fingerprint(&self) -> Fingerprint {
        let mac = self.core.mac.clone();
        Arc::new(move |endpoint: &Endpoint, token: &[u8]| {
            entry::token_fingerprint(&mac, endpoint.as_str(), token)
        })
    }

    /// Local misses answered here, and operations that failed.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.health.errors.load(Ordering::Relaxed),
        )
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

    /// The shared answer for (endpoint, token), fresh for what its seal leaves it, if Redis
    /// has one under this tier's seal and no tombstone of the token: a `GET` of the entry and
    /// one of its tombstone (the same hash tag), sent together.
    pub(crate) async fn get(&self, endpoint: &str, token: &str) -> Option<Cached> {
        let generation = match self.core.generation() {
            Some(generation) => generation,
            None => self.load_generation().await?,
        };
        let digest = self.digest(endpoint, token);
        let key = self.core.keys.token(generation, &digest);
        let tombstone = self.core.keys.token_tombstone(generation, &digest);
        let (value, tombstone): (Option<Vec<u8>>, Option<Vec<u8>>) = self
            .run("get", |mut conn| {
                let (key, tombstone) = (key.clone(), tombstone.clone());
                let mut other = conn.clone();
                async move {
                    // Two single-key commands sent together: the cluster client follows an
                    // `ASK` (a slot migrating) for each, which it did not for a third at once.
                    let (mut get, mut tomb) = (redis::cmd("GET"), redis::cmd("GET"));
                    get.arg(&key);
                    tomb.arg(&tombstone);
                    let (value, tombstone) = futures_util::future::join(
                        get.query_async(&mut conn),
                        tomb.query_async(&mut other),
                    )
                    .await;
                    Ok((value?, tombstone?))
                }
            })
            .await?;
        let Some(value) = value else {
            metrics::counter!(telemetry::SHARED_CACHE_MISSES_TOTAL).increment(1);
            return None;
        };
        let now = self.core.now_ms();
        let (entry, expires_at) = match SharedEntry::open(&self.core.mac, &key, &value, now) {
            Ok(opened) => opened,
            Err(Unsealed::Forged) => {
                // Counted, but no rest: a value someone planted must not take the tier away.
                self.health.errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(telemetry::SHARED_CACHE_ERRORS_TOTAL, "op" => "unsealed")
                    .increment(1);
                metrics::counter!(telemetry::SHARED_FORGED_TOTAL, "what" => "value").increment(1);
                tracing::warn!("a value in Redis is not sealed with this tier's secret: ignored");
                return None;
            }
            Err(Unsealed::Expired { expired_at_ms }) => {
                // Redis keeps a value for what its seal gives it, give or take the nodes'
                // clocks: one it still holds long after is a copy written back.
                if now.saturating_sub(expired_at_ms) > REPLAY_SLACK.as_millis() as u64 {
                    replayed("a value in Redis is past its sealed expiry: ignored");
                }
                metrics::counter!(telemetry::SHARED_CACHE_MISSES_TOTAL).increment(1);
                return None;
            }
        };
        if tombstone.is_some() {
            // This tier never writes under a tombstone: someone wrote it back.
            replayed("a value in Redis lies under its token's tombstone: ignored");
            metrics::counter!(telemetry::SHARED_CACHE_MISSES_TOTAL).increment(1);
            return None;
        }
        // What the seal leaves: the writer's `PX` was the same, so Redis drops the key then too
        // (give or take the clocks of the two nodes).
        let left = Duration::from_millis(expires_at - now);
        self.hits.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::SHARED_CACHE_HITS_TOTAL).increment(1);
        Some(entry.cached(left))
    }

    /// The tier's generation, read from Redis before the reader has: the first look-ups of a
    /// node need it to know which keys hold answers.
    async fn load_generation(&self) -> Option<u64> {
        let key = self.core.keys.generation();
        let generation: Option<u64> = self
            .run("generation", |mut conn| {
                let key = key.clone();
                async move { redis::cmd("GET").arg(&key).query_async(&mut conn).await }
            })
            .await?;
        let generation = generation.unwrap_or(0);
        // The reader, or an `invalidate_all` of this node, may have known better meanwhile.
        let known = self.core.generation.compare_exchange(
            UNKNOWN,
            generation,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        Some(known.map_or_else(|known| known, |_| generation))
    }

    /// Stores an answer for what is left of its freshness, in the background, unless a
    /// tombstone of its token, its user or its session says it was revoked: a user's entry
    /// first joins its user's index (refused under the user's or the session's tombstone), then
    /// is written (refused under the token's).
    pub(crate) fn put(&self, endpoint: &str, token: &str, cached: &Cached) {
        if self.health.is_resting() {
            return;
        }
        let digest = self.digest(endpoint, token);
        let ttl = cached.fresh_until().left().as_millis().max(1) as u64;
        let expires_at = self.core.now_ms() + ttl;
        let entry = SharedEntry::of(cached);
        let user = match cached {
            Cached::User { user, .. } => Some((
                endpoint.to_owned(),
                user.id,
                user.session().map(str::to_owned),
            )),
            Cached::Rejected { .. } => None,
        };
        // The generation as the answer is stored, not as the task gets a connection (up to
        // `op_timeout` later): an `invalidate_all` heard meanwhile revoked this answer, which
        // must not be written into the new generation. Unknown: not written at all.
        let Some(generation) = self.core.generation() else {
            return;
        };
        let index_ttl = self.index_ttl.as_millis().max(1) as u64;
        let core = self.core.clone();
        self.spawn("put", false, self.op_timeout, move |mut conn| {
            let (core, entry, user, digest) =
                (core.clone(), entry.clone(), user.clone(), digest.clone());
            async move {
                let moved = || core.generation() != Some(generation);
                if moved() {
                    return Ok(());
                }
                if let Some((endpoint, id, session)) = &user {
                    let keys = core.user_index_keys(generation, endpoint, *id, session.as_deref());
                    if !core
                        .scripts
                        .join_index(&mut conn, &keys, &digest, index_ttl)
                        .await?
                    {
                        return Ok(());
                    }
                }
                if moved() {
                    return Ok(());
                }
                let key = core.keys.token(generation, &digest);
                let tombstone = core.keys.token_tombstone(generation, &digest);
                let value = entry.seal(&core.mac, &key, expires_at);
                let written = core.scripts.write(&mut conn, &key, &tombstone, &value, ttl);
                written.await.map(|_| ())
            }
        });
    }

    /// Runs a write in the background, each try within `timeout`. A cache write (`insist`
    /// false) is skipped while Redis rests and tried once; a revocation (`insist` true) is
    /// tried until it succeeds or its tombstone's lifetime passes, since a lost one leaves other
    /// nodes serving what was revoked. Called outside a runtime, it runs on the reader's; with
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
        let insist_for = self.core.tombstone_ttl;
        runtime.spawn(async move {
            let deadline = clock::now() + insist_for;
            let mut pause = Duration::from_millis(50);
            while attempt(&backend, &health, timeout, op, &work)
                .await
                .is_err()
                && insist
                && clock::now() + pause < deadline
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }
}

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
        resting.is_some_and(|until| clock::now() < until)
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
        let now = clock::now();
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
