//! The scripted upstream: an axum server on `127.0.0.1:0` whose every answer the test's handler
//! chooses, which counts and records what it sees. A handler that panics fails the test when the
//! server is dropped, as reqwest's test server does.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::FutureExt;

/// What the scripted upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body_len: usize,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct Counts {
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    /// What each handler that panicked said; the server's drop fails the test with them.
    panics: Mutex<Vec<String>>,
}

/// An upstream on `127.0.0.1:0` that answers every request with what the test's handler says.
pub struct Scripted {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Scripted {
    /// Starts a server that answers each request with `handler(n, seen)`, `n` counting from 0.
    pub async fn start<F, Fut>(handler: F) -> Scripted
    where
        F: Fn(usize, Seen) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let app = Router::new().fallback(move |req: Request| {
            let (c, handler) = (c.clone(), handler.clone());
            async move {
                let n = c.requests.fetch_add(1, Ordering::SeqCst);
                let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                c.max_in_flight.fetch_max(now, Ordering::SeqCst);
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .unwrap_or_default();
                let seen = Seen {
                    method: parts.method,
                    path: parts.uri.path().to_owned(),
                    headers: parts.headers,
                    body_len: body.len(),
                };
                c.seen.lock().unwrap().push(seen.clone());
                // A panic in the handler would only kill this connection's task, and the test
                // would see a reset; it is kept instead, and fails the test on drop.
                let response = match AssertUnwindSafe(handler(n, seen)).catch_unwind().await {
                    Ok(response) => response,
                    Err(panic) => {
                        c.panics.lock().unwrap().push(panic_message(panic.as_ref()));
                        StatusCode::INTERNAL_SERVER_ERROR.into_response()
                    }
                };
                c.in_flight.fetch_sub(1, Ordering::SeqCst);
                response
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Scripted { addr, counts, task }
    }

    /// A server answering every request with the same status, headers and body.
    pub async fn always(
        status: u16,
        headers: &'static [(&'static str, &'static str)],
        body: &'static [u8],
    ) -> Scripted {
        Scripted::start(move |_, _| async move { respond(status, headers, body) }).await
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.counts.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.counts.seen.lock().unwrap().clone()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
        let panics = self.counts.panics.lock().unwrap().clone();
        if !panics.is_empty() && !std::thread::panicking() {
            panic!("a handler of the scripted server panicked: {panics:?}");
        }
    }
}

/// The message a panic carried.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// A response with this status, headers and body.
pub fn respond(
    status: u16,
    headers: &[(&'static str, &'static str)],
    body: &'static [u8],
) -> Response {
    let mut response = (StatusCode::from_u16(status).unwrap(), Body::from(body)).into_response();
    for (name, value) in headers {
        response.headers_mut().append(*name, value.parse().unwrap());
    }
    response
}

/// A 200 answer for user `id` named `name`.
pub fn user_answer(id: i64, name: &str) -> Response {
    let body = serde_json::json!({ "id": id, "name": name }).to_string();
    (StatusCode::OK, [("content-type", "application/json")], body).into_response()
}

/// The token [`api_answering`] accepts.
pub const GOOD_TOKEN: &str = "good-token";

/// An upstream that checks the bearer token: `Bearer good-token` gets `valid(seen)`, anything
/// else a conforming 401 with `WWW-Authenticate: Bearer`. For `check` tests that break one
/// rule of the 200 answer at a time.
pub async fn api_answering<F>(valid: F) -> Scripted
where
    F: Fn(&Seen) -> Response + Clone + Send + Sync + 'static,
{
    Scripted::start(move |_, seen| {
        let valid = valid.clone();
        async move {
            if seen.header("authorization") == Some(&format!("Bearer {GOOD_TOKEN}")) {
                valid(&seen)
            } else {
                respond(
                    401,
                    &[("www-authenticate", "Bearer error=\"invalid_token\"")],
                    b"",
                )
            }
        }
    })
    .await
}

/// A conforming 200 answer for user 7 "grace", with `Cache-Control` and JSON content type.
pub fn conforming_answer() -> Response {
    respond(
        200,
        &[
            ("content-type", "application/json"),
            ("cache-control", "private, max-age=30"),
        ],
        br#"{"id":7,"name":"grace"}"#,
    )
}
