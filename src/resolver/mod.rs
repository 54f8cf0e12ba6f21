//! [`Resolver`], the entry point: from an authUrl and an access token to a verified [`User`].
//!
//! The order of work in a resolution is the order of the checks a hostile client meets: the
//! authUrl against the allowlist, the token's syntax, the cache, then one coalesced upstream
//! call under the resolver-wide slot limit. Nothing reaches the network before the first two
//! pass.
//!
//! - this file: the resolve path and [`Stats`];
//! - [`builder`]: [`ResolverBuilder`], every setting and its default;
//! - [`request`]: [`ConnectRequest`], [`JoinRequest`] and the [`Identity`] they resolve to;
//! - [`expiry`]: how long an answer may be served, and when never again;
//! - [`miss`]: a resolution the cache could not answer: the coalesced call, what is stored,
//!   and the stale fallback;
//! - [`flight`]: coalescing concurrent look-ups of one key into one call;
//! - [`revoke`]: invalidation and the [`Revocation`](crate::Revocation) events it publishes;
//! - [`stats`]: [`Stats`] and the striped counters behind it.

pub(crate) mod builder;
mod expiry;
mod flight;
mod miss;
mod outcome;
pub(crate) mod request;
mod revoke;
pub(crate) mod stats;

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tracing::field::Empty;
use tracing::{Instrument, Span};

pub use self::builder::ResolverBuilder;
use self::flight::Flights;
use self::miss::{Fetched, Tier};
use self::outcome::{CacheOutcome, Ended};
pub use self::request::{ConnectRequest, Identity, JoinRequest};
pub use self::revoke::{Delivery, Revoke};
pub use self::stats::Stats;
use self::stats::{Counter, Counters};
use crate::auth_url::{AllowList, Endpoint};
use crate::cache::{KeyRef, Lookup, Mark, Tiers, Verdict};
use crate::error::{ErrorCode, ResolveError};
use crate::telemetry;
use crate::token;
use crate::upstream::Upstream;
use crate::user::{Resolution, User};

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
    /// Answers (users and rejections) in every tier, each with its own time to live.
    cache: Tiers,
    /// Calls under way, so concurrent resolutions of one key share one, each with where the
    /// revocations stood when it began.
    flights: Flights<(Fetched, Mark, Tier)>,
    /// The HTTP call, with what admits it: the breakers and the slot limit.
    upstream: Upstream,
    /// Upper bound on how long a user is cached.
    cache_ttl: Duration,
    /// Leeway on every `exp` (RFC 7519): it counts as passed this long after it.
    clock_skew: Duration,
    /// How much older than a revocation an answer still admitted can be: `cache_ttl`, the
    /// stale window and `clock_skew`; a dated revocation closes what began that long before.
    late_margin: Duration,
    /// How long a rejection is cached.
    negative_cache_ttl: Duration,
    /// The counters behind [`Resolver::stats`].
    counters: Counters,
    /// The handles of `token_resolver_resolutions_total`, one per outcome.
    resolutions: telemetry::Resolutions,
}

/// Where a resolution goes: a client-supplied authUrl, or the configured default.
#[derive(Clone, Copy)]
enum Target<'a> {
    Url(&'a str),
    Default,
}

/// How far [`Resolver::hit`] got before the slow path took over: refused by the allowlist or
/// the size check, or looked up in the cache, or not started (the slow path begins in its
/// span).
enum Seen<'a> {
    Nothing,
    Refused(ResolveError),
    Looked {
        endpoint: Cow<'a, Arc<Endpoint>>,
        lookup: Lookup,
    },
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
        let target = Target::Url(auth_url);
        // The hit's result is taken apart before the await, so that the future this returns
        // does not keep room for it.
        let seen = match self.hit(target, access_token) {
            Ok(user) => return Ok(user.into_user()),
            Err(seen) => seen,
        };
        let resolution = self.resolve_slow(target, None, access_token, seen).await;
        resolution.map(Resolution::into_user)
    }

    /// [`resolve`](Self::resolve), with what the answer says of itself: when the token stops
    /// being valid, and whether it was served stale. For a game server that keeps a session
    /// open for as long as its token is valid.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub async fn resolve_in_full(
        &self,
        auth_url: &str,
        access_token: &str,
    ) -> Result<Resolution, ResolveError> {
        let target = Target::Url(auth_url);
        let seen = match self.hit(target, access_token) {
            Ok(resolution) => return Ok(resolution),
            Err(seen) => seen,
        };
        self.resolve_slow(target, None, access_token, seen).await
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
        Ok(self.resolve_connect_in_full(req).await?.into())
    }

    /// [`resolve_connect`](Self::resolve_connect), with what the answer says of itself (see
    /// [`resolve_in_full`](Self::resolve_in_full)); `None` where that is
    /// [`Identity::Anonymous`] (auth switched off).
    ///
    /// # Errors
    ///
    /// As [`resolve_connect`](Self::resolve_connect).
    pub async fn resolve_connect_in_full(
        &self,
        req: &ConnectRequest,
    ) -> Result<Option<Resolution>, ResolveError> {
        self.resolve_identity(Target::Default, None, req.access_token.as_deref())
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
        Ok(self.resolve_join_in_full(req).await?.into())
    }

    /// [`resolve_join`](Self::resolve_join), with what the answer says of itself (see
    /// [`resolve_in_full`](Self::resolve_in_full)); `None` where that is
    /// [`Identity::Anonymous`] (auth switched off).
    ///
    /// # Errors
    ///
    /// As [`resolve_join`](Self::resolve_join).
    pub async fn resolve_join_in_full(
        &self,
        req: &JoinRequest,
    ) -> Result<Option<Resolution>, ResolveError> {
        let target = match req.auth_url.as_str() {
            "" => Target::Default,
            url => Target::Url(url),
        };
        let room = Some(req.room_id.as_str());
        self.resolve_identity(target, room, req.access_token.as_deref())
            .await
    }

    /// A connect's or a join's resolution; `room` is the join's, which its span names.
    async fn resolve_identity(
        &self,
        target: Target<'_>,
        room: Option<&str>,
        token: Option<&str>,
    ) -> Result<Option<Resolution>, ResolveError> {
        if !self.inner.auth_required {
            return Ok(None);
        }
        let token = token.unwrap_or_default();
        let seen = match self.hit(target, token) {
            Ok(user) => return Ok(Some(user)),
            Err(seen) => seen,
        };
        self.resolve_slow(target, room, token, seen).await.map(Some)
    }

    /// The identity behind an HTTP request's bearer token, for the axum integration: at
    /// `auth_url`, or at the default authUrl when `None`. `token` is what the `Authorization`
    /// header gave, or why it gave nothing usable (two headers, bytes that are not ASCII), an
    /// error counted as any refused resolution. With `auth_required(false)` this is
    /// [`Identity::Anonymous`] whatever the header held, as for a connect.
    ///
    /// With feature `opentelemetry`, a request that brings a trace (`traceparent`) while no
    /// span is current is resolved in a span that continues it.
    #[cfg(feature = "axum")]
    pub(crate) async fn resolve_bearer(
        &self,
        auth_url: Option<&str>,
        headers: &::axum::http::HeaderMap,
    ) -> Result<Identity, ResolveError> {
        let token = crate::axum::bearer_token(headers);
        #[cfg(feature = "opentelemetry")]
        if let Some(span) = crate::trace::request_span(headers) {
            return self
                .resolve_bearer_token(auth_url, token)
                .instrument(span)
                .await;
        }
        self.resolve_bearer_token(auth_url, token).await
    }

    /// [`resolve_bearer`](Self::resolve_bearer) once the header is read.
    #[cfg(feature = "axum")]
    async fn resolve_bearer_token(
        &self,
        auth_url: Option<&str>,
        token: Result<&str, ResolveError>,
    ) -> Result<Identity, ResolveError> {
        if !self.inner.auth_required {
            return Ok(Identity::Anonymous);
        }
        let target = auth_url.map_or(Target::Default, Target::Url);
        match token {
            Ok(token) => Ok(self
                .resolve_identity(target, None, Some(token))
                .await?
                .into()),
            Err(error) => {
                self.inner.resolutions.count(error.code().as_str());
                Err(error)
            }
        }
    }

    /// The usual case, answered in plain synchronous code before any future of the slow path
    /// exists: a fresh cached user, counted (in [`Stats`] and in the resolutions metric).
    /// Anything else is `Err` with how far the resolution got ([`Seen`]), for
    /// [`resolve_slow`](Self::resolve_slow) to go on from instead of asking again.
    ///
    /// The checks come in the order a hostile client meets them: the authUrl against the
    /// allowlist (or the default one), then the token's size. Only the size: every cached token
    /// passed the full syntax check before it was stored, so a hit needs no scan; a miss scans
    /// before anything else.
    ///
    /// Only while nothing listens at DEBUG, where the slow path's span would be disabled
    /// anyway: a hit then has nothing to record.
    #[inline(always)]
    fn hit<'a>(&'a self, target: Target<'_>, token: &str) -> Result<Resolution, Seen<'a>> {
        if tracing::level_enabled!(tracing::Level::DEBUG) {
            return Err(Seen::Nothing);
        }
        let inner = &*self.inner;
        let endpoint = self.endpoint(target).map_err(Seen::Refused)?;
        token::check_size(token).map_err(Seen::Refused)?;
        let key = KeyRef {
            endpoint: &endpoint,
            token,
        };
        match inner.cache.lookup(&key) {
            Lookup::Fresh(Verdict::User(user)) => {
                inner.counters.bump(Counter::Hits);
                inner.resolutions.count_hit();
                Ok(user)
            }
            lookup => Err(Seen::Looked { endpoint, lookup }),
        }
    }

    /// Everything but a quiet hit, boxed: the slow path's state is far larger than the hit's,
    /// and the futures `resolve` and the others return would otherwise hold it inline, which
    /// every cache hit would pay to set up and drop. A miss pays one allocation beside its
    /// upstream call.
    fn resolve_slow<'a>(
        &'a self,
        target: Target<'a>,
        room: Option<&'a str>,
        token: &'a str,
        seen: Seen<'a>,
    ) -> Pin<Box<impl Future<Output = Result<Resolution, ResolveError>> + Send + 'a>> {
        Box::pin(self.resolve_traced(target, room, token, seen))
    }

    /// One resolution in its span (which names the join's `room`, if any), counted in the
    /// metrics; `seen` is how far [`hit`](Self::hit) got.
    async fn resolve_traced(
        &self,
        target: Target<'_>,
        room: Option<&str>,
        token: &str,
        seen: Seen<'_>,
    ) -> Result<Resolution, ResolveError> {
        let room = room.map(shown_room);
        let span = tracing::debug_span!(
            "resolve",
            room,
            auth_host = Empty,
            outcome = Empty,
            cache = Empty,
            user_id = Empty,
            error = Empty
        );
        // With no subscriber listening at this level the span is a no-op: skip entering it on
        // every poll, and skip recording into it (each `record` looks its field up by name,
        // even on a disabled span).
        if span.is_disabled() {
            // DEBUG is on for other targets only: `hit` did not look, `resolve_inner` does.
            let result = self.resolve_inner(target, token, &span, seen).await;
            let label = match &result {
                Ok((_, outcome)) => outcome.metric_label(),
                Err((error, _)) => error.code().as_str(),
            };
            self.inner.resolutions.count(label);
            return result.map(|(user, _)| user).map_err(|(error, _)| error);
        }
        let result = self
            .resolve_inner(target, token, &span, Seen::Nothing)
            .instrument(span.clone())
            .await;
        let label = match &result {
            Ok((user, outcome)) => {
                span.record("user_id", user.id);
                span.record("outcome", outcome.as_str());
                span.record("cache", outcome.as_str());
                outcome.metric_label()
            }
            Err((error, outcome)) => {
                if let Some(outcome) = outcome {
                    span.record("cache", outcome.as_str());
                }
                let code = error.code().as_str();
                span.record(
                    "outcome",
                    match error.code() {
                        ErrorCode::TokenRejected => "rejected",
                        _ => code,
                    },
                );
                span.record("error", code);
                code
            }
        };
        self.inner.resolutions.count(label);
        result.map(|(user, _)| user).map_err(|(error, _)| error)
    }

    /// The endpoint `target` names, once the allowlist has passed it: borrowed from the
    /// configuration when it is one of its own.
    #[inline(always)]
    fn endpoint<'a>(&'a self, target: Target<'_>) -> Result<Cow<'a, Arc<Endpoint>>, ResolveError> {
        let inner = &*self.inner;
        match target {
            Target::Url(url) => {
                (inner.allow.check(url)).map_err(ResolveError::auth_url_not_allowed)
            }
            Target::Default => match &inner.default_endpoint {
                Some(endpoint) => Ok(Cow::Borrowed(endpoint)),
                None => Err(no_default_auth_url()),
            },
        }
    }

    /// A resolution from where `seen` says [`hit`](Self::hit) stopped, or from the start.
    async fn resolve_inner(
        &self,
        target: Target<'_>,
        token: &str,
        span: &Span,
        seen: Seen<'_>,
    ) -> Ended {
        let inner = &*self.inner;
        let (endpoint, lookup) = match seen {
            Seen::Refused(error) => return Err((error, None)),
            Seen::Looked { endpoint, lookup } => (endpoint, lookup),
            Seen::Nothing => {
                let endpoint = self.endpoint(target).map_err(|e| (e, None))?;
                token::check_size(token).map_err(|e| (e, None))?;
                let lookup = inner.cache.lookup(&KeyRef {
                    endpoint: &endpoint,
                    token,
                });
                (endpoint, lookup)
            }
        };
        if !span.is_disabled() {
            span.record("auth_host", endpoint.host());
        }
        let key = KeyRef {
            endpoint: &endpoint,
            token,
        };
        let stale = match lookup {
            Lookup::Fresh(Verdict::User(user)) => {
                inner.counters.bump(Counter::Hits);
                return Ok((user, CacheOutcome::Hit));
            }
            Lookup::Fresh(Verdict::Rejected(status)) => {
                inner.counters.bump(Counter::NegativeHits);
                let error = ResolveError::rejected(endpoint.shared_host(), status);
                return Err((error, Some(CacheOutcome::NegativeHit)));
            }
            Lookup::Stale(user) => Some(user),
            Lookup::Absent => None,
        };
        // Not boxed again: the whole slow path is (`resolve_slow`).
        self.resolve_miss(&endpoint, &key, stale).await
    }

    /// How long an answer is kept before the integrator is asked again, at most
    /// ([`ResolverBuilder::cache_ttl`]; an answer's `max-age` may shorten it): a proxy that
    /// caches the resolver's answers must keep them no longer.
    pub fn cache_ttl(&self) -> Duration {
        self.inner.cache_ttl
    }

    /// The leeway on every `exp` ([`ResolverBuilder::clock_skew`]): a token whose expiry is `t`
    /// is valid until `t` plus this.
    pub fn clock_skew(&self) -> Duration {
        self.inner.clock_skew
    }

    /// The default authUrl's endpoint, for connects and rooms without an authUrl.
    pub fn default_endpoint(&self) -> Option<&Endpoint> {
        self.inner.default_endpoint.as_deref()
    }

    /// Whether this resolver has a shared tier (feature `redis`, [`ResolverBuilder::shared_cache`]).
    pub fn has_shared_cache(&self) -> bool {
        self.inner.cache.has_shared()
    }

    /// Whether this resolver listens to the other nodes' invalidations on the shared tier now
    /// (always `false` without one). The listener starts with the first resolution; wait for
    /// this before relying on another node's invalidation reaching this one.
    pub fn shared_cache_subscribed(&self) -> bool {
        self.inner.cache.shared_subscribed()
    }

    /// Benches only: the heap bytes the cache's revocation index holds now (its slots and
    /// tables as allocated; `cargo bench --bench alloc` states its share of an entry). Not part
    /// of the API: hidden, outside semver.
    #[doc(hidden)]
    pub fn index_heap_bytes(&self) -> usize {
        self.inner.cache.index_heap_bytes()
    }

    /// What this resolver (and its clones) did so far.
    pub fn stats(&self) -> Stats {
        let inner = &*self.inner;
        let c = &inner.counters;
        let (shared_hits, shared_errors) = inner.cache.shared_counts();
        Stats {
            hits: c.get(Counter::Hits),
            misses: c.get(Counter::Misses),
            coalesced: c.get(Counter::Coalesced),
            negative_hits: c.get(Counter::NegativeHits),
            upstream_calls: c.get(Counter::UpstreamCalls),
            upstream_errors: c.get(Counter::UpstreamErrors),
            entries: inner.cache.entries(),
            stale_served: c.get(Counter::StaleServed),
            short_circuited: inner.upstream.breakers.refusals(),
            shared_hits,
            shared_errors,
        }
    }
}

/// A room id as a span shows it: its first 64 bytes at most (cut at a character), so that a
/// client that names a room of its own cannot fill the logs through it.
fn shown_room(room: &str) -> &str {
    let mut end = room.len().min(64);
    while !room.is_char_boundary(end) {
        end -= 1;
    }
    &room[..end]
}

/// The error for a resolution at the default authUrl when none is configured.
fn no_default_auth_url() -> ResolveError {
    ResolveError::auth_url_not_allowed("no authUrl was given and no default_auth_url is configured")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_is_shown_cut_to_64_bytes_at_a_character() {
        assert_eq!(shown_room("lobby"), "lobby");
        let long = "é".repeat(40);
        let shown = shown_room(&long);
        assert_eq!(shown.len(), 64);
        assert!(long.starts_with(shown));
        assert_eq!(
            shown_room(&format!("a{long}")).len(),
            63,
            "not inside a character"
        );
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
