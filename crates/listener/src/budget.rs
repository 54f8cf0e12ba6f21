//! [`Budget`]: how many times each key (a client address, a device id) did something lately,
//! each at most a budget per window, so that a public listener can slow one caller down
//! without holding back the others.
//!
//! A window starts with a key's first count and runs its length; the key then starts afresh.
//! The map is bounded, and a count costs O(1) however full it is: keys are kept in the order
//! their windows began, which (every window being as long) is the order they end in. Each count
//! drops up to two keys whose window ended from the front of that order, and a new key in a full
//! map ([`MAX_KEYS`]) drops the oldest one still counting: its caller starts afresh, nobody else
//! does. Nothing ever scans the map under the lock.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Keys counted at once, at most.
pub const MAX_KEYS: usize = 100_000;

/// Keys whose window ended dropped by each count, at most.
const SWEEP_STEPS: usize = 2;

/// Counts per key, each key at most `budget` per `window`.
#[derive(Debug)]
pub struct Budget<K> {
    budget: u32,
    window: Duration,
    by_key: Mutex<Counts<K>>,
}

/// The counts, and the order their windows began in.
#[derive(Debug)]
struct Counts<K> {
    /// Each key's window start and count.
    by_key: HashMap<K, (Instant, u32)>,
    /// Every window begun, oldest first: an entry whose start is not its key's now is from a
    /// window that ended, dropped when it reaches the front.
    order: VecDeque<(K, Instant)>,
    /// Entries of `order` looked at to make room so far: what counts cost.
    #[cfg(test)]
    visited: u64,
}

impl<K: Hash + Eq + Clone> Counts<K> {
    /// Whether `order`'s entry (`key`, `since`) is `key`'s window now.
    fn current(&self, key: &K, since: Instant) -> bool {
        self.by_key
            .get(key)
            .is_some_and(|(start, _)| *start == since)
    }

    /// Drops the front of the order if its window ended by `now` (or it is outdated); says
    /// whether it did.
    fn sweep_front(&mut self, now: Instant, window: Duration) -> bool {
        let Some((key, since)) = self.order.front() else {
            return false;
        };
        #[cfg(test)]
        {
            self.visited += 1;
        }
        if now.duration_since(*since) < window && self.current(key, *since) {
            return false;
        }
        if let Some((key, since)) = self.order.pop_front() {
            if self.current(&key, since) {
                self.by_key.remove(&key);
            }
        }
        true
    }

    /// Forgets the key whose window began first, outdated entries dropped on the way.
    fn evict_oldest(&mut self) {
        while let Some((key, since)) = self.order.pop_front() {
            #[cfg(test)]
            {
                self.visited += 1;
            }
            if self.current(&key, since) {
                self.by_key.remove(&key);
                return;
            }
        }
    }
}

impl<K: Hash + Eq + Clone> Budget<K> {
    /// `budget` counts per `window` per key; a budget of 0 turns the count off.
    pub fn new(budget: u32, window: Duration) -> Budget<K> {
        Budget {
            budget,
            window,
            by_key: Mutex::new(Counts {
                by_key: HashMap::new(),
                order: VecDeque::new(),
                #[cfg(test)]
                visited: 0,
            }),
        }
    }

    /// How long until `key` is within its budget again; `None` while it is.
    pub fn exhausted(&self, key: &K) -> Option<Duration> {
        if self.budget == 0 {
            return None;
        }
        let counts = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let &(since, count) = counts.by_key.get(key)?;
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
        let window = self.window;
        let mut counts = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        for _ in 0..SWEEP_STEPS {
            if !counts.sweep_front(now, window) {
                break;
            }
        }
        match counts.by_key.get_mut(&key) {
            Some((since, count)) if now.duration_since(*since) < window => {
                *count = count.saturating_add(1);
            }
            Some(entry) => {
                *entry = (now, 1);
                counts.order.push_back((key, now));
            }
            None => {
                if counts.by_key.len() >= MAX_KEYS {
                    counts.evict_oldest();
                }
                counts.by_key.insert(key.clone(), (now, 1));
                counts.order.push_back((key, now));
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
    fn a_full_map_forgets_its_oldest_key_not_every_count() {
        // MAX_KEYS keys all within their window, the last one spent: one key more forgets the
        // oldest, and the spent key stays spent (emptying the map would have given it back its
        // budget, to any caller able to bring that many keys). Each new key looks at a handful
        // of entries, counted rather than timed (a sweep looked at every key).
        let budget = Budget::new(3, Duration::from_secs(60));
        for key in 0..MAX_KEYS as u32 - 1 {
            budget.record(key);
        }
        let spent = u32::MAX;
        for _ in 0..3 {
            budget.record(spent);
        }
        assert!(budget.exhausted(&spent).is_some());
        let before = budget.by_key.lock().unwrap().visited;
        for key in 0..1_000 {
            budget.record(u32::MAX - 1 - key);
        }
        assert!(budget.exhausted(&spent).is_some(), "still spent");
        let counts = budget.by_key.lock().unwrap();
        let per_key = (counts.visited - before) / 1_000;
        assert!(per_key <= 4, "entries looked at per new key: {per_key}");
        assert_eq!(counts.by_key.len(), MAX_KEYS);
        assert!(!counts.by_key.contains_key(&999), "the oldest went");
        assert!(counts.by_key.contains_key(&1_000));
        assert!(counts.order.len() <= 2 * MAX_KEYS);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_whose_window_ended_are_dropped_as_others_count() {
        let budget = Budget::new(3, Duration::from_secs(10));
        for key in 0..100u32 {
            budget.record(key);
        }
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..50 {
            budget.record(1_000u32);
        }
        let counts = budget.by_key.lock().unwrap();
        assert_eq!(
            counts.by_key.len(),
            1,
            "two ended windows dropped per count"
        );
        assert_eq!(counts.order.len(), 1);
    }

    #[test]
    fn a_budget_of_zero_counts_nothing() {
        let budget = Budget::new(0, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        budget.record(a);
        assert_eq!(budget.exhausted(&a), None);
        assert!(budget.by_key.lock().unwrap().by_key.is_empty());
    }
}
