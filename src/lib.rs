//! Resolve a player's access token to a verified user, the game-server side of token
//! authentication.
//!
//! A client logs in to the integrator's web API, takes an access token from it, and hands that
//! token to the game server on connect and on room join. The game server turns it into a user by
//! calling the integrator's **user information acquisition API**:
//!
//! ```text
//! POST {authUrl}/api/user
//! Authorization: Bearer <ACCESS_TOKEN>
//! -> 200 {"id": <number>, "name": <string>}
//! ```
//!
//! [`Resolver`] does that call for you: it refuses authUrls that are not allowed and malformed
//! tokens before any traffic, caches answers, makes one upstream call for many concurrent
//! look-ups of one token, bounds the calls in flight, validates the answer strictly and fails
//! closed with a stable [`ErrorCode`]. The game server never sees a password.
//!
//! # Layout
//!
//! - `resolver/`: [`Resolver`] and the resolve path; [`ResolverBuilder`], every setting;
//!   [`ConnectRequest`], [`JoinRequest`] and the [`Identity`] they resolve to; coalescing of
//!   concurrent look-ups (`flight`); a resolution the cache could not answer (`miss`); how long
//!   an answer lives (`expiry`: `exp`, a JWT's `exp`, the clock skew); invalidation and the
//!   [`Revocation`] events a game server closes live sessions on (`revoke`); [`Stats`].
//! - `cache/`: the cache as one type over its tiers: what an entry is (`entry`), keys and their
//!   keyed hashing (`key`), the local tier (`local`) on two moka caches (`store`) and, with
//!   feature `redis`, the shared tier on Redis (`redis`, configured by [`RedisTier`]: one server
//!   over `redis://` or `rediss://`, Sentinel, or Redis Cluster; checked with
//!   [`RedisTier::check`], whose [`RedisTierError`] names what is wrong) with cluster-wide
//!   invalidation. `docs/redis.md` covers running it in production.
//! - `upstream/`: the HTTP call to `/api/user`, admitted once by the per-API circuit breaker
//!   (`breaker`) and the slot limit, with its deadline, retries and body cap.
//! - `clock`: the library's "now" for its deadlines, cool-downs and rests: tokio's clock,
//!   which a test with a paused runtime moves.
//! - `auth_url`: an authUrl parsed into an [`Endpoint`] (where [`PlainHttp`] says whether
//!   `http://` may leave loopback), and the allowlist.
//! - `token`: the token rule ([`check_syntax`]) and [`AccessToken`], which never prints itself.
//! - `answer`: strict parsing of the `/api/user` answer and its `Cache-Control`; reachable (the
//!   conformance checker and the fuzzers apply exactly these rules) but hidden, no embedder's API.
//! - `user`: [`User`] and its [`ExtraFields`]; [`Resolution`], a user with what one answer
//!   says of itself (its [`Expiry`], whether it was served stale).
//! - `error`: [`ResolveError`], one variant per [`ErrorCode`], each with the [`ErrorContext`]
//!   it is asked about; [`ConfigError`].
//! - [`telemetry`]: the metric names this crate records.
//! - [`trace`] (feature `opentelemetry`): W3C trace context across the call to `/api/user`:
//!   each call carries its span's `traceparent`, and [`trace::continue_trace`] continues the
//!   trace a request brings.
//! - [`axum`] (feature `axum`): for an embedder's own HTTP API, the
//!   [`Authenticated`](axum::Authenticated) and [`AuthIdentity`](axum::AuthIdentity)
//!   extractors, [`AuthLayer`](axum::AuthLayer), a tower layer that resolves before the inner
//!   service, and [`AuthRejection`](axum::AuthRejection), each error code as an HTTP answer.
//!   `docs/axum.md` covers using them.
//!
//! The other parties of token authentication are members of this crate's workspace, built on
//! its public API and never the other way round: the reference integrator API, the player's
//! side, the game server, the conformance checker and the `token-resolver` binary
//! (`docs/architecture.md` has the map, and follows one join through the files).
//!
//! # Features
//!
//! - `redis`: the shared cache tier ([`RedisTier`]), with TLS (rustls), Sentinel and Cluster.
//! - `axum`: the axum/tower integration above (axum, and tower's layer and service traits).
//! - `opentelemetry`: trace context propagation ([`trace`]), with the OpenTelemetry API crate
//!   only; the program that exports spans brings the SDK and its exporter.
//!
//! With neither, the crate pulls in no HTTP server, argument parser or web framework: its
//! dependencies are reqwest, tokio, moka, serde, tracing, metrics and what they need.
//!
//! # Example
//!
//! ```no_run
//! use token_resolver::{ErrorCode, Identity, JoinRequest, Resolver};
//!
//! # async fn on_join(room_id: String, room_auth_url: String, token: Option<String>) {
//! let resolver = Resolver::builder()
//!     .default_auth_url("https://auth.example.com")
//!     .allow_auth_url("https://rooms.example.com/game")
//!     .build()
//!     .expect("valid configuration");
//!
//! let req = JoinRequest { room_id, auth_url: room_auth_url, access_token: token, ..Default::default() };
//! match resolver.resolve_join(&req).await {
//!     Ok(Identity::Authenticated(user)) => println!("{} joined as {}", user.id, user.name),
//!     Ok(Identity::Anonymous) => println!("auth is switched off"),
//!     Err(e) if e.code() == ErrorCode::TokenRejected => println!("log in again"),
//!     Err(e) => println!("join refused: {} ({})", e.code().as_str(), e),
//! }
//! # }
//! ```
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The answer rules, for the workspace's conformance checker and the fuzzers, which must apply
// exactly the resolver's: reachable, but not part of the API an embedder is offered (hidden
// from the docs, outside semver).
#[doc(hidden)]
pub mod answer;
mod auth_url;
mod cache;
pub(crate) mod clock;
mod error;
mod resolver;
pub mod telemetry;
mod token;
#[cfg(feature = "opentelemetry")]
#[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
pub mod trace;
mod upstream;
mod user;

// The shared tier's readers of what Redis hands a node (`XREAD`, `XINFO STREAM`, the revocation
// stream's messages), for the fuzzers and their replay tests: reachable, hidden from the docs,
// outside semver.
#[cfg(feature = "redis")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::cache::redis_fuzzing::*;
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;

pub use auth_url::{Endpoint, PlainHttp, MAX_AUTH_URL_BYTES};
pub use cache::{DatedRevocation, Revocation, RevocationFeed, TokenFingerprint};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use cache::{RedisTier, RedisTierError};
pub use error::{ConfigError, ErrorCode, ErrorContext, ResolveError};
pub use resolver::{
    ConnectRequest, Delivery, Identity, JoinRequest, Resolver, ResolverBuilder, Revoke, Stats,
};
pub use token::{check_syntax, AccessToken, MAX_TOKEN_BYTES};
pub use user::{Expiry, ExtraFields, Resolution, User};

/// The README's Rust examples compile as doctests (they use the products of the workspace, the
/// shared tier and the axum integration).
#[cfg(all(doctest, feature = "redis", feature = "axum"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// `docs/axum.md`'s Rust examples compile as doctests.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../docs/axum.md")]
struct AxumDocDoctests;
