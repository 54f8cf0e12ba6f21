//! The sessions a game server named when it resolved: each is enrolled in the live-session
//! [`Registry`](token_resolver_sessions::Registry), so that a revocation
//! finds it through the registry's indexes, and watched by a task of its own that turns what
//! happens to it into events: a revocation, its token's expiry (then the grace to resolve it
//! again), a re-check that finds it fallen or cannot get an answer for too long.
//!
//! A resolve that names a session already kept is its refresh: the same user replaces the
//! token (the timers start again from the new expiry); another user is refused and the session
//! kept as it was. A session whose token was revoked while it was being resolved is not kept.
//! The sessions are bounded ([`MAX_SESSIONS`]); `DELETE /v1/sessions/{id}` forgets one, with no
//! event.
//!
//! Nothing keeps a session unchecked for long: one whose tokens do not expire within
//! [`max_unchecked`](crate::SidecarConfig::max_unchecked) (no `exp`, or one far ahead) has
//! them resolved again (through the cache) at least that often. And the sessions of a game
//! server that crashed are reclaimed: while no stream reads `GET /v1/events` for
//! [`reclaim_after`](crate::SidecarConfig::reclaim_after), every session kept that long is
//! forgotten, counted in [`SESSIONS_RECLAIMED_TOTAL`], and `resync` journaled, so that a game
//! server coming back with an id from before resolves again the players it still holds. (A
//! game server that restarts sooner leaves its former sessions to end with their tokens.)

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::answer::{check_session, error};
use super::Node;
use token_resolver_sessions::{
    recheck_until_known, sleep_until, Credential, Due, RevocationCursor, RevocationsSince,
    SessionCredentials, SessionSignals, SessionStatus, Timers,
};

/// Sessions kept at once, at most.
pub(crate) const MAX_SESSIONS: usize = 100_000;

/// The shortest [`max_unchecked`](crate::SidecarConfig::max_unchecked) taken.
const MIN_UNCHECKED: Duration = Duration::from_millis(100);

/// Sessions forgotten because no stream read `GET /v1/events` for
/// [`reclaim_after`](crate::SidecarConfig::reclaim_after).
pub const SESSIONS_RECLAIMED_TOTAL: &str = "sidecar_sessions_reclaimed_total";

/// The sessions kept, by the game server's id.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<Arc<str>, Entry>>,
    /// The registry's number for the next session.
    next: AtomicU64,
}

/// One session kept.
#[derive(Debug)]
struct Entry {
    /// Its number in the registry.
    connection: u64,
    /// Whose it is.
    user_id: i64,
    /// What it holds now.
    holdings: SessionCredentials,
    /// Fired by the registry when a revocation names it.
    kick: CancellationToken,
    /// Notified when revocations may have been missed.
    recheck: Arc<Notify>,
    /// Tells its task what it holds after a refresh.
    update: watch::Sender<SessionCredentials>,
    /// Fired when the game server forgets it.
    forget: CancellationToken,
    /// When it was first kept.
    kept_at: tokio::time::Instant,
}

/// What [`keep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// A session not kept before.
    New,
    /// The session's token was replaced.
    Refreshed,
}

/// Why [`keep`] did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The token belongs to another user than the session's.
    Mismatch,
    /// A revocation named the token while it was being resolved.
    RevokedMeanwhile,
    /// [`MAX_SESSIONS`] are kept.
    Full,
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sessions kept now.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Forgets the session `id` if it is still the one numbered `connection`.
    fn remove_if(&self, id: &str, connection: u64) {
        let mut by_id = self.lock();
        if by_id.get(id).is_some_and(|e| e.connection == connection) {
            by_id.remove(id);
        }
    }
}

/// Keeps `credential`, resolved since `cursor`, for the session `id`: a new session, or the
/// refresh of one kept.
pub(crate) fn keep(
    node: &Arc<Node>,
    id: &str,
    credential: Credential,
    cursor: RevocationCursor,
) -> Result<Kept, Refused> {
    let mut by_id = node.sessions.lock();
    if let Some(entry) = by_id.get_mut(id) {
        if !entry.kick.is_cancelled() && !entry.forget.is_cancelled() {
            if entry.user_id != credential.user_id {
                return Err(Refused::Mismatch);
            }
            let mut holdings = entry.holdings.clone();
            holdings.hold(credential);
            match node.registry.update(entry.connection, &holdings, cursor) {
                RevocationsSince::Named => {
                    entry.kick.cancel();
                    return Err(Refused::RevokedMeanwhile);
                }
                RevocationsSince::Unknown => entry.recheck.notify_one(),
                RevocationsSince::Nothing => {}
            }
            entry.holdings = holdings.clone();
            entry.update.send_replace(holdings);
            return Ok(Kept::Refreshed);
        }
        // A session that ended and whose task has not yet gone: the id starts afresh.
        let ended = by_id.remove(id).expect("just found");
        node.registry.remove(ended.connection);
    }
    if by_id.len() >= MAX_SESSIONS {
        return Err(Refused::Full);
    }
    let connection = node.sessions.next.fetch_add(1, Ordering::Relaxed);
    let signals = node.registry.enrol(connection);
    let user_id = credential.user_id;
    let mut holdings = SessionCredentials::default();
    holdings.hold(credential);
    match node.registry.update(connection, &holdings, cursor) {
        RevocationsSince::Named => {
            node.registry.remove(connection);
            return Err(Refused::RevokedMeanwhile);
        }
        RevocationsSince::Unknown => signals.recheck.notify_one(),
        RevocationsSince::Nothing => {}
    }
    let (update, watched) = watch::channel(holdings.clone());
    let forget = CancellationToken::new();
    let id: Arc<str> = Arc::from(id);
    by_id.insert(
        id.clone(),
        Entry {
            connection,
            user_id,
            holdings,
            kick: signals.kick.clone(),
            recheck: signals.recheck.clone(),
            update,
            forget: forget.clone(),
            kept_at: tokio::time::Instant::now(),
        },
    );
    tokio::spawn(watch_session(
        node.clone(),
        id,
        connection,
        signals,
        watched,
        forget,
    ));
    Ok(Kept::New)
}

/// Forgets every session kept since `cutoff` or before, as `DELETE /v1/sessions/{id}` would:
/// how many there were.
fn forget_kept_by(node: &Node, cutoff: tokio::time::Instant) -> usize {
    let mut forgotten = 0;
    node.sessions.lock().retain(|_, entry| {
        if entry.kept_at > cutoff {
            return true;
        }
        node.registry.remove(entry.connection);
        entry.forget.cancel();
        forgotten += 1;
        false
    });
    forgotten
}

/// Reclaims the sessions of game servers that no longer read: whenever no stream has read
/// `GET /v1/events` for `after`, forgets every session kept at least `after` ago and journals
/// `resync` (a session kept later goes on the next round: within twice `after`). Ends with the
/// sidecar.
pub(crate) async fn reclaim(node: Weak<Node>, after: Duration) {
    let (mut readers, cut) = match node.upgrade() {
        Some(node) => (node.events.readers(), node.cut.clone()),
        None => return,
    };
    loop {
        tokio::select! {
            () = cut.cancelled() => return,
            none = readers.wait_for(|open| *open == 0) => if none.is_err() { return },
        }
        tokio::select! {
            () = cut.cancelled() => return,
            () = tokio::time::sleep(after) => {}
            some = readers.wait_for(|open| *open > 0) => {
                if some.is_err() {
                    return;
                }
                continue;
            }
        }
        let Some(node) = node.upgrade() else {
            return;
        };
        let cutoff = tokio::time::Instant::now().checked_sub(after);
        let reclaimed = cutoff.map_or(0, |cutoff| forget_kept_by(&node, cutoff));
        if reclaimed > 0 {
            metrics::counter!(SESSIONS_RECLAIMED_TOTAL).increment(reclaimed as u64);
            tracing::warn!(
                reclaimed,
                after_ms = after.as_millis() as u64,
                "no game server read the events: its sessions are forgotten"
            );
            node.events.publish("resync", json!({}));
        }
    }
}

/// `DELETE /v1/sessions/{id}`: forgets the session (204 whether or not it was kept).
pub(crate) async fn forget(State(node): State<Arc<Node>>, Path(id): Path<String>) -> Response {
    if let Err(message) = check_session(&id) {
        return error(StatusCode::BAD_REQUEST, "invalid_request", message);
    }
    let removed = node.sessions.lock().remove(id.as_str());
    if let Some(entry) = removed {
        node.registry.remove(entry.connection);
        entry.forget.cancel();
    }
    StatusCode::NO_CONTENT.into_response()
}

/// A check of what a session holds, under way beside its other business.
type Check<'a> = Pin<Box<dyn Future<Output = SessionStatus> + Send + 'a>>;

/// Starts a check of `holdings`, paced with every other session's.
fn check<'a>(node: &'a Node, holdings: &SessionCredentials) -> Check<'a> {
    let holdings = holdings.clone();
    Box::pin(async move {
        let grace = node.config.unverified_grace;
        recheck_until_known(&node.resolver, &holdings, &node.rechecks, grace).await
    })
}

/// When `holdings`, resolved or checked just now, must be checked again: in
/// [`max_unchecked`](crate::SidecarConfig::max_unchecked), unless they expire before (then
/// their expiry asks for a refresh, which is a resolve).
fn next_check(node: &Node, holdings: &SessionCredentials) -> Option<tokio::time::Instant> {
    // A bound of zero would check without pause.
    let bound = node.config.max_unchecked.max(MIN_UNCHECKED);
    let expires_in =
        (holdings.earliest_expiry()).map(|exp| exp.remaining(node.resolver.clock_skew()));
    if expires_in.is_some_and(|left| left <= bound) {
        return None;
    }
    tokio::time::Instant::now().checked_add(bound)
}

/// Watches one session until it ends: `revoked` (with its reason) when it ends for anything but
/// the game server forgetting it or the sidecar stopping; `reauth_required` when its token
/// expires.
async fn watch_session(
    node: Arc<Node>,
    id: Arc<str>,
    connection: u64,
    signals: SessionSignals,
    mut holdings: watch::Receiver<SessionCredentials>,
    forget: CancellationToken,
) {
    let config = &node.config;
    let mut timers = Timers::new(
        node.resolver.clock_skew(),
        config.reauth_grace,
        config.revalidate,
    );
    timers.rearm(&holdings.borrow());
    let mut checking: Option<Check<'_>> = None;
    let mut unchecked_until = next_check(&node, &holdings.borrow());
    let reason = loop {
        let next = timers.next();
        tokio::select! {
            biased;
            () = node.cut.cancelled() => break None,
            () = forget.cancelled() => break None,
            () = signals.kick.cancelled() => break Some("revoked"),
            changed = holdings.changed() => {
                if changed.is_err() {
                    break None;
                }
                let now = holdings.borrow_and_update().clone();
                timers.rearm(&now);
                if checking.is_some() {
                    checking = Some(check(&node, &now));
                } else {
                    // A refresh was resolved just now.
                    unchecked_until = next_check(&node, &now);
                }
            }
            () = signals.recheck.notified() => {
                checking.get_or_insert_with(|| check(&node, &holdings.borrow()));
            }
            status = async { checking.as_mut().expect("checking").await }, if checking.is_some() => {
                checking = None;
                match status {
                    SessionStatus::Stands => unchecked_until = next_check(&node, &holdings.borrow()),
                    SessionStatus::Falls => break Some("revoked"),
                    SessionStatus::Unknown(code) => break Some(code.as_str()),
                }
            }
            () = sleep_until(unchecked_until), if unchecked_until.is_some() && checking.is_none() => {
                unchecked_until = None;
                checking = Some(check(&node, &holdings.borrow()));
            }
            () = sleep_until(next), if next.is_some() => match timers.due() {
                Some(Due::Reauth(within)) => node.events.publish(
                    "reauth_required",
                    json!({"session": &*id, "within_ms": within.as_millis() as u64}),
                ),
                Some(Due::Expired) => break Some("session_expired"),
                Some(Due::Revalidate) => {
                    checking.get_or_insert_with(|| check(&node, &holdings.borrow()));
                }
                None => {}
            },
        }
    };
    node.registry.remove(connection);
    node.sessions.remove_if(&id, connection);
    if let Some(reason) = reason {
        let user_id = holdings.borrow().credentials.first().map(|c| c.user_id);
        tracing::info!(session = %id, reason, "session revoked");
        node.events.publish(
            "revoked",
            json!({"session": &*id, "user_id": user_id, "reason": reason}),
        );
    }
}
