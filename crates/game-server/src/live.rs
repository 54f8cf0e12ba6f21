//! Live sessions: what each session holds (the tokens it resolved, for which endpoint and
//! user, until when), the registry that finds the sessions a revocation names, the task that
//! listens to the resolver's revocations, and the checks a session runs again (a refresh, a
//! re-check after missed revocations, a periodic revalidation).
//!
//! A session keeps its tokens in memory only, as [`AccessToken`]s whose `Debug` shows nothing;
//! the registry keeps their fingerprints, never the tokens.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::protocol::encode;
use super::telemetry::REVOKED_TOTAL;
use token_resolver::{AccessToken, Expiry, Resolver, Revocation, TokenFingerprint};

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

/// Every open session of one server that resolved a token, by connection, and the latest
/// revocations, so that a session that was resolving while one came can still find it.
#[derive(Debug, Default)]
pub(super) struct Registry {
    inner: Mutex<Sessions>,
}

#[derive(Debug, Default)]
struct Sessions {
    by_connection: HashMap<u64, Registered>,
    /// The last [`RECENT`] revocations, by sequence number.
    recent: VecDeque<(u64, Revocation)>,
    /// The sequence number the next revocation gets.
    next: u64,
}

/// How many revocations the registry remembers for sessions that were resolving meanwhile.
const RECENT: usize = 256;

/// A session's levers, from [`Registry::enrol`].
pub(super) struct Levers {
    pub(super) kick: CancellationToken,
    pub(super) recheck: Arc<Notify>,
}

/// Where the registry's revocations stood: taken before a message is handled, given back to
/// [`Registry::update`] after.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark(u64);

/// What came while a session was handling a message, by [`Registry::update`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Meanwhile {
    /// No revocation that names what the session holds.
    Nothing,
    /// A revocation named it: the session is revoked.
    Named,
    /// More revocations than the registry remembers, or a re-check for everyone: the session
    /// checks its tokens again.
    Unknown,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Sessions> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enrols a new session; its levers.
    pub(super) fn enrol(&self, connection: u64) -> Levers {
        let kick = CancellationToken::new();
        let recheck = Arc::new(Notify::new());
        self.lock().by_connection.insert(
            connection,
            Registered {
                held: Vec::new(),
                kick: kick.clone(),
                recheck: recheck.clone(),
            },
        );
        Levers { kick, recheck }
    }

    /// Where revocations stand now.
    pub(super) fn mark(&self) -> Mark {
        Mark(self.lock().next)
    }

    /// Records what the session holds now, and says whether a revocation since `since` names
    /// it: one that came while the message was handled found the session's old holdings.
    pub(super) fn update(&self, connection: u64, holdings: &Holdings, since: Mark) -> Meanwhile {
        let mut sessions = self.lock();
        let held: Vec<_> = holdings
            .credentials
            .iter()
            .map(|c| (c.endpoint.clone(), c.fingerprint.clone(), c.user_id))
            .collect();
        let meanwhile = if held.is_empty() || sessions.next == since.0 {
            Meanwhile::Nothing
        } else if sessions
            .recent
            .front()
            .is_none_or(|(seq, _)| *seq > since.0)
        {
            Meanwhile::Unknown
        } else {
            let came = || {
                let recent = sessions.recent.iter();
                let came = recent.filter(|(seq, _)| *seq >= since.0);
                came.map(|(_, revocation)| names(revocation, &held))
            };
            if came().any(|named| named == Some(true)) {
                Meanwhile::Named
            } else if came().any(|named| named.is_none()) {
                Meanwhile::Unknown
            } else {
                Meanwhile::Nothing
            }
        };
        if let Some(registered) = sessions.by_connection.get_mut(&connection) {
            registered.held = held;
        }
        meanwhile
    }

    pub(super) fn remove(&self, connection: u64) {
        self.lock().by_connection.remove(&connection);
    }

    /// Kicks every session `revocation` names (a `Recheck` makes every session that holds a
    /// token check it again instead); how many were kicked now.
    pub(super) fn revoke(&self, revocation: &Revocation) -> usize {
        let mut sessions = self.lock();
        let seq = sessions.next;
        sessions.next += 1;
        if sessions.recent.len() == RECENT {
            sessions.recent.pop_front();
        }
        sessions.recent.push_back((seq, revocation.clone()));
        let mut kicked = 0;
        for registered in sessions.by_connection.values() {
            if registered.held.is_empty() {
                continue;
            }
            match names(revocation, &registered.held) {
                Some(true) if !registered.kick.is_cancelled() => {
                    registered.kick.cancel();
                    kicked += 1;
                }
                Some(_) => {}
                None => registered.recheck.notify_one(),
            }
        }
        metrics::counter!(REVOKED_TOTAL).increment(kicked as u64);
        kicked
    }
}

/// Whether `revocation` names one of the credentials `held`; `None` for a re-check, which names
/// nobody and asks everybody to check again, and for a kind of revocation this server does not
/// know yet, which is treated the same way.
fn names(revocation: &Revocation, held: &[(String, TokenFingerprint, i64)]) -> Option<bool> {
    Some(match revocation {
        Revocation::Token { endpoint, token } => {
            held.iter().any(|(e, f, _)| e == endpoint && f == token)
        }
        Revocation::User { endpoint, user_id } => {
            held.iter().any(|(e, _, u)| e == endpoint && u == user_id)
        }
        Revocation::All => true,
        _ => return None,
    })
}

/// Applies `revocations` to the sessions in `registry` until the server is `cut` or gone; a lag
/// (revocations missed) makes every session check its tokens again.
pub(super) async fn listen(
    mut revocations: broadcast::Receiver<Revocation>,
    cut: CancellationToken,
    registry: Weak<Registry>,
) {
    loop {
        let received = tokio::select! {
            () = cut.cancelled() => return,
            received = revocations.recv() => received,
        };
        let Some(registry) = registry.upgrade() else {
            return;
        };
        match received {
            Ok(revocation) => {
                let kicked = registry.revoke(&revocation);
                if kicked > 0 {
                    tracing::info!(kicked, "sessions revoked");
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "revocations missed: every session checks its tokens"
                );
                registry.revoke(&Revocation::Recheck);
            }
            Err(RecvError::Closed) => return,
        }
    }
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

/// `by` after `now`, at most a century on: durations come from configuration and from the
/// API's `exp`, and one past what an `Instant` holds must not panic a session.
fn later(now: tokio::time::Instant, by: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(by.min(CENTURY)).unwrap_or(now)
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
    pub(super) fn due(&mut self) -> Option<Due> {
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

/// Whether what `holdings` holds still stands: every token resolves again (through the cache,
/// coalesced) to its user. Only an answer that says no (a rejection, another user) makes it
/// fall; an unreachable API does not, so that an outage does not close sessions. A token past
/// its expiry is not asked about: it is the grace timer's business, and its session may still
/// send a refresh.
pub(super) async fn still_stands(resolver: &Resolver, holdings: &Holdings) -> bool {
    let clock_skew = resolver.clock_skew();
    for credential in &holdings.credentials {
        if credential
            .expires_at
            .is_some_and(|exp| exp.has_passed(clock_skew))
        {
            continue;
        }
        let token = credential.token.secret();
        match resolver.resolve(&credential.endpoint, token).await {
            Ok(user) if user.id != credential.user_id => return false,
            Err(e) if e.is_rejected() => return false,
            Ok(_) | Err(_) => {}
        }
    }
    true
}
