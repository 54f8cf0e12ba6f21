//! The server's side of the wire protocol, whatever carries it: the game server's own error
//! codes and writing the server's messages (answers, refusals, the server's own notices).
//! The messages themselves, the requests a client sends and reading one bounded line (the TCP
//! framing) are the player's ([`token_resolver_player::protocol`]), shared with the client.
//!
//! Refusals never echo a value the client sent.

use std::time::Duration;

use token_resolver::{ErrorCode, Resolution};
use token_resolver_player::protocol::ServerMessage;
use token_resolver_player::Player;

use super::telemetry;

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

/// A user as the answers show it, `None` when auth is off.
pub(super) fn player_of(resolution: Option<&Resolution>) -> Option<Player> {
    resolution.map(|u| Player {
        id: u.id,
        name: u.name.clone(),
    })
}

/// `{"type":"error", ...}`: a request refused, or the reason the server closes; counted in
/// `game_server_errors_total` under its code. The game server's codes and the resolver's are
/// static strings; any other is counted as `other`, so a label never carries client input.
pub(super) fn refusal(code: &str, message: &str, retryable: bool) -> Vec<u8> {
    let label = known_code(code).unwrap_or("other");
    metrics::counter!(telemetry::ERRORS_TOTAL, "code" => label).increment(1);
    encode(&ServerMessage::Error {
        error: code.to_owned(),
        message: message.to_owned(),
        retryable,
    })
}

/// `{"type":"revoked","error":"token_rejected","message":…}`.
pub(super) fn revoked() -> Vec<u8> {
    encode(&ServerMessage::Revoked {
        error: "token_rejected".to_owned(),
        message:
            "your access was revoked (a logout, a ban, or the login server said so); log in again"
                .to_owned(),
    })
}

/// `{"type":"reauth_required","within_ms":N}`.
pub(super) fn reauth_required(within: Duration) -> Vec<u8> {
    let within_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
    encode(&ServerMessage::ReauthRequired { within_ms })
}

/// `{"type":"shutdown","retry_after_ms":N}`: the server is draining; reconnect after `N` ms,
/// to this node or, behind a load balancer, another.
pub(super) fn shutdown(retry_after: Duration) -> Vec<u8> {
    let retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
    encode(&ServerMessage::Shutdown { retry_after_ms })
}

/// One message as the transports carry it (no framing).
pub(super) fn encode(message: &ServerMessage) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_default()
}

/// A parse error with the client's values blanked, cut to a readable length: nothing the client
/// sent (its token among them) is echoed. serde_json quotes a client's strings in `"…"` and its
/// other values and unknown names in backticks; backticks also quote the schema's own names
/// (`missing field`, `duplicate field`, and everything after `expected`), which are kept.
///
/// A client's value may itself hold the quote that closes it (a backtick, or `\"` in a string
/// serde shows escaped), so its end is not the next quote: it is where serde's own text goes
/// on after it (`, expected …`, `, there are no …`, or the ` at line …` serde_json appends),
/// the last such place, since serde's text follows the value; a message of another shape is cut
/// at the quote. Found by the `game_message` fuzz target (fuzz/README.md, finding 3).
pub(super) fn blank_quoted(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find(['"', '`']) {
        let quote = if rest.as_bytes()[at] == b'"' {
            '"'
        } else {
            '`'
        };
        out.push_str(&rest[..at]);
        out.push(quote);
        let ours = quote == '`'
            && (out.ends_with("missing field `")
                || out.ends_with("duplicate field `")
                || out.contains("expected"));
        let inside = &rest[at + 1..];
        if ours {
            // The schema's own name: kept, up to its closing backtick.
            let close = inside.find('`').map_or(inside.len(), |c| c + 1);
            out.push_str(&inside[..close]);
            rest = &inside[close..];
            continue;
        }
        out.push('…');
        // serde follows a value it quotes with `, expected …` or `, there are no …`; serde_json
        // then appends ` at line …`. The last such place is serde's: its own text comes after.
        let last = |after: &str| inside.rfind(&format!("{quote}{after}"));
        let close = [", expected ", ", there are no "]
            .into_iter()
            .filter_map(last)
            .max()
            .or_else(|| last(" at line "));
        match close {
            Some(close) => {
                out.push(quote);
                rest = &inside[close + 1..];
            }
            // Not a shape serde writes: everything after the opening quote may be the
            // client's.
            None => rest = "",
        }
    }
    out.push_str(rest);
    out.chars().take(MAX_ECHOED_ERROR_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_inside_the_clients_value_does_not_end_its_blanking() {
        for error in [
            "unknown variant `SEC`RET`, expected one of `connect`, `join` at line 1 column 17",
            r#"invalid type: string "SEC\"RET", expected u16 at line 1 column 9"#,
            "unknown field `SEC`RET` at line 1 column 12",
            "unknown field `SEC`RET`, there are no fields at line 1 column 12",
            "unknown field `SEC`, there are no RET`, expected one of `a` at line 1 column 12",
            "invalid type: string \"SEC\"RET at line 1 column 3",
        ] {
            let shown = blank_quoted(error);
            assert!(!shown.contains("RET"), "{error} shown as {shown}");
        }
        assert_eq!(
            blank_quoted(
                "unknown variant `SEC`RET`, expected one of `connect`, `join` at line 1 column 17"
            ),
            "unknown variant `…`, expected one of `connect`, `join` at line 1 column 17"
        );
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
