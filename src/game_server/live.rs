//! Live sessions: what each session holds (the tokens it resolved, for which endpoint and
//! user, until when), the registry that finds the sessions a revocation names, the task that
//! listens to the resolver's revocations, and the checks a session runs again (a refresh, a
//! re-check after missed revocations, a periodic revalidation).
//!
//! A session keeps its tokens in memory only, as [`AccessToken`]s whose `Debug` shows nothing;
//! the registry keeps their fingerprints, never the tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::handler::Shared;
use super::protocol::encode;
use super::telemetry::REVOKED_TOTAL;
use crate::{AccessToken, Expiry, ResolveError, Revocation, TokenFingerprint, User};

/// Which request a credential came from: a session holds at most one of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    Connect,
    Join,
}

/// A token a session resolved, and what it resolved to.
#[derive(Debug, Clone)]
pub(super) struct Credential {
    pub(super) purpose: Purpose,
    /// The normalised endpoint it was resolved at.
    pub(super) endpoint: String,
    pub(super) token: AccessToken,
    pub(super) fingerprint: TokenFingerprint,
    pub(super) user_id: i64,
    /// When the token stops being valid, when it says (before the clock skew).
    pub(super) expires_at: Option<Expiry>,
}

/// What one session holds: the credentials of its connect and of its join.
#[derive(Debug, Default)]
pub(super) struct Holdings {
    pub(super) credentials: Vec<Credential>,
}

impl Holdings {
    /// Keeps `credential`, in place of any earlier one of the same purpose.
    pub(super) fn hold(&mut self, credential: Credential) {
        self.credentials.retain(|c| c.purpose != credential.purpose);
        self.credentials.push(credential);
    }

    /// The earliest expiry among the credentials, if any says when.
    pub(super) fn earliest_expiry(&self) -> Option<Expiry> {
        self.credentials.iter().filter_map(|c| c.expires_at).min()
    }
}

/// What the registry keeps of a session: enough to tell whether a revocation names it, and the
/// levers that reach its task.
#[derive(Debug)]
struct Registered {
    /// (endpoint, fingerprint, user id) of each credential; no token.
    held: Vec<(String, TokenFingerprint, i64)>,
    /// Fired when a revocation names the session: it says `revoked` and closes.
    kick: CancellationToken,
    /// Notified when revocations may have been missed: it checks its tokens again.
    recheck: Arc<Notify>,
}

/// Every open session of one server that resolved a token, by connection.
#[derive(Debug, Default)]
pub(super) struct Registry {
    sessions: Mutex<HashMap<u64, Registered>>,
}

/// A session's levers, from [`Registry::enrol`].
pub(super) struct Levers {
    pub(super) kick: CancellationToken,
    pub(super) recheck: Arc<Notify>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Registered>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enrols a new session; its levers.
    pub(super) fn enrol(&self, connection: u64) -> Levers {
        let kick = CancellationToken::new();
        let recheck = Arc::new(Notify::new());
        self.lock().insert(
            connection,
            Registered {
                held: Vec::new(),
                kick: kick.clone(),
                recheck: recheck.clone(),
            },
        );
        Levers { kick, recheck }
    }

    /// Records what the session holds now.
    pub(super) fn update(&self, connection: u64, holdings: &Holdings) {
        if let Some(registered) = self.lock().get_mut(&connection) {
            registered.held = holdings
                .credentials
                .iter()
                .map(|c| (c.endpoint.clone(), c.fingerprint.clone(), c.user_id))
                .collect();
        }
    }

    pub(super) fn remove(&self, connection: u64) {
        self.lock().remove(&connection);
    }

    /// Kicks every session `revocation` names (a `Recheck` makes every session that holds a
    /// token check it again instead); how many were kicked now.
    pub(super) fn revoke(&self, revocation: &Revocation) -> usize {
        let sessions = self.lock();
        let mut kicked = 0;
        for registered in sessions.values().filter(|r| !r.held.is_empty()) {
            let named = match revocation {
                Revocation::Token { endpoint, token } => registered
                    .held
                    .iter()
                    .any(|(e, f, _)| e == endpoint && f == token),
                Revocation::User { endpoint, user_id } => registered
                    .held
                    .iter()
                    .any(|(e, _, u)| e == endpoint && u == user_id),
                Revocation::All => true,
                Revocation::Recheck => {
                    registered.recheck.notify_one();
                    false
                }
            };
            if named && !registered.kick.is_cancelled() {
                registered.kick.cancel();
                kicked += 1;
            }
        }
        metrics::counter!(REVOKED_TOTAL).increment(kicked as u64);
        kicked
    }
}

/// Applies the resolver's revocations to the sessions of the server behind `shared` until it
/// is cut or gone; a lag (revocations missed) makes every session check its tokens again.
pub(super) async fn listen(shared: Weak<Shared>) {
    let (mut revocations, cut) = match shared.upgrade() {
        Some(shared) => (shared.resolver.revocations(), shared.cut.clone()),
        None => return,
    };
    loop {
        let received = tokio::select! {
            () = cut.cancelled() => return,
            received = revocations.recv() => received,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match received {
            Ok(revocation) => {
                let kicked = shared.registry.revoke(&revocation);
                if kicked > 0 {
                    tracing::info!(kicked, "sessions revoked");
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "revocations missed: every session checks its tokens"
                );
                shared.registry.revoke(&Revocation::Recheck);
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// Resolves every credential of a session again (through the cache, coalesced); the first
/// error, if any, and the users they resolved to.
pub(super) async fn check_again(
    shared: &Shared,
    holdings: &Holdings,
) -> Result<Vec<Arc<User>>, ResolveError> {
    let mut users = Vec::with_capacity(holdings.credentials.len());
    for credential in &holdings.credentials {
        users.push(
            shared
                .resolver
                .resolve(&credential.endpoint, credential.token.secret())
                .await?,
        );
    }
    Ok(users)
}

/// `{"type":"revoked","error":"token_rejected","message":…}`.
pub(super) fn revoked() -> Vec<u8> {
    encode(&json!({
        "type": "revoked",
        "error": "token_rejected",
        "message": "your access was revoked (a logout, a ban, or the login server said so); log in again",
    }))
}

/// `{"type":"reauth_required","within_ms":N}`.
pub(super) fn reauth_required(within: Duration) -> Vec<u8> {
    let within_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
    encode(&json!({"type": "reauth_required", "within_ms": within_ms}))
}

/// A session's own clock: when its token expires (then `reauth_required`), when the grace to
/// refresh ends (then `session_expired`), and when it revalidates its tokens.
#[derive(Debug)]
pub(super) struct Timers {
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

/// What a session's clock says is due.
pub(super) enum Due {
    /// The token expired: ask for a refresh within this long.
    Reauth(Duration),
    /// No refresh came in time.
    Expired,
    /// Check the tokens again.
    Revalidate,
}

impl Timers {
    pub(super) fn new(
        clock_skew: Duration,
        grace: Duration,
        revalidate: Option<Duration>,
    ) -> Timers {
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
    pub(super) fn next(&self) -> Option<tokio::time::Instant> {
        [self.reauth_at, self.expires_at, self.revalidate_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Sets the clock for what the session holds now (after a connect, a join or a refresh):
    /// a pending grace ends when the new credentials expire later.
    pub(super) fn rearm(&mut self, holdings: &Holdings) {
        let now = tokio::time::Instant::now();
        let reauth_at = holdings
            .earliest_expiry()
            .map(|exp| now + exp.remaining(self.clock_skew));
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
            (Some(every), false) => self.revalidate_at.or(Some(now + every)),
            _ => None,
        };
    }

    /// What is due now, moving the clock past it.
    pub(super) fn due(&mut self) -> Option<Due> {
        let now = tokio::time::Instant::now();
        if self.expires_at.is_some_and(|at| at <= now) {
            self.expires_at = None;
            return Some(Due::Expired);
        }
        if self.reauth_at.is_some_and(|at| at <= now) {
            self.reauth_at = None;
            self.expires_at = Some(now + self.grace);
            return Some(Due::Reauth(self.grace));
        }
        if self.revalidate_at.is_some_and(|at| at <= now) {
            self.revalidate_at = self.revalidate.map(|every| now + every);
            return Some(Due::Revalidate);
        }
        None
    }
}

/// Whether what `holdings` holds still stands: every token resolves again to its user. Only
/// an answer that says no (a rejection, another user) makes it fall; an unreachable API does
/// not, so that an outage does not close sessions.
pub(super) async fn still_stands(shared: &Shared, holdings: &Holdings) -> bool {
    match check_again(shared, holdings).await {
        Ok(users) => users
            .iter()
            .zip(&holdings.credentials)
            .all(|(user, credential)| user.id == credential.user_id),
        Err(e) => !e.is_rejected(),
    }
}
