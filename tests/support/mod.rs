//! Real servers on loopback for the integration tests: the reference integrator API, and a
//! scripted upstream whose every answer a test chooses, which counts what it sees.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use token_resolver::reference_api::{ApiConfig, ReferenceApi, RunningApi};
use token_resolver::Resolver;

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
                let response = handler(n, seen).await;
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
    }
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

/// A resolver whose default authUrl is `url`, with short timeouts fit for tests.
pub fn resolver_for(url: &str) -> token_resolver::ResolverBuilder {
    Resolver::builder()
        .default_auth_url(url)
        .request_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_millis(500))
}

/// The reference API with its demo users, on `127.0.0.1:0`.
pub async fn reference_api() -> RunningApi {
    reference_api_with(ApiConfig::default()).await
}

pub async fn reference_api_with(config: ApiConfig) -> RunningApi {
    ReferenceApi::new(config)
        .expect("valid reference API config")
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("reference API binds to loopback")
}

/// Logs `username` in at the reference API and takes an access token, as a client would.
pub async fn login_and_take_token(base_url: &str, username: &str, password: &str) -> String {
    let http = reqwest::Client::new();
    let login = http
        .post(format!("{base_url}/api/login"))
        .json(&serde_json::json!({ "username": username, "password": password }))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200, "login of {username}");
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let token: serde_json::Value = http
        .post(format!("{base_url}/api/access_token"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    token["access_token"].as_str().unwrap().to_owned()
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

/// A game server embedding `resolver`, serving `rooms`, on `127.0.0.1:0`.
pub async fn game_server(
    resolver: Resolver,
    rooms: Vec<token_resolver::game_server::RoomConfig>,
) -> token_resolver::game_server::RunningGameServer {
    game_server_with(
        resolver,
        token_resolver::game_server::GameServerConfig {
            rooms,
            ..Default::default()
        },
    )
    .await
}

pub async fn game_server_with(
    resolver: Resolver,
    config: token_resolver::game_server::GameServerConfig,
) -> token_resolver::game_server::RunningGameServer {
    token_resolver::game_server::GameServer::new(resolver, config)
        .expect("valid game server config")
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("game server binds to loopback")
}

/// A room `{roomId, authUrl?}`.
pub fn room(id: &str, auth_url: Option<&str>) -> token_resolver::game_server::RoomConfig {
    token_resolver::game_server::RoomConfig {
        room_id: id.to_owned(),
        auth_url: auth_url.map(str::to_owned),
    }
}

// ---------------------------------------------------------------------------------------------
// Misbehaving upstreams for the fault-injection suites (issue 5): raw TCP servers that break
// HTTP on purpose, and a TLS server whose certificate the resolver does not trust.
// ---------------------------------------------------------------------------------------------

/// An upstream on loopback that reads each request's head and then does whatever the test's
/// behaviour does with the raw connection: stall, trickle, stream forever, cut or reset.
pub struct RawServer {
    addr: SocketAddr,
    /// TCP connections accepted.
    connections: Arc<AtomicUsize>,
    /// The head (request line and headers) of every request read, in order.
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    /// Starts on `127.0.0.1:0`; each connection runs `behaviour(n, head, stream)` once its first
    /// request head is read, `n` counting connections from 0.
    pub async fn start<F, Fut>(behaviour: F) -> RawServer
    where
        F: Fn(usize, String, tokio::net::TcpStream) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        RawServer::start_on("127.0.0.1", behaviour).await
    }

    /// As [`start`](Self::start), on another loopback address such as `127.0.0.2`.
    pub async fn start_on<F, Fut>(ip: &str, behaviour: F) -> RawServer
    where
        F: Fn(usize, String, tokio::net::TcpStream) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (c, h) = (connections.clone(), heads.clone());
        let task = tokio::spawn(async move {
            // Dropped with the accept loop when the server is: every connection task ends too.
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let n = c.fetch_add(1, Ordering::SeqCst);
                let (h, behaviour) = (h.clone(), behaviour.clone());
                tasks.spawn(async move {
                    if let Some(head) = read_head(&mut stream).await {
                        h.lock().unwrap().push(head.clone());
                        behaviour(n, head, stream).await;
                    }
                });
                while tasks.try_join_next().is_some() {}
            }
        });
        RawServer {
            addr,
            connections,
            heads,
            task,
        }
    }

    /// `http://IP:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests whose head was read.
    pub fn requests(&self) -> usize {
        self.heads.lock().unwrap().len()
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads up to the blank line ending a request head (the resolver sends no body); `None` when
/// the peer closes first or the head is absurdly long.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Writes `bytes`, ignoring a peer that already left.
pub async fn write_raw(stream: &mut tokio::net::TcpStream, bytes: &[u8]) -> bool {
    use tokio::io::AsyncWriteExt;
    stream.write_all(bytes).await.is_ok() && stream.flush().await.is_ok()
}

/// Behaviour: read the request, then never send a byte (the connection stays open).
pub async fn never_answer(_: usize, _: String, stream: tokio::net::TcpStream) {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    drop(stream);
}

/// Behaviour: a 200 head announcing a 64-byte body, then the body one byte a second.
pub async fn trickle_body(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let body = br#"{"id":1,"name":"trickled","pad":"................................"}"#;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    if !write_raw(&mut stream, head.as_bytes()).await {
        return;
    }
    for byte in body {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !write_raw(&mut stream, &[*byte]).await {
            return;
        }
    }
}

/// Behaviour: a 200 with a chunked body that never ends, 4 KiB chunks as fast as they go.
pub async fn endless_chunked(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    if !write_raw(&mut stream, head.as_bytes()).await {
        return;
    }
    let mut chunk = b"1000\r\n".to_vec();
    chunk.extend_from_slice(&[b' '; 0x1000]);
    chunk.extend_from_slice(b"\r\n");
    while write_raw(&mut stream, &chunk).await {}
}

/// Behaviour: a 200 announcing 100 bytes of body, 24 of them, then a clean close.
pub async fn short_body_then_close(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let response = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"id\":1,\"name\":\"short\"}";
    write_raw(&mut stream, response.as_bytes()).await;
    use tokio::io::AsyncWriteExt;
    let _ = stream.shutdown().await;
}

/// Behaviour: a 200 announcing 100 bytes of body, 24 of them, then a TCP reset (RST).
pub async fn reset_mid_body(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let response = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"id\":1,\"name\":\"reset\"}";
    write_raw(&mut stream, response.as_bytes()).await;
    // Let the client take the head before the reset, so the reset lands mid-body.
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream.set_zero_linger().unwrap();
    drop(stream);
}

/// Behaviour: close the connection without answering.
pub async fn close_at_once(_: usize, _: String, stream: tokio::net::TcpStream) {
    drop(stream);
}

/// An HTTPS upstream on `127.0.0.1:0` with a fresh self-signed certificate (for `localhost`
/// and `127.0.0.1`) that no client trusts. It counts handshakes that failed and HTTP requests
/// that got through (it would answer them with a user, and none should come).
pub struct UntrustedTls {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    failed_handshakes: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl UntrustedTls {
    pub async fn start() -> UntrustedTls {
        use tokio_rustls::rustls;
        let certified = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .unwrap();
        let cert = certified.cert.der().clone();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let failed_handshakes = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (c, f, r) = (
            connections.clone(),
            failed_handshakes.clone(),
            requests.clone(),
        );
        let task = tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let (acceptor, f, r) = (acceptor.clone(), f.clone(), r.clone());
                tasks.spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        f.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let mut buf = [0u8; 4096];
                    if tls.read(&mut buf).await.unwrap_or(0) > 0 {
                        r.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"id":666,"name":"over-untrusted-tls"}"#;
                        let response = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = tls.write_all(response.as_bytes()).await;
                    }
                });
                while tasks.try_join_next().is_some() {}
            }
        });
        UntrustedTls {
            addr,
            connections,
            failed_handshakes,
            requests,
            task,
        }
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// `https://localhost:PORT`
    pub fn localhost_url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn failed_handshakes(&self) -> usize {
        self.failed_handshakes.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for UntrustedTls {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Resolves `token` at `url` and asserts that it fails with `code` within `bound`; a hang
/// fails the test rather than the CI run. Returns the error and how long the call took.
pub async fn fails_within(
    resolver: &Resolver,
    url: &str,
    token: &str,
    code: token_resolver::ErrorCode,
    bound: Duration,
) -> (token_resolver::ResolveError, Duration) {
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        bound + Duration::from_secs(30),
        resolver.resolve(url, token),
    )
    .await
    .unwrap_or_else(|_| panic!("the resolution hung past {bound:?} + 30 s"));
    let elapsed = started.elapsed();
    let error = match result {
        Ok(user) => panic!("resolved {user:?}, expected {}", code.as_str()),
        Err(error) => error,
    };
    assert_eq!(error.code(), code, "{error}");
    assert!(
        elapsed <= bound,
        "{} took {elapsed:?}, over the bound of {bound:?}",
        code.as_str()
    );
    (error, elapsed)
}

/// A `token-resolver game-server` process listening on `127.0.0.1:0`, killed on drop.
pub struct GameServerProcess {
    child: std::process::Child,
    /// Where it listens, read from its first line of output.
    pub addr: SocketAddr,
    /// Kept open so that the server never writes to a closed pipe.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl GameServerProcess {
    /// Starts `token-resolver game-server --listen 127.0.0.1:0` with `args` and `envs`.
    pub async fn start(args: &[&str], envs: &[(&str, &str)]) -> GameServerProcess {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_token-resolver"))
            .args(["game-server", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(envs.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first, reader) = tokio::task::spawn_blocking(move || {
            let mut reader = std::io::BufReader::new(stdout);
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            (line, reader)
        })
        .await
        .unwrap();
        let addr = first
            .split_whitespace()
            .find_map(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no address in {first:?}"));
        GameServerProcess {
            child,
            addr,
            _stdout: reader,
        }
    }
}

impl Drop for GameServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Everything logged, as text: the writer [`capture_everything`] installs.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs, for the whole test binary, a TRACE subscriber writing every event and span (with
/// its fields) to the returned capture, and a recording metrics recorder.
pub fn capture_everything() -> (Captured, metrics_util::debugging::Snapshotter) {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    (logs, snapshotter)
}
