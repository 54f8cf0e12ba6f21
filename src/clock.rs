//! The library's notion of "now" for the deadlines it keeps: an answer's freshness
//! (`cache::entry`'s `Deadline`), the revocation log's horizon, the circuit breaker's
//! cool-down, the Redis tier's rests and the upstream call's deadline all read this clock;
//! nothing in `src/` reads `std::time::Instant::now` but `Deadline`'s origin, which must not
//! follow a paused clock.
//!
//! It is tokio's clock ([`tokio::time::Instant`]): in a runtime whose clock is paused
//! (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`), the test moves it with
//! `tokio::time::advance`, and every deadline here moves with it. Outside such a runtime it is
//! the monotonic clock: exactly `std::time::Instant::now()` in a build without tokio's
//! `test-util` feature, and one atomic load more with it (tokio checks whether any clock was
//! ever paused; only once one was, in a test process, does it read the runtime's clock).
//!
//! What this clock does not own:
//! - wall-clock dates (`SystemTime`): a token's `exp`, and when a revocation was made, which
//!   other nodes compare with their own wall clock; those stay `SystemTime`.
//! - moka's time to live: the local tier's lasting users (fresh for the whole `cache_ttl`, with
//!   stale serving off) are expired by moka on its own clock, so that a hit on one reads no
//!   clock at all; every other entry also carries a `Deadline` read from here.

pub(crate) use tokio::time::Instant;

/// Now, on the library's clock.
#[inline]
pub(crate) fn now() -> Instant {
    Instant::now()
}
