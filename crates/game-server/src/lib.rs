//! A runnable game server that embeds a [`Resolver`]: tokio TCP, one JSON message per line.
//! It owns the server's side of the wire protocol, the rooms and who is in them and the
//! per-connection limits; the protocol's messages and [`GameClient`], its client side, are the
//! player's (`token_resolver_player`), re-exported here. It does not own token resolution:
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
//! server's own: [`ROOM_NOT_FOUND`], [`BAD_REQUEST`], [`RATE_LIMITED`] (an address whose
//! tokens keep being rejected, answered without a call), [`LINE_TOO_LONG`], [`LOGIN_TIMEOUT`],
//! [`IDLE_TIMEOUT`], [`SERVER_BUSY`] and [`TOO_MANY_CONNECTIONS`]; after the last five the
//! server closes the connection.
//!
//! The server also speaks first once: when it drains (see [`RunningGameServer::drain`]) it
//! sends `{"type":"shutdown","retry_after_ms":N}` and closes; reconnect after `N` ms.
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
//!   close), time to log in from accept, which no other message extends (then
//!   [`LOGIN_TIMEOUT`] and close), time between messages (then [`IDLE_TIMEOUT`] and close),
//!   time to read an answer (`write_timeout`, then close), concurrent connections in all
//!   ([`SERVER_BUSY`] and close) and per client address on both transports together
//!   ([`TOO_MANY_CONNECTIONS`] and close), tokens the integrator rejects per address (then
//!   [`RATE_LIMITED`]).
//!   Messages of one connection are handled one at a time, so a connection has at most one
//!   resolution under way.
//! - Error messages and logs never carry the token; a malformed request's parse error is
//!   echoed with every quoted value blanked out.
//!
//! # Layout
//!
//! - this file: [`GameServer`], which starts a server, and [`RunningGameServer`], one serving;
//! - `config`: [`RoomConfig`], [`GameServerConfig`] and [`GameServerError`];
//! - `protocol`: the game server's error codes and writing its messages (the messages
//!   themselves and reading one bounded line are `token_resolver_player::protocol`);
//! - `state`: what every session of one server shares (the resolver, the rooms and their
//!   members, the connection cap, the drain signals, the registry of live sessions);
//! - `handler`: handling one message: the game logic of connect, search, join and refresh;
//! - `session`: one session's message loop, whatever the transport, and the `Transport`
//!   trait the transports implement;
//! - `tcp`: the TCP transport: accept loop, connection cap, lines;
//! - live sessions (what each holds, the registry revocations are matched against, the
//!   revocation follower, each session's timers and re-checks) and the admin listener
//!   ([`RunningGameServer::spawn_admin`], with `POST /admin/revoke`) belong to the
//!   `token_resolver_sessions` crate, shared with the sidecar;
//! - [`telemetry`]: the `game_server_*` metric names and [`Metrics`](telemetry::Metrics), the
//!   Prometheus recorder;
//! - [`GameClient`], the client's end of the protocol, is `token_resolver_player`'s.
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod config;
// The reader of the clients' messages, for the fuzzers: reachable, hidden from the docs,
// outside semver.
#[doc(hidden)]
pub mod fuzzing;
mod handler;
mod protocol;
mod session;
mod state;
mod tcp;
pub mod telemetry;
mod websocket;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::net::TcpListener;

use self::config::validate_rooms;
pub use self::config::{GameServerConfig, GameServerError, RoomConfig};
pub use self::protocol::{
    BAD_REQUEST, IDLE_TIMEOUT, LINE_TOO_LONG, LOGIN_TIMEOUT, RATE_LIMITED, REFRESH_MISMATCH,
    ROOM_NOT_FOUND, SERVER_BUSY, SESSION_EXPIRED, TOO_MANY_CONNECTIONS,
};
use self::state::{normalised, Room, Shared};
pub use self::websocket::WebSocketConfig;
use token_resolver_listener::ServerTask;
/// The client's end of the protocol and the user its answers show: the player's, re-exported
/// under their former paths.
pub use token_resolver_player::{GameClient, GameClientError, Joined, Player, Push};
use token_resolver_player::{RoomInfo, AUTH_URL_PROPERTY};
/// The admin listener, its [`AdminNode`] and the admin secret of `POST /admin/revoke` are the
/// live sessions' (shared with the sidecar): re-exported here under their former paths.
pub use token_resolver_sessions::{spawn_admin, AdminConfig, AdminNode, AdminSecret, RunningAdmin};

/// How long [`RunningGameServer::shutdown`] lets sessions finish before they are cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long cut sessions get to notice.
const CUT_GRACE: Duration = Duration::from_secs(1);
#[cfg(doc)]
use token_resolver::{Endpoint, ErrorCode};
use token_resolver::{Identity, Resolver};

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
            (
                "max_connections_per_address",
                config.max_connections_per_address == 0,
            ),
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
        let room_infos = room_infos(&self.config, local_addr, "tcp");
        // The invalidation channel of a Redis tier starts listening now, not at the first
        // resolution: readiness waits for it.
        let _ = self.resolver.shared_cache_subscribed();
        let shared = Arc::new(Shared::new(self.resolver, rooms, room_infos, self.config));
        shared.set_accepting(true);
        tokio::spawn(token_resolver_sessions::listen(
            shared.resolver.dated_revocations(),
            shared.cut.clone(),
            Arc::downgrade(&shared.registry),
        ));
        let accepting = shared.clone();
        let task = ServerTask::spawn(|stopped| tcp::accept_loop(listener, accepting, stopped));
        tracing::info!(%local_addr, "game server listening");
        Ok(RunningGameServer {
            local_addr,
            shared,
            task: Some(task),
            websocket: None,
        })
    }
}

/// The rooms as `search_room` answers them to a client of the listener at `addr`, speaking
/// `protocol`.
fn room_infos(config: &GameServerConfig, addr: SocketAddr, protocol: &str) -> Vec<RoomInfo> {
    let host = config
        .advertised_host
        .clone()
        .unwrap_or_else(|| addr.ip().to_string());
    config
        .rooms
        .iter()
        .map(|r| RoomInfo {
            host: host.clone(),
            port: addr.port(),
            protocol: protocol.to_owned(),
            room_id: r.room_id.clone(),
            node_properties: r.auth_url.as_ref().map(|url| {
                Map::from_iter([(AUTH_URL_PROPERTY.to_owned(), Value::String(url.clone()))])
            }),
        })
        .collect()
}

/// Whom a room holds: one entry per connection that joined it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The connection's number on this server, counting from 1.
    pub connection: u64,
    /// Who the join resolved to.
    pub identity: Identity,
}

/// A [`GameServer`] serving in a tokio task, from [`GameServer::spawn`].
///
/// Dropping it closes the listener and every session at once; [`drain`](Self::drain) and
/// [`shutdown`](Self::shutdown) stop it gracefully.
#[derive(Debug)]
pub struct RunningGameServer {
    /// The bound address (the real port when 0 was asked for).
    local_addr: SocketAddr,
    /// The resolver, rooms and members, to read them.
    shared: Arc<Shared>,
    /// The TCP accept loop; the sessions run on `shared`'s task tracker. `None` once drained.
    task: Option<ServerTask>,
    /// The WebSocket listener's address and task, once [`listen_websocket`](Self::listen_websocket)
    /// started it.
    websocket: Option<(SocketAddr, ServerTask)>,
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

    /// The address of the WebSocket listener, once it listens.
    pub fn websocket_addr(&self) -> Option<SocketAddr> {
        self.websocket.as_ref().map(|(addr, _)| *addr)
    }

    /// The rooms as `search_room` answers them over TCP.
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

    /// Starts an admin listener on `addr` for this server (`/metrics`, `/healthz`, `/readyz`);
    /// it serves until its [`RunningAdmin`] is shut down or dropped, draining included.
    ///
    /// # Errors
    ///
    /// The I/O error of binding `addr`.
    pub async fn spawn_admin(
        &self,
        addr: SocketAddr,
        config: AdminConfig,
    ) -> io::Result<RunningAdmin> {
        token_resolver_sessions::spawn_admin(addr, self.shared.clone(), config).await
    }

    /// Serves the same game over WebSocket on `addr` too: `GET /ws` upgrades, each text frame
    /// is one message. Both transports share the rooms, the resolver and `max_connections`;
    /// over WebSocket, `search_room` advertises the WebSocket listener (protocol `ws`).
    ///
    /// # Errors
    ///
    /// The I/O error of binding `addr`; [`io::ErrorKind::AlreadyExists`] when a WebSocket
    /// listener runs already.
    pub async fn listen_websocket(
        &mut self,
        addr: SocketAddr,
        config: WebSocketConfig,
    ) -> io::Result<SocketAddr> {
        if self.websocket.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the WebSocket listener runs already",
            ));
        }
        let (local_addr, task) = websocket::spawn(addr, self.shared.clone(), config).await?;
        let _ = self
            .shared
            .ws_room_infos
            .set(room_infos(&self.shared.config, local_addr, "ws"));
        self.websocket = Some((local_addr, task));
        Ok(local_addr)
    }

    /// Drains: from now on `/readyz` answers 503 and no connection is accepted; every session
    /// is told `{"type":"shutdown","retry_after_ms":N}` as soon as it is not handling a
    /// message, and closes. Sessions still open after `grace` are cut.
    pub async fn drain(mut self, grace: Duration) {
        tracing::info!(grace_ms = grace.as_millis() as u64, "draining");
        metrics::gauge!(telemetry::DRAINING).set(1.0);
        let shared = self.shared.clone();
        shared.draining.cancel();
        if let Some(task) = self.task.take() {
            task.shutdown(Duration::from_secs(1)).await;
        }
        if let Some((_, task)) = self.websocket.take() {
            task.shutdown(Duration::from_secs(1)).await;
        }
        shared.sessions.close();
        if tokio::time::timeout(grace, shared.sessions.wait())
            .await
            .is_err()
        {
            tracing::warn!("sessions still open after the drain: cutting them");
            shared.cut.cancel();
            let _ = tokio::time::timeout(CUT_GRACE, shared.sessions.wait()).await;
        }
        // The revocation listener goes with the last session.
        shared.cut.cancel();
    }

    /// Drains with a grace of 5 s; see [`drain`](Self::drain).
    pub async fn shutdown(self) {
        self.drain(SHUTDOWN_GRACE).await;
    }
}

impl Drop for RunningGameServer {
    fn drop(&mut self) {
        self.shared.cut.cancel();
    }
}
