//! The admin listener, apart from the port players use, for operators and their tools, served
//! for any [`AdminNode`] (the game server, the sidecar): `GET /metrics` (Prometheus text),
//! `GET /healthz` (the process serves), `GET /readyz` (the server takes players: what the node
//! names, and a configured Redis tier's invalidation channel subscribed), and, for the
//! integrator, `POST /admin/revoke` (`revoke`). Anything else is 404, a wrong method 405.
//!
//! It has its own small connection cap and deadlines, so a flood or a slow client on it does
//! not reach the game port. Keep it on loopback or a private network: it is not meant for
//! players.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;

use crate::node::AdminNode;
use crate::revoke;
use crate::telemetry::{self, Metrics};
use token_resolver_listener::http::{self, HttpLimits};
use token_resolver_listener::AdminSecret;
use token_resolver_listener::ServerTask;

/// Longest request body the admin listener reads.
const MAX_BODY_BYTES: usize = 4 * 1024;
/// Longest wait for the admin listener's requests in progress when it stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(6);

/// What the admin listener serves and the bounds it keeps.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// What `/metrics` renders; `None` answers it 404 (no recorder was installed).
    /// Default: `None`.
    pub metrics: Option<Metrics>,
    /// Connections open at once; one more is closed without an answer. Default: 16.
    pub max_connections: usize,
    /// Longest wait for a request's head. Default: 5 s.
    pub header_timeout: Duration,
    /// Longest a request may take, body included; then 408. Default: 10 s.
    pub request_timeout: Duration,
    /// The secret `POST /admin/revoke` requires; `None` turns the endpoint off (404).
    /// Default: `None`.
    pub revoke_secret: Option<AdminSecret>,
    /// Longest `POST /admin/revoke` waits for the shared tier to take a revocation before it
    /// answers 503 with `Retry-After` (applied here, still being delivered, but not yet known
    /// to other nodes). Default: 1 s.
    pub revoke_ack_within: Duration,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            metrics: None,
            max_connections: 16,
            header_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            revoke_secret: None,
            revoke_ack_within: Duration::from_secs(1),
        }
    }
}

/// An admin listener serving in a tokio task, from [`spawn`] (the game server's
/// `RunningGameServer::spawn_admin` calls it for its own node). Dropping it
/// stops it at once; [`shutdown`](Self::shutdown) lets requests in progress finish.
#[derive(Debug)]
pub struct RunningAdmin {
    local_addr: SocketAddr,
    task: ServerTask,
}

impl RunningAdmin {
    /// The address the admin listener listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and waits a few seconds for requests in progress.
    pub async fn shutdown(self) {
        self.task.shutdown(SHUTDOWN_GRACE).await;
    }
}

/// What the handlers read.
#[derive(Clone)]
struct AdminState {
    node: Arc<dyn AdminNode>,
    metrics: Option<Metrics>,
    revoke_secret: Option<AdminSecret>,
    revoke_ack_within: Duration,
}

/// Binds `addr` and serves the admin router for `node`.
///
/// # Errors
///
/// The I/O error of binding `addr`.
pub async fn spawn(
    addr: SocketAddr,
    node: Arc<dyn AdminNode>,
    config: AdminConfig,
) -> io::Result<RunningAdmin> {
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    if config.metrics.is_some() {
        node.register_metrics();
    }
    let limits = HttpLimits {
        max_connections: config.max_connections.max(1),
        // Operators and the integrator's notifier, not the public: no per-address share.
        max_connections_per_address: config.max_connections.max(1),
        header_timeout: config.header_timeout,
        request_timeout: config.request_timeout,
    };
    let router = router(AdminState {
        node,
        metrics: config.metrics,
        revoke_secret: config.revoke_secret,
        revoke_ack_within: config.revoke_ack_within,
    });
    let task = ServerTask::spawn(|stopped| http::serve(listener, router, limits, stopped));
    tracing::info!(%local_addr, "admin listener listening");
    Ok(RunningAdmin { local_addr, task })
}

fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/admin/revoke", post(revoke))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// `GET /metrics`: every metric of the process, in the Prometheus text format.
async fn metrics(State(state): State<AdminState>) -> Response {
    match &state.metrics {
        Some(metrics) => {
            record_readiness(&not_ready(&*state.node));
            record_alive_tasks();
            (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                metrics.render(),
            )
                .into_response()
        }
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "not_found", "message": "no metrics recorder is installed"})),
        )
            .into_response(),
    }
}

/// Sets [`READY`](telemetry::READY) and every [`NOT_READY`](telemetry::NOT_READY) reason from
/// what `/readyz` would answer now (every reason a node gives is one of
/// [`NOT_READY_REASONS`](telemetry::NOT_READY_REASONS)).
fn record_readiness(not_ready: &[&'static str]) {
    metrics::gauge!(telemetry::READY).set(if not_ready.is_empty() { 1.0 } else { 0.0 });
    for reason in telemetry::NOT_READY_REASONS {
        let failing = not_ready.contains(&reason);
        metrics::gauge!(telemetry::NOT_READY, "reason" => reason).set(if failing {
            1.0
        } else {
            0.0
        });
    }
}

/// Sets [`ALIVE_TASKS`](telemetry::ALIVE_TASKS) from the runtime serving this scrape.
fn record_alive_tasks() {
    let alive = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    metrics::gauge!(telemetry::ALIVE_TASKS).set(alive as f64);
}

/// `POST /admin/revoke`: see `revoke`.
async fn revoke(State(state): State<AdminState>, headers: HeaderMap, body: Bytes) -> Response {
    let (secret, within) = (state.revoke_secret.as_ref(), state.revoke_ack_within);
    revoke::revoke(&*state.node, secret, &headers, &body, within).await
}

/// `GET /healthz`: 200 while the process serves.
async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// `GET /readyz`: 200 when the server takes players; otherwise 503 naming what is not ready.
async fn readyz(State(state): State<AdminState>) -> Response {
    let not_ready = not_ready(&*state.node);
    if not_ready.is_empty() {
        Json(json!({"ready": true})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ready": false, "not_ready": not_ready})),
        )
            .into_response()
    }
}

/// What keeps the server from taking players: what the node says, and
/// `shared_cache_invalidation` (a Redis tier whose channel is not subscribed).
fn not_ready(node: &dyn AdminNode) -> Vec<&'static str> {
    let mut reasons = node.not_ready();
    let resolver = node.resolver();
    if resolver.has_shared_cache() && !resolver.shared_cache_subscribed() {
        reasons.push("shared_cache_invalidation");
    }
    reasons
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": "not_found", "message": "the admin listener serves /metrics, /healthz, /readyz and /admin/revoke"})),
    )
        .into_response()
}
