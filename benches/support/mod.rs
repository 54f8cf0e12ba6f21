//! What the benches share: a fast loopback upstream answering `/api/user` for any token, token
//! names, runtimes, and the baseline caches' key and value types, shaped like the resolver's own
//! (which are crate-private) so that a baseline pays for the same hashing and cloning.
#![allow(dead_code, unreachable_pub)]

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use token_resolver::Resolver;

/// A multi-thread runtime with one worker per core of this 2-core machine.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A 43-byte `b64token` (the length of 32 random bytes in base64url), distinct for each
/// `(set, i)`: `set` is one letter naming the set the bench draws from.
pub fn token(set: char, i: u64) -> String {
    format!("{set}{i:042}")
}

/// The 16-byte user name the upstream answers for user `id`.
pub fn name(id: u64) -> String {
    format!("player{:010}", id % 10_000_000_000)
}

/// A resolver for `base` as a game server would build one, with a cache big enough for the
/// bench and a `cache_ttl` longer than any bench run.
pub fn resolver(base: &str) -> Resolver {
    Resolver::builder()
        .default_auth_url(base)
        .cache_ttl(Duration::from_secs(3600))
        .build()
        .expect("a valid resolver configuration")
}

/// How the upstream answers.
#[derive(Clone)]
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

/// An upstream on `127.0.0.1:0`, served from its own thread and runtime so that it does not
/// take the measured runtime's workers. Every bearer token is a user; the user id counts the
/// calls. Dropping it stops the server.
pub struct Upstream {
    addr: SocketAddr,
    calls: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct State {
    calls: Arc<AtomicU64>,
    config: UpstreamConfig,
}

async fn user(
    axum::extract::State(state): axum::extract::State<State>,
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
        gate.acquire().await.expect("the gate stays open").forget();
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
    pub fn start(config: UpstreamConfig) -> Upstream {
        let calls = Arc::new(AtomicU64::new(0));
        let state = State {
            calls: calls.clone(),
            config,
        };
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-upstream".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the upstream's runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .expect("bind 127.0.0.1:0");
                    addr_tx.send(listener.local_addr().unwrap()).unwrap();
                    let app = Router::new()
                        .route("/api/user", post(user))
                        .with_state(state);
                    // Not a graceful shutdown: pooled keep-alive connections would hold it open.
                    tokio::select! {
                        served = axum::serve(listener, app) => served.expect("the upstream serves"),
                        _ = stopped => {}
                    }
                });
            })
            .expect("the upstream's thread");
        let addr = addr_rx.recv().expect("the upstream's address");
        Upstream {
            addr,
            calls,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, the authUrl.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/api/user`, what the baselines POST to.
    pub fn user_url(&self) -> String {
        format!("http://{}/api/user", self.addr)
    }

    /// Requests answered with a user so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the naive baseline parses an answer into.
#[derive(Debug, serde::Deserialize)]
pub struct NaiveUser {
    pub id: i64,
    pub name: String,
}

/// What an integrator writes by hand: one reqwest POST and a serde_json parse per call, no cache.
pub async fn naive_resolve(client: &reqwest::Client, url: &str, token: &str) -> NaiveUser {
    client
        .post(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("the upstream answers")
        .error_for_status()
        .expect("a 200")
        .json()
        .await
        .expect("a user")
}

/// The floor for a network miss: a bare hyper client POST, the body read, nothing parsed.
pub type HyperClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<axum::body::Bytes>,
>;

pub fn hyper_client() -> HyperClient {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

pub async fn hyper_post(client: &HyperClient, uri: &axum::http::Uri, token: &str) -> usize {
    use http_body_util::BodyExt;
    let request = axum::http::Request::post(uri.clone())
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_LENGTH, "0")
        .body(http_body_util::Empty::new())
        .expect("a request");
    let response = client.request(request).await.expect("the upstream answers");
    assert_eq!(response.status(), 200);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    body.len()
}

// The baseline caches' key: the resolver's `CacheKey` is (Arc<Endpoint>, the token inline up to
// 48 bytes) and is looked up through `Borrow<dyn KeyView>` without building a key; this is the
// same, with the endpoint as an `Arc<str>`.

/// Both parts of a key, owned or borrowed.
pub trait KeyView {
    fn endpoint(&self) -> &str;
    fn token(&self) -> &[u8];
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.endpoint().hash(state);
        self.token().hash(state);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.token() == other.token() && self.endpoint() == other.endpoint()
    }
}

impl Eq for dyn KeyView + '_ {}

/// The owned key the baselines store.
#[derive(Clone)]
pub struct Key {
    pub endpoint: Arc<str>,
    pub token: smallvec::SmallVec<[u8; 48]>,
}

impl KeyView for Key {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }
    fn token(&self) -> &[u8] {
        &self.token
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn KeyView).hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn KeyView) == (other as &dyn KeyView)
    }
}

impl Eq for Key {}

/// A borrowed key: what a look-up builds instead of a `Key`.
pub struct KeyRef<'a> {
    pub endpoint: &'a str,
    pub token: &'a str,
}

impl KeyView for KeyRef<'_> {
    fn endpoint(&self) -> &str {
        self.endpoint
    }
    fn token(&self) -> &[u8] {
        self.token.as_bytes()
    }
}

/// The user a baseline cache holds, shaped like `token_resolver::User`.
#[derive(Debug, Clone)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub extra: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    pub stale: bool,
}

/// A baseline cache's value, shaped like the resolver's `Cached`: cloning it is an `Arc` clone,
/// and the deadline is nanoseconds since an origin, as the resolver's `Deadline`.
#[derive(Debug, Clone)]
pub enum Value {
    User { user: Arc<User>, fresh_until: u64 },
    Rejected { status: u16, fresh_until: u64 },
}

/// `instant` in nanoseconds since the first call.
fn nanos(instant: Instant) -> u64 {
    static ORIGIN: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
    instant.saturating_duration_since(*ORIGIN).as_nanos() as u64
}

impl Value {
    pub fn user(id: i64) -> Value {
        Value::answered(id, name(id as u64))
    }

    /// The entry for an answer of `id` and `name`, fresh for an hour.
    pub fn answered(id: i64, name: String) -> Value {
        Value::User {
            user: Arc::new(User {
                id,
                name,
                extra: None,
                stale: false,
            }),
            fresh_until: nanos(Instant::now() + Duration::from_secs(3600)),
        }
    }

    fn fresh_until(&self) -> u64 {
        match self {
            Value::User { fresh_until, .. } | Value::Rejected { fresh_until, .. } => *fresh_until,
        }
    }
}

/// Derives each entry's lifetime from its deadline, as the resolver's cache does.
struct PerEntryTtl;

impl moka::Expiry<Key, Value> for PerEntryTtl {
    fn expire_after_create(&self, _: &Key, value: &Value, now: Instant) -> Option<Duration> {
        Some(Duration::from_nanos(
            value.fresh_until().saturating_sub(nanos(now)),
        ))
    }
}

/// A bare moka cache configured as the resolver configures its own: capacity and a per-entry
/// time to live.
pub fn moka_cache(capacity: u64) -> moka::sync::Cache<Key, Value> {
    moka::sync::Cache::builder()
        .max_capacity(capacity)
        .expire_after(PerEntryTtl)
        .build()
}
