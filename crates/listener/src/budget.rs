//! [`Budget`]: how many times each key (a client address, a device id) did something lately,
//! each at most a budget per window, so that a public listener can slow one caller down
//! without holding back the others.
//!
//! A window starts with a key's first count and runs its length; the key then starts afresh.
//! The map is bounded: past [`MAX_KEYS`] it drops the keys whose window ended, and if every one
//! is still counting, it starts again (an attacker with that many keys is not stopped by a
//! per-key budget anyway).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Keys counted at once, at most.
pub const MAX_KEYS: usize = 100_000;

/// Counts per key, each key at most `budget` per `window`.
#[derive(Debug)]
pub struct Budget<K> {
    budget: u32,
    window: Duration,
    by_key: Mutex<HashMap<K, (Instant, u32)>>,
}

impl<K: Hash + Eq> Budget<K> {
    /// `budget` counts per `window` per key; a budget of 0 turns the count off.
    pub fn new(budget: u32, window: Duration) -> Budget<K> {
        Budget {
            budget,
            window,
            by_key: Mutex::new(HashMap::new()),
        }
    }

    /// How long until `key` is within its budget again; `None` while it is.
    pub fn exhausted(&self, key: &K) -> Option<Duration> {
        if self.budget == 0 {
            return None;
        }
        let by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let &(since, count) = by_key.get(key)?;
        // A window that has run its length is over, as `record` sees it.
        let left = (self.window.checked_sub(since.elapsed())).filter(|left| !left.is_zero())?;
        (count >= self.budget).then_some(left)
    }

    /// Counts one for `key`.
    pub fn record(&self, key: K) {
        if self.budget == 0 {
            return;
        }
        let now = Instant::now();
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let (since, count) = by_key.entry(key).or_insert((now, 0));
        if now.duration_since(*since) >= self.window {
            (*since, *count) = (now, 0);
        }
        *count = count.saturating_add(1);
        if by_key.len() > MAX_KEYS {
            let window = self.window;
            by_key.retain(|_, (since, _)| now.duration_since(*since) < window);
            if by_key.len() > MAX_KEYS {
                by_key.clear();
            }
        }
    }

    /// Counts one for `key` if it is within its budget; otherwise how long until it is.
    ///
    /// # Errors
    ///
    /// The wait, when `key` has spent its budget in this window (nothing is counted then).
    pub fn spend(&self, key: K) -> Result<(), Duration> {
        match self.exhausted(&key) {
            Some(wait) => Err(wait),
            None => {
                self.record(key);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_past_its_budget_waits_out_its_window_and_others_are_not_held_back() {
        let budget = Budget::new(3, Duration::from_secs(60));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert_eq!(budget.exhausted(&a), None);
            budget.record(a);
        }
        assert_eq!(budget.exhausted(&a), Some(Duration::from_secs(60)));
        assert_eq!(budget.exhausted(&b), None, "another key");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(budget.exhausted(&a), None, "a new window");
        budget.record(a);
        assert_eq!(budget.exhausted(&a), None, "counted afresh");
    }

    #[tokio::test(start_paused = true)]
    async fn spending_past_the_budget_is_refused_with_the_wait_and_not_counted() {
        let budget = Budget::new(2, Duration::from_secs(10));
        assert_eq!(budget.spend("device"), Ok(()));
        assert_eq!(budget.spend("device"), Ok(()));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(budget.spend("device"), Err(Duration::from_secs(6)));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(budget.spend("device"), Ok(()));
    }

    #[test]
    fn a_budget_of_zero_counts_nothing() {
        let budget = Budget::new(0, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        budget.record(a);
        assert_eq!(budget.exhausted(&a), None);
        assert!(budget.by_key.lock().unwrap().is_empty());
    }
}
