//! The sidecar beside its peers, on this machine in one run. Not a criterion bench: it prints
//! one table.
//!
//! 1. `/v1/resolve`: 64 keep-alive connections resolving tokens already cached (a warm-up goes
//!    first), against a bare hyper server answering a fixed JSON body of the same shape.
//!    Target: >= 0.8x its throughput.
//! 2. gRPC `Check` (ext_authz): 64 channels checking cached tokens, against a bare tonic
//!    `Authorization` service that answers OK with the same headers. Target: >= 0.8x.
//! 3. nginx `auth_request` to the sidecar's `/v1/authorize` (the example configuration as
//!    shipped, with the sidecar granting nginx its answers and purging them on revocation),
//!    against nginx `auth_request` to the integrator's `/api/user` cached with `proxy_cache`,
//!    both in front of the same API route. Target: >= 1.0x its throughput, with a lower p99.
//!    Skipped with a note where nginx or its purge module is not installed.
//!    Then the same configuration against itself on a second nginx (an A/A row, no target):
//!    the spread of the ratio when nothing differs, to read the row above against.
//!    Then, 200 times, a token nginx holds, its user revoked at the admin listener, and the
//!    time until nginx no longer answers from its cache (the sidecar's purge).
//! 4. A ban through `/v1/events`: 200 times, a session resolved, its user revoked at the admin
//!    listener (`POST /admin/revoke`), and the time until a foreign server, reading the event
//!    stream, has closed the player's socket and the player reads its end. Target: p99 < 5 ms.
//!
//! Rows 1-3 alternate their two contenders over 5 rounds of 2 s; each shows its median round (by
//! throughput) and the median of the per-round ratios with their range. The servers run on a
//! 2-worker runtime each, the load on another; all share the machine's 2 cores.
//!
//! `cargo bench -p token-resolver-sidecar --bench sidecar`.

use token_resolver_support::bench as support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse,
};
use envoy_types::ext_authz::v3::{CheckResponseExt, OkHttpResponseBuilder};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
use http_body_util::Full;
use hyper::body::Bytes;
use serde_json::{json, Value};
use support::{Upstream, UpstreamConfig};
use token_resolver::Resolver;
use token_resolver_sessions::{spawn_admin, AdminConfig, AdminSecret};
use token_resolver_sidecar::{NginxCache, Sidecar, SidecarConfig};
use token_resolver_support::closed_loop::{
    closed_loop, median, Caller, HttpCaller, MakeRequest, Run,
};
use token_resolver_support::{Nginx, SseReader};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// Connections (or channels) of the load.
const CONNECTIONS: usize = 64;
/// Measured rounds, alternating which contender goes first.
const ROUNDS: usize = 5;
/// How long each contender runs in each round.
const ROUND_TIME: Duration = Duration::from_secs(2);
/// Bans of the event row.
const BANS: usize = 200;
/// The admin listener's secret.
const SECRET: &str = "sidecar-bench-admin-secret-32-bytes";
/// The fixed body of the bare HTTP server: the shape of a `/v1/resolve` answer.
const FIXED_BODY: &str = r#"{"user":{"id":1,"name":"bench-user-0000001"},"expires_at":null}"#;

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream");
    let base = upstream.base();
    let servers = server_runtime("sidecar");
    // Where the example's nginx takes purges.
    let purge = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let (sidecar, grpc, admin) = servers.block_on(async {
        let resolver = Resolver::builder()
            .default_auth_url(&base)
            .build()
            .expect("a resolver");
        let config = SidecarConfig {
            nginx_cache: Some(NginxCache::new(&format!("http://{purge}/purge")).unwrap()),
            ..SidecarConfig::default()
        };
        let sidecar = Sidecar::new(resolver, config);
        let admin = spawn_admin(
            "127.0.0.1:0".parse().unwrap(),
            sidecar.admin_node(),
            AdminConfig {
                revoke_secret: Some(AdminSecret::new(SECRET).unwrap()),
                ..AdminConfig::default()
            },
        )
        .await
        .expect("the admin listener");
        let grpc = sidecar
            .spawn_grpc("127.0.0.1:0".parse().unwrap())
            .await
            .expect("gRPC");
        let running = sidecar
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .expect("HTTP");
        (running, grpc, admin)
    });
    let peers = server_runtime("peers");
    let bare_http = peers.block_on(bare_http());
    let bare_grpc = peers.block_on(bare_grpc());
    let behind = peers.block_on(behind_api());

    println!(
        "sidecar: {CONNECTIONS} connections, {ROUNDS} alternating rounds of {} s, all cache hits; {} cores",
        ROUND_TIME.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| row | requests/s | p50 | p99 | vs the peer (median, range) | target |");
    println!("|---|---|---|---|---|---|");
    let client = support::runtime();
    client.block_on(async {
        let tokens: Arc<Vec<String>> = Arc::new(
            (0..CONNECTIONS as u64)
                .map(|i| support::token('s', i))
                .collect(),
        );
        let http = sidecar.local_addr();
        let resolve = |addr: SocketAddr| resolve_callers(addr, tokens.clone());
        let warm = closed_loop(resolve(http).await, Duration::from_millis(200)).await;
        assert_eq!(warm.errors, 0, "the warm-up had refusals");
        let rounds = alternate(|| resolve(http), || resolve(bare_http)).await;
        print_pair(
            "POST /v1/resolve",
            "bare hyper, fixed JSON",
            &rounds,
            Target::AtLeast(0.8),
        );

        let grpc_addr = grpc.local_addr();
        let check = |addr: SocketAddr| grpc_callers(addr, tokens.clone());
        let rounds = alternate(|| check(grpc_addr), || check(bare_grpc)).await;
        print_pair(
            "gRPC Check",
            "bare tonic, always OK",
            &rounds,
            Target::AtLeast(0.8),
        );

        match Nginx::binary().filter(|_| Nginx::purge_module().is_some()) {
            Some(binary) => {
                let upstream_addr = base.trim_start_matches("http://").parse().unwrap();
                let example = |http: String| {
                    Nginx::start_with(&binary, 2, &Nginx::load_purge_module(), &http)
                };
                // Measured as shipped: without the debugging header the purge row reads.
                let with_sidecar = example(Nginx::sidecar_example(http, behind, purge));
                let peer =
                    Nginx::start(&binary, 2, &Nginx::proxy_cache_peer(behind, upstream_addr));
                let get = |addr: SocketAddr| authorize_callers(addr, tokens.clone());
                let warm = closed_loop(get(peer.addr).await, Duration::from_millis(200)).await;
                assert_eq!(warm.errors, 0, "the peer's warm-up had refusals");
                let rounds = alternate(|| get(with_sidecar.addr), || get(peer.addr)).await;
                print_pair(
                    "nginx auth_request -> /v1/authorize",
                    "nginx auth_request + proxy_cache -> /api/user",
                    &rounds,
                    Target::AtLeastWithLowerP99(1.0),
                );
                // The row's own spread: the same configuration twice (its purge location on
                // an address nothing purges; there are no revocations in these rounds).
                let twin = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .expect("a free port");
                let same = example(Nginx::sidecar_example(http, behind, twin));
                let rounds = alternate(|| get(with_sidecar.addr), || get(same.addr)).await;
                print_pair(
                    "nginx auth_request -> /v1/authorize",
                    "the same, a second nginx (A/A: the row's own spread)",
                    &rounds,
                    Target::Spread,
                );
                drop(same);
                // The same, saying which answers came from nginx's cache (on the same purge
                // address, so once the first has stopped).
                drop(with_sidecar);
                let showing_hits =
                    example(Nginx::sidecar_example_showing_hits(http, behind, purge));
                purges(showing_hits.addr, http, admin.local_addr()).await;
            }
            None => println!(
                "| nginx rows | skipped: nginx or its purge module is not installed (apt-get install nginx libnginx-mod-http-cache-purge) | | | | |"
            ),
        }
        bans(http, admin.local_addr()).await;
    });
    drop(servers);
    drop(peers);
}

/// A multi-thread runtime of two workers named `name`, for servers.
fn server_runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A bare hyper HTTP/1.1 server answering every request with [`FIXED_BODY`].
async fn bare_http() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    let response = hyper::Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(FIXED_BODY.as_bytes())))
                        .expect("a response");
                    Ok::<_, std::convert::Infallible>(response)
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    addr
}

/// A bare tonic `Authorization` service: OK, with the headers the sidecar adds.
struct AlwaysOk;

#[tonic::async_trait]
impl Authorization for AlwaysOk {
    async fn check(
        &self,
        _request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let mut ok = OkHttpResponseBuilder::new();
        ok.add_header("x-user-id", "1", None, false).add_header(
            "x-user-name",
            "bench-user-0000001",
            None,
            true,
        );
        let mut response = CheckResponse::with_status(tonic::Status::ok("authorized"));
        response.set_http_response(ok);
        Ok(tonic::Response::new(response))
    }
}

async fn bare_grpc() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AuthorizationServer::new(AlwaysOk))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    addr
}

/// The API route behind both nginx configurations.
async fn behind_api() -> SocketAddr {
    let router = axum::Router::new().route(
        "/api/profile",
        axum::routing::get(|| async { axum::Json(json!({"ok": true})) }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// One connection per token, each resolving its token at `/v1/resolve`.
async fn resolve_callers(addr: SocketAddr, tokens: Arc<Vec<String>>) -> Vec<HttpCaller> {
    let mut callers = Vec::with_capacity(tokens.len());
    for token in tokens.iter() {
        let body = Bytes::from(json!({"access_token": token}).to_string());
        let make: MakeRequest = Box::new(move || {
            hyper::Request::post("/v1/resolve")
                .header("host", "sidecar")
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .expect("a request")
        });
        callers.push(HttpCaller::open(addr, make).await);
    }
    callers
}

/// One connection per token, each asking for `/api/profile` with its bearer.
async fn authorize_callers(addr: SocketAddr, tokens: Arc<Vec<String>>) -> Vec<HttpCaller> {
    let mut callers = Vec::with_capacity(tokens.len());
    for token in tokens.iter() {
        callers.push(HttpCaller::bearer_get(addr, "game.example", "/api/profile", token).await);
    }
    callers
}

/// A gRPC channel checking one token, as Envoy would.
struct GrpcCaller {
    client: AuthorizationClient<tonic::transport::Channel>,
    request: CheckRequest,
}

impl Caller for GrpcCaller {
    async fn call(&mut self) -> bool {
        match self.client.check(self.request.clone()).await {
            Ok(answer) => answer.into_inner().status.is_some_and(|s| s.code == 0),
            Err(_) => false,
        }
    }
}

/// One channel per token.
async fn grpc_callers(addr: SocketAddr, tokens: Arc<Vec<String>>) -> Vec<GrpcCaller> {
    let mut callers = Vec::with_capacity(tokens.len());
    for token in tokens.iter() {
        let client = AuthorizationClient::connect(format!("http://{addr}"))
            .await
            .expect("a gRPC channel");
        let headers = HashMap::from([("authorization".to_owned(), format!("Bearer {token}"))]);
        let request = CheckRequest {
            attributes: Some(AttributeContext {
                request: Some(Request {
                    http: Some(HttpRequest {
                        headers,
                        ..HttpRequest::default()
                    }),
                    ..Request::default()
                }),
                ..AttributeContext::default()
            }),
        };
        callers.push(GrpcCaller { client, request });
    }
    callers
}

/// [`ROUNDS`] rounds of the contender (`ours`) and its peer, alternating which goes first.
async fn alternate<A, B, FA, FB, CA, CB>(ours: A, peer: B) -> Vec<(Run, Run)>
where
    A: Fn() -> FA,
    B: Fn() -> FB,
    FA: std::future::Future<Output = Vec<CA>>,
    FB: std::future::Future<Output = Vec<CB>>,
    CA: Caller,
    CB: Caller,
{
    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let (a, b) = if round % 2 == 0 {
            let a = closed_loop(ours().await, ROUND_TIME).await;
            (a, closed_loop(peer().await, ROUND_TIME).await)
        } else {
            let b = closed_loop(peer().await, ROUND_TIME).await;
            (closed_loop(ours().await, ROUND_TIME).await, b)
        };
        rounds.push((a, b));
    }
    rounds
}

/// What a row's ratio is held to.
#[derive(Clone, Copy)]
enum Target {
    /// Our throughput at least this many times the peer's.
    AtLeast(f64),
    /// The same, and a lower p99 in most rounds.
    AtLeastWithLowerP99(f64),
    /// None: both contenders are the same, and the range is the bench's own spread.
    Spread,
}

/// Two table lines (ours, the peer) from `rounds`, and whether `target` was met.
fn print_pair(ours: &str, peer: &str, rounds: &[(Run, Run)], target: Target) {
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|(a, b)| a.per_second / b.per_second)
        .collect();
    let middle = median(ratios.clone());
    let (low, high) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
    let errors: usize = rounds.iter().map(|(a, b)| a.errors + b.errors).sum();
    let median_round = |pick: fn(&(Run, Run)) -> Run| {
        let mut runs: Vec<Run> = rounds.iter().map(pick).collect();
        runs.sort_by(|x, y| x.per_second.total_cmp(&y.per_second));
        runs[runs.len() / 2]
    };
    let (a, b) = (median_round(|r| r.0), median_round(|r| r.1));
    let p99_lower = rounds.iter().filter(|(a, b)| a.p99 < b.p99).count();
    let most_p99_lower = p99_lower * 2 > ROUNDS;
    let target = match target {
        Target::AtLeast(ratio) => {
            format!(
                ">= {ratio:.1}x: {}",
                verdict(middle >= ratio && errors == 0)
            )
        }
        Target::AtLeastWithLowerP99(ratio) => format!(
            ">= {ratio:.1}x, lower p99 (in {p99_lower} of {ROUNDS}): {}",
            verdict(middle >= ratio && most_p99_lower && errors == 0)
        ),
        Target::Spread => format!("none: lower p99 in {p99_lower} of {ROUNDS}"),
    };
    println!(
        "| {ours} | {:.0} | {} | {} | {middle:.2}x ({low:.2}x-{high:.2}x) | {target}; errors {errors} |",
        a.per_second,
        ms(a.p50),
        ms(a.p99)
    );
    println!(
        "| {peer} | {:.0} | {} | {} | 1.00x | |",
        b.per_second,
        ms(b.p50),
        ms(b.p99)
    );
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// [`BANS`] times: a token nginx keeps (at `nginx`, asked twice), its user revoked at the
/// admin listener, and the time until nginx's answer for it no longer comes from its cache.
async fn purges(nginx: SocketAddr, sidecar: SocketAddr, admin: SocketAddr) {
    let http = reqwest::Client::new();
    let url = format!("http://{nginx}/api/profile");
    let cached = |token: String| {
        let request = http.get(&url).bearer_auth(token);
        async move {
            let answer = request.send().await.unwrap();
            assert_eq!(answer.status(), 200);
            answer
                .headers()
                .get("x-token-resolver-cache")
                .is_some_and(|v| v == "HIT")
        }
    };
    let mut delays = Vec::with_capacity(BANS);
    for i in 0..BANS {
        let token = support::token('p', i as u64);
        cached(token.clone()).await;
        assert!(cached(token.clone()).await, "nginx did not keep the answer");
        let user_id = resolve_user(&http, sidecar, json!({"access_token": token})).await;
        let started = Instant::now();
        revoke_user(&http, admin, user_id).await;
        while cached(token.clone()).await {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "nginx kept a revoked answer"
            );
        }
        delays.push(started.elapsed());
    }
    print_delays(
        "a ban to nginx's cache dropping the answer (the sidecar's purge)",
        delays,
        None,
    );
}

/// [`BANS`] times: a session resolved, its user revoked at the admin listener, and the time
/// until a foreign server reading `/v1/events` has closed the player's socket and the player
/// reads its end.
async fn bans(sidecar: SocketAddr, admin: SocketAddr) {
    let http = reqwest::Client::new();
    // The foreign server: its players' sockets by session, closed on `revoked`.
    let open: Arc<Mutex<HashMap<String, TcpStream>>> = Arc::default();
    let events = http
        .get(format!("http://{sidecar}/v1/events"))
        .send()
        .await
        .unwrap();
    let closing = open.clone();
    tokio::spawn(async move {
        let mut events = SseReader::new(events);
        while let Some(event) = events.next().await {
            let session = event.data["session"].as_str().unwrap_or_default();
            drop(closing.lock().unwrap().remove(session));
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let game = listener.local_addr().unwrap();
    let mut delays = Vec::with_capacity(BANS);
    for i in 0..BANS {
        let session = format!("ban-{i}");
        let token = support::token('b', i as u64);
        let body = json!({"access_token": token, "session": session});
        let user_id = resolve_user(&http, sidecar, body).await;
        let mut player = TcpStream::connect(game).await.unwrap();
        let (server_side, _) = listener.accept().await.unwrap();
        open.lock().unwrap().insert(session, server_side);
        let started = Instant::now();
        revoke_user(&http, admin, user_id).await;
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), player.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "the player's socket was not closed"
        );
        delays.push(started.elapsed());
    }
    print_delays(
        "a ban to the foreign server's close through /v1/events",
        delays,
        Some(Duration::from_millis(5)),
    );
}

/// `POST /v1/resolve` with `body`: the user's id.
async fn resolve_user(http: &reqwest::Client, sidecar: SocketAddr, body: Value) -> i64 {
    let answer: Value = http
        .post(format!("http://{sidecar}/v1/resolve"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["user"]["id"].as_i64().expect("a user")
}

/// `POST /admin/revoke` of `user_id`.
async fn revoke_user(http: &reqwest::Client, admin: SocketAddr, user_id: i64) {
    let revoked = http
        .post(format!("http://{admin}/admin/revoke"))
        .bearer_auth(SECRET)
        .json(&json!({"user_id": user_id}))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
}

/// A table line of `delays`: p50, p99, the longest, and whether the p99 is under `target`.
fn print_delays(row: &str, mut delays: Vec<Duration>, target: Option<Duration>) {
    delays.sort();
    let at = |q: f64| delays[((delays.len() as f64 * q) as usize).min(delays.len() - 1)];
    let p99 = at(0.99);
    let target = target.map_or_else(
        || "none set".to_owned(),
        |t| format!("p99 < {} ms: {}", t.as_millis(), verdict(p99 < t)),
    );
    println!(
        "| {row} ({}) | | {} | {} | max {} | {target} |",
        delays.len(),
        ms(at(0.5)),
        ms(p99),
        ms(delays[delays.len() - 1]),
    );
}
