//! What was revoked lately, and in what order: the [`RevocationLog`] that a look-up begun
//! before a revocation is checked against, so that its answer is neither cached nor handed to
//! anyone once the revocation has landed.
//!
//! Every revocation applied here (made on this node or received from another) gets the next
//! sequence number, and the log keeps, for each thing revoked (a token, a user, a session, or
//! everything), the number of its latest revocation. A look-up takes a [`Mark`] when it begins;
//! when its answer comes, [`RevocationLog::revoked_since`] says whether anything it names was
//! revoked after that mark. The usual answer (no revocation at all since the mark) is one
//! atomic load.
//!
//! The log forgets what is older than its horizon, longer than any look-up can last (the
//! resolver's deadlines): a mark older than what it still knows counts as revoked, so
//! forgetting can only ever make a look-up start again, never admit what was revoked.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::clock::{self, Instant};

/// Where the log stood when a look-up began: the number of revocations applied so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Mark(u64);

/// One thing a revocation names, by hashes that stay the same on every node (endpoints by
/// their URL's hash; tokens by the fingerprint the revocation itself carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Named {
    /// One token at one endpoint.
    Token { endpoint: u64, token: u64 },
    /// Every token of one user at one endpoint.
    User { endpoint: u64, user: i64 },
    /// Every token of one of the integrator's sessions at one endpoint.
    Session { endpoint: u64, session: u64 },
}

/// The revocations applied lately, by what they named.
pub(crate) struct RevocationLog {
    /// Revocations applied so far: what a [`Mark`] reads, without the lock.
    applied: AtomicU64,
    recent: Mutex<Recent>,
    /// How long a revocation is remembered: longer than any look-up lasts.
    horizon: Duration,
}

#[derive(Default)]
struct Recent {
    /// The sequence number of the latest revocation of each thing named.
    latest: HashMap<Named, u64>,
    /// The latest revocation of everything, 0 for none.
    all: u64,
    /// Every remembered revocation, oldest first, to forget them past the horizon.
    order: VecDeque<(Instant, Option<Named>, u64)>,
    /// Revocations numbered below this were forgotten.
    floor: u64,
}

impl RevocationLog {
    /// A log that remembers each revocation for `horizon`.
    pub(crate) fn new(horizon: Duration) -> RevocationLog {
        RevocationLog {
            applied: AtomicU64::new(0),
            recent: Mutex::new(Recent {
                floor: 1,
                ..Recent::default()
            }),
            horizon,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the log stands now: take it before a look-up begins.
    pub(crate) fn mark(&self) -> Mark {
        Mark(self.applied.load(Ordering::Acquire))
    }

    /// Records a revocation of `named`, or of everything for `None`.
    pub(crate) fn record(&self, named: Option<Named>) {
        let now = clock::now();
        let mut recent = self.lock();
        let seq = self.applied.load(Ordering::Relaxed) + 1;
        match named {
            Some(named) => {
                recent.latest.insert(named, seq);
            }
            None => recent.all = seq,
        }
        recent.order.push_back((now, named, seq));
        while let Some(&(at, named, old)) = recent.order.front() {
            if now.duration_since(at) < self.horizon {
                break;
            }
            recent.order.pop_front();
            if let Some(named) = named {
                if recent.latest.get(&named) == Some(&old) {
                    recent.latest.remove(&named);
                }
            }
            recent.floor = old + 1;
        }
        // Published after the entry, under the lock: a mark that sees `seq` finds it.
        self.applied.store(seq, Ordering::Release);
    }

    /// Whether anything `names` gives was revoked after `since` (everything included). A mark
    /// older than what the log remembers counts as revoked.
    pub(crate) fn revoked_since(
        &self,
        since: Mark,
        names: impl IntoIterator<Item = Named>,
    ) -> bool {
        if self.applied.load(Ordering::Acquire) == since.0 {
            return false;
        }
        let recent = self.lock();
        since.0 + 1 < recent.floor
            || recent.all > since.0
            || names
                .into_iter()
                .any(|named| recent.latest.get(&named).is_some_and(|&seq| seq > since.0))
    }

    /// Revocations remembered now.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.lock().order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: Named = Named::User {
        endpoint: 1,
        user: 7,
    };
    const BOB: Named = Named::User {
        endpoint: 1,
        user: 8,
    };

    #[test]
    fn only_a_revocation_after_the_mark_of_what_it_names_counts() {
        let log = RevocationLog::new(Duration::from_secs(60));
        log.record(Some(ALICE));
        let mark = log.mark();
        assert!(!log.revoked_since(mark, [ALICE]), "revoked before the mark");
        log.record(Some(BOB));
        assert!(!log.revoked_since(mark, [ALICE]), "someone else");
        assert!(log.revoked_since(mark, [ALICE, BOB]));
        log.record(Some(ALICE));
        assert!(log.revoked_since(mark, [ALICE]));
        assert!(!log.revoked_since(log.mark(), [ALICE, BOB]));
    }

    #[test]
    fn revoking_everything_names_everyone() {
        let log = RevocationLog::new(Duration::from_secs(60));
        let mark = log.mark();
        log.record(None);
        assert!(log.revoked_since(mark, [ALICE]));
        assert!(log.revoked_since(mark, []));
        assert!(!log.revoked_since(log.mark(), [ALICE]));
    }

    #[test]
    fn a_mark_older_than_the_horizon_counts_as_revoked_and_the_log_stays_bounded() {
        let log = RevocationLog::new(Duration::ZERO);
        let old = log.mark();
        for user in 0..1000 {
            log.record(Some(Named::User { endpoint: 1, user }));
        }
        assert!(log.remembered() <= 1, "{} remembered", log.remembered());
        // BOB's revocation was forgotten, but a look-up that began before it cannot tell: it
        // starts again rather than be admitted.
        assert!(log.revoked_since(old, [BOB]));
        assert!(!log.revoked_since(log.mark(), [BOB]));
    }
}
