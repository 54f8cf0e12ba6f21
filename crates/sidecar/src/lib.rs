//! The resolver as a local service, for game servers written in C++, C#, Go
//! or Node.js: they call it on loopback over HTTP/JSON instead of embedding the library.
//!
//! - `resolve`: `POST /v1/resolve`, a token (and an optional authUrl) to `{user, expires_at}`;
//!   with a `session`, the game server's connection id, the sidecar keeps the session live.
//! - `sessions`: the named sessions, each watched by a task of its own (revocations, token
//!   expiry, re-checks), through the live-session registry of `token_resolver_sessions`; `DELETE
//!   /v1/sessions/{id}`.
//! - `answer`: the JSON errors and session-id check `resolve` and `sessions` share;
//! - `events`: what happens to named sessions (`revoked`, `reauth_required`, `resync`), kept
//!   in a bounded journal and pushed on `GET /v1/events` as Server-Sent Events; ids carry the
//!   process's epoch, and a stream that comes back with `Last-Event-ID` is sent what it
//!   missed, after `resync` when it cannot be shown to have missed nothing.
//! - `authorize`: `GET|POST /v1/authorize`, forward-auth for nginx `auth_request`, Traefik
//!   `forwardAuth` and Envoy's HTTP ext_authz.
//! - `nginx_cache`: with [`NginxCache`], nginx keeps `/v1/authorize` answers in its own cache
//!   for as long as the sidecar grants, and the sidecar purges them when a revocation comes
//!   (and, with a grants file, whatever a previous process granted when it starts).
//! - `grpc`: Envoy's ext_authz over gRPC (`Authorization/Check`), on a listener of its own
//!   ([`Sidecar::spawn_grpc`]), on the listener crate's accept loop.
//!
//! The admin listener (`/metrics`, `/healthz`, `/readyz`, `POST /admin/revoke`) is the one the
//! game server serves too ([`token_resolver_sessions::spawn_admin`]), serving the sidecar
//! through [`AdminNode`]. The listener is HTTP/1.1 with the bounds of every listener of the
//! project (`token_resolver_listener::http`). No token is in any answer, event or log line.
//!
//! ```no_run
//! use token_resolver::Resolver;
//! use token_resolver_sidecar::{Sidecar, SidecarConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let resolver = Resolver::builder().default_auth_url("https://auth.example.com").build()?;
//! let sidecar = Sidecar::new(resolver, SidecarConfig::default());
//! let running = sidecar.spawn("127.0.0.1:7360".parse()?).await?;
//! println!("POST http://{}/v1/resolve", running.local_addr());
//! # Ok(()) }
//! ```
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod answer;
mod authorize;
mod events;
// The readers of what clients and files hand the sidecar, for the fuzzers: reachable, hidden
// from the docs, outside semver.
#[doc(hidden)]
pub mod fuzzing;
mod grpc;
mod nginx_cache;
mod resolve;
mod sessions;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::response::Response;
use axum::routing::{any, delete, get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use self::events::{EVENTS_DELIVERED_TOTAL, EVENT_STREAMS_DROPPED_TOTAL, EVENT_STREAMS_OPEN};
pub use self::nginx_cache::{NginxCache, PurgeUrlError, PURGES_TOTAL, PURGE_HEADER};
pub use self::sessions::SESSIONS_RECLAIMED_TOTAL;

use self::events::Events;
use self::nginx_cache::Grants;
use self::sessions::Sessions;
use token_resolver::Resolver;
use token_resolver_listener::http::{self, HttpLimits};
use token_resolver_listener::ServerTask;
use token_resolver_sessions::{AdminNode, Pacer, Registry};

/// Longest request body read (a resolve is a token, an authUrl and a session id).
const MAX_BODY_BYTES: usize = 8 * 1024;
/// Longest wait for requests in progress when the sidecar stops.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How a [`Sidecar`] serves.
#[derive(Debug, Clone)]
pub struct SidecarConfig {
    /// Connections open at once on each listener (event streams included); one more is
    /// answered 503 (closed, on the gRPC listener). Default: 1024.
    pub max_connections: usize,
    /// Longest wait for a request's head, from accept or the last answer (on the gRPC
    /// listener: for the HTTP/2 preface, from accept). Default: 10 s.
    pub header_timeout: Duration,
    /// Longest a request may take before it is answered 408 (an event stream's head is sent
    /// at once; its events are not bounded by it). Default: 10 s.
    pub request_timeout: Duration,
    /// Longest a gRPC connection stays open with no call in flight; then it is closed.
    /// Default: 5 min.
    pub grpc_idle_timeout: Duration,
    /// Age at which a gRPC connection is told to go away (`GOAWAY`: its calls in flight end,
    /// the client opens another). Default: 30 min.
    pub grpc_max_age: Duration,
    /// How long a session whose token expired has, after `reauth_required`, to be resolved
    /// again with a new token; then it is `revoked` (`session_expired`). Default: 60 s.
    pub reauth_grace: Duration,
    /// How often each session's tokens are resolved again (through the cache); `None`: only
    /// when revocations may have been missed. Default: `None`.
    pub revalidate: Option<Duration>,
    /// Re-checks begun per second across sessions, at most. Default: 200.
    pub recheck_rate: u32,
    /// How long a session whose re-check cannot get an answer stays live; then it is
    /// `revoked` with the reason. Default: `None`, as long as the outage lasts.
    pub unverified_grace: Option<Duration>,
    /// Longest a session goes without its tokens being resolved again (through the cache)
    /// when they do not expire before: a token with no `exp`, or one far ahead, is checked at
    /// least this often (100 ms at the least), and the session `revoked` if it fell.
    /// Default: 5 min.
    pub max_unchecked: Duration,
    /// How long the sessions are kept while no stream reads `GET /v1/events`: then they are
    /// forgotten (as `DELETE /v1/sessions/{id}` would), counted in
    /// [`SESSIONS_RECLAIMED_TOTAL`], and `resync` is journaled for a game server that comes
    /// back with an older id. Reclaims the sessions of a game server that crashed. `None`:
    /// kept until their tokens expire. Default: 5 min.
    pub reclaim_after: Option<Duration>,
    /// Events the journal keeps for streams that come back. Default: 16,384.
    pub journal: usize,
    /// Events a stream may fall behind by before it is dropped (it comes back with
    /// `Last-Event-ID`). Default: 1,024.
    pub stream_buffer: usize,
    /// Lets nginx cache `/v1/authorize` answers, purged on revocation; `None`: every answer
    /// says `Cache-Control: no-store`. Default: `None`.
    pub nginx_cache: Option<NginxCache>,
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            grpc_idle_timeout: Duration::from_secs(300),
            grpc_max_age: Duration::from_secs(1800),
            reauth_grace: Duration::from_secs(60),
            revalidate: None,
            recheck_rate: 200,
            unverified_grace: None,
            max_unchecked: Duration::from_secs(300),
            reclaim_after: Some(Duration::from_secs(300)),
            journal: 16_384,
            stream_buffer: 1_024,
            nginx_cache: None,
        }
    }
}

/// The resolver as a local service: build it with [`Sidecar::new`], serve it with
/// [`Sidecar::spawn`].
#[derive(Clone)]
pub struct Sidecar {
    node: Arc<Node>,
}

/// What every request and session task shares.
struct Node {
    resolver: Resolver,
    config: SidecarConfig,
    registry: Arc<Registry>,
    sessions: Sessions,
    events: Events,
    rechecks: Pacer,
    /// What nginx may keep, with [`SidecarConfig::nginx_cache`].
    grants: Option<Arc<Grants>>,
    /// Fires when the sidecar stops: session tasks end without an event.
    cut: CancellationToken,
    /// Fires when the sidecar starts draining: `/readyz` says so.
    draining: CancellationToken,
}

impl fmt::Debug for Sidecar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sidecar")
            .field("sessions", &self.node.sessions.len())
            .field("config", &self.node.config)
            .finish_non_exhaustive()
    }
}

impl AdminNode for Node {
    fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn not_ready(&self) -> Vec<&'static str> {
        if self.draining.is_cancelled() {
            vec!["draining"]
        } else {
            Vec::new()
        }
    }

    /// The sidecar's own metrics, at zero: events by type, the streams, nginx purges by
    /// outcome, reclaimed sessions.
    fn register_metrics(&self) {
        use metrics::{describe_counter, describe_gauge};
        describe_counter!(
            EVENTS_DELIVERED_TOTAL,
            "Session events a stream sent on, by type."
        );
        describe_gauge!(
            EVENT_STREAMS_OPEN,
            "Event streams (GET /v1/events) open now."
        );
        describe_counter!(
            EVENT_STREAMS_DROPPED_TOTAL,
            "Event streams ended for falling too far behind."
        );
        describe_counter!(
            PURGES_TOTAL,
            "nginx cache purges of revoked grants, by outcome."
        );
        describe_counter!(
            SESSIONS_RECLAIMED_TOTAL,
            "Sessions left behind by a game server that stopped reading, reclaimed."
        );
        for kind in ["revoked", "reauth_required", "resync"] {
            let _ = metrics::counter!(EVENTS_DELIVERED_TOTAL, "type" => kind);
        }
        for outcome in ["purged", "absent", "failed"] {
            let _ = metrics::counter!(PURGES_TOTAL, "outcome" => outcome);
        }
        let _ = metrics::gauge!(EVENT_STREAMS_OPEN);
        let _ = metrics::counter!(EVENT_STREAMS_DROPPED_TOTAL);
        let _ = metrics::counter!(SESSIONS_RECLAIMED_TOTAL);
    }
}

impl Sidecar {
    /// A sidecar resolving with `resolver`, which also feeds it the revocations it hears (its
    /// Redis tier's, and those `/admin/revoke` applies).
    pub fn new(resolver: Resolver, config: SidecarConfig) -> Sidecar {
        let cut = CancellationToken::new();
        let grants = (config.nginx_cache.as_ref())
            .and_then(|nginx| nginx_cache::start(nginx, &resolver, &cut));
        let node = Arc::new(Node {
            grants,
            registry: Arc::default(),
            sessions: Sessions::default(),
            events: Events::new(config.journal, config.stream_buffer),
            rechecks: Pacer::new(config.recheck_rate),
            cut,
            draining: CancellationToken::new(),
            resolver,
            config,
        });
        let revocations = node.resolver.dated_revocations();
        tokio::spawn(token_resolver_sessions::listen(
            revocations,
            node.cut.clone(),
            Arc::downgrade(&node.registry),
        ));
        if let Some(after) = node.config.reclaim_after {
            tokio::spawn(sessions::reclaim(Arc::downgrade(&node), after));
        }
        Sidecar { node }
    }

    /// The routes, for an embedder serving them itself: `POST /v1/resolve`, `GET /v1/events`,
    /// `DELETE /v1/sessions/{id}`, `GET|POST /v1/authorize`, and any method on
    /// `/v1/authorize/{path}` (Envoy's HTTP ext_authz sends the client's method and path after
    /// its `path_prefix`).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v1/resolve", post(resolve::resolve))
            .route("/v1/events", get(events::stream))
            .route("/v1/sessions/{id}", delete(sessions::forget))
            .route(
                "/v1/authorize",
                get(authorize::authorize).post(authorize::authorize),
            )
            .route("/v1/authorize/{*path}", any(authorize::authorize))
            .route_layer(axum::middleware::from_fn(traced))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(self.node.clone())
    }

    /// The node the admin listener serves: give it to
    /// [`spawn_admin`](token_resolver_sessions::spawn_admin).
    pub fn admin_node(&self) -> Arc<dyn AdminNode> {
        self.node.clone()
    }

    /// Sessions kept now.
    pub fn sessions(&self) -> usize {
        self.node.sessions.len()
    }

    /// Binds `addr` and serves in a tokio task until [`RunningSidecar::shutdown`].
    ///
    /// # Errors
    ///
    /// The I/O error of binding `addr`.
    pub async fn spawn(&self, addr: SocketAddr) -> io::Result<RunningSidecar> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let config = &self.node.config;
        let limits = HttpLimits {
            max_connections: config.max_connections,
            // A loopback service: its callers are the game servers of this host.
            max_connections_per_address: config.max_connections,
            header_timeout: config.header_timeout,
            request_timeout: config.request_timeout,
        };
        let router = self.router();
        let task = ServerTask::spawn(|stopped| http::serve(listener, router, limits, stopped));
        tracing::info!(%local_addr, "sidecar listening");
        Ok(RunningSidecar {
            local_addr,
            task,
            sidecar: self.clone(),
        })
    }
}

impl Sidecar {
    /// Binds `addr` and serves Envoy's ext_authz `Authorization/Check` over gRPC (HTTP/2) in a
    /// tokio task until [`RunningGrpc::shutdown`].
    ///
    /// # Errors
    ///
    /// The I/O error of binding `addr`.
    pub async fn spawn_grpc(&self, addr: SocketAddr) -> io::Result<RunningGrpc> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let node = self.node.clone();
        let task = ServerTask::spawn(|stopped| grpc::serve(listener, node, stopped));
        tracing::info!(%local_addr, "ext_authz gRPC listener listening");
        Ok(RunningGrpc { local_addr, task })
    }
}

/// The ext_authz gRPC listener serving in a tokio task.
#[derive(Debug)]
pub struct RunningGrpc {
    local_addr: SocketAddr,
    task: ServerTask,
}

impl RunningGrpc {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and lets checks in progress finish (a few seconds at most).
    pub async fn shutdown(self) {
        self.task.shutdown(STOP_GRACE).await;
    }
}

/// A sidecar serving in a tokio task.
#[derive(Debug)]
pub struct RunningSidecar {
    local_addr: SocketAddr,
    task: ServerTask,
    sidecar: Sidecar,
}

impl RunningSidecar {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The sidecar it serves.
    pub fn sidecar(&self) -> &Sidecar {
        &self.sidecar
    }

    /// Drains: `/readyz` says `draining`, requests in progress finish (a few seconds at most),
    /// then the session tasks stop. Event streams end with the listener.
    pub async fn shutdown(self) {
        let node = &self.sidecar.node;
        node.draining.cancel();
        self.task.shutdown(STOP_GRACE).await;
        node.cut.cancel();
    }
}

/// Anything else: 404 naming the routes.
async fn not_found() -> axum::response::Response {
    answer::error(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        "the sidecar serves POST /v1/resolve, GET /v1/events, DELETE /v1/sessions/{id}, GET|POST /v1/authorize and /v1/authorize/{path}",
    )
}

/// Each request to a route in a server span that continues the trace its caller sent (W3C
/// `traceparent`), or starts a trace when tracing is on: the resolution it makes, and the call
/// to the integrator's `/api/user`, are in that trace. Without an OpenTelemetry layer in the
/// program (or with INFO off) the span is disabled, and its fields never computed.
async fn traced(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let route =
        (request.extensions().get::<axum::extract::MatchedPath>()).map_or("", |path| path.as_str());
    let span = token_resolver::trace::continue_trace(request.headers(), || {
        tracing::info_span!(
            "sidecar_request",
            otel.kind = "server",
            otel.name = %format_args!("{} {}", request.method(), route),
            http.request.method = %request.method(),
            http.route = route,
            http.response.status_code = tracing::field::Empty,
        )
    });
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}
