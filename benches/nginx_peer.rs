//! The nginx peer, side by side: what a user would deploy instead of embedding the resolver is
//! nginx's `auth_request` to the integrator's `/api/user`, cached with `proxy_cache` (and
//! `proxy_cache_lock`), in front of their game API. One small axum route is served two ways in
//! one run, both driven by the same load client over 64 keep-alive connections, every token
//! already cached (a warm-up goes first):
//!
//! - `nginx`: nginx (2 workers) with `auth_request` to the reference API's `/api/user`, then
//!   `proxy_pass` to the route, which has no auth of its own;
//! - `Authenticated`: the route served directly, with the `axum` feature's extractor.
//!
//! Alternating rounds of a fixed time each; the table shows each row's median round (by
//! throughput), and the median of the per-round ratios with its range. Target: `Authenticated`
//! >= 2x nginx's throughput, with a lower p99.
//!
//! `cargo bench --bench nginx_peer`; skipped with a note where `nginx` is not installed
//! (`apt-get install nginx`).

use token_resolver_support::bench as support;
use token_resolver_support::closed_loop::{closed_loop, median, HttpCaller, Run};
use token_resolver_support::Nginx;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use token_resolver::axum::Authenticated;
use token_resolver::Resolver;
use token_resolver_player::IntegratorClient;
use token_resolver_reference_api::{ApiConfig, ReferenceApi};

use support::LoopbackServer;

/// Keep-alive connections of the load client, one token each.
const CONNECTIONS: usize = 64;
/// Measured rounds, alternating which row goes first.
const ROUNDS: usize = 5;
/// How long each row runs in each round.
const ROUND_TIME: Duration = Duration::from_secs(2);

/// The game route behind nginx: nginx has let the request through, and says no more.
async fn behind_nginx() -> Json<Value> {
    Json(json!({ "ok": true }))
}

/// The game route served directly: the player as the resolver found them.
async fn direct(Authenticated(user): Authenticated) -> Json<Value> {
    Json(json!({ "id": user.id, "name": user.name }))
}

/// An axum app on a thread of its own with a two-worker runtime, as a game API would run.
struct App {
    addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl App {
    fn start(router: Router) -> App {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("game-api")
            .enable_all()
            .build()
            .expect("the app's runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        runtime.spawn(async move { axum::serve(listener, router).await });
        App {
            addr,
            _runtime: runtime,
        }
    }
}

/// `CONNECTIONS` keep-alive connections to `addr`, each sending `GET /profile` with its own
/// token, one request at a time, for `ROUND_TIME`.
async fn drive(addr: SocketAddr, tokens: &Arc<Vec<String>>) -> Run {
    let mut callers = Vec::with_capacity(CONNECTIONS);
    for token in tokens.iter().take(CONNECTIONS) {
        callers.push(HttpCaller::bearer_get(addr, "game.example", "/profile", token).await);
    }
    closed_loop(callers, ROUND_TIME).await
}

/// `count` access tokens from the reference API at `base`, one per device login.
async fn tokens(base: &str, count: usize) -> Vec<String> {
    let mut tokens = Vec::with_capacity(count);
    for i in 0..count {
        let mut client = IntegratorClient::new(base).expect("a client");
        client
            .login_device(&format!("bench-device-{i}"))
            .await
            .expect("a device login");
        tokens.push(
            client
                .fetch_access_token()
                .await
                .expect("a token")
                .secret()
                .to_owned(),
        );
    }
    tokens
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    println!("nginx_peer: one axum route behind nginx auth_request + proxy_cache, and with Authenticated");
    println!();
    let Some(nginx) = Nginx::binary() else {
        println!("skipped: nginx is not installed (apt-get install nginx runs this row)");
        return;
    };
    let api = ReferenceApi::new(ApiConfig::default()).expect("the reference API");
    let served = api.clone();
    let integrator = LoopbackServer::start("reference-api", move || served.router())
        .expect("the reference API serves");
    let base = integrator.base();
    let resolver = Resolver::builder()
        .default_auth_url(&base)
        .build()
        .expect("a resolver");
    let behind = App::start(Router::new().route("/profile", get(behind_nginx)));
    let authenticated = App::start(
        Router::new()
            .route("/profile", get(direct))
            .with_state(resolver),
    );
    let integrator_addr: SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let nginx = Nginx::start(
        &nginx,
        2,
        &Nginx::proxy_cache_peer(behind.addr, integrator_addr),
    );

    let client = support::runtime();
    client.block_on(async {
        let tokens = Arc::new(tokens(&base, CONNECTIONS).await);
        // Warm-up: every token cached on both paths, every connection pool filled.
        for addr in [nginx.addr, authenticated.addr] {
            let warm = drive(addr, &tokens).await;
            assert_eq!(warm.errors, 0, "the warm-up at {addr} had refusals");
        }
        let rounds = alternate(nginx.addr, authenticated.addr, &tokens).await;
        let errors: usize = rounds.iter().map(|(n, a)| n.errors + a.errors).sum();
        // All hits: each token reached /api/user once through nginx and once through the
        // resolver, in the warm-up.
        let calls = api.user_requests();
        assert!(
            calls <= 2 * CONNECTIONS as u64,
            "{calls} calls to /api/user: a path did not cache"
        );
        print_table(&rounds, errors, calls);
    });
}

/// [`ROUNDS`] rounds of both paths, alternating which goes first.
async fn alternate(
    nginx: SocketAddr,
    authenticated: SocketAddr,
    tokens: &Arc<Vec<String>>,
) -> Vec<(Run, Run)> {
    let mut rounds: Vec<(Run, Run)> = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let (n, a) = if round % 2 == 0 {
            let n = drive(nginx, tokens).await;
            (n, drive(authenticated, tokens).await)
        } else {
            let a = drive(authenticated, tokens).await;
            (drive(nginx, tokens).await, a)
        };
        rounds.push((n, a));
    }
    rounds
}

/// The table of both paths' median rounds, and the targets' verdicts.
fn print_table(rounds: &[(Run, Run)], errors: usize, calls: u64) {
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|(n, a)| a.per_second / n.per_second)
        .collect();
    let p99_lower = rounds.iter().filter(|(n, a)| a.p99 < n.p99).count();
    let ratio = median(ratios.clone());
    let (low, high) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
    println!(
        "{CONNECTIONS} connections, {ROUNDS} alternating rounds of {} s each, all cache hits",
        ROUND_TIME.as_secs()
    );
    println!();
    println!("| row | requests/s | p50 | p99 | vs nginx (median, range) |");
    println!("|---|---:|---:|---:|---|");
    for (label, pick) in [
        ("nginx auth_request + proxy_cache", 0),
        ("Authenticated (axum feature)", 1),
    ] {
        let mut runs: Vec<&Run> = rounds
            .iter()
            .map(|(n, a)| if pick == 0 { n } else { a })
            .collect();
        runs.sort_by(|x, y| x.per_second.total_cmp(&y.per_second));
        let run = runs[runs.len() / 2];
        let vs = if pick == 0 {
            "1.00x".to_owned()
        } else {
            format!("{ratio:.2}x ({low:.2}x-{high:.2}x)")
        };
        println!(
            "| {label} | {:.0} | {} | {} | {vs} |",
            run.per_second,
            ms(run.p50),
            ms(run.p99)
        );
    }
    println!();
    println!(
        "target: >= 2x nginx's throughput: {} ({ratio:.2}x, median of {ROUNDS} per-round ratios); lower p99: {} (in {p99_lower} of {ROUNDS} rounds); errors: {errors}; /api/user calls: {calls}",
        if ratio >= 2.0 { "met" } else { "missed" },
        if p99_lower * 2 > ROUNDS { "met" } else { "missed" },
    );
}
