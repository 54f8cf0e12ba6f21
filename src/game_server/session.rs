//! One player's session, whatever carries it: the loop that reads a message, hands it to the
//! handler and sends the answer, one at a time, within the server's limits, and that ends the
//! session when the player leaves, falls silent, breaks the framing, or the server drains.
//!
//! A transport (TCP lines, WebSocket frames) implements [`Transport`]; everything else about a
//! session is written here once.

use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::body::Bytes;
use tokio::sync::OwnedSemaphorePermit;

use super::handler::{handle, Shared};
use super::protocol::{refusal, shutdown, BAD_REQUEST, IDLE_TIMEOUT, LINE_TOO_LONG};
use super::telemetry::{SESSIONS_OPEN, SESSIONS_TOTAL};

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

    /// Sends one message (a JSON object), framed as the transport frames it.
    fn send(&mut self, message: &[u8]) -> impl Future<Output = io::Result<()>> + Send;

    /// Ends the connection, `how` says why.
    fn close(self, how: Close) -> impl Future<Output = ()> + Send;
}

/// Serves one session on `transport` until it ends, holding `slot` (a place under
/// `max_connections`) meanwhile.
pub(super) async fn serve<T: Transport>(
    mut transport: T,
    shared: Arc<Shared>,
    connection: u64,
    slot: OwnedSemaphorePermit,
) {
    let open = metrics::gauge!(SESSIONS_OPEN, "transport" => T::NAME);
    open.increment(1.0);
    metrics::counter!(SESSIONS_TOTAL, "transport" => T::NAME).increment(1);
    tracing::info!(connection, transport = T::NAME, "connection opened");
    let (outcome, how) = run(&mut transport, &shared, connection).await;
    transport.close(how).await;
    shared.leave(connection);
    open.decrement(1.0);
    drop(slot);
    tracing::info!(connection, outcome, "connection closed");
}

/// The message loop; how it ended, and how to close.
async fn run<T: Transport>(
    transport: &mut T,
    shared: &Shared,
    connection: u64,
) -> (&'static str, Close) {
    let config = &shared.config;
    loop {
        let incoming = tokio::select! {
            biased;
            () = shared.cut.cancelled() => return ("cut", Close::Normal),
            () = shared.draining.cancelled() => {
                let _ = send(transport, &shutdown(config.shutdown_retry_after), shared).await;
                return ("shutdown", Close::GoingAway);
            }
            incoming = tokio::time::timeout(config.idle_timeout, transport.recv()) => incoming,
        };
        let answer = match incoming {
            Err(_) => {
                let msg = format!("no message within {:?}; closing", config.idle_timeout);
                let _ = send(transport, &refusal(IDLE_TIMEOUT, &msg, false), shared).await;
                return (IDLE_TIMEOUT, Close::Normal);
            }
            Ok(Err(_)) | Ok(Ok(Incoming::Closed)) => return ("closed", Close::Normal),
            Ok(Ok(Incoming::TooLong)) => {
                let msg = format!(
                    "a message is longer than {} bytes; closing",
                    config.max_line_bytes
                );
                let _ = send(transport, &refusal(LINE_TOO_LONG, &msg, false), shared).await;
                return (LINE_TOO_LONG, Close::TooBig);
            }
            Ok(Ok(Incoming::Unsupported(why))) => refusal(BAD_REQUEST, why, false),
            Ok(Ok(Incoming::Message(message))) if message.iter().all(u8::is_ascii_whitespace) => {
                continue
            }
            // A message in progress finishes while the server drains; only a cut stops it.
            Ok(Ok(Incoming::Message(message))) => tokio::select! {
                biased;
                () = shared.cut.cancelled() => return ("cut", Close::Normal),
                answer = handle(shared, connection, T::NAME, &message) => answer,
            },
        };
        if send(transport, &answer, shared).await.is_err() {
            return ("write_failed", Close::Normal);
        }
    }
}

/// Sends one message within `write_timeout`: a client that does not read is let go.
async fn send<T: Transport>(transport: &mut T, message: &[u8], shared: &Shared) -> io::Result<()> {
    let timeout = shared.config.write_timeout;
    match tokio::time::timeout(timeout, transport.send(message)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client does not read its answers",
        )),
    }
}
