//! [`Rejections`]: how many of a client address's tokens the integrator rejected lately, so
//! that made-up tokens cannot be turned into a flood on the integrator. Past a budget per
//! window, the address's connects, joins and refreshes are answered [`RATE_LIMITED`] without
//! a resolution until its window ends.
//!
//! Only rejections count (`token_rejected`): a player whose tokens are good is never slowed.
//! The map is bounded: past [`MAX_ADDRESSES`] it drops the addresses whose window ended, and if
//! every one is still counting, it starts again (an attacker with that many addresses is not
//! stopped by a per-address budget anyway).
//!
//! [`RATE_LIMITED`]: super::protocol::RATE_LIMITED

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Addresses counted at once, at most.
const MAX_ADDRESSES: usize = 100_000;

/// Rejected resolutions per client address, each address at most `budget` per `window`.
#[derive(Debug)]
pub(super) struct Rejections {
    budget: u32,
    window: Duration,
    by_address: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Rejections {
    /// `budget` rejections per `window` per address; a budget of 0 turns the count off.
    pub(super) fn new(budget: u32, window: Duration) -> Rejections {
        Rejections {
            budget,
            window,
            by_address: Mutex::new(HashMap::new()),
        }
    }

    /// How long until `address` may resolve again; `None` while it is within its budget.
    pub(super) fn exhausted(&self, address: IpAddr) -> Option<Duration> {
        if self.budget == 0 {
            return None;
        }
        let by_address = self
            .by_address
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let &(since, count) = by_address.get(&address)?;
        // A window that has run its length is over, as `record` sees it.
        let left = (self.window.checked_sub(since.elapsed())).filter(|left| !left.is_zero())?;
        (count >= self.budget).then_some(left)
    }

    /// Counts one rejected resolution of `address`.
    pub(super) fn record(&self, address: IpAddr) {
        if self.budget == 0 {
            return;
        }
        let now = Instant::now();
        let mut by_address = self
            .by_address
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (since, count) = by_address.entry(address).or_insert((now, 0));
        if now.duration_since(*since) >= self.window {
            (*since, *count) = (now, 0);
        }
        *count = count.saturating_add(1);
        if by_address.len() > MAX_ADDRESSES {
            let window = self.window;
            by_address.retain(|_, (since, _)| now.duration_since(*since) < window);
            if by_address.len() > MAX_ADDRESSES {
                by_address.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_address_past_its_budget_waits_out_its_window_and_others_are_not_held_back() {
        let rejections = Rejections::new(3, Duration::from_secs(60));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert_eq!(rejections.exhausted(a), None);
            rejections.record(a);
        }
        assert_eq!(rejections.exhausted(a), Some(Duration::from_secs(60)));
        assert_eq!(rejections.exhausted(b), None, "another address");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(rejections.exhausted(a), None, "a new window");
        rejections.record(a);
        assert_eq!(rejections.exhausted(a), None, "counted afresh");
    }

    #[test]
    fn a_budget_of_zero_counts_nothing() {
        let rejections = Rejections::new(0, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        rejections.record(a);
        assert_eq!(rejections.exhausted(a), None);
        assert!(rejections.by_address.lock().unwrap().is_empty());
    }
}
