//! A runnable game server that embeds a [`Resolver`]: tokio TCP, one JSON message per line.
//! It owns the wire protocol, the rooms and who is in them, the per-connection limits, and
//! [`GameClient`], the client side of the same protocol. It does not own token resolution:
//! its connect and join handlers call [`Resolver::resolve_connect`] and
//! [`Resolver::resolve_join`], which keep the allowlist, the cache and the upstream call.
//!
//! # Protocol
//!
//! Every message is one JSON object on one line (`\n`-terminated, at most
//! [`GameServerConfig::max_line_bytes`]). A client sends, and the server answers each in
//! order:
//!
//! | request | answer |
//! |---|---|
//! | `{"type":"connect","access_token":"…"}` | `{"type":"connected","user":{"id":1,"name":"Alice"}}` (`"user":null` when auth is off) |
//! | `{"type":"search_room"}` | `{"type":"rooms","rooms":[RoomInfo…]}`, camelCase; a protected room carries `nodeProperties.authUrl` |
//! | `{"type":"join", <RoomJoinArgs fields, camelCase>, "access_token":"…"}` | `{"type":"joined","room_id":"arena","user":{…}}` (`"user":null` when auth is off) |
//!
//! Any request can instead be answered `{"type":"error","error":"<code>","message":"…",
//! "retryable":false}`. The codes are the resolver's ([`ErrorCode::as_str`]) plus the game
//! server's own: [`ROOM_NOT_FOUND`], [`BAD_REQUEST`], [`LINE_TOO_LONG`], [`IDLE_TIMEOUT`]
//! and [`SERVER_BUSY`]; after the last three the server closes the connection.
//!
//! # Decisions
//!
//! - **A join names its room; the room names the auth server.** The server looks the room up
//!   by `roomId` (unknown: [`ROOM_NOT_FOUND`]) and refuses, with `auth_url_not_allowed` and no
//!   upstream request, a join whose `authUrl` is not the room's own. The two are compared
//!   after normalisation by [`Endpoint::parse`] (case of scheme and host, default port,
//!   trailing slashes), so a client that re-serialises the URL is not punished; an empty
//!   `authUrl` matches only a room without one. The resolution then uses the room's
//!   configured URL, never the client's string. `host`, `port` and `protocol` of the join are
//!   not checked: the room is identified by its id.
//! - **Connect and join are resolved independently**, each with the token it carries, as on a
//!   platform whose master server and room servers are separate processes. A join does not
//!   need a prior connect, and does not reuse its token.
//! - **A connection is in at most one room**: joining another leaves the first; closing the
//!   connection leaves it too. So members are bounded by `max_connections`.
//! - **What a hostile client controls is bounded**: line length (then [`LINE_TOO_LONG`] and
//!   close), time between messages (then [`IDLE_TIMEOUT`] and close), time to read an answer
//!   (`write_timeout`, then close), concurrent connections ([`SERVER_BUSY`] and close).
//!   Messages of one connection are handled one at a time, so a connection has at most one
//!   resolution under way.
//! - Error messages and logs never carry the token; a malformed request's parse error is
//!   echoed with every quoted value blanked out.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::client::{RoomInfo, RoomJoinArgs, AUTH_URL_PROPERTY};
use crate::{ConnectRequest, Endpoint, ErrorCode, Identity, JoinRequest, ResolveError, Resolver};

/// Error code: the join names a room this server does not have. Not retryable.
pub const ROOM_NOT_FOUND: &str = "room_not_found";
/// Error code: the line is not JSON, or not one of the three requests. Not retryable; the
/// connection stays open.
pub const BAD_REQUEST: &str = "bad_request";
/// Error code: the line is longer than `max_line_bytes`; the connection is then closed.
pub const LINE_TOO_LONG: &str = "line_too_long";
/// Error code: no complete message within `idle_timeout`; the connection is then closed.
pub const IDLE_TIMEOUT: &str = "idle_timeout";
/// Error code: `max_connections` are open; this one is closed at once. Retryable.
pub const SERVER_BUSY: &str = "server_busy";

/// Longest wait for open connections on [`RunningGameServer::shutdown`] before they are cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Longest room id accepted in a rooms file.
const MAX_ROOM_ID_BYTES: usize = 256;
/// Longest message quoted back in a `bad_request` answer.
const MAX_ECHOED_ERROR_CHARS: usize = 200;

/// One room in a rooms file or a [`GameServerConfig`]: `{"roomId": "arena", "authUrl": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoomConfig {
    /// The room's identifier, unique on this server.
    pub room_id: String,
    /// The room's authUrl, advertised as `nodeProperties.authUrl`. `None`: the room is
    /// checked against the resolver's default authUrl and advertises no authUrl.
    #[serde(default)]
    pub auth_url: Option<String>,
}

impl RoomConfig {
    /// The built-in rooms: `lobby`, without an authUrl (so checked against the default), and
    /// `arena`, protected by `arena_auth_url` when one is given.
    pub fn defaults(arena_auth_url: Option<&str>) -> Vec<RoomConfig> {
        vec![
            RoomConfig {
                room_id: "lobby".to_owned(),
                auth_url: None,
            },
            RoomConfig {
                room_id: "arena".to_owned(),
                auth_url: arena_auth_url.map(str::to_owned),
            },
        ]
    }

    /// Reads a rooms file: a JSON list of `{"roomId": "…", "authUrl": "…"}` (`authUrl`
    /// optional), and checks it as [`GameServer::new`] would.
    ///
    /// # Errors
    ///
    /// [`GameServerError::Read`] or [`GameServerError::Parse`] for the file,
    /// [`GameServerError::Rooms`] for a room that cannot be served.
    pub fn load(path: &Path) -> Result<Vec<RoomConfig>, GameServerError> {
        let text = std::fs::read(path).map_err(|source| GameServerError::Read {
            path: path.to_owned(),
            source,
        })?;
        let rooms: Vec<RoomConfig> =
            serde_json::from_slice(&text).map_err(|source| GameServerError::Parse {
                path: path.to_owned(),
                source,
            })?;
        validate_rooms(&rooms)?;
        Ok(rooms)
    }

    /// The authUrls of `rooms` that no URL of `allowed` covers (by [`Endpoint::covers`]): a
    /// resolver allowing only `allowed` would refuse every join to those rooms. Startup code
    /// uses it to fail early, before the first player meets the misconfiguration.
    pub fn uncovered_auth_urls(
        rooms: &[RoomConfig],
        allowed: &[&str],
        allow_insecure_http: bool,
    ) -> Vec<String> {
        let allowed: Vec<Endpoint> = allowed
            .iter()
            .filter_map(|u| Endpoint::parse(u, allow_insecure_http).ok())
            .collect();
        rooms
            .iter()
            .filter_map(|r| r.auth_url.as_deref())
            .filter(|url| match Endpoint::parse(url, allow_insecure_http) {
                Ok(endpoint) => !allowed.iter().any(|a| a.covers(&endpoint)),
                Err(_) => true,
            })
            .map(str::to_owned)
            .collect()
    }
}

/// Why a game server could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GameServerError {
    /// The rooms file could not be read: check its path and permissions.
    #[error("cannot read the rooms file {}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The rooms file is not a JSON list of `{"roomId", "authUrl"?}`.
    #[error("the rooms file {} is not a JSON list of {{\"roomId\", \"authUrl\"?}}: {source}", path.display())]
    Parse {
        /// The file named.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A room cannot be served: no rooms, an empty, long or duplicate id, or an authUrl that is
    /// not a valid authUrl. Fix the room list.
    #[error("invalid rooms: {reason}")]
    Rooms {
        /// What is wrong, naming the room.
        reason: String,
    },
    /// A limit of the [`GameServerConfig`] is zero.
    #[error("invalid game server setting `{setting}`: must be greater than zero")]
    Limit {
        /// The field at fault.
        setting: &'static str,
    },
}

fn validate_rooms(rooms: &[RoomConfig]) -> Result<(), GameServerError> {
    let bad = |reason: String| GameServerError::Rooms { reason };
    if rooms.is_empty() {
        return Err(bad("the list is empty".to_owned()));
    }
    let mut seen = std::collections::HashSet::new();
    for room in rooms {
        if room.room_id.is_empty() || room.room_id.len() > MAX_ROOM_ID_BYTES {
            return Err(bad(format!(
                "room id {:?} must have 1 to {MAX_ROOM_ID_BYTES} bytes",
                room.room_id
            )));
        }
        if !seen.insert(room.room_id.as_str()) {
            return Err(bad(format!("room id {:?} appears twice", room.room_id)));
        }
        if let Some(url) = &room.auth_url {
            // Only the URL's form is checked here; whether it may be called is the
            // resolver's allowlist's business.
            Endpoint::parse(url, true)
                .map_err(|reason| bad(format!("room {:?}: authUrl {reason}", room.room_id)))?;
        }
    }
    Ok(())
}

/// What a [`GameServer`] serves and the limits it keeps.
#[derive(Debug, Clone)]
pub struct GameServerConfig {
    /// The rooms `search_room` lists and `join` accepts. Default: [`RoomConfig::defaults`]
    /// without an arena authUrl (both rooms checked against the default authUrl).
    pub rooms: Vec<RoomConfig>,
    /// Longest message line, newline excluded; a longer one is answered [`LINE_TOO_LONG`]
    /// and the connection closed. Default: 16 KiB.
    pub max_line_bytes: usize,
    /// Longest wait for the next complete message; then [`IDLE_TIMEOUT`] and close.
    /// Default: 60 s.
    pub idle_timeout: Duration,
    /// Longest wait for the client to take an answer off the socket; then close.
    /// Default: 10 s.
    pub write_timeout: Duration,
    /// Connections open at once; one more is answered [`SERVER_BUSY`] and closed.
    /// Default: 1024.
    pub max_connections: usize,
    /// The host rooms advertise in `search_room` (e.g. a public DNS name when listening on
    /// `0.0.0.0`). Default: `None`, the bound IP address.
    pub advertised_host: Option<String>,
}

impl Default for GameServerConfig {
    fn default() -> Self {
        GameServerConfig {
            rooms: RoomConfig::defaults(None),
            max_line_bytes: 16 * 1024,
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            max_connections: 1024,
            advertised_host: None,
        }
    }
}

/// A room as the server keeps it.
#[derive(Debug)]
struct Room {
    /// The room's id.
    id: String,
    /// The configured authUrl as written, or `""`: what the resolver is asked with.
    auth_url: String,
    /// The normalised endpoint of `auth_url` (`None` without one): what a join's authUrl is
    /// compared with.
    endpoint: Option<String>,
}

impl Room {
    /// Whether a join's `authUrl` names this room's auth server: both empty, or both the same
    /// endpoint after normalisation.
    fn accepts(&self, claimed: &str) -> bool {
        match (&self.endpoint, claimed) {
            (None, "") => true,
            (Some(own), claimed) if !claimed.is_empty() => {
                normalised(claimed).as_ref() == Some(own)
            }
            _ => false,
        }
    }
}

/// A game server ready to listen: a [`Resolver`], rooms and limits. [`spawn`](Self::spawn)
/// starts it.
#[derive(Debug, Clone)]
pub struct GameServer {
    resolver: Resolver,
    config: GameServerConfig,
}

impl GameServer {
    /// A game server resolving tokens with `resolver` (a clone shares its cache).
    ///
    /// The rooms' authUrls must be allowed by `resolver` (its default or an
    /// `allow_auth_url`), or every join to them fails with `auth_url_not_allowed`; see
    /// [`RoomConfig::uncovered_auth_urls`].
    ///
    /// # Errors
    ///
    /// [`GameServerError::Rooms`] for an empty room list, a bad or duplicate room id or an
    /// unparsable authUrl; [`GameServerError::Limit`] for a zero limit.
    pub fn new(resolver: Resolver, config: GameServerConfig) -> Result<Self, GameServerError> {
        validate_rooms(&config.rooms)?;
        for (setting, zero) in [
            ("max_line_bytes", config.max_line_bytes == 0),
            ("idle_timeout", config.idle_timeout.is_zero()),
            ("write_timeout", config.write_timeout.is_zero()),
            ("max_connections", config.max_connections == 0),
        ] {
            if zero {
                return Err(GameServerError::Limit { setting });
            }
        }
        Ok(GameServer { resolver, config })
    }

    /// Binds `addr` (port 0 picks a free one) and serves in a tokio task until
    /// [`RunningGameServer::shutdown`], or until the [`RunningGameServer`] is dropped.
    /// The rooms advertise `advertised_host` (default: the bound IP) and the bound port.
    ///
    /// # Errors
    ///
    /// The I/O error of binding `addr` or of reading the bound address.
    pub async fn spawn(self, addr: SocketAddr) -> io::Result<RunningGameServer> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let rooms: Vec<Room> = self
            .config
            .rooms
            .iter()
            .map(|r| Room {
                id: r.room_id.clone(),
                auth_url: r.auth_url.clone().unwrap_or_default(),
                endpoint: r.auth_url.as_deref().and_then(normalised),
            })
            .collect();
        let room_infos = self
            .config
            .rooms
            .iter()
            .map(|r| RoomInfo {
                host: self
                    .config
                    .advertised_host
                    .clone()
                    .unwrap_or_else(|| local_addr.ip().to_string()),
                port: local_addr.port(),
                protocol: "tcp".to_owned(),
                room_id: r.room_id.clone(),
                node_properties: r.auth_url.as_ref().map(|url| {
                    Map::from_iter([(AUTH_URL_PROPERTY.to_owned(), Value::String(url.clone()))])
                }),
            })
            .collect();
        let shared = Arc::new(Shared {
            resolver: self.resolver,
            rooms,
            room_infos,
            members: Mutex::new(HashMap::new()),
            config: self.config,
            next_connection: AtomicU64::new(1),
        });
        let (stop, stopped) = watch::channel(());
        let task = tokio::spawn(accept_loop(listener, shared.clone(), stopped));
        tracing::info!(%local_addr, "game server listening");
        Ok(RunningGameServer {
            local_addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// Whom a room holds: one entry per connection that joined it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The connection's number on this server, counting from 1.
    pub connection: u64,
    /// Who the join resolved to.
    pub identity: Identity,
}

/// What every connection task of one server shares.
#[derive(Debug)]
struct Shared {
    /// Resolves connect and join tokens.
    resolver: Resolver,
    /// The rooms, for join.
    rooms: Vec<Room>,
    /// The rooms as `search_room` answers them.
    room_infos: Vec<RoomInfo>,
    /// Room id -> connection -> who joined.
    members: Mutex<HashMap<String, HashMap<u64, Identity>>>,
    /// Limits.
    config: GameServerConfig,
    /// The next connection number.
    next_connection: AtomicU64,
}

impl Shared {
    /// Locks the member table; a panic while holding it leaves only whole map operations
    /// behind, so a poisoned lock is still usable.
    fn members(&self) -> MutexGuard<'_, HashMap<String, HashMap<u64, Identity>>> {
        self.members
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts `connection` in `room`, taking it out of any other.
    fn enter(&self, connection: u64, room: &str, identity: Identity) {
        let mut members = self.members();
        leave_all(&mut members, connection);
        members
            .entry(room.to_owned())
            .or_default()
            .insert(connection, identity);
    }

    fn leave(&self, connection: u64) {
        leave_all(&mut self.members(), connection);
    }
}

fn leave_all(members: &mut HashMap<String, HashMap<u64, Identity>>, connection: u64) {
    members.retain(|_, room| {
        room.remove(&connection);
        !room.is_empty()
    });
}

/// A [`GameServer`] serving in a tokio task, from [`GameServer::spawn`].
///
/// Dropping it aborts the server and its connections; [`shutdown`](Self::shutdown) stops it
/// gracefully.
#[derive(Debug)]
pub struct RunningGameServer {
    /// The bound address (the real port when 0 was asked for).
    local_addr: SocketAddr,
    /// The resolver, rooms and members, to read them.
    shared: Arc<Shared>,
    /// Tells the accept loop and every connection to stop; `None` once used.
    stop: Option<watch::Sender<()>>,
    /// The accept loop, which owns the connection tasks; `None` once shut down.
    task: Option<JoinHandle<()>>,
}

impl RunningGameServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The embedded resolver, e.g. for its [`stats`](Resolver::stats) or to
    /// [`invalidate`](Resolver::invalidate) a revoked token.
    pub fn resolver(&self) -> &Resolver {
        &self.shared.resolver
    }

    /// The rooms as `search_room` answers them.
    pub fn rooms(&self) -> &[RoomInfo] {
        &self.shared.room_infos
    }

    /// Who is in `room_id` now, by connection number.
    pub fn members(&self, room_id: &str) -> Vec<Member> {
        let members = self.shared.members();
        let mut list: Vec<Member> = members
            .get(room_id)
            .into_iter()
            .flatten()
            .map(|(&connection, identity)| Member {
                connection,
                identity: identity.clone(),
            })
            .collect();
        list.sort_by_key(|m| m.connection);
        list
    }

    /// Stops accepting, tells every connection to close after the message it is handling,
    /// and waits for them for at most 5 s, after which they are cut.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for RunningGameServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<()>) {
    let slots = Arc::new(Semaphore::new(shared.config.max_connections));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    match slots.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let connection = shared.next_connection.fetch_add(1, Ordering::Relaxed);
                            let span = tracing::info_span!("connection", %peer, connection);
                            connections.spawn(
                                serve_connection(stream, peer, connection, shared.clone(), stop.clone(), permit)
                                    .instrument(span),
                            );
                        }
                        Err(_) => {
                            tracing::warn!(%peer, "game server full: connection refused");
                            // A fresh socket's send buffer takes one short line without
                            // blocking; if not, the client loses only the explanation.
                            let line = error_line(SERVER_BUSY, "too many connections; retry shortly", true);
                            let _ = stream.try_write(&line);
                        }
                    }
                }
                Err(error) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

/// How reading one line went.
enum Line {
    /// A whole line is in the buffer, newline removed.
    Complete,
    /// The peer closed the connection (a partial last line is dropped).
    Eof,
    /// The line grew past the limit.
    TooLong,
}

/// Reads one `\n`-terminated line of at most `max` bytes into `buf` (cleared first), never
/// buffering more than `max` bytes of it.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
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

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    connection: u64,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<()>,
    _permit: OwnedSemaphorePermit,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    let config = &shared.config;
    loop {
        let read = tokio::select! {
            _ = stop.changed() => break,
            read = tokio::time::timeout(config.idle_timeout, read_line(&mut reader, &mut line, config.max_line_bytes)) => read,
        };
        let answer = match read {
            Err(_) => {
                let msg = format!("no message within {:?}; closing", config.idle_timeout);
                let _ = send(&mut write, &error_line(IDLE_TIMEOUT, &msg, false), config).await;
                break;
            }
            Ok(Err(_)) | Ok(Ok(Line::Eof)) => break,
            Ok(Ok(Line::TooLong)) => {
                let msg = format!(
                    "a message is longer than {} bytes; closing",
                    config.max_line_bytes
                );
                tracing::debug!(connection, "line too long");
                if send(&mut write, &error_line(LINE_TOO_LONG, &msg, false), config)
                    .await
                    .is_ok()
                {
                    linger(&mut reader, &mut write).await;
                }
                break;
            }
            Ok(Ok(Line::Complete)) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Ok(Line::Complete)) => handle(&shared, connection, &line).await,
        };
        if send(&mut write, &answer, config).await.is_err() {
            break;
        }
    }
    shared.leave(connection);
    tracing::debug!(connection, %peer, "connection closed");
}

/// Most unread input discarded before closing after `line_too_long`.
const LINGER_BYTES: usize = 64 * 1024;
/// Longest wait for the client to stop sending before closing after `line_too_long`.
const LINGER_TIME: Duration = Duration::from_millis(500);

/// Closes our side and discards what the client is still sending, briefly: closing a socket
/// with unread input makes the kernel send a reset, which can destroy the error answer
/// before the client reads it.
async fn linger(reader: &mut BufReader<OwnedReadHalf>, write: &mut OwnedWriteHalf) {
    let _ = write.shutdown().await;
    let drain = async {
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            match reader.fill_buf().await {
                Ok(buf) if !buf.is_empty() => {
                    let n = buf.len();
                    reader.consume(n);
                    discarded += n;
                }
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

/// Writes one answer line within `write_timeout`.
async fn send(
    write: &mut OwnedWriteHalf,
    line: &[u8],
    config: &GameServerConfig,
) -> io::Result<()> {
    match tokio::time::timeout(config.write_timeout, write.write_all(line)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client does not read its answers",
        )),
    }
}

/// A request off the wire. No `Debug`: it holds the token.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Request {
    Connect {
        #[serde(default)]
        access_token: Option<String>,
    },
    SearchRoom,
    Join(JoinMessage),
}

/// A join request: the `RoomJoinArgs` fields plus the token.
#[derive(Deserialize)]
struct JoinMessage {
    #[serde(flatten)]
    args: RoomJoinArgs,
    #[serde(default)]
    access_token: Option<String>,
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
    fn of(identity: &Identity) -> Option<Player> {
        identity.user().map(|u| Player {
            id: u.id,
            name: u.name.clone(),
        })
    }
}

/// Handles one message; the answer line, newline included.
async fn handle(shared: &Shared, connection: u64, line: &[u8]) -> Vec<u8> {
    let request = match serde_json::from_slice::<Request>(line) {
        Ok(request) => request,
        Err(e) => {
            let msg = format!(
                "expected {{\"type\": \"connect\" | \"search_room\" | \"join\", ...}}: {}",
                blank_quoted(&e.to_string())
            );
            return error_line(BAD_REQUEST, &msg, false);
        }
    };
    match request {
        Request::Connect { access_token } => {
            let req = ConnectRequest { access_token };
            match shared.resolver.resolve_connect(&req).await {
                Ok(identity) => {
                    tracing::info!(
                        connection,
                        user_id = identity.user().map(|u| u.id),
                        "connected"
                    );
                    to_line(&json!({"type": "connected", "user": Player::of(&identity)}))
                }
                Err(e) => resolve_error_line(connection, "connect", &e),
            }
        }
        Request::SearchRoom => to_line(&json!({"type": "rooms", "rooms": shared.room_infos})),
        Request::Join(JoinMessage { args, access_token }) => {
            let Some(room) = shared.rooms.iter().find(|r| r.id == args.room_id) else {
                return error_line(
                    ROOM_NOT_FOUND,
                    "this server has no room with that roomId; search rooms again",
                    false,
                );
            };
            if !room.accepts(&args.auth_url) {
                tracing::info!(connection, room = %room.id, "join refused: authUrl is not the room's own");
                return error_line(
                    ErrorCode::AuthUrlNotAllowed.as_str(),
                    "the join's authUrl is not the room's own; send the authUrl that SearchRoom gave for this room",
                    false,
                );
            }
            let req = JoinRequest {
                room_id: room.id.clone(),
                auth_url: room.auth_url.clone(),
                access_token,
            };
            match shared.resolver.resolve_join(&req).await {
                Ok(identity) => {
                    tracing::info!(connection, room = %room.id, user_id = identity.user().map(|u| u.id), "joined");
                    let user = Player::of(&identity);
                    shared.enter(connection, &room.id, identity);
                    to_line(&json!({"type": "joined", "room_id": room.id, "user": user}))
                }
                Err(e) => resolve_error_line(connection, "join", &e),
            }
        }
    }
}

/// The normalised endpoint of an authUrl; `None` when it does not parse.
fn normalised(auth_url: &str) -> Option<String> {
    Endpoint::parse(auth_url, true)
        .ok()
        .map(|endpoint| endpoint.as_str().to_owned())
}

fn resolve_error_line(connection: u64, what: &str, e: &ResolveError) -> Vec<u8> {
    tracing::info!(connection, code = e.code().as_str(), "{what} refused");
    error_line(e.code().as_str(), &e.to_string(), e.is_retryable())
}

fn error_line(code: &str, message: &str, retryable: bool) -> Vec<u8> {
    to_line(&json!({"type": "error", "error": code, "message": message, "retryable": retryable}))
}

fn to_line(value: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(value).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A parse error with every `"…"` value blanked, cut to a readable length: the client's
/// values (its token among them) are not echoed.
fn blank_quoted(message: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in message.chars() {
        if c == '"' {
            if inside {
                out.push_str("…\"");
            } else {
                out.push('"');
            }
            inside = !inside;
        } else if !inside {
            out.push(c);
        }
    }
    out.chars().take(MAX_ECHOED_ERROR_CHARS).collect()
}

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

/// A client of the game server's protocol over one TCP connection: connect, search rooms,
/// join. Requests are answered in order, one at a time.
pub struct GameClient {
    /// The server's address, for `Debug`.
    peer: SocketAddr,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Deadline for each answer.
    timeout: Duration,
    /// Reused line buffer.
    line: Vec<u8>,
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
        let _ = stream.set_nodelay(true);
        let (read, writer) = stream.into_split();
        Ok(GameClient {
            peer: addr,
            reader: BufReader::new(read),
            writer,
            timeout,
            line: Vec::new(),
        })
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
        let answer = self
            .call(
                &json!({"type": "connect", "access_token": access_token}),
                "connected",
            )
            .await?;
        user_of(&answer)
    }

    /// `SearchRoom`: the rooms the server offers.
    ///
    /// # Errors
    ///
    /// I/O, timeout and protocol errors.
    pub async fn search_rooms(&mut self) -> Result<Vec<RoomInfo>, GameClientError> {
        let mut answer = self.call(&json!({"type": "search_room"}), "rooms").await?;
        serde_json::from_value(answer["rooms"].take())
            .map_err(|e| GameClientError::Protocol(format!("rooms: {e}")))
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
        let mut message =
            serde_json::to_value(args).map_err(|e| GameClientError::Protocol(e.to_string()))?;
        message["type"] = json!("join");
        message["access_token"] = json!(access_token);
        let answer = self.call(&message, "joined").await?;
        serde_json::from_value(answer)
            .map_err(|e| GameClientError::Protocol(format!("joined: {e}")))
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
            Line::Complete => serde_json::from_slice(&self.line)
                .map_err(|e| GameClientError::Protocol(format!("not JSON: {e}"))),
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

    /// One request whose successful answer has type `expected`; an error answer is `Refused`.
    async fn call(&mut self, message: &Value, expected: &str) -> Result<Value, GameClientError> {
        let answer = self.request(message).await?;
        match answer["type"].as_str() {
            Some(t) if t == expected => Ok(answer),
            Some("error") => Err(GameClientError::Refused {
                code: answer["error"].as_str().unwrap_or_default().to_owned(),
                message: answer["message"].as_str().unwrap_or_default().to_owned(),
            }),
            _ => Err(GameClientError::Protocol(format!(
                "expected a {expected:?} answer, got type {}",
                answer["type"]
            ))),
        }
    }
}

fn user_of(answer: &Value) -> Result<Option<Player>, GameClientError> {
    serde_json::from_value(answer["user"].clone())
        .map_err(|e| GameClientError::Protocol(format!("user: {e}")))
}

#[cfg(test)]
mod tests {
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
    async fn read_line_ends_at_eof() {
        let mut reader = BufReader::new(&b"partial"[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut reader, &mut buf, 100).await.unwrap(),
            Line::Eof
        ));
    }

    #[test]
    fn blank_quoted_hides_values() {
        let shown =
            blank_quoted(r#"invalid type: string "SECRET", expected u16 at line 1 column 9"#);
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("expected u16"), "{shown}");
    }

    #[test]
    fn rooms_must_have_unique_nonempty_ids_and_valid_auth_urls() {
        let room = |id: &str, url: Option<&str>| RoomConfig {
            room_id: id.into(),
            auth_url: url.map(Into::into),
        };
        assert!(validate_rooms(&[]).is_err());
        assert!(validate_rooms(&[room("", None)]).is_err());
        assert!(validate_rooms(&[room("a", None), room("a", None)]).is_err());
        assert!(validate_rooms(&[room("a", Some("ftp://x"))]).is_err());
        assert!(validate_rooms(&[room("a", Some("https://x.example/game/"))]).is_ok());
    }

    #[test]
    fn uncovered_auth_urls_names_rooms_the_allowlist_misses() {
        let rooms = vec![
            RoomConfig {
                room_id: "a".into(),
                auth_url: Some("https://auth.example/game/eu".into()),
            },
            RoomConfig {
                room_id: "b".into(),
                auth_url: Some("https://other.example".into()),
            },
            RoomConfig {
                room_id: "c".into(),
                auth_url: None,
            },
        ];
        assert_eq!(
            RoomConfig::uncovered_auth_urls(&rooms, &["https://auth.example/game"], false),
            ["https://other.example"]
        );
    }

    #[test]
    fn a_room_accepts_its_own_auth_url_in_any_spelling_and_nothing_else() {
        let room = |url: Option<&str>| Room {
            id: "r".into(),
            auth_url: url.unwrap_or_default().into(),
            endpoint: url.and_then(normalised),
        };
        let protected = room(Some("http://127.0.0.1:8080/game"));
        assert!(protected.accepts("HTTP://127.0.0.1:8080/game/"));
        assert!(!protected.accepts(""));
        assert!(!protected.accepts("http://127.0.0.1:8080/gamex"));
        assert!(!protected.accepts("http://127.0.0.1:8080/game/x"));
        assert!(!protected.accepts("not a url"));
        let open = room(None);
        assert!(open.accepts(""));
        assert!(!open.accepts("http://127.0.0.1:8080"));
    }
}
