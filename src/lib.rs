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
//! - [`resolver`]: [`Resolver`] and [`ResolverBuilder`], the entry points; connect and join
//!   requests ([`ConnectRequest`], [`JoinRequest`]) and what they resolve to ([`Identity`]).
//! - [`auth_url`]: parsing and normalising an authUrl into an endpoint, and the allowlist.
//! - [`token`]: the access token's syntax rule and its redacted [`AccessToken`] type.
//! - [`answer`]: strict parsing of the `/api/user` answer and of its `Cache-Control`.
//! - [`user`]: [`User`], what a resolution yields, and its [`ExtraFields`].
//! - `cache` (private): the cache keys, entries and per-entry expiry on top of moka.
//! - `upstream` (private): the HTTP call with its deadline, retries and body cap.
//! - `breaker` (private): the per-API circuit breaker that makes a dead API fail fast.
//! - `flight` (private): coalescing concurrent look-ups of one key into one call.
//! - `counters` (private): the counters behind [`Stats`], striped per thread.
//! - `shared_cache` (feature `redis`): the second cache tier on Redis, shared by every
//!   game-server node, with cluster-wide invalidation.
//! - [`error`]: [`ResolveError`], [`ErrorCode`] and [`ConfigError`].
//! - [`telemetry`]: the metric names this crate records.
//! - [`client`]: the game client's side: `RoomInfo` and its authUrl rule, `RoomJoinArgs`, and
//!   a client of the integrator's web API that logs in and takes an access token.
//! - `reference_api` (feature `reference-api`): a reference integrator web API.
//! - `demo` (feature `reference-api`): the seed's whole flow on loopback.
//! - `game_server` (feature `reference-api`): a runnable game server embedding the resolver
//!   (TCP, JSON lines: connect, search_room, join) and `GameClient`, its client.
//! - `check` (feature `reference-api`): the conformance checker an integrator runs against
//!   their own user information API.
//! - `cli` (feature `cli`): the `token-resolver` command line.
//! - `load` (feature `cli`): `token-resolver load`, the throughput and memory harness.
//!
//! Features: `reference-api` (axum, argon2) and `cli` (clap, on top of it) are on by default
//! for the binary. A game server that embeds the resolver depends with
//! `default-features = false` and pulls in neither.
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

pub mod answer;
pub mod auth_url;
mod breaker;
mod cache;
#[cfg(feature = "reference-api")]
pub mod check;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
mod counters;
#[cfg(feature = "reference-api")]
pub mod demo;
pub mod error;
mod flight;
#[cfg(feature = "reference-api")]
pub mod game_server;
#[cfg(feature = "cli")]
pub mod load;
#[cfg(feature = "reference-api")]
pub mod reference_api;
pub mod resolver;
#[cfg(feature = "redis")]
pub mod shared_cache;
pub mod telemetry;
pub mod token;
mod upstream;
pub mod user;

pub use auth_url::{AllowList, Endpoint};
pub use error::{ConfigError, ErrorCode, ResolveError};
pub use resolver::{ConnectRequest, JoinRequest, Resolver, ResolverBuilder, Stats};
pub use token::AccessToken;
pub use user::{ExtraFields, Identity, User};

/// The README's Rust examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
