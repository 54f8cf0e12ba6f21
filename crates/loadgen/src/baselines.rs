//! What `token-resolver load` and the benches both measure against: servers on loopback that
//! run on a thread and runtime of their own (so that they do not take the measured runtime's
//! workers), an upstream answering `/api/user` for any token, and the baselines a game-server
//! engineer would write instead of embedding the resolver.
//!
//! The benches (through the test support crate's `bench`) and the binary's `load` use this one
//! module, so that both measure the same things.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

/// An axum router served on `127.0.0.1:0` from its own thread and current-thread runtime;
/// dropping it stops the server. Not a graceful shutdown: pooled keep-alive connections would
/// hold it open.
#[derive(Debug)]
pub struct LoopbackServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoopbackServer {
    /// Serves the router `make` builds (on the server's own runtime).
    ///
    /// # Errors
    ///
    /// Why the thread, its runtime or the listener could not start.
    pub fn start<F>(name: &str, make: F) -> Result<LoopbackServer, String>
    where
        F: FnOnce() -> Router + Send + 'static,
    {
        let (ready, started) = std::sync::mpsc::channel::<Result<SocketAddr, String>>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(e.to_string()));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                        Ok(listener) => listener,
                        Err(e) => {
                            let _ = ready.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let addr = listener.local_addr().map_err(|e| e.to_string());
                    let _ = ready.send(addr);
                    tokio::select! {
                        _ = axum::serve(listener, make()) => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|e| e.to_string())?;
        let addr = started
            .recv()
            .map_err(|_| format!("the {name} thread ended before it started"))??;
        Ok(LoopbackServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The 16-byte user name the upstream answers for user `id`.
pub fn name(id: u64) -> String {
    format!("player{:010}", id % 10_000_000_000)
}

/// How the upstream answers.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// The `Cache-Control` of every 200 answer.
    pub cache_control: &'static str,
    /// When set, each request waits for one permit before it is answered, so a bench can hold
    /// the answers back until every caller has joined the flight.
    pub gate: Option<Arc<tokio::sync::Semaphore>>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            cache_control: "private, max-age=3600",
            gate: None,
        }
    }
}

/// An upstream answering `POST /api/user` for any bearer token with a user whose id counts the
/// calls and whose name is 16 bytes.
#[derive(Debug)]
pub struct Upstream {
    server: LoopbackServer,
    calls: Arc<AtomicU64>,
}

#[derive(Clone)]
struct UpstreamState {
    calls: Arc<AtomicU64>,
    config: UpstreamConfig,
}

async fn any_user(
    axum::extract::State(state): axum::extract::State<UpstreamState>,
    headers: HeaderMap,
) -> Response {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer.is_none_or(str::is_empty) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if let Some(gate) = &state.config.gate {
        if let Ok(permit) = gate.acquire().await {
            permit.forget();
        }
    }
    let id = state.calls.fetch_add(1, Ordering::Relaxed) + 1;
    let body = format!(r#"{{"id":{id},"name":"{}"}}"#, name(id));
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, state.config.cache_control),
        ],
        body,
    )
        .into_response()
}

impl Upstream {
    /// Starts an upstream answering as `config` says.
    ///
    /// # Errors
    ///
    /// As [`LoopbackServer::start`].
    pub fn start(config: UpstreamConfig) -> Result<Upstream, String> {
        let calls = Arc::new(AtomicU64::new(0));
        let state = UpstreamState {
            calls: calls.clone(),
            config,
        };
        let server = LoopbackServer::start("loopback-upstream", move || {
            Router::new()
                .route("/api/user", post(any_user))
                .with_state(state)
        })?;
        Ok(Upstream { server, calls })
    }

    /// `http://127.0.0.1:PORT`, the authUrl.
    pub fn base(&self) -> String {
        self.server.base()
    }

    /// `http://127.0.0.1:PORT/api/user`, what the baselines POST to.
    pub fn user_url(&self) -> String {
        format!("{}/api/user", self.server.base())
    }

    /// Requests answered with a user so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// What the hand-written baselines parse an answer into.
#[derive(Debug, serde::Deserialize)]
pub struct NaiveUser {
    /// The user's id.
    pub id: i64,
    /// The user's name.
    pub name: String,
}

/// The HTTP client of the hand-written baselines: reqwest's defaults, no proxy.
pub fn naive_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client")
}

/// What an integrator writes by hand: one reqwest POST and a serde_json parse per call.
///
/// # Errors
///
/// The transport error, a status other than 200, or a body that is not a user.
pub async fn naive_resolve(
    client: &reqwest::Client,
    url: &str,
    token: &str,
) -> Result<NaiveUser, String> {
    let response = client
        .post(url)
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if response.status() != StatusCode::OK {
        return Err(format!("HTTP {}", response.status()));
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| e.without_url().to_string())?;
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

/// The cache a game-server engineer writes by hand: a moka cache keyed by the token `String`
/// alone (moka's default hasher) holding `Arc`s, and [`naive_resolve`] on a miss. No
/// coalescing, no validation, no allowlist, no slot limit, no metrics.
#[derive(Debug)]
pub struct HandWritten {
    /// The users by token.
    pub cache: moka::sync::Cache<String, Arc<NaiveUser>>,
    /// The client of [`naive_resolve`].
    pub http: reqwest::Client,
    /// The `/api/user` URL.
    pub url: String,
}

impl HandWritten {
    /// A cache of `capacity` entries, each living `ttl`, in front of the API at `url`.
    pub fn new(url: String, capacity: u64, ttl: Duration) -> HandWritten {
        HandWritten {
            cache: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .build(),
            http: naive_client(),
            url,
        }
    }

    /// The user for `token`, and whether that took an upstream call.
    ///
    /// # Errors
    ///
    /// As [`naive_resolve`].
    pub async fn resolve(&self, token: &str) -> Result<(Arc<NaiveUser>, bool), String> {
        if let Some(user) = self.cache.get(token) {
            return Ok((user, false));
        }
        let user = Arc::new(naive_resolve(&self.http, &self.url, token).await?);
        self.cache.insert(token.to_owned(), user.clone());
        Ok((user, true))
    }
}

/// The floor for a network miss: a bare hyper client POST, the body read, nothing parsed.
pub type HyperClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<axum::body::Bytes>,
>;

/// A bare hyper client, plain HTTP only.
pub fn hyper_client() -> HyperClient {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// One bare hyper POST with the bearer token; the body's length.
///
/// # Errors
///
/// The transport error, or a status other than 200.
pub async fn hyper_post(client: &HyperClient, uri: &Uri, token: &str) -> Result<usize, String> {
    use http_body_util::BodyExt;
    let request = axum::http::Request::post(uri.clone())
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_LENGTH, "0")
        .body(http_body_util::Empty::new())
        .map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(format!("HTTP {status}"));
    }
    Ok(body.len())
}
