//! One player's session, whatever carries it: the loop that reads a message, hands it to the
//! handler and sends the answer, one at a time, within the server's limits; that tells the
//! player when its token expires and waits for a refresh; and that ends the session when the
//! player leaves, falls silent, breaks the framing, is revoked, or the server drains.
//!
//! A transport (TCP lines, WebSocket frames) implements [`Transport`]; everything else about a
//! session is written here once.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Bytes;

use super::handler::{handle, Caller, Reply};
use super::protocol::{
    reauth_required, refusal, revoked, shutdown, BAD_REQUEST, IDLE_TIMEOUT, LINE_TOO_LONG,
    LOGIN_TIMEOUT, SESSION_EXPIRED,
};
use super::state::{Place, Shared};
use super::telemetry::{SESSIONS_OPEN, SESSIONS_TOTAL};
use token_resolver_sessions::{
    recheck_until_known, sleep_until, Due, RevocationsSince, SessionCredentials, SessionStatus,
    Timers,
};

/// What a transport read.
pub(super) enum Incoming {
    /// One message.
    Message(Bytes),
    /// A message over `max_line_bytes`: answered `line_too_long`, then the session ends.
    TooLong,
    /// A frame the protocol has no use for (a WebSocket binary frame): answered
    /// `bad_request`, and the session goes on.
    Unsupported(&'static str),
    /// The peer closed the connection.
    Closed,
}

/// How the session ends its connection (a WebSocket says it with its close code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// The session is over (1000).
    Normal,
    /// The peer sent a message over the cap (1009).
    TooBig,
    /// The server drains (1001).
    GoingAway,
    /// The server is full (1013).
    Busy,
}

/// A connection that carries protocol messages: one message per line, or per frame.
pub(super) trait Transport: Send {
    /// The transport's name in metric labels and logs: `tcp`, `ws`.
    const NAME: &'static str;

    /// The next message, or what happened instead.
    fn recv(&mut self) -> impl Future<Output = io::Result<Incoming>> + Send;

    /// Sends one message (a JSON object, so UTF-8), framed as the transport frames it.
    fn send(&mut self, message: Vec<u8>) -> impl Future<Output = io::Result<()>> + Send;

    /// Ends the connection, `how` says why.
    fn close(self, how: Close) -> impl Future<Output = ()> + Send;
}

/// Serves one session on `transport` until it ends, holding `place` (under `max_connections`
/// and its address's cap) meanwhile.
pub(super) async fn serve<T: Transport>(
    mut transport: T,
    shared: Arc<Shared>,
    caller: Caller,
    place: Place,
) {
    let connection = caller.connection;
    let open = metrics::gauge!(SESSIONS_OPEN, "transport" => T::NAME);
    open.increment(1.0);
    metrics::counter!(SESSIONS_TOTAL, "transport" => T::NAME).increment(1);
    tracing::info!(connection, transport = T::NAME, "connection opened");
    let (outcome, how) = run(&mut transport, &shared, caller).await;
    transport.close(how).await;
    shared.registry.remove(connection);
    shared.leave(connection);
    open.decrement(1.0);
    drop(place);
    tracing::info!(connection, outcome, "connection closed");
}

/// What woke the session up.
enum Wake {
    /// The transport read something (or the idle timeout passed).
    Incoming(Result<io::Result<Incoming>, tokio::time::error::Elapsed>),
    /// Revocations may have been missed: check the tokens again.
    Recheck,
    /// The check under way found what the session's tokens are worth now.
    Checked(SessionStatus),
    /// The session's clock says something is due.
    Timer,
    /// The connection has not logged in within the login timeout.
    LoginTimeout,
}

/// A check of what the session holds, under way beside its messages: it waits its turn and
/// retries an integrator that cannot answer, which must not hold up the player.
type Check<'a> = Pin<Box<dyn Future<Output = SessionStatus> + Send + 'a>>;

/// Starts a check of `holdings` (a snapshot: a check under way when they change is started
/// again).
fn check<'a>(shared: &'a Shared, holdings: &SessionCredentials) -> Check<'a> {
    let holdings = holdings.clone();
    Box::pin(async move {
        let grace = shared.config.unverified_grace;
        recheck_until_known(&shared.resolver, &holdings, &shared.rechecks, grace).await
    })
}

/// The message loop; how it ended, and how to close.
async fn run<T: Transport>(
    transport: &mut T,
    shared: &Shared,
    caller: Caller,
) -> (&'static str, Close) {
    let connection = caller.connection;
    let config = &shared.config;
    let signals = shared.registry.enrol(connection);
    let mut holdings = SessionCredentials::default();
    let mut timers = Timers::new(
        shared.resolver.clock_skew(),
        config.reauth_grace,
        config.revalidate,
    );
    // Silence is counted from the last message, not from the last wake-up: timers and
    // rechecks do not keep a silent client connected.
    let mut heard_at = tokio::time::Instant::now();
    // Counted from accept: messages before a login do not extend it.
    let mut login_by = Some(heard_at + config.login_timeout);
    let mut checking: Option<Check<'_>> = None;
    loop {
        let next = timers.next();
        let silence_left = config.idle_timeout.saturating_sub(heard_at.elapsed());
        let wake = tokio::select! {
            biased;
            () = shared.cut.cancelled() => return ("cut", Close::Normal),
            () = signals.kick.cancelled() => {
                let _ = send(transport, revoked(), shared).await;
                return ("revoked", Close::Normal);
            }
            () = shared.draining.cancelled() => {
                let _ = send(transport, shutdown(config.shutdown_retry_after), shared).await;
                return ("shutdown", Close::GoingAway);
            }
            () = sleep_until(login_by), if login_by.is_some() => Wake::LoginTimeout,
            () = signals.recheck.notified() => Wake::Recheck,
            status = async { checking.as_mut().expect("checking").await }, if checking.is_some() => {
                checking = None;
                Wake::Checked(status)
            }
            () = sleep_until(next), if next.is_some() => Wake::Timer,
            incoming = tokio::time::timeout(silence_left, transport.recv()) => {
                heard_at = tokio::time::Instant::now();
                Wake::Incoming(incoming)
            }
        };
        let incoming = match wake {
            Wake::Incoming(incoming) => incoming,
            Wake::Recheck => {
                checking.get_or_insert_with(|| check(shared, &holdings));
                continue;
            }
            Wake::Checked(status) => match checked(transport, shared, status).await {
                Some(end) => return end,
                None => continue,
            },
            Wake::LoginTimeout => {
                let msg = format!(
                    "no connect within {:?} of connecting; closing",
                    config.login_timeout
                );
                let _ = send(transport, refusal(LOGIN_TIMEOUT, &msg, false), shared).await;
                return (LOGIN_TIMEOUT, Close::Normal);
            }
            Wake::Timer => {
                match on_timer(transport, shared, &mut timers).await {
                    Timed::End(why, how) => return (why, how),
                    Timed::Check => {
                        checking.get_or_insert_with(|| check(shared, &holdings));
                    }
                    Timed::Nothing => {}
                }
                continue;
            }
        };
        let held_before = holdings.credentials.len();
        let reply = match on_incoming(transport, shared, caller, &mut holdings, incoming).await {
            Next::Answer(reply, meanwhile) => {
                if meanwhile || (checking.is_some() && held_before > 0) {
                    // What the session holds changed, or revocations may have been missed
                    // while it was handled: check what it holds now.
                    checking = Some(check(shared, &holdings));
                }
                reply
            }
            Next::Skip => continue,
            Next::End(why, how) => return (why, how),
        };
        if reply.admitted {
            login_by = None;
        }
        timers.rearm(&holdings);
        if send(transport, reply.message, shared).await.is_err() {
            return ("write_failed", Close::Normal);
        }
        if reply.close {
            return ("refused", Close::Normal);
        }
    }
}

/// What the loop does next with what the transport read.
enum Next {
    /// Send this answer; `true` when revocations may have been missed while it was worked out
    /// (the session checks its tokens again).
    Answer(Reply, bool),
    /// Nothing to answer (a blank line).
    Skip,
    /// The session is over: why, and how to close.
    End(&'static str, Close),
}

/// Works out the answer to what the transport read: a message handled (recording what the
/// session holds then), a refusal, or the end of the session.
async fn on_incoming<T: Transport>(
    transport: &mut T,
    shared: &Shared,
    caller: Caller,
    holdings: &mut SessionCredentials,
    incoming: Result<io::Result<Incoming>, tokio::time::error::Elapsed>,
) -> Next {
    let config = &shared.config;
    match incoming {
        Err(_) => {
            let msg = format!("no message within {:?}; closing", config.idle_timeout);
            let _ = send(transport, refusal(IDLE_TIMEOUT, &msg, false), shared).await;
            Next::End(IDLE_TIMEOUT, Close::Normal)
        }
        Ok(Err(_)) | Ok(Ok(Incoming::Closed)) => Next::End("closed", Close::Normal),
        Ok(Ok(Incoming::TooLong)) => {
            let msg = format!(
                "a message is longer than {} bytes; closing",
                config.max_line_bytes
            );
            let _ = send(transport, refusal(LINE_TOO_LONG, &msg, false), shared).await;
            Next::End(LINE_TOO_LONG, Close::TooBig)
        }
        Ok(Ok(Incoming::Unsupported(why))) => {
            Next::Answer(refusal(BAD_REQUEST, why, false).into(), false)
        }
        Ok(Ok(Incoming::Message(message))) if message.iter().all(u8::is_ascii_whitespace) => {
            Next::Skip
        }
        // A message in progress finishes while the server drains; only a cut stops it.
        Ok(Ok(Incoming::Message(message))) => {
            let since = shared.registry.cursor();
            let reply = tokio::select! {
                biased;
                () = shared.cut.cancelled() => return Next::End("cut", Close::Normal),
                reply = handle(shared, caller, holdings, T::NAME, &message) => reply,
            };
            // A revocation that came while the message was resolved did not find it.
            match shared.registry.update(caller.connection, holdings, since) {
                RevocationsSince::Nothing => Next::Answer(reply, false),
                RevocationsSince::Unknown => Next::Answer(reply, true),
                RevocationsSince::Named => {
                    let _ = send(transport, revoked(), shared).await;
                    Next::End("revoked", Close::Normal)
                }
            }
        }
    }
}

/// What a session's timer found due.
enum Timed {
    /// Nothing more to do.
    Nothing,
    /// Check the tokens again.
    Check,
    /// The session is over: why, and how to close.
    End(&'static str, Close),
}

/// What a session's timer found due, done (but a revalidation, which the loop starts).
async fn on_timer<T: Transport>(transport: &mut T, shared: &Shared, timers: &mut Timers) -> Timed {
    match timers.due() {
        None => Timed::Nothing,
        Some(Due::Reauth(within)) => match send(transport, reauth_required(within), shared).await {
            Ok(()) => Timed::Nothing,
            Err(_) => Timed::End("write_failed", Close::Normal),
        },
        Some(Due::Expired) => {
            let msg = "no refresh came in time after reauth_required; closing";
            let _ = send(transport, refusal(SESSION_EXPIRED, msg, false), shared).await;
            Timed::End(SESSION_EXPIRED, Close::Normal)
        }
        Some(Due::Revalidate) => Timed::Check,
    }
}

/// Acts on what a check found: `Some` with how the session ends (revoked; or unverified past
/// the server's grace), `None` to go on.
async fn checked<T: Transport>(
    transport: &mut T,
    shared: &Shared,
    status: SessionStatus,
) -> Option<(&'static str, Close)> {
    match status {
        SessionStatus::Stands => None,
        SessionStatus::Falls => {
            let _ = send(transport, revoked(), shared).await;
            Some(("revoked", Close::Normal))
        }
        SessionStatus::Unknown(code) => {
            let msg =
                "the login server could not confirm your access for too long; reconnect later";
            let _ = send(transport, refusal(code.as_str(), msg, true), shared).await;
            Some(("unverified", Close::Normal))
        }
    }
}

/// Sends one message within `write_timeout`: a client that does not read is let go.
async fn send<T: Transport>(
    transport: &mut T,
    message: Vec<u8>,
    shared: &Shared,
) -> io::Result<()> {
    let timeout = shared.config.write_timeout;
    match tokio::time::timeout(timeout, transport.send(message)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client does not read its answers",
        )),
    }
}
