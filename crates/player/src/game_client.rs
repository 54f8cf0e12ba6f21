//! [`GameClient`]: the game client's end of the protocol over one TCP connection, as a game
//! would use it and as the tests and the demo do: requests and their answers, and what the
//! server says on its own ([`Push`]: a revocation, a request to re-authenticate, a shutdown),
//! with a callback that renews an expiring token in place.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::protocol::{read_line, JoinMessage, Line, Player, Request, ServerMessage};
use crate::{RoomInfo, RoomJoinArgs};

/// What a [`GameClient`] call can end with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GameClientError {
    /// The connection failed or closed.
    #[error("game server connection: {0}")]
    Io(#[from] io::Error),
    /// The server answered `{"type":"error"}`: the request was refused.
    #[error("refused: {code}: {message}")]
    Refused {
        /// The error code, e.g. `token_rejected` or `room_not_found`.
        code: String,
        /// The server's explanation.
        message: String,
    },
    /// The server's answer is not what the protocol says.
    #[error("unexpected answer from the game server: {0}")]
    Protocol(String),
    /// No answer within the client's timeout.
    #[error("no answer from the game server within {0:?}")]
    Timeout(Duration),
    /// The server revoked the session (a logout, a ban, a rejected token) and closed it: log
    /// in again.
    #[error("revoked: {0}")]
    Revoked(String),
    /// The server is draining and closed the session: reconnect after this long.
    #[error("the game server is going away; retry after {0:?}")]
    Shutdown(Duration),
}

impl GameClientError {
    /// The refusal's code, when the server refused.
    pub fn code(&self) -> Option<&str> {
        match self {
            GameClientError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// The answer to a join: the room and who the server says joined (`None` when auth is off).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Joined {
    /// The room joined.
    pub room_id: String,
    /// The user the token resolved to; `None` when the server does not require auth.
    pub user: Option<Player>,
}

/// What the server said on its own, between answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Push {
    /// The session's token expired: send a fresh one ([`GameClient::refresh`]) within this
    /// long, or the session is closed.
    ReauthRequired(Duration),
    /// A refresh (sent by the [`on_reauth`](GameClient::on_reauth) callback) went through: the
    /// session carries on, as this user.
    Refreshed(Option<Player>),
}

/// Gives a fresh access token when the server asks for one; `None` lets the session expire.
type Reauth = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send>;

/// A client of the game server's protocol over one TCP connection: connect, search rooms,
/// join, refresh. Requests are answered in order, one at a time; what the server says on its
/// own comes between answers, and a call meets it (a `reauth_required` is answered through
/// [`on_reauth`](Self::on_reauth); a revocation or a shutdown ends the call with an error).
pub struct GameClient {
    /// The server's address, for `Debug`.
    peer: SocketAddr,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Deadline for each answer.
    timeout: Duration,
    /// Reused line buffer.
    line: Vec<u8>,
    /// Renews the token when the server asks.
    reauth: Option<Reauth>,
    /// Refreshes the callback sent whose answers are still to come (after the answer being
    /// waited for, which was asked first).
    pending_refreshes: usize,
}

impl fmt::Debug for GameClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GameClient")
            .field("peer", &self.peer)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Longest answer line a [`GameClient`] reads (a long room list fits).
const MAX_ANSWER_BYTES: usize = 1 << 20;

impl GameClient {
    /// Opens a TCP connection to the game server at `addr`. Each later call waits at most
    /// 10 s for its answer; see [`set_timeout`](Self::set_timeout).
    ///
    /// # Errors
    ///
    /// The connect error, or a timeout after 10 s.
    pub async fn open(addr: SocketAddr) -> io::Result<GameClient> {
        let timeout = Duration::from_secs(10);
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        Ok(GameClient::over(stream, addr))
    }

    /// A client on `stream`, already connected to the game server at `addr` (say, from a
    /// chosen local address). Each later call waits at most 10 s for its answer.
    pub fn over(stream: TcpStream, addr: SocketAddr) -> GameClient {
        let timeout = Duration::from_secs(10);
        let _ = stream.set_nodelay(true);
        let (read, writer) = stream.into_split();
        GameClient {
            peer: addr,
            reader: BufReader::new(read),
            writer,
            timeout,
            line: Vec::new(),
            reauth: None,
            pending_refreshes: 0,
        }
    }

    /// Renews an expiring token in place: when the server says `reauth_required`, `renew` is
    /// asked for a fresh token, which is sent as a `refresh`; the session stays in its room.
    /// `renew` giving `None` lets the session expire.
    pub fn on_reauth<F, Fut>(&mut self, mut renew: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Option<String>> + Send + 'static,
    {
        self.reauth = Some(Box::new(move || Box::pin(renew())));
    }

    /// Sends `{"type":"refresh"}` with a fresh token for the same user: the user it resolved
    /// to.
    ///
    /// # Errors
    ///
    /// [`GameClientError::Refused`] with `refresh_mismatch` (another user: the server closes
    /// the session) or the resolver's code; I/O, timeout and protocol errors.
    pub async fn refresh(&mut self, access_token: &str) -> Result<Option<Player>, GameClientError> {
        let request = Request::Refresh {
            access_token: Some(access_token.to_owned()),
        };
        match self.call(&request).await? {
            ServerMessage::Refreshed { user } => Ok(user),
            other => Err(unexpected("refreshed", &other)),
        }
    }

    /// Waits, with no deadline, for the next thing the server says on its own: a
    /// `reauth_required` (answered through [`on_reauth`](Self::on_reauth) when set, and then
    /// the refresh's outcome, [`Push::Refreshed`], comes next).
    ///
    /// # Errors
    ///
    /// [`GameClientError::Revoked`] and [`GameClientError::Shutdown`] when the server ends
    /// the session; a refused refresh; I/O and protocol errors (`Io` with `UnexpectedEof` when
    /// the server closed).
    pub async fn next_push(&mut self) -> Result<Push, GameClientError> {
        loop {
            match self.read_message().await? {
                ServerMessage::ReauthRequired { within_ms } => {
                    if !self.renew().await? {
                        return Ok(Push::ReauthRequired(Duration::from_millis(within_ms)));
                    }
                }
                ServerMessage::Refreshed { user } if self.pending_refreshes > 0 => {
                    self.pending_refreshes -= 1;
                    return Ok(Push::Refreshed(user));
                }
                message @ ServerMessage::Error { .. } if self.pending_refreshes > 0 => {
                    self.pending_refreshes -= 1;
                    return Err(ended(message));
                }
                message => return Err(ended(message)),
            }
        }
    }

    /// Asks the callback for a fresh token and sends it; whether one was sent.
    async fn renew(&mut self) -> Result<bool, GameClientError> {
        let Some(renew) = self.reauth.as_mut() else {
            return Ok(false);
        };
        let Some(token) = renew().await else {
            return Ok(false);
        };
        let line = line_of(&Request::Refresh {
            access_token: Some(token),
        })?;
        self.writer.write_all(&line).await?;
        self.pending_refreshes += 1;
        Ok(true)
    }

    /// Sets how long each call waits for its answer.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// `ConnectMasterServer`: sends `connect` with the access token the client holds.
    /// `Ok(None)` when the server does not require auth.
    ///
    /// # Errors
    ///
    /// [`GameClientError::Refused`] with the resolver's code (`token_rejected`,
    /// `token_missing`, …); I/O, timeout and protocol errors.
    pub async fn connect(
        &mut self,
        access_token: Option<&str>,
    ) -> Result<Option<Player>, GameClientError> {
        let request = Request::Connect {
            access_token: access_token.map(str::to_owned),
        };
        match self.call(&request).await? {
            ServerMessage::Connected { user } => Ok(user),
            other => Err(unexpected("connected", &other)),
        }
    }

    /// `SearchRoom`: the rooms the server offers.
    ///
    /// # Errors
    ///
    /// I/O, timeout and protocol errors.
    pub async fn search_rooms(&mut self) -> Result<Vec<RoomInfo>, GameClientError> {
        match self.call(&Request::SearchRoom).await? {
            ServerMessage::Rooms { rooms } => Ok(rooms),
            other => Err(unexpected("rooms", &other)),
        }
    }

    /// `JoinRoom`: sends the join arguments with the access token.
    ///
    /// # Errors
    ///
    /// [`GameClientError::Refused`] with `auth_url_not_allowed` when `args.auth_url` is not
    /// the room's, `room_not_found`, or the resolver's code; I/O, timeout and protocol errors.
    pub async fn join(
        &mut self,
        args: &RoomJoinArgs,
        access_token: Option<&str>,
    ) -> Result<Joined, GameClientError> {
        let request = Request::Join(JoinMessage {
            args: args.clone(),
            access_token: access_token.map(str::to_owned),
        });
        match self.call(&request).await? {
            ServerMessage::Joined { room_id, user } => Ok(Joined { room_id, user }),
            other => Err(unexpected("joined", &other)),
        }
    }

    /// Sends any JSON message and returns the server's answer as it is, error answers
    /// included: for tests and tools that speak the protocol by hand.
    ///
    /// # Errors
    ///
    /// I/O and timeout errors; a [`GameClientError::Protocol`] when the answer is not JSON.
    pub async fn request(&mut self, message: &Value) -> Result<Value, GameClientError> {
        let mut line =
            serde_json::to_vec(message).map_err(|e| GameClientError::Protocol(e.to_string()))?;
        line.push(b'\n');
        self.request_line(&line).await
    }

    /// Sends raw bytes (which should end in `\n`) and reads one answer line.
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request).
    pub async fn request_line(&mut self, line: &[u8]) -> Result<Value, GameClientError> {
        let timeout = self.timeout;
        let exchange = async {
            self.writer.write_all(line).await?;
            self.read_answer().await
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| GameClientError::Timeout(timeout))?
    }

    /// Reads one answer line, e.g. one the server sent on its own before closing.
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request); `Io` with `UnexpectedEof` when the server closed.
    pub async fn read_answer(&mut self) -> Result<Value, GameClientError> {
        match read_line(&mut self.reader, &mut self.line, MAX_ANSWER_BYTES).await? {
            Line::Complete => {
                let answer = serde_json::from_slice(&self.line)
                    .map_err(|e| GameClientError::Protocol(format!("not JSON: {e}")));
                self.line.clear();
                answer
            }
            Line::Eof => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )
            .into()),
            Line::TooLong => Err(GameClientError::Protocol(format!(
                "an answer is longer than {MAX_ANSWER_BYTES} bytes"
            ))),
        }
    }

    /// Reads one message the server wrote, as the protocol's type.
    async fn read_message(&mut self) -> Result<ServerMessage, GameClientError> {
        let message = self.read_answer().await?;
        let kind = message["type"].to_string();
        serde_json::from_value(message).map_err(|e| {
            GameClientError::Protocol(format!("unexpected message of type {kind}: {e}"))
        })
    }

    /// One request and its answer (the caller checks it is the one it expects); an error
    /// answer is `Refused`. What the server says on its own meanwhile is met on the way (see
    /// [`GameClient`]).
    async fn call(&mut self, request: &Request) -> Result<ServerMessage, GameClientError> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.exchange(request))
            .await
            .map_err(|_| GameClientError::Timeout(timeout))?
    }

    async fn exchange(&mut self, request: &Request) -> Result<ServerMessage, GameClientError> {
        // The answers to refreshes sent before this request come before its own.
        while self.pending_refreshes > 0 {
            self.next_push().await?;
        }
        let line = line_of(request)?;
        self.writer.write_all(&line).await?;
        loop {
            match self.read_message().await? {
                // Its refresh was sent after this request: its answer comes after this one.
                ServerMessage::ReauthRequired { .. } => {
                    self.renew().await?;
                }
                message @ (ServerMessage::Error { .. }
                | ServerMessage::Revoked { .. }
                | ServerMessage::Shutdown { .. }) => return Err(ended(message)),
                answer => return Ok(answer),
            }
        }
    }
}

/// `request` as one line of the protocol.
fn line_of(request: &Request) -> Result<Vec<u8>, GameClientError> {
    let mut line =
        serde_json::to_vec(request).map_err(|e| GameClientError::Protocol(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

/// A message that ends the call as an error: a refusal, the end of the session, or one that
/// is no answer.
fn ended(message: ServerMessage) -> GameClientError {
    match message {
        ServerMessage::Error { error, message, .. } => GameClientError::Refused {
            code: error,
            message,
        },
        ServerMessage::Revoked { message, .. } => GameClientError::Revoked(message),
        ServerMessage::Shutdown { retry_after_ms } => {
            GameClientError::Shutdown(Duration::from_millis(retry_after_ms))
        }
        other => {
            GameClientError::Protocol(format!("unexpected message of type {:?}", other.kind()))
        }
    }
}

/// An answer of another type than the request's.
fn unexpected(expected: &str, answer: &ServerMessage) -> GameClientError {
    GameClientError::Protocol(format!(
        "expected a {expected:?} answer, got type {:?}",
        answer.kind()
    ))
}
