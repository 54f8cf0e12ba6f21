//! [`Stats`], what a resolver did so far, and the counters behind it, striped so that
//! resolutions on different threads never write to the same cache line.
//!
//! One shared `AtomicU64` bumped on every hit makes two threads trade its cache line on every
//! hit, and takes away most of what a second thread adds. Each thread here bumps its own
//! stripe; a read sums the stripes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Counters of what a resolver did since it was built; see [`Resolver::stats`](crate::Resolver::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Resolutions answered with a user from the cache.
    pub hits: u64,
    /// Resolutions that found nothing cached and made the upstream call themselves.
    pub misses: u64,
    /// Resolutions that found nothing cached and waited for another's upstream call.
    pub coalesced: u64,
    /// Resolutions refused from the cache because the token was rejected recently.
    pub negative_hits: u64,
    /// HTTP requests sent upstream (retries included).
    pub upstream_calls: u64,
    /// Upstream requests that got no usable answer (transport error, or a status other than
    /// 200, 401 and 403, or a bad body).
    pub upstream_errors: u64,
    /// Entries in the cache now (users and rejections). An entry that expired before its
    /// cache's time to live (an answer with a shorter `max-age`) is no longer served but may be
    /// counted until then.
    pub entries: u64,
    /// Resolutions answered with a stale user (past its freshness, not its expiry) because the
    /// API was unavailable.
    pub stale_served: u64,
    /// Resolutions that failed fast because their API's circuit breaker was open.
    pub short_circuited: u64,
    /// Local misses answered by the shared Redis tier (feature `redis`).
    pub shared_hits: u64,
    /// Shared tier operations that failed or timed out; the resolutions went on without it.
    pub shared_errors: u64,
}

/// What is counted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Hits,
    Misses,
    Coalesced,
    NegativeHits,
    UpstreamCalls,
    UpstreamErrors,
    StaleServed,
}

const COUNTERS: usize = Counter::StaleServed as usize + 1;

/// Stripes owned by one thread each: the first threads to count take one each, alone.
const OWNED: usize = 16;

/// Stripes per counter set: the owned ones, then a few that every later thread shares.
const STRIPES: usize = OWNED + 4;

/// A set of counters, each split into per-thread stripes.
#[derive(Default)]
pub(crate) struct Counters {
    stripes: [CachePadded<[AtomicU64; COUNTERS]>; STRIPES],
}

impl Counters {
    /// Adds one to `counter`, on this thread's stripe. A thread that owns its stripe alone
    /// (one of the first [`OWNED`] threads to count) adds with a plain load and store: it is the
    /// stripe's only writer, and a locked add is a noticeable part of a cache hit. Later threads share
    /// the remaining stripes and add atomically.
    #[inline(always)]
    pub(crate) fn bump(&self, counter: Counter) {
        let (stripe, owned) = stripe();
        let cell = &self.stripes[stripe][counter as usize];
        if owned {
            cell.store(cell.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        } else {
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The count so far, summed over the stripes.
    pub(crate) fn get(&self, counter: Counter) -> u64 {
        self.stripes
            .iter()
            .map(|stripe| stripe[counter as usize].load(Ordering::Relaxed))
            .sum()
    }
}

/// This thread's stripe, handed out in turn as threads first count, and whether this thread
/// is the only one ever given it. Kept in a constant-initialised thread local: reading it is
/// one load, with no lazy-initialisation state to check on every count.
#[inline(always)]
fn stripe() -> (usize, bool) {
    thread_local! {
        static STRIPE: Cell<Option<(usize, bool)>> = const { Cell::new(None) };
    }
    STRIPE.with(|cell| match cell.get() {
        Some(stripe) => stripe,
        None => {
            let stripe = next_stripe();
            cell.set(Some(stripe));
            stripe
        }
    })
}

/// The stripe for a thread that has none yet.
#[cold]
fn next_stripe() -> (usize, bool) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    if n < OWNED {
        (n, true)
    } else {
        (OWNED + n % (STRIPES - OWNED), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up_per_counter() {
        let counters = Counters::default();
        std::thread::scope(|scope| {
            for _ in 0..(STRIPES + 3) {
                scope.spawn(|| {
                    for _ in 0..1_000 {
                        counters.bump(Counter::Hits);
                    }
                    counters.bump(Counter::Misses);
                });
            }
        });
        assert_eq!(counters.get(Counter::Hits), (STRIPES as u64 + 3) * 1_000);
        assert_eq!(counters.get(Counter::Misses), STRIPES as u64 + 3);
        assert_eq!(counters.get(Counter::Coalesced), 0);
    }

    #[test]
    fn a_thread_keeps_its_stripe() {
        let mine = stripe();
        assert!(mine.0 < STRIPES);
        assert!((0..100).all(|_| stripe() == mine));
    }
}
