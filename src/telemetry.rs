//! The metric names this crate records through the `metrics` facade, and their labels.
//!
//! The embedding server installs a recorder (Prometheus, StatsD, ...); without one, recording
//! costs next to nothing. No label ever carries a token or a user name.
//!
//! [`RESOLUTIONS_TOTAL`], counted on every resolution, is registered with the recorder once per
//! resolver, at its first resolution; install the recorder before resolving anything.

use std::sync::OnceLock;

use metrics::Counter;

use crate::error::ErrorCode;

/// Counter, label `outcome`: `hit`, `miss` (answered by an upstream call this resolution made),
/// `coalesced` (answered by another resolution's call), `stale` (a stale answer served while the
/// API was unreachable), or the error code of a failure.
pub const RESOLUTIONS_TOTAL: &str = "token_resolver_resolutions_total";

/// Counter, label `status`: the HTTP status of each upstream request, or `error` when none came.
pub const UPSTREAM_REQUESTS_TOTAL: &str = "token_resolver_upstream_requests_total";

/// Histogram: seconds from sending an upstream request to having its whole answer.
pub const UPSTREAM_DURATION_SECONDS: &str = "token_resolver_upstream_duration_seconds";

/// Gauge: upstream requests in flight now.
pub const UPSTREAM_IN_FLIGHT: &str = "token_resolver_upstream_in_flight";

/// Gauge: upstream requests allowed in flight at once (`max_concurrent_requests`), set when a
/// resolver is built (the last one built, where a process builds several): the bound
/// [`UPSTREAM_IN_FLIGHT`] runs against.
pub const UPSTREAM_SLOTS: &str = "token_resolver_upstream_slots";

/// Histogram: seconds from when another node made a revocation (by its clock) to when this
/// node applied it from the shared cache's stream.
pub const REVOCATION_DELAY_SECONDS: &str = "token_resolver_revocation_delay_seconds";

/// Gauge: entries in the cache (users and rejections), updated as the cache changes.
pub const CACHE_ENTRIES: &str = "token_resolver_cache_entries";

/// Gauge, label `origin` (`scheme://host:port` of an auth API): 1 while its circuit breaker is
/// open and calls fail fast, 0 once it closes.
pub const CIRCUIT_OPEN: &str = "token_resolver_circuit_open";

/// Counter: resolutions that failed fast because their auth API's circuit breaker was open.
pub const CIRCUIT_REJECTIONS_TOTAL: &str = "token_resolver_circuit_rejections_total";

/// Counter: stale answers served because the auth API was unavailable (`serve_stale_for`).
pub const STALE_SERVED_TOTAL: &str = "token_resolver_stale_served_total";

/// Counter, label `op`: shared cache (Redis) operations that failed or timed out; the
/// resolution went on without Redis.
pub const SHARED_CACHE_ERRORS_TOTAL: &str = "token_resolver_shared_cache_errors_total";

/// Counter: times the shared cache's revocation stream was lost (its connection failed or fell
/// silent) and read again.
pub const SHARED_CACHE_CHANNEL_LOSSES_TOTAL: &str =
    "token_resolver_shared_cache_channel_losses_total";

/// Counter: times revocations may have been missed (the stream no longer held what came after
/// the last one applied), so the local cache was emptied and sessions told to re-check.
pub const SHARED_CACHE_RESYNCS_TOTAL: &str = "token_resolver_shared_cache_resyncs_total";

/// Counter, label `what` (`value`: a value in Redis not sealed with the tier's secret;
/// `replayed_value`: a sealed value under its token's tombstone or long past its sealed
/// expiry, written back by someone; `message`: a revocation on the stream whose MAC is missing
/// or wrong; `replayed_message`: an authentic one told again long after it was made): what a
/// writer in Redis without the secret put there, ignored.
pub const SHARED_FORGED_TOTAL: &str = "token_resolver_shared_forged_total";

/// Gauge: resolutions waiting now for another resolution's upstream call of the same token
/// (coalesced waiters).
pub const COALESCED_WAITERS: &str = "token_resolver_coalesced_waiters";

/// Counter, labels `origin` and `state` (`open`, `closed`): circuit-breaker transitions.
pub const CIRCUIT_TRANSITIONS_TOTAL: &str = "token_resolver_circuit_transitions_total";

/// Counter: local misses the shared cache (Redis) answered.
pub const SHARED_CACHE_HITS_TOTAL: &str = "token_resolver_shared_cache_hits_total";

/// Counter: local misses the shared cache (Redis) had no answer for.
pub const SHARED_CACHE_MISSES_TOTAL: &str = "token_resolver_shared_cache_misses_total";

/// Counter, labels `scope` (`token`, `user`, `session`, `all`) and `source` (`local`: made on this node;
/// `remote`: another node's, through the shared cache's channel, or the emptying of the cache
/// when that channel is subscribed again): invalidations applied to this node's cache.
pub const INVALIDATIONS_TOTAL: &str = "token_resolver_invalidations_total";

/// Describes every metric of this crate to the installed recorder and registers each at zero
/// (counters under the label values known in advance), so that a scrape shows `0` rather than
/// nothing before the first event: a dashboard panel or an alert rule then has a series from
/// the start. A product calls it once, after installing its recorder; without one it does
/// nothing.
pub fn register() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        RESOLUTIONS_TOTAL,
        "Resolutions, by outcome: hit, miss, coalesced, stale or the error code."
    );
    describe_counter!(
        UPSTREAM_REQUESTS_TOTAL,
        "Requests to the integrator's /api/user, by HTTP status (or error)."
    );
    describe_histogram!(
        UPSTREAM_DURATION_SECONDS,
        Unit::Seconds,
        "Time from sending a request to /api/user to having its whole answer."
    );
    describe_gauge!(UPSTREAM_IN_FLIGHT, "Requests to /api/user in flight now.");
    describe_gauge!(
        UPSTREAM_SLOTS,
        "Requests to /api/user allowed in flight at once (max_concurrent_requests)."
    );
    describe_gauge!(
        CACHE_ENTRIES,
        "Entries in the local cache (users and rejections)."
    );
    describe_gauge!(
        CIRCUIT_OPEN,
        "1 while an auth API's circuit breaker is open, by origin."
    );
    describe_counter!(
        CIRCUIT_REJECTIONS_TOTAL,
        "Resolutions failed fast on an open circuit breaker."
    );
    describe_counter!(
        CIRCUIT_TRANSITIONS_TOTAL,
        "Circuit-breaker transitions, by origin and state."
    );
    describe_counter!(
        STALE_SERVED_TOTAL,
        "Stale answers served while the auth API was unavailable."
    );
    describe_counter!(
        SHARED_CACHE_HITS_TOTAL,
        "Local misses the shared cache (Redis) answered."
    );
    describe_counter!(
        SHARED_CACHE_MISSES_TOTAL,
        "Local misses the shared cache (Redis) had no answer for."
    );
    describe_counter!(
        SHARED_CACHE_ERRORS_TOTAL,
        "Shared cache (Redis) operations that failed or timed out, by op."
    );
    describe_counter!(
        SHARED_CACHE_CHANNEL_LOSSES_TOTAL,
        "Times the shared cache's revocation stream was lost and read again."
    );
    describe_counter!(
        SHARED_CACHE_RESYNCS_TOTAL,
        "Times revocations may have been missed, so the local cache was emptied."
    );
    describe_counter!(
        SHARED_FORGED_TOTAL,
        "What a writer in Redis without the secret put there, ignored, by what."
    );
    describe_gauge!(
        COALESCED_WAITERS,
        "Resolutions waiting now on another resolution's call for the same token."
    );
    describe_counter!(
        INVALIDATIONS_TOTAL,
        "Invalidations applied to this node's cache, by scope and source."
    );
    describe_histogram!(
        REVOCATION_DELAY_SECONDS,
        Unit::Seconds,
        "Time from another node making a revocation to this node applying it."
    );

    for outcome in OUTCOMES {
        let _ = metrics::counter!(RESOLUTIONS_TOTAL, "outcome" => outcome);
    }
    for scope in ["token", "user", "session", "all"] {
        for source in ["local", "remote"] {
            let _ = metrics::counter!(INVALIDATIONS_TOTAL, "scope" => scope, "source" => source);
        }
    }
    for what in ["value", "replayed_value", "message", "replayed_message"] {
        let _ = metrics::counter!(SHARED_FORGED_TOTAL, "what" => what);
    }
    // `op` is the failing operation; `subscribe` (the revocation stream) is always one.
    let _ = metrics::counter!(SHARED_CACHE_ERRORS_TOTAL, "op" => "subscribe");
    for name in [
        CIRCUIT_REJECTIONS_TOTAL,
        STALE_SERVED_TOTAL,
        SHARED_CACHE_HITS_TOTAL,
        SHARED_CACHE_MISSES_TOTAL,
        SHARED_CACHE_CHANNEL_LOSSES_TOTAL,
        SHARED_CACHE_RESYNCS_TOTAL,
    ] {
        let _ = metrics::counter!(name);
    }
    for name in [
        UPSTREAM_IN_FLIGHT,
        UPSTREAM_SLOTS,
        CACHE_ENTRIES,
        COALESCED_WAITERS,
    ] {
        let _ = metrics::gauge!(name);
    }
    for name in [UPSTREAM_DURATION_SECONDS, REVOCATION_DELAY_SECONDS] {
        let _ = metrics::histogram!(name);
    }
}

/// What an invalidation drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// One token's answer.
    Token,
    /// Every answer of one user.
    User,
    /// Every answer of one of the integrator's sessions.
    Session,
    /// Everything.
    All,
}

/// Counts one invalidation under its scope and source (`local` or `remote`).
pub(crate) fn count_invalidation(scope: Scope, source: &'static str) {
    let scope = match scope {
        Scope::Token => "token",
        Scope::Session => "session",
        Scope::User => "user",
        Scope::All => "all",
    };
    metrics::counter!(INVALIDATIONS_TOTAL, "scope" => scope, "source" => source).increment(1);
}

/// Every `outcome` of [`RESOLUTIONS_TOTAL`]: how an answer came, then each error code.
const OUTCOMES: [&str; 4 + ErrorCode::ALL.len()] = {
    let mut outcomes = [""; 4 + ErrorCode::ALL.len()];
    let answered = ["hit", "miss", "coalesced", "stale"];
    let mut i = 0;
    while i < answered.len() {
        outcomes[i] = answered[i];
        i += 1;
    }
    let mut i = 0;
    while i < ErrorCode::ALL.len() {
        outcomes[answered.len() + i] = ErrorCode::ALL[i].as_str();
        i += 1;
    }
    outcomes
};

/// A resolver's [`RESOLUTIONS_TOTAL`] counters, one handle per outcome, registered with the
/// recorder at the first resolution. Counting is then a call on a handle; the `counter!` macro
/// would build and hash the key on every resolution, even with no recorder at all, and have
/// the recorder look it up.
#[derive(Default)]
pub(crate) struct Resolutions {
    handles: OnceLock<Box<[Counter; OUTCOMES.len()]>>,
}

impl Resolutions {
    /// Counts one cache hit (`outcome="hit"`, the first of [`OUTCOMES`]).
    #[inline(always)]
    pub(crate) fn count_hit(&self) {
        self.handles()[0].increment(1);
    }

    #[inline(always)]
    fn handles(&self) -> &[Counter; OUTCOMES.len()] {
        self.handles.get_or_init(|| {
            Box::new(
                OUTCOMES.map(|outcome| metrics::counter!(RESOLUTIONS_TOTAL, "outcome" => outcome)),
            )
        })
    }

    /// Counts one resolution under `outcome`, one of [`OUTCOMES`].
    #[inline]
    pub(crate) fn count(&self, outcome: &'static str) {
        let handles = self.handles();
        match OUTCOMES.iter().position(|known| *known == outcome) {
            Some(i) => handles[i].increment(1),
            // Not reached while OUTCOMES lists every code; counted all the same if it is.
            None => metrics::counter!(RESOLUTIONS_TOTAL, "outcome" => outcome).increment(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn outcomes_name_every_error_code_once() {
        for code in ErrorCode::ALL {
            let n = OUTCOMES.iter().filter(|o| **o == code.as_str()).count();
            assert_eq!(n, 1, "{code:?}");
        }
        assert!(!OUTCOMES.contains(&""));
    }

    #[test]
    fn resolutions_are_counted_per_outcome_on_registered_handles() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let resolutions = Resolutions::default();
        metrics::with_local_recorder(&recorder, || {
            for outcome in ["hit", "hit", "hit", "token_rejected", "overloaded"] {
                resolutions.count(outcome);
            }
        });
        let snapshot = snapshotter.snapshot().into_vec();
        let count = |outcome: &str| {
            snapshot
                .iter()
                .find(|(key, ..)| key.key().labels().any(|l| l.value() == outcome))
                .map(|(.., value)| match value {
                    DebugValue::Counter(n) => *n,
                    other => panic!("a counter, not {other:?}"),
                })
        };
        assert_eq!(count("hit"), Some(3));
        assert_eq!(count("token_rejected"), Some(1));
        assert_eq!(count("overloaded"), Some(1));
        assert_eq!(
            count("miss"),
            Some(0),
            "every outcome is registered, at zero"
        );
    }
}
