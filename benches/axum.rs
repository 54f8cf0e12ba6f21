//! What authentication costs an axum route on cache hits: the same handler served with no
//! auth, with the `Authenticated` extractor, and behind `AuthLayer` (its handler taking the
//! layer's identity through `Authenticated`), each called over loopback HTTP by one hyper
//! client, one request at a time, every player's token already cached.
//!
//! - `axum_hit/{no_auth,extractor,layer}`: criterion's time per request.
//! - `axum_hit_in_process/…`: the same router called as a tower service, no HTTP: the CPU that
//!   each way in costs, without loopback's noise.
//! - then a summary: the three routes called in turn, round after round, so that a load change
//!   on the machine falls on all three alike; the median and p99 latency of each, and each
//!   auth route's median over `no_auth`'s. Target: `extractor` <= 1.1x `no_auth`.
//!
//! `cargo bench --bench axum --features axum`; `docs/axum.md` has numbers.

use token_resolver_support::bench as support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, Request, StatusCode, Uri};
use axum::routing::get;
use axum::{Json, Router};
use criterion::{criterion_group, Criterion};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use support::{token, LoopbackServer, Upstream, UpstreamConfig};
use token_resolver::axum::{AuthLayer, Authenticated};
use token_resolver::Resolver;

/// Players, each with a cached token; requests go round them.
const PLAYERS: u64 = 100;
/// Rounds of the summary, each one request per route.
const ROUNDS: usize = 20_000;
/// The routes, in the order the summary calls them.
const ROUTES: [&str; 3] = ["no_auth", "extractor", "layer"];

/// The game API under measure, its upstream, and a client on the bench's runtime.
struct Fixture {
    /// The client's runtime, apart from the app's and the upstream's.
    rt: tokio::runtime::Runtime,
    /// Answers the warm-up; cache hits never reach it.
    upstream: Upstream,
    /// The app, on a thread and runtime of its own, as a game server's HTTP API would be.
    _app: LoopbackServer,
    /// `http://127.0.0.1:PORT` of the app.
    base: String,
    /// One pooled keep-alive client for every route, so that they differ only in their auth.
    client: Client,
    /// The app's resolver, for the in-process router.
    resolver: Resolver,
    /// The players' tokens, each cached by the warm-up.
    tokens: Arc<Vec<String>>,
}

/// A bare hyper client: the least a client adds to each request.
type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<axum::body::Bytes>,
>;

/// The answer of every route: a user as JSON.
async fn no_auth() -> Json<Value> {
    Json(json!({ "id": 1, "name": support::name(1) }))
}

async fn authenticated(Authenticated(user): Authenticated) -> Json<Value> {
    Json(json!({ "id": user.id, "name": user.name }))
}

/// The game API: one route per way in, the same handler behind each auth.
fn app(resolver: Resolver) -> Router {
    Router::new()
        .route("/layer", get(authenticated))
        .route_layer(AuthLayer::new(resolver.clone()))
        .route("/extractor", get(authenticated))
        .route("/no_auth", get(no_auth))
        .with_state(resolver)
}

impl Fixture {
    fn new() -> Fixture {
        let rt = support::runtime();
        let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
        let resolver = support::resolver(&upstream.base());
        let served = resolver.clone();
        let app =
            LoopbackServer::start("game-api", move || app(served)).expect("the game API starts");
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let tokens: Vec<String> = (0..PLAYERS).map(|i| token('a', i)).collect();
        let f = Fixture {
            rt,
            upstream,
            base: app.base(),
            _app: app,
            client,
            resolver,
            tokens: Arc::new(tokens),
        };
        f.rt.block_on(async {
            for route in ROUTES {
                let uri = f.uri(route);
                for t in f.tokens.iter() {
                    f.call(&uri, t).await;
                }
            }
        });
        assert_eq!(
            f.upstream.calls(),
            PLAYERS,
            "one call per player, then hits"
        );
        f
    }

    fn uri(&self, route: &str) -> Uri {
        format!("{}/{route}", self.base)
            .parse()
            .expect("a valid URI")
    }

    /// One `GET` with the player's bearer token, the body read; panics on anything but 200.
    async fn call(&self, uri: &Uri, token: &str) {
        let request = Request::get(uri.clone())
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(http_body_util::Empty::new())
            .expect("a valid request");
        let response = self.client.request(request).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.expect("a body");
        black_box(body.to_bytes());
    }
}

fn axum_hit(c: &mut Criterion) {
    let f = Fixture::new();
    let mut group = c.benchmark_group("axum_hit");
    for route in ROUTES {
        let uri = f.uri(route);
        group.bench_function(route, |b| {
            b.iter_custom(|iters| {
                f.rt.block_on(async {
                    let start = Instant::now();
                    for i in 0..iters {
                        f.call(&uri, &f.tokens[(i % PLAYERS) as usize]).await;
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
    in_process(c, &f);
    // `--test` (each bench once, as CI runs them) and `--list` measure nothing.
    if !std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        summary(&f);
    }
}

/// The same router called as a tower service, with no HTTP or socket: what each way in costs
/// in CPU alone, without loopback's noise.
fn in_process(c: &mut Criterion, f: &Fixture) {
    use tower_service::Service;
    let router = app(f.resolver.clone());
    let mut group = c.benchmark_group("axum_hit_in_process");
    for route in ROUTES {
        let path = format!("/{route}");
        let bearers: Vec<String> = f.tokens.iter().map(|t| format!("Bearer {t}")).collect();
        group.bench_function(route, |b| {
            b.iter_custom(|iters| {
                f.rt.block_on(async {
                    let mut router = router.clone();
                    let start = Instant::now();
                    for i in 0..iters {
                        let request = Request::get(path.as_str())
                            .header(header::AUTHORIZATION, &bearers[(i % PLAYERS) as usize])
                            .body(axum::body::Body::empty())
                            .expect("a valid request");
                        std::future::poll_fn(|cx| {
                            Service::<Request<axum::body::Body>>::poll_ready(&mut router, cx)
                        })
                        .await
                        .expect("infallible");
                        let response = router.call(request).await.expect("infallible");
                        assert_eq!(response.status(), StatusCode::OK);
                        let body = response.into_body().collect().await.expect("a body");
                        black_box(body.to_bytes());
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

/// The routes called in turn for `ROUNDS` rounds; prints each one's median and p99 and the
/// ratio of medians to `no_auth`.
fn summary(f: &Fixture) {
    let uris: Vec<Uri> = ROUTES.iter().map(|r| f.uri(r)).collect();
    let mut latencies: Vec<Vec<Duration>> = vec![Vec::with_capacity(ROUNDS); ROUTES.len()];
    f.rt.block_on(async {
        for round in 0..ROUNDS {
            let t = &f.tokens[round % PLAYERS as usize];
            // A different route first each round, so that no route always follows another.
            for k in 0..ROUTES.len() {
                let r = (round + k) % ROUTES.len();
                let start = Instant::now();
                f.call(&uris[r], t).await;
                latencies[r].push(start.elapsed());
            }
        }
    });
    let quantile = |l: &mut Vec<Duration>, q: f64| {
        l.sort_unstable();
        l[((l.len() - 1) as f64 * q) as usize]
    };
    let medians: Vec<Duration> = latencies.iter_mut().map(|l| quantile(l, 0.5)).collect();
    println!("\naxum_hit summary: {ROUNDS} rounds, the routes in turn, {PLAYERS} cached players");
    for (i, route) in ROUTES.iter().enumerate() {
        println!(
            "  {route:<10} median {:>7.1} us  p99 {:>7.1} us  {:.3}x no_auth",
            medians[i].as_secs_f64() * 1e6,
            quantile(&mut latencies[i], 0.99).as_secs_f64() * 1e6,
            medians[i].as_secs_f64() / medians[0].as_secs_f64(),
        );
    }
    assert_eq!(
        f.upstream.calls(),
        PLAYERS,
        "every measured request was a cache hit"
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = axum_hit
}
criterion::criterion_main!(benches);
