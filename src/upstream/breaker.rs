//! The circuit breaker: after a run of transient failures at one auth API, resolutions that
//! need it fail at once for a cool-down, then one probe call decides whether it closes.
//!
//! Breakers are kept per origin (`scheme://host:port`): the allowlist admits only configured
//! origins, so their number is bounded by the configuration, whatever authUrls clients send.
//! This module only keeps the state: the upstream call asks it once for an [`Admission`] before
//! its first try and records on that admission how each try went.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::clock::{self, Instant};
use crate::telemetry;

/// The breaker settings: how many transient failures in a row open it, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BreakerConfig {
    /// Consecutive transient failures that open the breaker; 0 disables it.
    pub(crate) threshold: u32,
    /// How long an open breaker refuses calls before letting one probe through.
    pub(crate) cool_down: Duration,
}

/// One origin's state.
#[derive(Debug, Default)]
struct State {
    /// Transient failures since the last usable answer.
    failures: u32,
    /// While set, calls are refused until this instant; after it, one probe may go.
    open_until: Option<Instant>,
    /// A probe is under way: everyone else is refused until it reports.
    probing: bool,
}

/// The breakers of one resolver, by origin.
#[derive(Debug)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    states: Mutex<HashMap<Box<str>, State>>,
    /// Calls refused because a breaker was open, for `Stats::short_circuited`.
    refusals: AtomicU64,
}

/// Leave to make a call, given by [`Breakers::admit`]; record how each try went with
/// [`Admission::record`]. Dropped without a record (the call was cancelled), a probe frees the
/// way for the next probe.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    breakers: &'a Breakers,
    origin: &'a str,
    probe: bool,
    /// Whether [`Admission::record`] was called.
    recorded: Cell<bool>,
}

/// How a call went, as far as the breaker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A usable answer (200, 401, 403): the API is up.
    Up,
    /// A transient failure (connect error, reset, timeout, 408/429/5xx).
    Down,
    /// Something that says nothing about availability (e.g. a malformed body).
    Neutral,
}

impl Breakers {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Breakers {
            config,
            states: Mutex::new(HashMap::new()),
            refusals: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, State>> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks to call `origin`.
    ///
    /// # Errors
    ///
    /// The time until the breaker lets a probe through (zero while a probe is under way) when
    /// it is open.
    pub(crate) fn admit<'a>(&'a self, origin: &'a str) -> Result<Admission<'a>, Duration> {
        let admission = |probe| Admission {
            breakers: self,
            origin,
            probe,
            recorded: Cell::new(false),
        };
        if self.config.threshold == 0 {
            return Ok(admission(false));
        }
        let mut states = self.lock();
        let Some(state) = states.get_mut(origin) else {
            return Ok(admission(false));
        };
        let refused = match state.open_until {
            None => return Ok(admission(false)),
            Some(_) if state.probing => Duration::ZERO,
            Some(until) => match until.checked_duration_since(clock::now()) {
                Some(wait) if !wait.is_zero() => wait,
                _ => {
                    state.probing = true;
                    return Ok(admission(true));
                }
            },
        };
        self.refused();
        Err(refused)
    }

    fn refused(&self) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::CIRCUIT_REJECTIONS_TOTAL).increment(1);
    }

    /// How many calls were refused because a breaker was open.
    pub(crate) fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Whether calls to `origin` are being refused now.
    pub(crate) fn is_open(&self, origin: &str) -> bool {
        self.lock()
            .get(origin)
            .is_some_and(|s| s.open_until.is_some())
    }

    fn record(&self, origin: &str, probe: bool, outcome: Outcome) {
        if self.config.threshold == 0 {
            return;
        }
        let mut states = self.lock();
        if outcome != Outcome::Down && !states.contains_key(origin) {
            return;
        }
        let state = states.entry(origin.into()).or_default();
        if probe {
            state.probing = false;
        }
        let was_open = state.open_until.is_some();
        match outcome {
            Outcome::Up => *state = State::default(),
            Outcome::Down => {
                state.failures = state.failures.saturating_add(1);
                if probe || state.failures >= self.config.threshold {
                    state.open_until = Some(clock::now() + self.config.cool_down);
                }
            }
            Outcome::Neutral => {}
        }
        let is_open = state.open_until.is_some();
        if was_open != is_open {
            tracing::warn!(origin = %origin, open = is_open, "auth API circuit breaker changed state");
            metrics::gauge!(telemetry::CIRCUIT_OPEN, "origin" => origin.to_string())
                .set(if is_open { 1.0 } else { 0.0 });
            let state = if is_open { "open" } else { "closed" };
            metrics::counter!(telemetry::CIRCUIT_TRANSITIONS_TOTAL, "origin" => origin.to_string(), "state" => state)
                .increment(1);
        }
    }
}

impl Admission<'_> {
    /// Whether this call is the probe of a half-open breaker.
    pub(crate) fn is_probe(&self) -> bool {
        self.probe
    }

    /// Tells the breaker how one try went.
    pub(crate) fn record(&self, outcome: Outcome) {
        self.recorded.set(true);
        self.breakers.record(self.origin, self.probe, outcome);
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded.get() {
            if let Some(state) = self.breakers.lock().get_mut(self.origin) {
                state.probing = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "https://a.example";

    fn breakers(threshold: u32, cool_down_ms: u64) -> Breakers {
        Breakers::new(BreakerConfig {
            threshold,
            cool_down: Duration::from_millis(cool_down_ms),
        })
    }

    fn fail(b: &Breakers, n: u32) {
        for _ in 0..n {
            b.admit(O).unwrap().record(Outcome::Down);
        }
    }

    #[test]
    fn opens_after_the_threshold_of_failures_in_a_row() {
        let b = breakers(3, 10_000);
        fail(&b, 2);
        assert!(b.admit(O).is_ok());
        fail(&b, 1);
        assert!(b.admit(O).is_err());
        assert!(b.is_open(O));
    }

    #[test]
    fn a_usable_answer_resets_the_run() {
        let b = breakers(3, 10_000);
        fail(&b, 2);
        b.admit(O).unwrap().record(Outcome::Up);
        fail(&b, 2);
        assert!(b.admit(O).is_ok());
    }

    // The cool-downs below pass on tokio's paused clock, moved by `advance`.
    #[tokio::test(start_paused = true)]
    async fn after_the_cool_down_one_probe_decides() {
        let b = breakers(1, 20);
        fail(&b, 1);
        tokio::time::advance(Duration::from_millis(19)).await;
        assert_eq!(
            b.admit(O).unwrap_err(),
            Duration::from_millis(1),
            "still cooling down"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        let probe = b.admit(O).unwrap();
        assert!(probe.is_probe());
        assert_eq!(
            b.admit(O).unwrap_err(),
            Duration::ZERO,
            "one probe at a time"
        );
        probe.record(Outcome::Up);
        assert!(!b.is_open(O));
        assert!(b.admit(O).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_for_another_cool_down() {
        let b = breakers(5, 20);
        fail(&b, 5);
        tokio::time::advance(Duration::from_millis(30)).await;
        b.admit(O).unwrap().record(Outcome::Down);
        assert_eq!(b.admit(O).unwrap_err(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_probe_lets_the_next_probe_go() {
        let b = breakers(1, 10);
        fail(&b, 1);
        tokio::time::advance(Duration::from_millis(20)).await;
        drop(b.admit(O).unwrap());
        assert!(b.admit(O).unwrap().is_probe());
    }

    #[test]
    fn threshold_zero_disables_the_breaker() {
        let b = breakers(0, 10_000);
        fail(&b, 100);
        assert!(b.admit(O).is_ok());
    }

    #[test]
    fn origins_are_independent() {
        let b = breakers(1, 10_000);
        fail(&b, 1);
        assert!(b.admit("https://b.example").is_ok());
    }
}
