//! Real processes and links on loopback that the tests and the chaos run share: what both need
//! to start a program of their own beside the code under test, and to put a fault between two
//! real processes, with no mock and no flag in the code under test.
//!
//! # Layout
//!
//! - [`free_port`] (`port`): a free loopback port for a child process that binds it itself,
//!   chosen below the kernel's ephemeral range;
//! - [`RedisServer`] (`redis_server`): `redis-server` on a free port, killed and started again
//!   on the same port on the caller's word, with the tests' own look at its data; [`installed`]
//!   and [`wait_for`] beside it;
//! - [`Relay`] (`relay`): a TCP relay that goes half-open, refuses or delays on the caller's
//!   word;
//! - [`present`] (`skip`): skipping a test with a note, or failing it under CI, without a
//!   program it needs.
//!
//! It owns nothing else: the scripted servers, captures, baselines and the TLS, Sentinel and
//! Cluster launchers stay in the test support (`token-resolver-support`), which re-exports all
//! of this at its old paths. This crate must not depend on that one: the chaos run's binary takes
//! this one as a normal dependency, and never the test support.

#![warn(missing_docs, missing_debug_implementations)]

mod port;
mod redis_server;
mod relay;
mod skip;

pub use port::free_port;
pub use redis_server::{installed, wait_for, RedisServer};
pub use relay::Relay;
pub use skip::present;
