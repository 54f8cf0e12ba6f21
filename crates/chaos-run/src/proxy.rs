//! The integrator as the products see it: a small HTTP proxy in the run, in front of a
//! reference API, whose behaviour the run switches (answer late, answer 503, never answer).
//! Every product's authUrl is a proxy's URL; logins, logouts and bans go to the API itself.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

/// How the proxy answers now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Forwards.
    Healthy,
    /// Forwards, this many milliseconds late.
    Slow(u64),
    /// Answers 503 at once.
    Failing,
    /// Never answers (the products' own deadline ends the call).
    Silent,
}

#[derive(Debug)]
struct Shared {
    api: String,
    http: reqwest::Client,
    mode: AtomicU8,
    delay_ms: AtomicU64,
}

/// A running proxy; stops when the run's runtime does.
#[derive(Debug, Clone)]
pub(crate) struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Serves on `127.0.0.1:0`, forwarding to the API at `api` (`http://127.0.0.1:port`).
    pub(crate) async fn start(api: String) -> std::io::Result<Proxy> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared {
            api,
            http,
            mode: AtomicU8::new(0),
            delay_ms: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Proxy { addr, shared })
    }

    /// Its base URL: the authUrl the products use.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn set(&self, mode: Mode) {
        let (code, delay) = match mode {
            Mode::Healthy => (0, 0),
            Mode::Slow(ms) => (1, ms),
            Mode::Failing => (2, 0),
            Mode::Silent => (3, 0),
        };
        self.shared.delay_ms.store(delay, Ordering::SeqCst);
        self.shared.mode.store(code, Ordering::SeqCst);
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    match shared.mode.load(Ordering::SeqCst) {
        1 => {
            tokio::time::sleep(Duration::from_millis(
                shared.delay_ms.load(Ordering::SeqCst),
            ))
            .await
        }
        2 => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [("retry-after", "1")],
                "integrator failing (chaos)",
            )
                .into_response()
        }
        3 => {
            // Held until the caller gives up; a minute at most.
            tokio::time::sleep(Duration::from_secs(60)).await;
            return StatusCode::GATEWAY_TIMEOUT.into_response();
        }
        _ => {}
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 * 1024).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = shared
        .http
        .request(parts.method.clone(), format!("{}{path}", shared.api))
        .body(body);
    for (name, value) in &parts.headers {
        if !matches!(name.as_str(), "host" | "content-length" | "connection") {
            out = out.header(name, value);
        }
    }
    let Ok(answer) = out.send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if !matches!(
            name.as_str(),
            "content-length" | "transfer-encoding" | "connection"
        ) {
            if let Ok(name) = HeaderName::from_bytes(name.as_str().as_bytes()) {
                response = response.header(name, value.as_bytes());
            }
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    response
        .body(Body::from(bytes))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}
