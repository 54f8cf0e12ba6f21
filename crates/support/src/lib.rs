//! Helpers that the workspace's tests, benches and fuzz targets share, so that each is written
//! once: real servers on loopback (on `127.0.0.1:0`, stopped on drop), `redis-server`
//! processes, log and metric capture, the benches' hand-written baselines, and the properties
//! the fuzz targets check.
//!
//! # Layout
//!
//! - [`properties`]: the fuzz properties, also run on the stable toolchain by the tests (the only
//!   module without feature `servers`, so that the fuzz targets instrument no server);
//! - `scripted`, `raw`, `http_app`, `untrusted_tls`, `silent_tcp`: upstreams that answer as a
//!   test scripts them, misbehave at the TCP level, serve any router, or speak TLS with a
//!   certificate nobody trusts;
//! - `capture`: every log line and metric, for the leak tests; `revoke_recorder`: a game
//!   server's admin listener that records the revocations it is told; `hostile`: clients that
//!   do not do their part; [`Nginx`]: a real nginx with a configuration of the test's;
//!   [`SseReader`]: a reader of the sidecar's event stream;
//! - `files`: a test's own temporary directory ([`TempDir`]) and the programs it finds on the
//!   PATH ([`program`]);
//! - [`redis`]: `redis-server` on a free port: plain, TLS, Sentinel, Cluster;
//! - [`Relay`] (a TCP relay that goes half-open, refuses or delays on the test's word),
//!   [`present`] (skip with a note, or fail under CI, without a program), and the plain
//!   [`RedisServer`](redis::RedisServer) with [`free_port`](redis::free_port) are crate
//!   `token-resolver-loopback`'s, which the chaos run shares, re-exported here at their old
//!   paths; the TLS, Sentinel and Cluster launchers build on them here;
//! - [`bench`](mod@bench) and [`baselines`]: runtimes, token sets and the hand-written caches and calls the
//!   benches and `token-resolver load` measure against; [`closed_loop`]: the load client of the
//!   benches that set a server beside its peer;
//! - [`baselines`] and [`SseReader`] are the binary's own (crate `token-resolver-loadgen`),
//!   re-exported here: the binary takes that crate, never this one, as a normal dependency;
//! - `reference_api`, `tls_api` (feature `reference-api`): the reference integrator API on
//!   loopback, in the clear or over TLS, and logging in to it;
//! - `game_server` (feature `game-server`): a game server in this process, or the binary as a
//!   child process, and its clients; [`ws`]: a WebSocket client of it.
//!
//! Tests import what they need: `use token_resolver_support::{reference_api, Scripted};`.

pub mod properties;

#[cfg(feature = "servers")]
pub use token_resolver_loadgen::baselines;
#[cfg(feature = "servers")]
pub mod bench;
#[cfg(feature = "servers")]
mod capture;
#[cfg(feature = "servers")]
pub mod closed_loop;
#[cfg(feature = "game-server")]
mod game_server;
#[cfg(feature = "servers")]
mod http_app;
#[cfg(feature = "servers")]
mod otlp;
#[cfg(feature = "servers")]
mod raw;
#[cfg(feature = "servers")]
pub mod redis;
#[cfg(feature = "reference-api")]
mod reference_api;
#[cfg(feature = "servers")]
mod revoke_recorder;
#[cfg(feature = "servers")]
mod scripted;
#[cfg(feature = "servers")]
mod silent_tcp;
#[cfg(feature = "reference-api")]
mod tls_api;
#[cfg(feature = "servers")]
mod untrusted_tls;
#[cfg(feature = "game-server")]
pub mod ws;

#[cfg(feature = "servers")]
mod files;
#[cfg(feature = "servers")]
mod helpers;
#[cfg(feature = "servers")]
mod hostile;
#[cfg(feature = "servers")]
mod nginx;

#[cfg(feature = "servers")]
pub use capture::*;
#[cfg(feature = "servers")]
pub use files::*;
#[cfg(feature = "game-server")]
pub use game_server::*;
#[cfg(feature = "servers")]
pub use helpers::*;
#[cfg(feature = "servers")]
pub use hostile::*;
#[cfg(feature = "servers")]
pub use http_app::*;
#[cfg(feature = "servers")]
pub use nginx::Nginx;
#[cfg(feature = "servers")]
pub use otlp::*;
#[cfg(feature = "servers")]
pub use raw::*;
#[cfg(feature = "reference-api")]
pub use reference_api::*;
#[cfg(feature = "servers")]
pub use revoke_recorder::*;
#[cfg(feature = "servers")]
pub use scripted::*;
#[cfg(feature = "servers")]
pub use silent_tcp::*;
#[cfg(feature = "reference-api")]
pub use tls_api::*;
#[cfg(feature = "servers")]
pub use token_resolver_loadgen::{SseEvent, SseReader};
#[cfg(feature = "servers")]
pub use token_resolver_loopback::{present, Relay};
#[cfg(feature = "servers")]
pub use untrusted_tls::*;
