//! The WebSocket transport: `GET /ws` upgrades to a WebSocket whose text frames carry the
//! protocol's messages, one per frame, answered by text frames. The session's rules are the TCP
//! transport's (`session`): the same size cap, idle timeout, one message at a time, the same
//! connection cap and error codes.
//!
//! What only a browser brings is checked at the upgrade: its `Origin` must be one of
//! [`WebSocketConfig::allowed_origins`] (cross-site WebSocket hijacking), and a token in the URL
//! (which lands in access logs) is refused. A request with no `Origin` is not a browser's and is
//! accepted.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::handler::Caller;
use super::protocol::{busy_message, refusal, BAD_REQUEST};
use super::session::{self, Close, Incoming, Transport};
use super::state::Shared;
use super::telemetry::CONNECTIONS_REFUSED_TOTAL;
use token_resolver_listener::http::{self, HttpLimits};
use token_resolver_listener::ServerTask;

/// Longest wait for the client's side of the closing handshake.
const LINGER_TIME: Duration = Duration::from_millis(500);

/// The query keys that would carry a token in the URL; refused whatever their value.
const TOKEN_KEYS: [&str; 4] = ["access_token", "token", "authorization", "bearer"];

/// How the WebSocket listener admits browsers, and the bounds of its HTTP side.
#[derive(Debug, Clone)]
pub struct WebSocketConfig {
    /// The browser origins allowed to open a session, e.g. `https://play.example.com`
    /// (scheme, host and port; compared case-insensitively). A request whose `Origin` is not
    /// listed is refused with 403; a request without one (not a browser) is accepted.
    /// Default: none, so that no browser page can connect until one is allowed.
    pub allowed_origins: Vec<String>,
    /// Longest wait for the upgrade request's head. Default: 10 s.
    pub header_timeout: Duration,
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        WebSocketConfig {
            allowed_origins: Vec::new(),
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// What the upgrade handler reads.
#[derive(Clone)]
struct WsState {
    shared: Arc<Shared>,
    /// `allowed_origins`, lower-cased, without a trailing slash.
    origins: Arc<[String]>,
    /// Places for a full server's `server_busy` over the WebSocket: each holds an upgraded
    /// socket until its close handshake ends. Past them, the refusal is a plain HTTP 503.
    refusals: Arc<Semaphore>,
}

/// How many `server_busy` refusals a full server explains over WebSockets at once.
const BUSY_REFUSALS: usize = 64;

/// Binds `addr` and serves `GET /ws` for the server whose sessions share `shared`.
pub(super) async fn spawn(
    addr: SocketAddr,
    shared: Arc<Shared>,
    config: WebSocketConfig,
) -> io::Result<(SocketAddr, ServerTask)> {
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let limits = HttpLimits {
        // Room for every session and for the refusals a full server still explains.
        max_connections: shared.config.max_connections.saturating_add(BUSY_REFUSALS),
        max_connections_per_address: shared.config.max_connections_per_address,
        header_timeout: config.header_timeout,
        request_timeout: config.header_timeout,
    };
    let origins = config
        .allowed_origins
        .iter()
        .map(|o| normalise_origin(o))
        .collect();
    let router = Router::new()
        .route("/ws", get(upgrade))
        .with_state(WsState {
            shared,
            origins,
            refusals: Arc::new(Semaphore::new(BUSY_REFUSALS)),
        });
    let task = ServerTask::spawn(|stopped| http::serve(listener, router, limits, stopped));
    tracing::info!(%local_addr, "WebSocket listener listening");
    Ok((local_addr, task))
}

/// `scheme://host[:port]`, lower-cased, without a trailing slash.
fn normalise_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// `GET /ws`: checks the origin and the URL, then upgrades and runs the session, or refuses a
/// full server with `server_busy` over the WebSocket itself (a browser cannot read an HTTP
/// refusal of a WebSocket).
async fn upgrade(
    State(state): State<WsState>,
    RawQuery(query): RawQuery,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    // The listener gives every request its client's address.
    let peer = peer.map(|Extension(ConnectInfo(peer))| peer.ip());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .is_ok_and(|o| state.origins.contains(&normalise_origin(o)));
        if !allowed {
            return refuse(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                "this page's origin may not open game sessions; the server's --allow-origin lists those that may",
            );
        }
    }
    if query.as_deref().is_some_and(carries_a_token) {
        return refuse(
            StatusCode::BAD_REQUEST,
            BAD_REQUEST,
            "a token never travels in a URL (it lands in access logs); send it in the connect and join messages",
        );
    }
    let shared = state.shared;
    if shared.draining.is_cancelled() {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "the server is going away; connect to another",
        );
    }
    let max_message = shared.config.max_line_bytes;
    let ws = ws
        .max_message_size(max_message)
        .max_frame_size(max_message)
        .read_buffer_size(4 * 1024)
        .write_buffer_size(4 * 1024);
    let place = match shared.take_place(peer) {
        Ok(place) => place,
        Err(code) => return refuse_busy(ws, &state.refusals, code),
    };
    let connection = shared.next_connection();
    let span = tracing::info_span!("connection", connection, transport = "ws");
    let sessions = shared.sessions.clone();
    ws.on_upgrade(move |socket| {
        let caller = Caller { connection, peer };
        let session = session::serve(WsTransport { socket }, shared, caller, place);
        sessions.track_future(session.instrument(span))
    })
}

/// Refuses an upgrade for want of a place (`code`: `server_busy` or `too_many_connections`)
/// over the WebSocket itself, or as a plain HTTP 503 past the places for such refusals.
fn refuse_busy(ws: WebSocketUpgrade, refusals: &Arc<Semaphore>, code: &'static str) -> Response {
    metrics::counter!(CONNECTIONS_REFUSED_TOTAL, "reason" => code).increment(1);
    // An upgraded socket outlives the HTTP connection's place: bound them apart, so that a
    // flood of upgrades at a full server costs no more than BUSY_REFUSALS sockets.
    let Ok(place) = refusals.clone().try_acquire_owned() else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, code, busy_message(code));
    };
    ws.on_upgrade(move |socket| async move {
        let mut transport = WsTransport { socket };
        let busy = refusal(code, busy_message(code), true);
        let _ = transport.send(busy).await;
        transport.close(Close::Busy).await;
        drop(place);
    })
}

/// Whether a URL's query names a token key (`access_token=…`, `token=…`, …).
fn carries_a_token(query: &str) -> bool {
    query.split('&').any(|pair| {
        let key = pair.split('=').next().unwrap_or_default();
        TOKEN_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k))
    })
}

/// An HTTP refusal of the upgrade, `{"error","message"}`.
fn refuse(status: StatusCode, code: &'static str, message: &'static str) -> Response {
    (status, Json(json!({"error": code, "message": message}))).into_response()
}

/// A WebSocket carrying one message per text frame.
struct WsTransport {
    socket: WebSocket,
}

impl Transport for WsTransport {
    const NAME: &'static str = "ws";

    async fn recv(&mut self) -> io::Result<Incoming> {
        loop {
            return Ok(match self.socket.recv().await {
                None | Some(Ok(Message::Close(_))) => Incoming::Closed,
                Some(Ok(Message::Text(text))) => Incoming::Message(text.into()),
                Some(Ok(Message::Binary(_))) => Incoming::Unsupported(
                    "a binary frame carries no message here; send each message as a text frame",
                ),
                // Answered by the WebSocket layer itself; they do not count as messages, so a
                // client that only pings still meets the idle timeout.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Err(error)) if is_too_big(&error) => Incoming::TooLong,
                Some(Err(_)) => Incoming::Closed,
            });
        }
    }

    async fn send(&mut self, message: Vec<u8>) -> io::Result<()> {
        let text = String::from_utf8(message)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        self.socket
            .send(Message::Text(text.into()))
            .await
            .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e))
    }

    async fn close(mut self, how: Close) {
        let (code, reason) = match how {
            Close::Normal => (1000, "bye"),
            Close::TooBig => (1009, "message too big"),
            Close::GoingAway => (1001, "the server is going away"),
            Close::Busy => (1013, "too many connections; retry shortly"),
        };
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = self.socket.send(Message::Close(Some(frame))).await;
        // Closing the socket with unread input makes the kernel send a reset, which can
        // destroy our close frame before the client reads it. After an oversized frame
        // nothing more can be read, so the client is given the time to read ours; otherwise
        // the closing handshake is waited for, briefly.
        if how == Close::TooBig {
            return tokio::time::sleep(LINGER_TIME).await;
        }
        let handshake = async {
            while let Some(Ok(message)) = self.socket.recv().await {
                if matches!(message, Message::Close(_)) {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, handshake).await;
    }
}

/// Whether a read failed because a message or frame was over the cap.
fn is_too_big(error: &axum::Error) -> bool {
    std::error::Error::source(error)
        .and_then(|e| e.downcast_ref::<tungstenite::Error>())
        .is_some_and(|e| matches!(e, tungstenite::Error::Capacity(_)))
}
