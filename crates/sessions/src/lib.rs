//! Live sessions, for any server that keeps players connected after their token was resolved:
//! the game server, and the sidecar that keeps sessions for game servers in other languages.
//! Both depend on this crate, and neither on the other.
//!
//! It owns what a session holds, the registry a revocation is matched against, re-checking a
//! session's tokens and its own clock, the task that follows the resolver's revocations, and the
//! admin listener both products serve (`/metrics`, `/healthz`, `/readyz`, `POST /admin/revoke`)
//! for whatever [`AdminNode`] they give it. It does not own a transport, a protocol or rooms
//! (the products' own), nor token resolution (the library's
//! [`Resolver`](token_resolver::Resolver)).
//!
//! A session keeps its tokens in memory only, as [`AccessToken`](token_resolver::AccessToken)s
//! whose `Debug` shows nothing; the registry keeps their fingerprints, never the tokens.
//!
//! # Layout
//!
//! - `credential`: what a session holds: a [`Credential`] per token it resolved, for a
//!   [`Purpose`], gathered in [`SessionCredentials`];
//! - `registry`: the [`Registry`] of a server's sessions, indexed by what a revocation may name
//!   them by; [`SessionSignals`], how it reaches a session's task; [`RevocationCursor`] and
//!   [`RevocationsSince`], for the revocations that came while a session was busy;
//! - `recheck`: asking the resolver again whether a session may stay ([`check_credentials`],
//!   [`recheck_until_known`], their [`SessionStatus`]), paced across sessions by a [`Pacer`];
//! - `timers`: a session's own clock, [`Timers`] (expiry, the grace to refresh, revalidation),
//!   what is [`Due`], and [`sleep_until`];
//! - `follower`: [`listen`], the task that applies the resolver's revocations to a registry,
//!   and [`follow`], the loop under it;
//! - `revocation`: [`close_then_invalidate`], revoking from a node: the sessions here, then
//!   every cache and every other node;
//! - `node`: [`AdminNode`], what a server gives the admin listener;
//! - `admin`: the admin listener ([`spawn_admin`], [`AdminConfig`], [`RunningAdmin`]), served
//!   through `token_resolver_listener::http`; `revoke`: its `POST /admin/revoke`;
//! - [`telemetry`]: [`REVOKED_TOTAL`](telemetry::REVOKED_TOTAL) and
//!   [`Metrics`](telemetry::Metrics), the Prometheus recorder behind `/metrics`.
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod admin;
mod credential;
mod follower;
mod node;
mod recheck;
mod registry;
mod revocation;
mod revoke;
pub mod telemetry;
mod timers;

pub use self::admin::{spawn as spawn_admin, AdminConfig, RunningAdmin};
pub use self::credential::{Credential, Purpose, SessionCredentials};
pub use self::follower::{follow, listen};
pub use self::node::AdminNode;
pub use self::recheck::{check_credentials, recheck_until_known, Pacer, SessionStatus};
pub use self::registry::{Registry, RevocationCursor, RevocationsSince, SessionSignals};
pub use self::revocation::{close_then_invalidate, Revoked};
pub use self::timers::{sleep_until, Due, Timers};
/// The admin secret of `POST /admin/revoke`: the reference API's type, since both sides share
/// one secret (`TOKEN_RESOLVER_ADMIN_TOKEN`).
pub use token_resolver_listener::AdminSecret;
