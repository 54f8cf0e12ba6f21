//! A session's own clock: when its token expires (then it asks for a refresh), when the grace
//! to refresh ends (then it closes), and when it checks its tokens again.

use std::time::Duration;

use crate::credential::SessionCredentials;

/// A session's own clock: when its token expires (then `reauth_required`), when the grace to
/// refresh ends (then `session_expired`), and when it revalidates its tokens.
#[derive(Debug)]
pub struct Timers {
    /// `exp` plus the clock skew of the earliest credential, as an instant; `None` without one.
    reauth_at: Option<tokio::time::Instant>,
    /// The end of the grace after `reauth_required`; `None` unless one was sent.
    expires_at: Option<tokio::time::Instant>,
    /// The next revalidation; `None` when off or nothing is held.
    revalidate_at: Option<tokio::time::Instant>,
    clock_skew: Duration,
    grace: Duration,
    revalidate: Option<Duration>,
}

/// `by` after `now`, at most a century on: durations come from configuration and from the
/// API's `exp`, and one past what an `Instant` holds must not panic a session.
fn later(now: tokio::time::Instant, by: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(by.min(CENTURY)).unwrap_or(now)
}

/// What a session's clock says is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// The token expired: ask for a refresh within this long.
    Reauth(Duration),
    /// No refresh came in time.
    Expired,
    /// Check the tokens again.
    Revalidate,
}

impl Timers {
    /// A clock with nothing set: `clock_skew` is the leeway on every expiry, `grace` the time
    /// given to refresh, `revalidate` how often to check the tokens again (`None`: never).
    pub fn new(clock_skew: Duration, grace: Duration, revalidate: Option<Duration>) -> Timers {
        Timers {
            reauth_at: None,
            expires_at: None,
            revalidate_at: None,
            clock_skew,
            grace,
            revalidate,
        }
    }

    /// The next moment something is due, if any.
    pub fn next(&self) -> Option<tokio::time::Instant> {
        [self.reauth_at, self.expires_at, self.revalidate_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Sets the clock for what the session holds now (after a connect, a join or a refresh):
    /// a pending grace ends when the new credentials expire later.
    pub fn rearm(&mut self, holdings: &SessionCredentials) {
        let now = tokio::time::Instant::now();
        let reauth_at = holdings
            .earliest_expiry()
            .map(|exp| later(now, exp.remaining(self.clock_skew)));
        match reauth_at {
            // Credentials that expire later: a grace under way is over.
            Some(at) if at > now => {
                self.reauth_at = Some(at);
                self.expires_at = None;
            }
            // Still expired, and the grace is under way: it is not started again.
            Some(_) if self.expires_at.is_some() => self.reauth_at = None,
            Some(at) => self.reauth_at = Some(at),
            None => {
                self.reauth_at = None;
                self.expires_at = None;
            }
        }
        self.revalidate_at = match (self.revalidate, holdings.credentials.is_empty()) {
            (Some(every), false) => self.revalidate_at.or(Some(later(now, every))),
            _ => None,
        };
    }

    /// What is due now, moving the clock past it.
    pub fn due(&mut self) -> Option<Due> {
        let now = tokio::time::Instant::now();
        if self.expires_at.is_some_and(|at| at <= now) {
            self.expires_at = None;
            return Some(Due::Expired);
        }
        if self.reauth_at.is_some_and(|at| at <= now) {
            self.reauth_at = None;
            self.expires_at = Some(later(now, self.grace));
            return Some(Due::Reauth(self.grace));
        }
        if self.revalidate_at.is_some_and(|at| at <= now) {
            self.revalidate_at = self.revalidate.map(|every| later(now, every));
            return Some(Due::Revalidate);
        }
        None
    }
}

/// Sleeps until `at` (a session's [`Timers::next`], or any deadline it keeps); `None` never
/// comes, so a `select!` branch on it waits for ever where nothing is due.
pub async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
