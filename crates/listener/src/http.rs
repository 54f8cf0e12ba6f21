//! Serving an axum router on a listener with the bounds a public port needs: a cap on open
//! connections, in all and per client address (one more is answered a quick 503 with
//! `Retry-After` and closed), a deadline for
//! each request's head counted from accept (and, on a kept-alive connection, from the end of
//! the last answer: an idle connection is closed at the same deadline), one for the whole
//! request, and a graceful stop. HTTP/1.1 only: the admin listener and the WebSocket transport
//! both serve through it, and neither means to speak HTTP/2.
//!
//! hyper's HTTP/1 connection is used directly, not hyper-util's auto builder: the auto builder
//! reads the first bytes to tell the protocols apart with no timer running, so a client that
//! sends nothing held its slot for ever, and its `http1_only` does not apply to connections
//! served with upgrades.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower_service::Service as _;

use crate::caps::{PerAddress, TurnAway};
use crate::task::Stopped;

/// Longest wait for requests in progress when the listener stops.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections open at once; one more is answered 503 with `Retry-After: 1` and closed.
    pub max_connections: usize,
    /// Connections one client address holds open at once; one more is answered the same
    /// way. `max_connections` for a private listener.
    pub max_connections_per_address: usize,
    /// Longest wait for a request's head, from accept or from the end of the last answer;
    /// then the connection closes.
    pub header_timeout: Duration,
    /// Longest a request may take, body included, before it is answered 408.
    pub request_timeout: Duration,
}

/// Serves `router` on `listener` within `limits` until `stopped` fires; then stops accepting,
/// lets requests in progress finish for a few seconds and closes idle connections.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    mut stopped: Stopped,
) {
    let router = router.layer(middleware::from_fn_with_state(
        limits.request_timeout,
        request_deadline,
    ));
    let max_connections = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max_connections));
    let per_address = PerAddress::new(limits.max_connections_per_address);
    let turn_away = TurnAway::default();
    let (stopping, stop_seen) = watch::channel(false);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    loop {
        let (stream, peer) = tokio::select! {
            () = stopped.wait() => break,
            accepted = crate::task::accept(&listener) => accepted,
        };
        let Some(address_slot) = per_address.admit(peer.ip()) else {
            tracing::debug!(%peer, "client address at its cap: connection answered 503");
            turn_away.answer(stream);
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "HTTP listener full: connection answered 503");
            turn_away.answer(stream);
            continue;
        };
        // Small answers, sent at once: a WebSocket frame must not wait for the last ACK.
        let _ = stream.set_nodelay(true);
        // Every request carries the client's address, as `axum::serve` with connect info
        // gives it.
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            router.clone().call(request)
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let mut stop_seen = stop_seen.clone();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let stop = async move {
                let _ = stop_seen.wait_for(|stopping| *stopping).await;
            };
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stop => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = ended {
                tracing::debug!(%peer, %error, "HTTP connection ended with an error");
            }
            drop((slot, address_slot));
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(STOP_GRACE, slots.acquire_many(all)).await;
}

/// Answers 408 when a request (its body included) takes longer than the deadline.
async fn request_deadline(
    State(deadline): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            axum::Json(json!({"error": "request_timeout"})),
        )
            .into_response(),
    }
}
