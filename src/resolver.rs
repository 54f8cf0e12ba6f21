//! [`Resolver`], the entry point: from an authUrl and an access token to a verified [`User`];
//! [`ResolverBuilder`], its settings; and the connect and join requests a game server resolves.
//!
//! The order of work in a resolution is the order of the checks a hostile client meets: the
//! authUrl against the allowlist, the token's syntax, the cache, then one coalesced upstream
//! call under the resolver-wide slot limit. Nothing reaches the network before the first two
//! pass.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::auth_url::{AllowList, Endpoint};
use crate::breaker::{BreakerConfig, Breakers};
use crate::cache::{self, CacheKey, Cached, KeyRef, KeyView};
use crate::counters::{Counter, Counters};
use crate::error::{ConfigError, ErrorCode, ResolveError};
use crate::flight::Flights;
#[cfg(feature = "redis")]
use crate::shared_cache::{Invalidation, RedisTier, SharedCache, SharedEntry};
use crate::telemetry;
use crate::token;
use crate::upstream::{Reply, Upstream};
pub use crate::user::{Identity, User};

/// Resolves access tokens to users by asking the integrator's `/api/user`, with a cache.
///
/// Cheap to clone: it is an `Arc` inside, and clones share the cache, the in-flight calls, the
/// slot limit and the HTTP connection pool. Build one per process with [`Resolver::builder`]
/// and hand clones to every connection handler.
///
/// # Many tasks asking for one token
///
/// When many tasks resolve the same (authUrl, token) at once, as when a whole party joins a
/// room, exactly one upstream call is made; every task gets its result, success or error.
/// Cache hits never wait for anything.
#[derive(Clone)]
pub struct Resolver {
    inner: Arc<Inner>,
}

/// Everything clones of a [`Resolver`] share.
struct Inner {
    /// The default authUrl and every `allow_auth_url`.
    allow: AllowList,
    /// The platform's "user resource acquisition API URL", for connects and rooms without one.
    default_endpoint: Option<Arc<Endpoint>>,
    /// The options-screen switch: when off, connects and joins are anonymous.
    auth_required: bool,
    /// Answers (users and rejections), each with its own time to live.
    cache: cache::Cache,
    /// Calls under way, so concurrent resolutions of one key share one.
    flights: Flights<Result<Cached, ResolveError>>,
    /// Upstream slots: at most `max_concurrent_requests` calls in flight.
    slots: Semaphore,
    /// The HTTP call and its deadline, retry and size settings.
    upstream: Upstream,
    cache_ttl: Duration,
    negative_cache_ttl: Duration,
    queue_timeout: Duration,
    /// How long past its freshness an answer may still be served while the API is down.
    serve_stale_for: Duration,
    /// Bumped by every invalidation: a call that started before one does not cache its answer,
    /// so an invalidation cannot be undone by a call already in flight.
    generation: AtomicU64,
    /// The counters behind [`Resolver::stats`].
    counters: Counters,
    /// The handles of `token_resolver_resolutions_total`, one per outcome.
    resolutions: telemetry::Resolutions,
    /// The second tier shared by every node, if configured.
    #[cfg(feature = "redis")]
    shared: Option<SharedCache>,
}

/// Counters of what a resolver did since it was built; see [`Resolver::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Resolutions answered with a user from the cache.
    pub hits: u64,
    /// Resolutions that found nothing cached and made the upstream call themselves.
    pub misses: u64,
    /// Resolutions that found nothing cached and waited for another's upstream call.
    pub coalesced: u64,
    /// Resolutions refused from the cache because the token was rejected recently.
    pub negative_hits: u64,
    /// HTTP requests sent upstream (retries included).
    pub upstream_calls: u64,
    /// Upstream requests that got no usable answer (transport error, or a status other than
    /// 200, 401 and 403, or a bad body).
    pub upstream_errors: u64,
    /// Entries in the cache now (users and rejections; expired ones may linger briefly).
    pub entries: u64,
    /// Resolutions answered with an expired user because the API was unavailable.
    pub stale_served: u64,
    /// Resolutions that failed fast because their API's circuit breaker was open.
    pub short_circuited: u64,
    /// Local misses answered by the shared Redis tier (feature `redis`).
    pub shared_hits: u64,
    /// Shared tier operations that failed or timed out; the resolutions went on without it.
    pub shared_errors: u64,
}

/// How a resolution was answered, for its span and its metric.
#[derive(Clone, Copy)]
enum CacheOutcome {
    Hit,
    NegativeHit,
    Miss,
    Coalesced,
    Stale,
}

impl CacheOutcome {
    fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::NegativeHit => "negative_hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Coalesced => "coalesced",
            CacheOutcome::Stale => "stale",
        }
    }
}

/// What the cache holds for a key.
enum Lookup {
    /// An answer to use as it is.
    Fresh(Cached),
    /// A user past its freshness, kept to serve if the API turns out to be unavailable.
    Stale(Arc<User>),
    Absent,
}

/// Where a resolution goes: a client-supplied authUrl, or the configured default.
#[derive(Clone, Copy)]
enum Target<'a> {
    Url(&'a str),
    Default,
}

// A resolver is shared across tasks and threads.
const _: fn() = || {
    fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<Resolver>();
};

impl Resolver {
    /// Starts configuring a resolver; see [`ResolverBuilder`] for every setting and default.
    pub fn builder() -> ResolverBuilder {
        ResolverBuilder::default()
    }

    /// Resolves `access_token` against the user information API at `auth_url`.
    ///
    /// In order: the authUrl must be allowed, the token must be a `b64token` of at most 4096
    /// bytes (both checked before any traffic), then the cache answers or one upstream call is
    /// made under the slot limit. Concurrent resolutions of one (authUrl, token) share that
    /// call. This ignores `auth_required`: it is the explicit call.
    ///
    /// # Errors
    ///
    /// A [`ResolveError`] whose [`code`](ResolveError::code) says what happened; see the table
    /// in the crate README. Transient ones ([`is_retryable`](ResolveError::is_retryable)) were
    /// already retried within `request_timeout`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let resolver = token_resolver::Resolver::builder()
    ///     .default_auth_url("https://auth.example.com")
    ///     .build()?;
    /// let user = resolver.resolve("https://auth.example.com", "mF_9.B5f-4.1JqM").await?;
    /// println!("{} is {}", user.id, user.name);
    /// # Ok(()) }
    /// ```
    pub async fn resolve(
        &self,
        auth_url: &str,
        access_token: &str,
    ) -> Result<Arc<User>, ResolveError> {
        self.resolve_traced(Target::Url(auth_url), access_token)
            .await
    }

    /// Resolves the token a client sent on connect, against the default authUrl.
    ///
    /// With `auth_required(false)` this is [`Identity::Anonymous`] and makes no call.
    ///
    /// # Errors
    ///
    /// [`ResolveError::TokenMissing`] when the request has no token or an empty one; otherwise
    /// as [`resolve`](Self::resolve).
    pub async fn resolve_connect(&self, req: &ConnectRequest) -> Result<Identity, ResolveError> {
        self.resolve_identity(Target::Default, req.access_token.as_deref())
            .await
    }

    /// Resolves the token a client sent on joining a room, against the room's authUrl; an
    /// empty `auth_url` means the default authUrl.
    ///
    /// With `auth_required(false)` this is [`Identity::Anonymous`] and makes no call. The
    /// authUrl is the client's claim: it is checked against the allowlist before any traffic.
    ///
    /// # Errors
    ///
    /// [`ResolveError::TokenMissing`] when the request has no token or an empty one; otherwise
    /// as [`resolve`](Self::resolve).
    pub async fn resolve_join(&self, req: &JoinRequest) -> Result<Identity, ResolveError> {
        let target = match req.auth_url.as_str() {
            "" => Target::Default,
            url => Target::Url(url),
        };
        self.resolve_identity(target, req.access_token.as_deref())
            .await
    }

    async fn resolve_identity(
        &self,
        target: Target<'_>,
        token: Option<&str>,
    ) -> Result<Identity, ResolveError> {
        if !self.inner.auth_required {
            return Ok(Identity::Anonymous);
        }
        let token = token.unwrap_or_default();
        self.resolve_traced(target, token)
            .await
            .map(Identity::Authenticated)
    }

    /// One resolution in its span, counted in the metrics.
    async fn resolve_traced(
        &self,
        target: Target<'_>,
        token: &str,
    ) -> Result<Arc<User>, ResolveError> {
        let span = tracing::debug_span!(
            "resolve",
            auth_host = Empty,
            cache = Empty,
            user_id = Empty,
            error = Empty
        );
        // With no subscriber listening at this level the span is a no-op: skip entering it on
        // every poll (about a tenth of a cache hit's instructions).
        let result = if span.is_disabled() {
            self.resolve_inner(target, token, &span).await
        } else {
            self.resolve_inner(target, token, &span)
                .instrument(span.clone())
                .await
        };
        let label = match &result {
            Ok((user, outcome)) => {
                span.record("user_id", user.id);
                span.record("cache", outcome.as_str());
                outcome.as_str()
            }
            Err((error, outcome)) => {
                if let Some(outcome) = outcome {
                    span.record("cache", outcome.as_str());
                }
                span.record("error", error.code().as_str());
                error.code().as_str()
            }
        };
        self.inner.resolutions.count(label);
        result.map(|(user, _)| user).map_err(|(error, _)| error)
    }

    async fn resolve_inner(
        &self,
        target: Target<'_>,
        token: &str,
        span: &Span,
    ) -> Result<(Arc<User>, CacheOutcome), (ResolveError, Option<CacheOutcome>)> {
        let inner = &*self.inner;
        let endpoint = match target {
            Target::Url(url) => inner.allow.check(url),
            Target::Default => inner
                .default_endpoint
                .as_ref()
                .map(Cow::Borrowed)
                .ok_or_else(|| ResolveError::AuthUrlNotAllowed {
                    reason: "no authUrl was given and no default_auth_url is configured".to_owned(),
                }),
        }
        .map_err(|e| (e, None))?;
        if !span.is_disabled() {
            span.record("auth_host", endpoint.host());
        }
        // Only the size here: every cached token passed the full syntax check before it was
        // stored, so a hit needs no scan. A miss scans before anything else.
        token::check_size(token).map_err(|e| (e, None))?;

        let key = KeyRef {
            endpoint: endpoint.as_str(),
            token,
        };
        let stale = match self.lookup(&key) {
            Lookup::Fresh(Cached::User { user, .. }) => {
                inner.counters.bump(Counter::Hits);
                return Ok((user, CacheOutcome::Hit));
            }
            Lookup::Fresh(Cached::Rejected { status, .. }) => {
                inner.counters.bump(Counter::NegativeHits);
                return Err((rejected(&endpoint, status), Some(CacheOutcome::NegativeHit)));
            }
            Lookup::Stale(user) => Some(user),
            Lookup::Absent => None,
        };
        // Boxed: the miss path's state is large, and a hit should not carry it.
        Box::pin(self.resolve_miss(&endpoint, &key, stale)).await
    }

    /// A resolution the cache could not answer: the syntax check, then the coalesced call,
    /// falling back to `stale` when the API is unreachable.
    async fn resolve_miss(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
        stale: Option<Arc<User>>,
    ) -> Result<(Arc<User>, CacheOutcome), (ResolveError, Option<CacheOutcome>)> {
        let inner = &*self.inner;
        token::check_syntax(key.token).map_err(|e| (e, None))?;
        let (result, ran) = inner
            .flights
            .run(
                key,
                || CacheKey::new(Arc::clone(endpoint), key.token),
                || self.fetch(endpoint, key),
            )
            .await;
        let outcome = if ran {
            inner.counters.bump(Counter::Misses);
            CacheOutcome::Miss
        } else {
            inner.counters.bump(Counter::Coalesced);
            CacheOutcome::Coalesced
        };
        match result {
            Ok(Cached::User { user, .. }) => Ok((user, outcome)),
            Ok(Cached::Rejected { status, .. }) => Err((rejected(endpoint, status), Some(outcome))),
            Err(error) => match stale {
                // Only an unreachable API falls back; a rejection or a broken answer never does.
                Some(user)
                    if matches!(
                        error.code(),
                        ErrorCode::AuthUnavailable | ErrorCode::AuthTimeout
                    ) =>
                {
                    inner.counters.bump(Counter::StaleServed);
                    metrics::counter!(telemetry::STALE_SERVED_TOTAL).increment(1);
                    tracing::warn!(
                        user_id = user.id,
                        error = error.code().as_str(),
                        "serving a stale answer"
                    );
                    let stale = User {
                        stale: true,
                        ..(*user).clone()
                    };
                    Ok((Arc::new(stale), CacheOutcome::Stale))
                }
                _ => Err((error, Some(outcome))),
            },
        }
    }

    /// The cache's answer for `key`, telling fresh entries from ones kept only as a fallback.
    fn lookup(&self, key: &KeyRef<'_>) -> Lookup {
        match self.inner.cache.get(key as &dyn KeyView) {
            None => Lookup::Absent,
            // Only kept past its freshness when stale serving is on; otherwise moka dropped it
            // at `fresh_until` and a hit needs no clock.
            Some(Cached::User { user, fresh_until })
                if !self.inner.serve_stale_for.is_zero() && fresh_until.has_passed() =>
            {
                Lookup::Stale(user)
            }
            Some(cached) => Lookup::Fresh(cached),
        }
    }

    /// The upstream call for one key, run once per flight: takes a slot, calls, caches.
    async fn fetch(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
    ) -> Result<Cached, ResolveError> {
        let inner = &*self.inner;
        // A flight that ended just before this one began may have cached the answer already.
        // `contains_key` first: unlike `get` it records no read, so the usual case (nothing
        // there, as the caller just saw) costs a probe of the map and nothing more.
        if inner.cache.contains_key(key as &dyn KeyView) {
            if let Lookup::Fresh(cached) = self.lookup(key) {
                return Ok(cached);
            }
        }
        let generation = inner.generation.load(Ordering::Acquire);
        #[cfg(feature = "redis")]
        if let Some(shared) = &inner.shared {
            self.start_subscriber();
            if let Some((entry, left)) = shared.get(endpoint.as_str(), key.token).await {
                let cached = match entry {
                    SharedEntry::User(user) => Cached::user(Arc::new(user), left),
                    SharedEntry::Rejected(status) => Cached::rejected(status, left),
                };
                inner.store(endpoint, key.token, &cached, generation);
                return Ok(cached);
            }
        }
        inner.upstream.fail_fast(endpoint)?;
        // A free slot is taken at once; only a wait needs a timer.
        let _slot = match inner.slots.try_acquire() {
            Ok(slot) => slot,
            Err(_) => {
                match tokio::time::timeout(inner.queue_timeout, inner.slots.acquire()).await {
                    Ok(Ok(slot)) => slot,
                    _ => {
                        return Err(ResolveError::Overloaded {
                            waited: inner.queue_timeout,
                        })
                    }
                }
            }
        };
        let on_request = |usable: bool| {
            inner.counters.bump(Counter::UpstreamCalls);
            if !usable {
                inner.counters.bump(Counter::UpstreamErrors);
            }
        };
        let (cached, fresh) = match inner
            .upstream
            .call(endpoint, key.token, &on_request)
            .await?
        {
            Reply::User { user, freshness } => {
                let fresh = freshness.ttl(inner.cache_ttl);
                (Cached::user(Arc::new(user), fresh), fresh)
            }
            Reply::Rejected { status } => {
                let fresh = inner.negative_cache_ttl;
                (Cached::rejected(status, fresh), fresh)
            }
        };
        if inner.store(endpoint, key.token, &cached, generation) {
            #[cfg(feature = "redis")]
            if let Some(shared) = &inner.shared {
                let entry = match &cached {
                    Cached::User { user, .. } => SharedEntry::User(User::clone(user)),
                    Cached::Rejected { status, .. } => SharedEntry::Rejected(*status),
                };
                shared.put(endpoint.as_str(), key.token, &entry, fresh, inner.cache_ttl);
            }
        }
        // Only the shared tier needs the fresh lifetime apart from the entry itself.
        #[cfg(not(feature = "redis"))]
        let _ = fresh;
        Ok(cached)
    }

    /// Starts, once, the task that applies other nodes' invalidations to this node's cache.
    #[cfg(feature = "redis")]
    fn start_subscriber(&self) {
        if let Some(shared) = &self.inner.shared {
            let inner = Arc::downgrade(&self.inner);
            shared.start_subscriber(move |invalidation| {
                if let Some(inner) = inner.upgrade() {
                    inner.apply(invalidation);
                }
            });
        }
    }

    /// Whether this resolver listens to the other nodes' invalidations on the shared tier now
    /// (always `false` without one). The listener starts with the first resolution; wait for
    /// this before relying on another node's invalidation reaching this one.
    #[cfg(feature = "redis")]
    pub fn shared_cache_subscribed(&self) -> bool {
        self.start_subscriber();
        self.inner
            .shared
            .as_ref()
            .is_some_and(|s| s.is_subscribed())
    }

    /// Drops the cached answer (user or rejection) for one token at one authUrl, here and, with
    /// a shared tier, in Redis and on every node.
    ///
    /// Call it when the integrator tells you a token was revoked. A call for that token already
    /// in flight will not cache its answer.
    pub fn invalidate(&self, auth_url: &str, access_token: &str) {
        let Ok(endpoint) = Endpoint::parse(auth_url, true) else {
            return;
        };
        self.inner.evict_token(endpoint.as_str(), access_token);
        #[cfg(feature = "redis")]
        if let Some(shared) = &self.inner.shared {
            shared.delete(endpoint.as_str(), access_token);
        }
    }

    /// Drops every cached token of user `user_id` at `auth_url`, e.g. when the user is banned or
    /// logs out everywhere; with a shared tier, in Redis and on every node too. It walks the
    /// local cache: O(entries), meant for rare administrative use.
    pub fn invalidate_user(&self, auth_url: &str, user_id: i64) {
        let Ok(endpoint) = Endpoint::parse(auth_url, true) else {
            return;
        };
        self.inner.evict_user(endpoint.as_str(), user_id);
        #[cfg(feature = "redis")]
        if let Some(shared) = &self.inner.shared {
            shared.delete_user(endpoint.as_str(), user_id);
        }
    }

    /// Empties the cache; with a shared tier, Redis's entries and every node's cache too.
    pub fn invalidate_all(&self) {
        self.inner.evict_all();
        #[cfg(feature = "redis")]
        if let Some(shared) = &self.inner.shared {
            shared.delete_all();
        }
    }

    /// What this resolver (and its clones) did so far.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        self.inner.cache.run_pending_tasks();
        #[cfg(feature = "redis")]
        let (shared_hits, shared_errors) = self.inner.shared.as_ref().map_or((0, 0), |s| {
            (
                s.hits.load(Ordering::Relaxed),
                s.errors.load(Ordering::Relaxed),
            )
        });
        #[cfg(not(feature = "redis"))]
        let (shared_hits, shared_errors) = (0, 0);
        Stats {
            hits: c.get(Counter::Hits),
            misses: c.get(Counter::Misses),
            coalesced: c.get(Counter::Coalesced),
            negative_hits: c.get(Counter::NegativeHits),
            upstream_calls: c.get(Counter::UpstreamCalls),
            upstream_errors: c.get(Counter::UpstreamErrors),
            entries: self.inner.cache.entry_count(),
            stale_served: c.get(Counter::StaleServed),
            short_circuited: self.inner.upstream.breakers.refusals(),
            shared_hits,
            shared_errors,
        }
    }
}

impl Inner {
    /// Caches `cached` unless it must not live (no freshness) or an invalidation happened since
    /// `generation` was read; says whether it did.
    fn store(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        cached: &Cached,
        generation: u64,
    ) -> bool {
        let invalidated_meanwhile = self.generation.load(Ordering::Acquire) != generation;
        if cached.fresh_until().has_passed() || invalidated_meanwhile {
            return false;
        }
        self.cache
            .insert(CacheKey::new(endpoint.clone(), token), cached.clone());
        self.publish_entries();
        true
    }

    fn evict_token(&self, endpoint: &str, token: &str) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.cache
            .invalidate(&KeyRef { endpoint, token } as &dyn KeyView);
        self.publish_entries();
    }

    fn evict_user(&self, endpoint: &str, user_id: i64) {
        self.evict_where(|key, cached| {
            cached.user_id() == Some(user_id) && key.endpoint.as_str() == endpoint
        });
    }

    fn evict_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.cache.invalidate_all();
        self.publish_entries();
    }

    /// Walks the cache and drops the entries `doomed` picks.
    fn evict_where(&self, doomed: impl Fn(&CacheKey, &Cached) -> bool) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let keys: Vec<Arc<CacheKey>> = self
            .cache
            .iter()
            .filter(|(key, cached)| doomed(key, cached))
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            self.cache.invalidate(&*key);
        }
        self.publish_entries();
    }

    /// Applies another node's invalidation to this node's cache.
    #[cfg(feature = "redis")]
    fn apply(&self, invalidation: Invalidation) {
        match invalidation {
            Invalidation::Key { endpoint, digest } => {
                let Some(shared) = &self.shared else { return };
                self.evict_where(|key, _| {
                    key.endpoint.as_str() == endpoint
                        && shared.digest(&endpoint, key.token()) == digest
                });
            }
            Invalidation::User { endpoint, user_id } => self.evict_user(&endpoint, user_id),
            Invalidation::All => self.evict_all(),
        }
    }

    fn publish_entries(&self) {
        metrics::gauge!(telemetry::CACHE_ENTRIES).set(self.cache.entry_count() as f64);
    }
}

fn rejected(endpoint: &Endpoint, status: u16) -> ResolveError {
    ResolveError::TokenRejected {
        host: endpoint.host().to_owned(),
        status,
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Resolver")
            .field("default_endpoint", &inner.default_endpoint)
            .field("allow", &inner.allow)
            .field("auth_required", &inner.auth_required)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// What a client sends on connect.
///
/// A plain struct: write `ConnectRequest { access_token, ..Default::default() }`.
#[derive(Clone, Default)]
pub struct ConnectRequest {
    /// The access token the client holds (`GameNetwork.authorizationAccessToken`), if any.
    pub access_token: Option<String>,
}

/// What a client sends on joining a room.
///
/// A plain struct: write `JoinRequest { room_id, auth_url, access_token, ..Default::default() }`.
#[derive(Clone, Default)]
pub struct JoinRequest {
    /// The room being joined.
    pub room_id: String,
    /// The room's authUrl as the client sent it (`RoomJoinArgs.authUrl`); empty when the room
    /// has none, which means the default authUrl.
    pub auth_url: String,
    /// The access token the client holds, if any.
    pub access_token: Option<String>,
}

/// Shows whether a token is present, never the token.
fn redacted(token: &Option<String>) -> Option<&'static str> {
    token.as_ref().map(|_| "[redacted]")
}

impl fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectRequest")
            .field("access_token", &redacted(&self.access_token))
            .finish()
    }
}

impl fmt::Debug for JoinRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinRequest")
            .field("room_id", &self.room_id)
            .field("auth_url", &self.auth_url)
            .field("access_token", &redacted(&self.access_token))
            .finish()
    }
}

/// Configures a [`Resolver`]. Every setter takes and returns the builder; [`build`](Self::build)
/// checks the whole configuration.
///
/// | setter | default |
/// |---|---|
/// | [`default_auth_url`](Self::default_auth_url) | none (required while `auth_required`) |
/// | [`allow_auth_url`](Self::allow_auth_url) | none |
/// | [`auth_required`](Self::auth_required) | `true` |
/// | [`allow_insecure_http`](Self::allow_insecure_http) | `false` |
/// | [`cache_ttl`](Self::cache_ttl) | 60 s |
/// | [`negative_cache_ttl`](Self::negative_cache_ttl) | 5 s |
/// | [`max_cache_entries`](Self::max_cache_entries) | 100 000 |
/// | [`max_concurrent_requests`](Self::max_concurrent_requests) | 64 |
/// | [`queue_timeout`](Self::queue_timeout) | 1 s |
/// | [`request_timeout`](Self::request_timeout) | 5 s |
/// | [`connect_timeout`](Self::connect_timeout) | 2 s |
/// | [`max_response_bytes`](Self::max_response_bytes) | 64 KiB |
/// | [`retries`](Self::retries) | 1 |
/// | [`serve_stale_for`](Self::serve_stale_for) | zero (off) |
/// | [`circuit_breaker`](Self::circuit_breaker) | 5 failures, 2 s cool-down |
#[derive(Debug, Clone)]
#[must_use]
pub struct ResolverBuilder {
    default_auth_url: Option<String>,
    allowed_auth_urls: Vec<String>,
    auth_required: bool,
    allow_insecure_http: bool,
    cache_ttl: Duration,
    negative_cache_ttl: Duration,
    max_cache_entries: u64,
    max_concurrent_requests: usize,
    queue_timeout: Duration,
    request_timeout: Duration,
    connect_timeout: Duration,
    max_response_bytes: usize,
    retries: u32,
    serve_stale_for: Duration,
    breaker: BreakerConfig,
    #[cfg(feature = "redis")]
    shared_cache: Option<RedisTier>,
}

impl Default for ResolverBuilder {
    fn default() -> Self {
        ResolverBuilder {
            default_auth_url: None,
            allowed_auth_urls: Vec::new(),
            auth_required: true,
            allow_insecure_http: false,
            cache_ttl: Duration::from_secs(60),
            negative_cache_ttl: Duration::from_secs(5),
            max_cache_entries: 100_000,
            max_concurrent_requests: 64,
            queue_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            max_response_bytes: 64 * 1024,
            retries: 1,
            serve_stale_for: Duration::ZERO,
            breaker: BreakerConfig {
                threshold: 5,
                cool_down: Duration::from_secs(2),
            },
            #[cfg(feature = "redis")]
            shared_cache: None,
        }
    }
}

impl ResolverBuilder {
    /// The platform option "user resource acquisition API URL": used for connects, and for
    /// joins whose room has no authUrl. Always allowed. Default: none.
    pub fn default_auth_url(self, url: impl AsRef<str>) -> Self {
        ResolverBuilder {
            default_auth_url: Some(url.as_ref().to_owned()),
            ..self
        }
    }

    /// Allows a room authUrl, and every URL under its path at a segment boundary. Repeatable.
    /// Default: none (only the default authUrl is allowed).
    pub fn allow_auth_url(mut self, url: impl AsRef<str>) -> Self {
        self.allowed_auth_urls.push(url.as_ref().to_owned());
        self
    }

    /// The options-screen switch. When `false`, connects and joins resolve to
    /// [`Identity::Anonymous`] with no network call. Default: `true`.
    pub fn auth_required(self, required: bool) -> Self {
        ResolverBuilder {
            auth_required: required,
            ..self
        }
    }

    /// Permits `http://` to non-loopback hosts, which sends tokens in the clear. Default:
    /// `false` (`http://` only to `localhost`, `127.0.0.0/8` and `[::1]`).
    pub fn allow_insecure_http(self, allow: bool) -> Self {
        ResolverBuilder {
            allow_insecure_http: allow,
            ..self
        }
    }

    /// Upper bound on how long a user stays cached; an answer's `max-age` may shorten it.
    /// Zero disables positive caching. Default: 60 s.
    pub fn cache_ttl(self, ttl: Duration) -> Self {
        ResolverBuilder {
            cache_ttl: ttl,
            ..self
        }
    }

    /// How long a token the API rejected (401/403) stays rejected without a call. Zero
    /// disables negative caching. Default: 5 s.
    pub fn negative_cache_ttl(self, ttl: Duration) -> Self {
        ResolverBuilder {
            negative_cache_ttl: ttl,
            ..self
        }
    }

    /// Cache capacity in entries (users and rejections). Default: 100 000.
    pub fn max_cache_entries(self, entries: u64) -> Self {
        ResolverBuilder {
            max_cache_entries: entries,
            ..self
        }
    }

    /// Upstream calls in flight at once, for the whole resolver and its clones. Must be at
    /// least 1. Default: 64.
    pub fn max_concurrent_requests(self, n: usize) -> Self {
        ResolverBuilder {
            max_concurrent_requests: n,
            ..self
        }
    }

    /// Longest wait for an upstream slot before failing with `overloaded`. Default: 1 s.
    pub fn queue_timeout(self, timeout: Duration) -> Self {
        ResolverBuilder {
            queue_timeout: timeout,
            ..self
        }
    }

    /// Deadline for one resolution's upstream work: every try, the backoff between them and
    /// reading the body. Must be non-zero. Default: 5 s.
    pub fn request_timeout(self, timeout: Duration) -> Self {
        ResolverBuilder {
            request_timeout: timeout,
            ..self
        }
    }

    /// Deadline for the TCP and TLS connect. Must be non-zero. Default: 2 s.
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        ResolverBuilder {
            connect_timeout: timeout,
            ..self
        }
    }

    /// Largest answer body accepted; a larger one is refused without reading it all. Must be
    /// non-zero. Default: 64 KiB.
    pub fn max_response_bytes(self, bytes: usize) -> Self {
        ResolverBuilder {
            max_response_bytes: bytes,
            ..self
        }
    }

    /// Extra tries on transient failures (connect errors, resets, 408, 429, 500, 502, 503,
    /// 504), with jittered exponential backoff, within `request_timeout`. Default: 1.
    pub fn retries(self, retries: u32) -> Self {
        ResolverBuilder { retries, ..self }
    }

    /// Serve an answer up to this long past its freshness when the auth API is unavailable or
    /// times out; the user is then flagged [`User::stale`] and counted in
    /// `token_resolver_stale_served_total`. Never when the API rejects the token or breaks the
    /// protocol. Default: zero (off).
    ///
    /// **The trade-off:** during an outage a token revoked at the API may still be accepted for
    /// up to this window, and an answer's `max-age` no longer bounds how long it is used. Turn
    /// it on when keeping players in the game through an auth outage matters more than revoking
    /// them to the second; keep the window short (minutes, not hours).
    pub fn serve_stale_for(self, window: Duration) -> Self {
        ResolverBuilder {
            serve_stale_for: window,
            ..self
        }
    }

    /// The per-API circuit breaker: after `failures` transient failures in a row (connect
    /// errors, resets, timeouts, 408/429/5xx) resolutions that need that API fail at once with
    /// `auth_unavailable` for `cool_down` (cache hits are still served), then one probe call
    /// decides whether it closes. `failures == 0` disables it. Default: 5 failures, 2 s.
    pub fn circuit_breaker(self, failures: u32, cool_down: Duration) -> Self {
        ResolverBuilder {
            breaker: BreakerConfig {
                threshold: failures,
                cool_down,
            },
            ..self
        }
    }

    /// A second cache tier on Redis shared by every game-server node (feature `redis`): a local
    /// miss looks there before calling the API, answers are written there with the same time
    /// to live, and invalidations reach every node. Redis being down, slow or answering garbage
    /// never fails a resolution. Default: none.
    #[cfg(feature = "redis")]
    pub fn shared_cache(self, tier: RedisTier) -> Self {
        ResolverBuilder {
            shared_cache: Some(tier),
            ..self
        }
    }

    /// Checks the configuration and builds the resolver.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting at fault when an authUrl is unparsable, has userinfo,
    /// a query or a fragment, or is `http://` to a non-loopback host without
    /// `allow_insecure_http(true)`; when `auth_required` is on without a `default_auth_url`;
    /// when `max_concurrent_requests`, `request_timeout`, `connect_timeout` or
    /// `max_response_bytes` is zero; or when the TLS backend cannot start.
    ///
    /// # Example
    ///
    /// ```
    /// use token_resolver::Resolver;
    ///
    /// let err = Resolver::builder().default_auth_url("http://auth.example.com").build().unwrap_err();
    /// assert_eq!(err.setting(), "default_auth_url");
    /// assert!(Resolver::builder().default_auth_url("https://auth.example.com").build().is_ok());
    /// ```
    pub fn build(self) -> Result<Resolver, ConfigError> {
        let parse = |setting: &'static str, url: &str| {
            Endpoint::parse(url, self.allow_insecure_http)
                .map(|e| (Box::<str>::from(url), Arc::new(e)))
                .map_err(|reason| ConfigError::new(setting, format!("{url:?}: {reason}")))
        };
        let default = self
            .default_auth_url
            .as_deref()
            .map(|u| parse("default_auth_url", u))
            .transpose()?;
        if self.auth_required && default.is_none() {
            return Err(ConfigError::new(
                "default_auth_url",
                "required while auth_required is on: set the platform's user resource acquisition API URL",
            ));
        }
        let mut entries: Vec<_> = default.iter().cloned().collect();
        for url in &self.allowed_auth_urls {
            entries.push(parse("allow_auth_url", url)?);
        }
        let nonzero = |setting: &'static str, zero: bool| {
            if zero {
                Err(ConfigError::new(setting, "must be greater than zero"))
            } else {
                Ok(())
            }
        };
        nonzero("max_concurrent_requests", self.max_concurrent_requests == 0)?;
        nonzero("request_timeout", self.request_timeout.is_zero())?;
        nonzero("connect_timeout", self.connect_timeout.is_zero())?;
        nonzero("max_response_bytes", self.max_response_bytes == 0)?;
        let max_slots = Semaphore::MAX_PERMITS;
        if self.max_concurrent_requests > max_slots {
            return Err(ConfigError::new(
                "max_concurrent_requests",
                format!("must be at most {max_slots}"),
            ));
        }

        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.connect_timeout)
            // A proxy from the environment would see every token; the allowlist decides where
            // tokens go, not HTTPS_PROXY.
            .no_proxy()
            // The resolver retries transient failures itself, within its deadline. reqwest's
            // own retry layer (for HTTP/2 refusals, which this HTTP/1 client never sees) would
            // clone every request's headers in case; with no retries allowed it clones nothing.
            .retry(reqwest::retry::never().max_retries_per_request(0))
            .user_agent(concat!("token-resolver/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                ConfigError::new("http client", format!("cannot start the HTTP client: {e}"))
            })?;

        #[cfg(feature = "redis")]
        let shared = self
            .shared_cache
            .clone()
            .map(SharedCache::new)
            .transpose()?;
        Ok(Resolver {
            inner: Arc::new(Inner {
                #[cfg(feature = "redis")]
                shared,
                allow: AllowList::new(entries, self.allow_insecure_http),
                default_endpoint: default.map(|(_, endpoint)| endpoint),
                auth_required: self.auth_required,
                cache: cache::new_cache(self.max_cache_entries, self.serve_stale_for),
                flights: Flights::new(),
                slots: Semaphore::new(self.max_concurrent_requests),
                upstream: Upstream {
                    client,
                    request_timeout: self.request_timeout,
                    retries: self.retries,
                    max_response_bytes: self.max_response_bytes,
                    breakers: Breakers::new(self.breaker),
                },
                cache_ttl: self.cache_ttl,
                negative_cache_ttl: self.negative_cache_ttl,
                queue_timeout: self.queue_timeout,
                serve_stale_for: self.serve_stale_for,
                generation: AtomicU64::new(0),
                counters: Counters::default(),
                resolutions: telemetry::Resolutions::default(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn build(b: ResolverBuilder) -> Result<Resolver, ConfigError> {
        b.build()
    }

    #[test]
    fn build_requires_a_default_url_while_auth_is_required() {
        let err = build(Resolver::builder()).unwrap_err();
        assert_eq!(err.setting(), "default_auth_url");
        assert!(build(Resolver::builder().auth_required(false)).is_ok());
    }

    #[test]
    fn build_refuses_bad_urls_naming_the_setter() {
        let base = || Resolver::builder().default_auth_url("https://a.example");
        for (b, setting) in [
            (
                Resolver::builder().default_auth_url("not a url"),
                "default_auth_url",
            ),
            (
                Resolver::builder().default_auth_url("https://u:p@a.example"),
                "default_auth_url",
            ),
            (
                Resolver::builder().default_auth_url("https://a.example/?q"),
                "default_auth_url",
            ),
            (
                Resolver::builder().default_auth_url("https://a.example/#f"),
                "default_auth_url",
            ),
            (base().allow_auth_url("http://b.example"), "allow_auth_url"),
        ] {
            assert_eq!(build(b).unwrap_err().setting(), setting);
        }
        assert!(build(
            base()
                .allow_auth_url("http://b.example")
                .allow_insecure_http(true)
        )
        .is_ok());
    }

    #[test]
    fn build_refuses_zero_limits() {
        let base = || Resolver::builder().default_auth_url("https://a.example");
        assert_eq!(
            build(base().max_concurrent_requests(0))
                .unwrap_err()
                .setting(),
            "max_concurrent_requests"
        );
        assert_eq!(
            build(base().request_timeout(Duration::ZERO))
                .unwrap_err()
                .setting(),
            "request_timeout"
        );
        assert_eq!(
            build(base().connect_timeout(Duration::ZERO))
                .unwrap_err()
                .setting(),
            "connect_timeout"
        );
        assert_eq!(
            build(base().max_response_bytes(0)).unwrap_err().setting(),
            "max_response_bytes"
        );
    }

    #[test]
    fn requests_debug_hides_the_token() {
        let join = JoinRequest {
            room_id: "r1".into(),
            access_token: Some("SECRET".into()),
            ..Default::default()
        };
        let connect = ConnectRequest {
            access_token: Some("SECRET".into()),
        };
        for shown in [format!("{join:?}"), format!("{connect:?}")] {
            assert!(
                !shown.contains("SECRET") && shown.contains("[redacted]"),
                "{shown}"
            );
        }
    }

    #[tokio::test]
    async fn auth_switched_off_is_anonymous_without_a_token() {
        let resolver = Resolver::builder().auth_required(false).build().unwrap();
        let id = resolver
            .resolve_connect(&ConnectRequest::default())
            .await
            .unwrap();
        assert_eq!(id, Identity::Anonymous);
        assert_eq!(resolver.stats().upstream_calls, 0);
    }

    #[tokio::test]
    async fn missing_and_malformed_tokens_fail_before_any_call() {
        let resolver = Resolver::builder()
            .default_auth_url("http://127.0.0.1:9")
            .build()
            .unwrap();
        let code = |t: Option<&str>| {
            let r = resolver.clone();
            let req = ConnectRequest {
                access_token: t.map(str::to_owned),
            };
            async move { r.resolve_connect(&req).await.unwrap_err().code() }
        };
        assert_eq!(code(None).await, ErrorCode::TokenMissing);
        assert_eq!(code(Some("")).await, ErrorCode::TokenMissing);
        assert_eq!(code(Some("a b")).await, ErrorCode::TokenMalformed);
        assert_eq!(resolver.stats().upstream_calls, 0);
    }
}
