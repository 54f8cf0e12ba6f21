//! Asking again whether what a session holds still stands: when revocations may have been
//! missed (the shared tier's stream was lost past what it keeps, or this server's listener fell
//! behind), or on a periodic revalidation.
//!
//! Only an answer counts. A token the API now rejects, or that names another user, makes the
//! session fall; an API that cannot be asked (`overloaded`, `auth_timeout`,
//! `auth_unavailable`) says nothing, and neither does the resolver's stale answer (with
//! `serve_stale_for`, [`Resolution::is_stale`](token_resolver::Resolution::is_stale): what the API said before it
//! became unreachable, not that the token still stands), so the check is tried again, with a
//! growing pause, until an answer comes. How long a session may stay meanwhile is the server's
//! setting (`unverified grace`): by default as long as the outage lasts, so that an
//! integrator's outage does not close every game; with a grace, a session still unverified
//! after it is closed.
//!
//! Re-checks after a re-sync can name every session at once: they go through a [`Pacer`], a
//! bounded rate shared by the server's sessions, each at a random point of its turn, so that
//! they reach the integrator as a steady trickle under the resolver's slot limit, not a
//! stampede.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::credential::SessionCredentials;
use token_resolver::{ErrorCode, Resolver};

/// Longest pause between two tries of a check the API could not answer.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);

/// Whether a session may stay, as a re-check of its credentials found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    /// Every token still resolves to its user.
    Stands,
    /// A token was rejected, or resolves to another user: the session is revoked.
    Falls,
    /// The API could not be asked (or answered only from the resolver's stale answers); the
    /// code says why.
    Unknown(ErrorCode),
}

/// One look at the credentials a session holds (`holdings`), each token resolved again
/// (through the cache, coalesced). A token past its expiry is not asked about: it is the grace
/// timer's business, and its session may still send a refresh.
pub async fn check_credentials(
    resolver: &Resolver,
    holdings: &SessionCredentials,
) -> SessionStatus {
    let clock_skew = resolver.clock_skew();
    let mut unknown = None;
    for credential in &holdings.credentials {
        if credential
            .expires_at
            .is_some_and(|exp| exp.has_passed(clock_skew))
        {
            continue;
        }
        let token = credential.token.secret();
        match resolver.resolve_in_full(&credential.endpoint, token).await {
            Ok(user) if user.id != credential.user_id => return SessionStatus::Falls,
            // Served from the cache because the API could not be reached: not a confirmation.
            Ok(user) if user.is_stale() => unknown = Some(ErrorCode::AuthUnavailable),
            Ok(_) => {}
            Err(e) if e.is_retryable() => unknown = Some(e.code()),
            Err(_) => return SessionStatus::Falls,
        }
    }
    unknown.map_or(SessionStatus::Stands, SessionStatus::Unknown)
}

/// Checks `holdings` until an answer comes, each try on a turn of `pacer` and the next after a
/// growing, jittered pause; [`SessionStatus::Unknown`] only once `grace` has passed without one
/// (never without a grace).
pub async fn recheck_until_known(
    resolver: &Resolver,
    holdings: &SessionCredentials,
    pacer: &Pacer,
    grace: Option<Duration>,
) -> SessionStatus {
    let started = Instant::now();
    let mut pause = Duration::from_millis(500);
    loop {
        pacer.turn().await;
        let found = check_credentials(resolver, holdings).await;
        if !matches!(found, SessionStatus::Unknown(_)) {
            return found;
        }
        if grace.is_some_and(|grace| started.elapsed() >= grace) {
            return found;
        }
        tokio::time::sleep(pause.mul_f64(0.5 + fastrand::f64())).await;
        pause = (pause * 2).min(MAX_RETRY_PAUSE);
    }
}

/// A rate shared by the checks of one server: at most `per_second` begin each second, each at
/// a random point of its turn.
#[derive(Debug)]
pub struct Pacer {
    /// One turn's length.
    every: Duration,
    /// When the next turn begins.
    next: Mutex<Instant>,
}

impl Pacer {
    /// At most `per_second` turns a second (at least one).
    pub fn new(per_second: u32) -> Pacer {
        Pacer {
            every: Duration::from_secs(1) / per_second.max(1),
            next: Mutex::new(Instant::now()),
        }
    }

    /// Waits for this caller's turn.
    pub async fn turn(&self) {
        let at = {
            let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
            let at = (*next).max(Instant::now());
            *next = at + self.every;
            at
        };
        tokio::time::sleep_until(at + self.every.mul_f64(fastrand::f64())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_pacer_lets_through_at_most_its_rate() {
        let pacer = std::sync::Arc::new(Pacer::new(10));
        let started = Instant::now();
        let turns: Vec<_> = (0..20)
            .map(|_| {
                let pacer = pacer.clone();
                tokio::spawn(async move {
                    pacer.turn().await;
                    started.elapsed()
                })
            })
            .collect();
        let mut at = Vec::new();
        for turn in turns {
            at.push(turn.await.unwrap());
        }
        at.sort();
        // Twenty turns at ten a second: the last no sooner than 1.9 s in, none before 0.
        assert!(at[19] >= Duration::from_millis(1900), "{at:?}");
        assert!(at[19] < Duration::from_millis(2100), "{at:?}");
        let in_the_first_second = at.iter().filter(|t| **t < Duration::from_secs(1)).count();
        assert!(in_the_first_second <= 10, "{at:?}");
    }
}
