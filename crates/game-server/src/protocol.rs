//! The wire protocol, whatever carries it: the requests a client sends, the messages the
//! server writes (answers, refusals, the server's own notices), the game server's own error
//! codes, and reading one bounded line (the TCP framing).
//!
//! A message is one JSON object; the transport frames it (a line over TCP). No `Debug` on what
//! holds a token; refusals never echo a value the client sent.

use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::telemetry;
use token_resolver::{ErrorCode, Identity};
use token_resolver_player::RoomJoinArgs;

/// Error code: the join names a room this server does not have. Not retryable.
pub const ROOM_NOT_FOUND: &str = "room_not_found";
/// Error code: the line is not JSON, or not one of the three requests. Not retryable; the
/// connection stays open.
pub const BAD_REQUEST: &str = "bad_request";
/// Error code: the line is longer than `max_line_bytes`; the connection is then closed.
pub const LINE_TOO_LONG: &str = "line_too_long";
/// Error code: no complete message within `idle_timeout`; the connection is then closed.
pub const IDLE_TIMEOUT: &str = "idle_timeout";
/// The connection did not complete a `connect` (or a `join`) within
/// [`login_timeout`](crate::GameServerConfig::login_timeout) of being accepted.
pub const LOGIN_TIMEOUT: &str = "login_timeout";
/// The client's address had more tokens rejected than
/// [`rejection_budget`](crate::GameServerConfig::rejection_budget) allows in its window: the
/// request was answered without asking the integrator. Retryable, once the window ends.
pub const RATE_LIMITED: &str = "rate_limited";
/// Error code: `max_connections` are open; this one is closed at once. Retryable.
pub const SERVER_BUSY: &str = "server_busy";
/// Error code: the client's address holds
/// [`max_connections_per_address`](crate::GameServerConfig::max_connections_per_address)
/// sessions already; this one is closed at once. Retryable once one of them ends.
pub const TOO_MANY_CONNECTIONS: &str = "too_many_connections";
/// Error code: a refresh resolved to another user than the session's; the connection is then
/// closed.
pub const REFRESH_MISMATCH: &str = "refresh_mismatch";
/// Error code: the session's token expired and no refresh came within the grace; the
/// connection is then closed.
pub const SESSION_EXPIRED: &str = "session_expired";

/// What a connection refused for want of a place is told, by its code ([`SERVER_BUSY`] or
/// [`TOO_MANY_CONNECTIONS`]).
pub(super) fn busy_message(code: &str) -> &'static str {
    if code == TOO_MANY_CONNECTIONS {
        "your address holds as many connections as it may; close one or retry later"
    } else {
        "too many connections; retry shortly"
    }
}

/// The error codes this server may send: its own, then the resolver's.
fn known_code(code: &str) -> Option<&'static str> {
    [
        ROOM_NOT_FOUND,
        BAD_REQUEST,
        LINE_TOO_LONG,
        IDLE_TIMEOUT,
        LOGIN_TIMEOUT,
        RATE_LIMITED,
        SERVER_BUSY,
        TOO_MANY_CONNECTIONS,
        REFRESH_MISMATCH,
        SESSION_EXPIRED,
    ]
    .into_iter()
    .chain(ErrorCode::ALL.iter().map(|c| c.as_str()))
    .find(|known| *known == code)
}

/// Longest message quoted back in a `bad_request` answer.
const MAX_ECHOED_ERROR_CHARS: usize = 200;

/// A request off the wire. No `Debug`: it holds the token.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Request {
    Connect {
        #[serde(default)]
        access_token: Option<String>,
    },
    SearchRoom,
    Join(JoinMessage),
    /// A new token for the same user, when the session's token expires.
    Refresh {
        #[serde(default)]
        access_token: Option<String>,
    },
}

impl Request {
    /// The request's `type`, as the messages metric labels it.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Request::Connect { .. } => "connect",
            Request::SearchRoom => "search_room",
            Request::Join(_) => "join",
            Request::Refresh { .. } => "refresh",
        }
    }
}

/// A join request: the `RoomJoinArgs` fields plus the token.
#[derive(Deserialize)]
pub(super) struct JoinMessage {
    #[serde(flatten)]
    pub(super) args: RoomJoinArgs,
    #[serde(default)]
    pub(super) access_token: Option<String>,
}

/// A user as the answers show it: id and name only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Player {
    /// The user's id at the auth API.
    pub id: i64,
    /// The user's name at the auth API.
    pub name: String,
}

impl Player {
    pub(super) fn of(identity: &Identity) -> Option<Player> {
        identity.user().map(|u| Player {
            id: u.id,
            name: u.name.clone(),
        })
    }
}

/// `{"type":"error", ...}`: a request refused, or the reason the server closes; counted in
/// `game_server_errors_total` under its code. The game server's codes and the resolver's are
/// static strings; any other is counted as `other`, so a label never carries client input.
pub(super) fn refusal(code: &str, message: &str, retryable: bool) -> Vec<u8> {
    let label = known_code(code).unwrap_or("other");
    metrics::counter!(telemetry::ERRORS_TOTAL, "code" => label).increment(1);
    encode(&json!({"type": "error", "error": code, "message": message, "retryable": retryable}))
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

/// `{"type":"shutdown","retry_after_ms":N}`: the server is draining; reconnect after `N` ms,
/// to this node or, behind a load balancer, another.
pub(super) fn shutdown(retry_after: Duration) -> Vec<u8> {
    let retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
    encode(&json!({"type": "shutdown", "retry_after_ms": retry_after_ms}))
}

/// One message as the transports carry it (no framing).
pub(super) fn encode(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// A parse error with the client's values blanked, cut to a readable length: nothing the client
/// sent (its token among them) is echoed. serde_json quotes a client's strings in `"…"` and its
/// other values and unknown names in backticks; backticks also quote the schema's own names
/// (`missing field`, `duplicate field`, and everything after `expected`), which are kept.
pub(super) fn blank_quoted(message: &str) -> String {
    let mut out = String::new();
    let mut quote = None;
    for c in message.chars() {
        match (quote, c) {
            (None, '"') => {
                out.push('"');
                quote = Some(('"', false));
            }
            (None, '`') => {
                let ours = out.ends_with("missing field ")
                    || out.ends_with("duplicate field ")
                    || out.contains("expected");
                out.push('`');
                quote = Some(('`', ours));
            }
            (None, c) => out.push(c),
            (Some((end, keep)), c) if c == end => {
                if !keep {
                    out.push('…');
                }
                out.push(c);
                quote = None;
            }
            (Some((_, true)), c) => out.push(c),
            (Some((_, false)), _) => {}
        }
    }
    out.chars().take(MAX_ECHOED_ERROR_CHARS).collect()
}

/// How reading one line went.
pub(super) enum Line {
    /// A whole line is in the buffer, newline removed.
    Complete,
    /// The peer closed the connection (a partial last line is dropped).
    Eof,
    /// The line grew past the limit.
    TooLong,
}

/// Reads one `\n`-terminated line of at most `max` bytes onto the end of `buf`, never
/// buffering more than `max` bytes of it. The caller empties `buf` after a complete line.
///
/// Cancel-safe: a call dropped at its `await` (a session's timer won the race) leaves what it
/// read of the line in `buf`, and the next call goes on from there, so no part of a line the
/// client sent is lost.
pub(super) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(Line::Eof);
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if buf.len() + chunk.len() > max {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(chunk);
        let used = done.unwrap_or(chunk.len());
        reader.consume(used);
        if done.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Line::Complete);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncWriteExt, BufReader};

    use super::*;

    #[tokio::test]
    async fn read_line_splits_lines_and_refuses_long_ones() {
        let input: &[u8] = b"{\"a\":1}\r\n\nxxxxxxxxxxx\n";
        let mut reader = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert!(buf.is_empty());
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::TooLong
        ));
    }

    #[tokio::test]
    async fn a_read_cancelled_mid_line_loses_nothing_of_it() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut reader = tokio::io::BufReader::new(server);
        let mut buf = Vec::new();
        client.write_all(b"{\"type\":").await.unwrap();
        let cancelled = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            read_line(&mut reader, &mut buf, 100),
        )
        .await;
        assert!(cancelled.is_err(), "no whole line yet");
        client.write_all(b"\"join\"}\n").await.unwrap();
        assert!(matches!(
            read_line(&mut reader, &mut buf, 100).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"{\"type\":\"join\"}");
    }

    #[tokio::test]
    async fn read_line_ends_at_eof() {
        let mut reader = BufReader::new(&b"partial"[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut reader, &mut buf, 100).await.unwrap(),
            Line::Eof
        ));
    }

    #[test]
    fn blank_quoted_hides_the_clients_values_and_keeps_the_schemas_names() {
        for (error, kept) in [
            (
                r#"invalid type: string "SECRET", expected u16 at line 1 column 9"#,
                "expected u16",
            ),
            (
                "unknown variant `SECRET`, expected one of `connect`, `join` at line 1 column 17",
                "expected one of `connect`, `join`",
            ),
            (
                "invalid type: integer `4242424242`, expected a string at line 1 column 30",
                "expected a string",
            ),
            (
                "unknown field `SECRET` at line 1 column 12",
                "unknown field `…`",
            ),
        ] {
            let shown = blank_quoted(error);
            assert!(
                !shown.contains("SECRET") && !shown.contains("4242"),
                "{shown}"
            );
            assert!(shown.contains(kept), "{shown}");
        }
        let shown = blank_quoted("missing field `access_token` at line 1 column 20");
        assert!(shown.contains("missing field `access_token`"), "{shown}");
    }
}
