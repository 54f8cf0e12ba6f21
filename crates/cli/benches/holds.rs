//! What each listener holds against hostile sockets, and what a real client sees meanwhile:
//! the `token-resolver game-server` process (game port, WebSocket listener, admin listener)
//! and the reference API (in this process), with their default limits. Not a criterion bench:
//! it prints one table.
//!
//! Each row opens its hostile sockets, each of which connects and then sends nothing (the
//! attack on held connections: silent sockets, squatters that never log in), from `addresses` loopback
//! source addresses (127.66.x.y), and keeps them open while a real client from 127.0.0.1 does
//! [`OPS`] operations one after another: a fresh connection each, retried every 50 ms until
//! served. Its latency (until served) is shown idle and under the attack, from the same run:
//!
//! - `admin`: `GET /healthz` (a private listener, 16 connections, no per-address share: silent
//!   sockets are closed at the 5 s head deadline, which bounds the wait);
//! - `game port`: open, `connect` with a token, `connected` (64 sessions per address; one more
//!   is told `too_many_connections`; a session that does not log in is closed at 10 s);
//! - `WebSocket`: upgrade, `connect`, `connected` (the same share, and silent sockets before
//!   the upgrade count against it);
//! - `reference API`: `POST /api/user` (64 connections per address, 10 s head deadline).
//!
//! `cargo bench -p token-resolver-cli --bench holds`. The harness raises its file limit to the
//! hard limit, which the game server inherits.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::json;
use token_resolver_player::GameClient;
use token_resolver_reference_api::{ApiConfig, ReferenceApi};
use token_resolver_support::ws::{ask, open};
use token_resolver_support::{
    connect_from, get_and_close, login_and_take_token, raise_file_limit, GameServerProcess,
};
use tokio::net::TcpStream;

/// Operations of the real client per row and per phase.
const OPS: usize = 100;
/// The longest the real client waits for one operation before it counts as refused.
const GIVE_UP: Duration = Duration::from_secs(15);
/// The admin secret the game server is started with.
const ADMIN_SECRET: &str = "bench-admin-secret-of-32-bytes!!";

/// A listener and what the real client does on it.
#[derive(Clone, Copy)]
enum Target {
    Admin(SocketAddr),
    GamePort(SocketAddr),
    WebSocket(SocketAddr),
    ReferenceApi(SocketAddr),
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Admin(_) => "admin",
            Target::GamePort(_) => "game port",
            Target::WebSocket(_) => "WebSocket",
            Target::ReferenceApi(_) => "reference API",
        }
    }

    fn addr(self) -> SocketAddr {
        match self {
            Target::Admin(a)
            | Target::GamePort(a)
            | Target::WebSocket(a)
            | Target::ReferenceApi(a) => a,
        }
    }

    /// One operation of the real client; whether it was served.
    async fn once(self, token: &str, user: &reqwest::Client) -> bool {
        match self {
            Target::Admin(addr) => get_and_close(addr, "/healthz")
                .await
                .starts_with("HTTP/1.1 200"),
            Target::GamePort(addr) => match GameClient::open(addr).await {
                Ok(mut client) => client
                    .connect(Some(token))
                    .await
                    .is_ok_and(|me| me.is_some()),
                Err(_) => false,
            },
            Target::WebSocket(addr) => match open(addr, "", None).await {
                Ok(mut ws) => {
                    let answer =
                        ask(&mut ws, json!({"type": "connect", "access_token": token})).await;
                    answer["type"] == "connected"
                }
                Err(_) => false,
            },
            Target::ReferenceApi(addr) => user
                .post(format!("http://{addr}/api/user"))
                .bearer_auth(token)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200),
        }
    }

    /// One operation retried every 50 ms until served: how long it took, `None` past
    /// [`GIVE_UP`].
    async fn served_within(self, token: &str, user: &reqwest::Client) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < GIVE_UP {
            let attempt = tokio::time::timeout(GIVE_UP, self.once(token, user)).await;
            if attempt == Ok(true) {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

/// The real client's latencies over [`OPS`] operations, sorted, and how many were refused.
async fn real_client(target: Target, token: &str) -> (Vec<Duration>, usize) {
    let user = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client");
    let mut latencies = Vec::with_capacity(OPS);
    let mut refused = 0;
    for _ in 0..OPS {
        match target.served_within(token, &user).await {
            Some(latency) => latencies.push(latency),
            None => refused += 1,
        }
    }
    latencies.sort();
    (latencies, refused)
}

/// `sockets` connections to `addr` that send nothing, from `addresses` source addresses.
async fn silent_sockets(addr: SocketAddr, sockets: usize, addresses: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(sockets);
    for i in 0..sockets {
        let n = (i % addresses) as u16;
        let from = IpAddr::V4(Ipv4Addr::new(127, 66, (n >> 8) as u8, (n & 0xff) as u8 + 1));
        held.push(connect_from(addr, from).await);
    }
    held
}

/// A latency in milliseconds.
fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// The `q` quantile of sorted `latencies`.
fn at(latencies: &[Duration], q: f64) -> Duration {
    if latencies.is_empty() {
        return GIVE_UP;
    }
    latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)]
}

fn main() {
    let limit = raise_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(limit));
}

async fn run(file_limit: u64) {
    let api = ReferenceApi::new(ApiConfig::default())
        .expect("demo users")
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind loopback");
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let game = GameServerProcess::start(
        env!("CARGO_BIN_EXE_token-resolver"),
        &[
            "--auth-url",
            &base,
            "--ws-listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[("TOKEN_RESOLVER_ADMIN_TOKEN", ADMIN_SECRET)],
    )
    .await;
    println!(
        "holds: a real client's latency (until served, retried every 50 ms) idle and while \
         hostile sockets that send nothing are held; {OPS} operations per phase; file limit \
         {file_limit}; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<14} {:>8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "listener",
        "hostile",
        "addresses",
        "idle p50",
        "idle p99",
        "held p50",
        "held p99",
        "refused"
    );
    let rows = [
        (
            Target::Admin(game.admin.expect("an admin listener")),
            240,
            1,
        ),
        (Target::GamePort(game.addr), 2_000, 1),
        (Target::GamePort(game.addr), 512, 16),
        (
            Target::WebSocket(game.websocket.expect("a WebSocket listener")),
            2_000,
            1,
        ),
        (
            Target::WebSocket(game.websocket.expect("a WebSocket listener")),
            512,
            16,
        ),
        (Target::ReferenceApi(api.local_addr()), 2_000, 1),
        (Target::ReferenceApi(api.local_addr()), 3_000, 50),
    ];
    for (target, sockets, addresses) in rows {
        let (idle, _) = real_client(target, &token).await;
        let hostile = silent_sockets(target.addr(), sockets, addresses).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (held, refused) = real_client(target, &token).await;
        drop(hostile);
        println!(
            "{:<14} {:>8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8}",
            target.name(),
            sockets,
            addresses,
            ms(at(&idle, 0.5)),
            ms(at(&idle, 0.99)),
            ms(at(&held, 0.5)),
            ms(at(&held, 0.99)),
            refused
        );
        // Let the listener see the hostile sockets go before the next row.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    api.shutdown().await;
}
