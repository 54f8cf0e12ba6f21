//! The bounds the checker holds a history to, each defaulting to what the documentation
//! promises. It owns the numbers and where they come from; the checker applies them.

use std::time::Duration;

/// How late a revocation may take effect, and how much the checker forgives.
///
/// Build it with `Bounds { across_processes: …, ..Bounds::default() }`; every default is the
/// documented figure named on its field.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    /// From a revocation acknowledged by a process to that same process refusing the token and
    /// telling its sessions, on a healthy link. Default 100 ms: the target of "revocation to
    /// the client's read, same node" (README, Performance; docs/sessions.md, "targets: 100 ms
    /// and 250 ms"). Also the bound after a token's expiry, which each process sees itself.
    pub same_process: Duration,
    /// From a revocation acknowledged by one process (the integrator's logout or ban, a node's
    /// `POST /admin/revoke`) to every other process refusing it and telling its sessions, on
    /// healthy links. Default 250 ms: the target of "revocation to the client's read ...
    /// through Redis" (README, Performance; docs/sessions.md), which the alert
    /// `TokenResolverRevocationSlow` holds p99 to (docs/operations.md, Dashboard and alerts).
    pub across_processes: Duration,
    /// After a fault that was open while a revocation travelled heals: how long until the
    /// revocation must hold and every session it names be told. Default 10 s, the documented
    /// paths added up: the reference API's notifier retries a failed notice after at most 5 s
    /// +20 % jitter, each try with a 2 s deadline ("a healed path is used within seconds",
    /// docs/reference-api.md, Retries until delivered), and the Redis tier rests 1 s after an
    /// error and reads the stream in 1 s blocking reads (docs/redis.md, Failure modes;
    /// docs/sessions.md). A run holding more than a few hundred sessions per node adds their
    /// paced re-check, `sessions / --recheck-rate` (200 a second).
    pub recovery: Duration,
    /// Leeway on every token expiry: an `exp` counts as passed this long after it. Default
    /// 30 s, the default `--clock-skew` (docs/sessions.md, Expiry is honoured; SPEC section 11).
    pub clock_skew: Duration,
    /// Of the sessions live on the processes a lost channel affects, the fraction that may be
    /// kicked with no revocation to explain it, from the loss until `recovery` after it heals.
    /// Default 0: a node that lost its channel re-checks its sessions, it does not kick them
    /// (docs/sessions.md; docs/redis.md, What the tier guarantees). A run whose own game
    /// server closes sessions a re-check could not answer may raise it.
    pub spurious_kick_rate: f64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            same_process: Duration::from_millis(100),
            across_processes: Duration::from_millis(250),
            recovery: Duration::from_secs(10),
            clock_skew: Duration::from_secs(30),
            spurious_kick_rate: 0.0,
        }
    }
}

/// A duration in the history's unit, microseconds (saturating).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
