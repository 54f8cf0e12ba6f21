//! What an entry is, whichever tier holds it: an answer ([`Verdict`]) with its deadline
//! ([`Cached`], [`Deadline`]), and what a look-up finds ([`Lookup`]).

use std::sync::OnceLock;
use std::time::Duration;

use crate::clock::{self, Instant};
use crate::user::Resolution;

/// What the local tier holds for a key.
pub(crate) enum Lookup {
    /// An answer to use as it is.
    Fresh(Verdict),
    /// A user past its freshness, kept to serve if the API turns out to be unavailable.
    Stale(Resolution),
    /// Nothing.
    Absent,
}

/// What an answer says: the user the API vouched for, or the status it rejected the token
/// with. A [`Cached`] answer is one with its deadline.
#[derive(Clone, Debug)]
pub(crate) enum Verdict {
    /// The API vouched for this user.
    User(Resolution),
    /// The API answered 401 or 403.
    Rejected(u16),
}

/// A cached answer, as the tiers hand it around: the user or the rejection, with its deadline.
#[derive(Clone, Debug)]
pub(crate) enum Cached {
    /// The API vouched for this user.
    User {
        /// The user (shared with every caller that gets it) and its token's expiry.
        user: Resolution,
        /// Until when it is fresh: `min(cache_ttl, max-age)` after the answer. With stale
        /// serving on, the entry is kept `serve_stale_for` longer, used only when the API is
        /// unavailable; otherwise it dies here.
        fresh_until: Deadline,
    },
    /// The API answered 401 or 403.
    Rejected {
        /// The status it answered.
        status: u16,
        /// When the entry dies: `negative_cache_ttl` after the answer.
        fresh_until: Deadline,
    },
}

impl Cached {
    /// `user`, fresh for `fresh` from now.
    pub(crate) fn user(user: Resolution, fresh: Duration) -> Cached {
        Cached::User {
            user,
            fresh_until: Deadline::after(fresh),
        }
    }

    /// A rejection with `status`, kept for `fresh` from now.
    pub(crate) fn rejected(status: u16, fresh: Duration) -> Cached {
        Cached::Rejected {
            status,
            fresh_until: Deadline::after(fresh),
        }
    }

    pub(crate) fn fresh_until(&self) -> Deadline {
        match self {
            Cached::User { fresh_until, .. } | Cached::Rejected { fresh_until, .. } => *fresh_until,
        }
    }

    /// What the answer says, without its deadline.
    pub(crate) fn verdict(&self) -> Verdict {
        match self {
            Cached::User { user, .. } => Verdict::User(user.clone()),
            Cached::Rejected { status, .. } => Verdict::Rejected(*status),
        }
    }
}

/// A moment on the library's clock (`clock`) in one word rather than an [`Instant`]'s two:
/// nanoseconds since an origin set before the first deadline this process made, saturating
/// centuries on. Every entry holds one, so its size is paid once per cached token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Deadline(u64);

impl Deadline {
    /// This moment.
    pub(crate) fn now() -> Deadline {
        Deadline::at(clock::now())
    }

    /// `fresh` from now.
    pub(crate) fn after(fresh: Duration) -> Deadline {
        let at = Deadline::at(clock::now()).0;
        Deadline(at.saturating_add(u64::try_from(fresh.as_nanos()).unwrap_or(u64::MAX)))
    }

    /// `instant`, or the origin for an instant before it.
    ///
    /// The origin is an hour (or as much as the monotonic clock allows) before the first
    /// reading, on the monotonic clock rather than a paused one: a runtime with a paused clock
    /// reads the time it was built at plus what its test advanced, so a test's instants may lie
    /// before the first reading another test took, and must not all be clamped to the origin.
    fn at(instant: Instant) -> Deadline {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(|| {
            let now = Instant::from_std(std::time::Instant::now());
            [3600, 60, 1]
                .into_iter()
                .find_map(|secs| now.checked_sub(Duration::from_secs(secs)))
                .unwrap_or(now)
        });
        let since = instant.saturating_duration_since(origin);
        Deadline(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Whether this moment has come.
    pub(crate) fn has_passed(self) -> bool {
        Deadline::now() >= self
    }

    /// `extra` after this moment.
    pub(crate) fn later(self, extra: Duration) -> Deadline {
        let extra = u64::try_from(extra.as_nanos()).unwrap_or(u64::MAX);
        Deadline(self.0.saturating_add(extra))
    }

    /// How long from now this moment is; zero once it has passed.
    pub(crate) fn left(self) -> Duration {
        self.left_after(clock::now())
    }

    /// How long after `now` this moment is; zero once it has passed.
    pub(crate) fn left_after(self, now: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(Deadline::at(now).0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_three_words() {
        // Each of a million entries pays this beside moka's own bookkeeping: the `Arc<User>`
        // and the deadline, with no lifetime stored besides (it was 40 bytes with one, 32
        // with an `Instant`).
        assert_eq!(std::mem::size_of::<Cached>(), 24);
    }

    #[test]
    fn a_deadline_leaves_what_remains_of_its_lifetime() {
        let now = clock::now();
        let left = Deadline::after(Duration::from_secs(60)).left_after(now);
        // `after` reads the clock after `now` did: the deadline is that much later.
        assert!(left <= Duration::from_millis(60_100), "{left:?}");
        assert!(left > Duration::from_secs(59), "{left:?}");
        let later = now + Duration::from_secs(61);
        assert_eq!(
            Deadline::after(Duration::from_secs(60)).left_after(later),
            Duration::ZERO
        );
    }

    #[test]
    fn a_lifetime_too_long_for_the_clock_saturates() {
        let far = Cached::rejected(401, Duration::MAX);
        let five_centuries = Duration::from_secs(500 * 365 * 24 * 3600);
        assert!(far.fresh_until() > Deadline::after(five_centuries));
        assert!(!far.fresh_until().has_passed());
        assert!(far.fresh_until().left_after(clock::now()) > five_centuries);
    }
}
