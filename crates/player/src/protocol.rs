//! The game protocol's messages, as both ends read and write them: the [`Request`]s a client
//! sends, the [`ServerMessage`]s the server writes (answers, refusals, the server's own
//! notices), and [`read_line`], one bounded line of the TCP framing.
//!
//! A message is one JSON object whose `type` names it; the transport frames it (a line over
//! TCP, a text frame over WebSocket). What a server does with a request (the error codes it
//! answers, the metrics it counts) is the server's, not this module's. No `Debug` shows a
//! token.

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::{RoomInfo, RoomJoinArgs};

/// A request a client sends: `{"type":"connect" | "search_room" | "join" | "refresh", ...}`.
/// Its `Debug` hides the token.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// `ConnectMasterServer`: log in with the access token (absent or `null` when the client
    /// has none).
    Connect {
        /// The access token.
        #[serde(default)]
        access_token: Option<String>,
    },
    /// `SearchRoom`: the rooms the server offers.
    SearchRoom,
    /// `JoinRoom`: the join arguments and the access token.
    Join(JoinMessage),
    /// A new token for the same user, when the session's token expires.
    Refresh {
        /// The new access token.
        #[serde(default)]
        access_token: Option<String>,
    },
}

impl Request {
    /// The request's `type`, e.g. `"search_room"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Connect { .. } => "connect",
            Request::SearchRoom => "search_room",
            Request::Join(_) => "join",
            Request::Refresh { .. } => "refresh",
        }
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |token: &Option<String>| token.as_ref().map(|_| "[redacted]");
        match self {
            Request::Connect { access_token } => f
                .debug_struct("Connect")
                .field("access_token", &redacted(access_token))
                .finish(),
            Request::SearchRoom => f.write_str("SearchRoom"),
            Request::Join(join) => f.debug_tuple("Join").field(join).finish(),
            Request::Refresh { access_token } => f
                .debug_struct("Refresh")
                .field("access_token", &redacted(access_token))
                .finish(),
        }
    }
}

/// A join request: the [`RoomJoinArgs`] fields (camelCase) plus the token. Its `Debug` hides
/// the token.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinMessage {
    /// Which room, and the authUrl the client was given for it.
    #[serde(flatten)]
    pub args: RoomJoinArgs,
    /// The access token.
    #[serde(default)]
    pub access_token: Option<String>,
}

impl fmt::Debug for JoinMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinMessage")
            .field("args", &self.args)
            .field(
                "access_token",
                &self.access_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// A user as the answers show it: id and name only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Player {
    /// The user's id at the auth API.
    pub id: i64,
    /// The user's name at the auth API.
    pub name: String,
}

/// What the server writes: the answer to a request, in order, or what it says on its own (a
/// revocation, a request to re-authenticate, a shutdown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ServerMessage {
    /// The answer to a `connect`: the user the token resolved to (`None` when auth is off).
    Connected {
        /// Who connected.
        user: Option<Player>,
    },
    /// The answer to a `search_room`; a protected room carries `nodeProperties.authUrl`.
    Rooms {
        /// The rooms, camelCase.
        rooms: Vec<RoomInfo>,
    },
    /// The answer to a `join`.
    Joined {
        /// The room joined.
        room_id: String,
        /// Who joined (`None` when auth is off).
        user: Option<Player>,
    },
    /// The answer to a `refresh`: the session carries on, as this user.
    Refreshed {
        /// The user the new token resolved to.
        user: Option<Player>,
    },
    /// A request refused, or the reason the server closes.
    Error {
        /// The stable code, e.g. `token_rejected` or `room_not_found`.
        error: String,
        /// The server's explanation; it never quotes what the client sent.
        message: String,
        /// Whether the same request may succeed later.
        retryable: bool,
    },
    /// The session's access was revoked (a logout, a ban); the server then closes it.
    Revoked {
        /// The code, `token_rejected`.
        error: String,
        /// The server's explanation.
        message: String,
    },
    /// The session's token expired: send a `refresh` within `within_ms`, or the session is
    /// closed.
    ReauthRequired {
        /// How long the server waits for the refresh, in milliseconds.
        within_ms: u64,
    },
    /// The server is draining and closes the session: reconnect after `retry_after_ms`, to
    /// this node or, behind a load balancer, another.
    Shutdown {
        /// How long to wait before reconnecting, in milliseconds.
        retry_after_ms: u64,
    },
}

impl ServerMessage {
    /// The message's `type`, e.g. `"reauth_required"`.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerMessage::Connected { .. } => "connected",
            ServerMessage::Rooms { .. } => "rooms",
            ServerMessage::Joined { .. } => "joined",
            ServerMessage::Refreshed { .. } => "refreshed",
            ServerMessage::Error { .. } => "error",
            ServerMessage::Revoked { .. } => "revoked",
            ServerMessage::ReauthRequired { .. } => "reauth_required",
            ServerMessage::Shutdown { .. } => "shutdown",
        }
    }
}

/// How reading one line went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
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
/// peer sent is lost.
///
/// # Errors
///
/// The reader's I/O error.
pub async fn read_line<R: AsyncBufRead + Unpin>(
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
    use serde_json::json;
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
    fn a_join_is_its_args_camel_case_beside_the_type_and_the_token() {
        let join = Request::Join(JoinMessage {
            args: RoomJoinArgs {
                host: "h".into(),
                port: 1,
                protocol: "tcp".into(),
                room_id: "r".into(),
                auth_url: String::new(),
                member_properties: Default::default(),
            },
            access_token: Some("t".into()),
        });
        let wire = serde_json::to_value(&join).unwrap();
        assert_eq!(
            wire,
            json!({"type": "join", "host": "h", "port": 1, "protocol": "tcp", "roomId": "r",
                   "authUrl": "", "memberProperties": {}, "access_token": "t"})
        );
        assert_eq!(serde_json::from_value::<Request>(wire).unwrap(), join);
    }

    #[test]
    fn requests_and_server_messages_have_their_wire_names() {
        assert_eq!(
            serde_json::to_value(Request::Connect { access_token: None }).unwrap(),
            json!({"type": "connect", "access_token": null})
        );
        assert_eq!(
            serde_json::from_value::<Request>(json!({"type": "refresh"})).unwrap(),
            Request::Refresh { access_token: None }
        );
        assert_eq!(
            serde_json::to_value(ServerMessage::ReauthRequired { within_ms: 5 }).unwrap(),
            json!({"type": "reauth_required", "within_ms": 5})
        );
        assert_eq!(
            serde_json::to_value(ServerMessage::Joined {
                room_id: "r".into(),
                user: Some(Player {
                    id: 1,
                    name: "Alice".into()
                }),
            })
            .unwrap(),
            json!({"type": "joined", "room_id": "r", "user": {"id": 1, "name": "Alice"}})
        );
    }

    #[test]
    fn debug_of_a_request_hides_the_token() {
        let connect = Request::Connect {
            access_token: Some("SECRET".into()),
        };
        let join: Request = serde_json::from_value(json!({"type": "join", "host": "h", "port": 1,
                "protocol": "tcp", "roomId": "r", "authUrl": "", "access_token": "SECRET"}))
        .unwrap();
        for shown in [format!("{connect:?}"), format!("{join:?}")] {
            assert!(!shown.contains("SECRET"), "{shown}");
        }
    }
}
