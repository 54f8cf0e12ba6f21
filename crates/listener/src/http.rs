//! Serving an axum router on a listener with the bounds a public port needs: a cap on open
//! connections (one more is closed at once), a deadline for a request's head and one for the
//! whole request, and a graceful stop. The admin listener and the WebSocket transport both
//! serve through it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::task::Stopped;

/// Longest wait for requests in progress when the listener stops.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections open at once; one more is closed without an answer.
    pub max_connections: usize,
    /// Longest wait for a request's head; then the connection closes.
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
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    loop {
        let (stream, peer) = tokio::select! {
            () = stopped.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "HTTP listener full: connection closed");
            continue;
        };
        // Small answers, sent at once: a WebSocket frame must not wait for the last ACK.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "HTTP connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(STOP_GRACE, graceful.shutdown()).await;
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
