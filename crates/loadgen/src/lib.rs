//! What the binary's `load` and `demo` commands drive the products with, and the benches and
//! tests too (through the test support crate, which re-exports it), so that all of them measure
//! and read the same things:
//!
//! - [`baselines`]: servers on loopback on a thread and runtime of their own, an upstream
//!   answering `/api/user` for any token, and the resolvers a game-server engineer would write
//!   by hand instead of embedding the library;
//! - [`sse`]: [`SseReader`], a reader of the sidecar's event stream, as a game server in another
//!   language reads it.
//!
//! It is a crate of its own so that the binary takes no test support as a normal dependency: it
//! starts no `redis-server`, makes no certificate and holds no fuzz property.
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod baselines;
pub mod sse;

pub use sse::{SseEvent, SseReader};
