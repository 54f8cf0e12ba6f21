//! The game server's WebSocket transport next to its TCP one, and what a node holding many
//! WebSocket sessions costs: both measured against the real `token-resolver game-server`
//! process, resolving at an upstream in this process (every token answered, cache hits after
//! the warm-up).
//!
//! 1. `joins`: joins on connections already open and connected, and `arrivals`: players
//!    arriving as a client does (open a connection, `connect`, `join`, close); through TCP and
//!    through WebSocket, in alternating rounds, with the game server's CPU time per operation.
//!    Each round's WebSocket/TCP ratio; the table shows the median round and the median ratio
//!    with its range. Target: joins through WebSocket >= 0.8x through TCP. An arrival over
//!    WebSocket also pays its HTTP upgrade and closing handshake, about twice the system calls
//!    of a TCP arrival: its row says what that costs, with no target.
//! 2. `sessions`: 10,000 WebSocket sessions, each connected and joined, held by one process:
//!    its RSS per session (target <= 16 KiB per idle session), the latency of players
//!    arriving while they are held, and revocations while they are held: 200 times, one held
//!    player's user revoked at the admin listener (`POST /admin/revoke`), the time until that
//!    player's client reads `revoked` (target: p99 under 5 ms).
//!
//! `cargo bench -p token-resolver-cli --bench websocket` (`-- --sessions N` holds another
//! number; `-- --sessions-only` runs the second part alone). The harness
//! raises its own file limit to the hard limit, which the game server inherits.

use token_resolver_support::bench as support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use token_resolver_player::{RoomInfo, RoomJoinArgs};
use token_resolver_support::{raise_file_limit, GameServerProcess};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use support::{Upstream, UpstreamConfig};

/// Measured rounds of each row, alternating which transport goes first.
const ROUNDS: usize = 5;
/// Clients at once in the transport rows.
const CONCURRENCY: usize = 32;
/// Arrivals per transport per round.
const ARRIVALS: usize = 4_000;
/// Joins on open connections per transport per round.
const JOINS: usize = 20_000;
/// Distinct players of the transport rows (warmed into the cache first).
const PLAYERS: u64 = 1_000;
/// Sessions held by default in the sessions row.
const SESSIONS: usize = 10_000;
/// Players arriving while the sessions are held, and how many at once.
const ARRIVALS_WHILE_HELD: usize = 2_000;
const CONCURRENCY_WHILE_HELD: usize = 8;
/// Held sessions revoked one at a time in the sessions row.
const REVOKED_WHILE_HELD: usize = 200;
/// The admin listener's secret (`TOKEN_RESOLVER_ADMIN_TOKEN`).
const ADMIN_SECRET: &str = "bench-admin-secret-of-32-bytes!!";

/// The two ways in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp(SocketAddr),
    WebSocket(SocketAddr),
}

/// One open connection, speaking the protocol one message at a time.
enum Conn {
    Tcp(BufReader<TcpStream>),
    WebSocket(Box<WebSocketStream<MaybeTlsStream<TcpStream>>>),
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Tcp(_) => "TCP",
            Transport::WebSocket(_) => "WebSocket",
        }
    }

    async fn open(self) -> Conn {
        match self {
            Transport::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await.expect("a TCP connection");
                stream.set_nodelay(true).expect("TCP_NODELAY");
                Conn::Tcp(BufReader::new(stream))
            }
            Transport::WebSocket(addr) => {
                let url = format!("ws://{addr}/ws");
                let (ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
                    .await
                    .expect("a WebSocket");
                Conn::WebSocket(Box::new(ws))
            }
        }
    }
}

impl Conn {
    /// Sends `message` and returns the next answer, which must be of type `expected`.
    async fn ask(&mut self, message: &str, expected: &str) -> String {
        let answer = match self {
            Conn::Tcp(stream) => {
                let mut line = Vec::with_capacity(message.len() + 1);
                line.extend_from_slice(message.as_bytes());
                line.push(b'\n');
                stream.get_mut().write_all(&line).await.expect("sent");
                let mut answer = String::new();
                stream.read_line(&mut answer).await.expect("an answer");
                answer
            }
            Conn::WebSocket(ws) => {
                ws.send(Message::text(message)).await.expect("sent");
                loop {
                    match ws.next().await {
                        Some(Ok(Message::Text(text))) => break text.as_str().to_owned(),
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                        other => panic!("no answer frame: {other:?}"),
                    }
                }
            }
        };
        assert!(
            answer.contains(&format!(r#""type":"{expected}""#)),
            "expected {expected}, got {answer}"
        );
        answer
    }

    /// Waits for a pushed message of type `expected`, skipping others.
    async fn pushed(&mut self, expected: &str) {
        let wanted = format!(r#""type":"{expected}""#);
        loop {
            let text = match self {
                Conn::Tcp(stream) => {
                    let mut line = String::new();
                    stream.read_line(&mut line).await.expect("a pushed line");
                    line
                }
                Conn::WebSocket(ws) => match ws.next().await {
                    Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
                    Some(Ok(_)) => continue,
                    other => panic!("no pushed frame: {other:?}"),
                },
            };
            if text.contains(&wanted) || text.contains(&format!(r#""error":"{expected}""#)) {
                return;
            }
        }
    }

    /// Closes as a well-behaved client does.
    async fn close(self) {
        match self {
            Conn::Tcp(stream) => drop(stream),
            Conn::WebSocket(mut ws) => {
                let _ = SinkExt::close(&mut ws).await;
            }
        }
    }
}

/// The `connect` and lobby `join` messages of one player on one transport.
struct Messages {
    connect: String,
    join: String,
}

/// The messages of players `0..count` of `set` on `transport`, the lobby read from the
/// server's own room list.
async fn messages(transport: Transport, set: char, count: u64) -> Vec<Messages> {
    let mut conn = transport.open().await;
    let rooms: Value =
        serde_json::from_str(&conn.ask(r#"{"type":"search_room"}"#, "rooms").await).unwrap();
    conn.close().await;
    let rooms: Vec<RoomInfo> = serde_json::from_value(rooms["rooms"].clone()).unwrap();
    let lobby = rooms
        .iter()
        .find(|r| r.room_id == "lobby")
        .expect("a lobby");
    let args = serde_json::to_value(RoomJoinArgs::new(lobby, Map::new())).unwrap();
    (0..count)
        .map(|i| {
            let token = support::token(set, i);
            let mut join = args.clone();
            join["type"] = json!("join");
            join["access_token"] = json!(token);
            Messages {
                connect: json!({"type": "connect", "access_token": token}).to_string(),
                join: join.to_string(),
            }
        })
        .collect()
}

/// One player's arrival: open, connect, join, close. Returns the time it took.
async fn arrive(transport: Transport, player: &Messages) -> Duration {
    let started = Instant::now();
    let mut conn = transport.open().await;
    conn.ask(&player.connect, "connected").await;
    conn.ask(&player.join, "joined").await;
    let took = started.elapsed();
    conn.close().await;
    took
}

/// What one run of a row gave.
struct Run {
    count: usize,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    /// The game server's CPU time (user and system) per operation, when measured.
    server_cpu: Option<Duration>,
}

impl Run {
    /// The run of client `tasks` started at `started`: every latency they measured.
    async fn gathered(tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>, started: Instant) -> Run {
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.expect("a client task"));
        }
        Run::of(latencies, started.elapsed())
    }

    fn of(mut latencies: Vec<Duration>, elapsed: Duration) -> Run {
        latencies.sort();
        let at =
            |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
        Run {
            count: latencies.len(),
            per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
            p50: at(0.50),
            p99: at(0.99),
            server_cpu: None,
        }
    }
}

/// `total` arrivals over `concurrency` clients, each a player of `players` in turn.
async fn arrivals(
    transport: Transport,
    players: &std::sync::Arc<Vec<Messages>>,
    total: usize,
    concurrency: usize,
) -> Run {
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|c| {
            let players = players.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(total / concurrency);
                for i in (c..total).step_by(concurrency) {
                    latencies.push(arrive(transport, &players[i % players.len()]).await);
                }
                latencies
            })
        })
        .collect();
    Run::gathered(tasks, started).await
}

/// `total` joins over `CONCURRENCY` connections opened and connected first.
async fn joins(transport: Transport, players: &std::sync::Arc<Vec<Messages>>, total: usize) -> Run {
    let mut conns = Vec::with_capacity(CONCURRENCY);
    for c in 0..CONCURRENCY {
        let mut conn = transport.open().await;
        conn.ask(&players[c].connect, "connected").await;
        conns.push(conn);
    }
    let started = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(c, mut conn)| {
            let players = players.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(total / CONCURRENCY);
                for _ in (c..total).step_by(CONCURRENCY) {
                    let asked = Instant::now();
                    conn.ask(&players[c].join, "joined").await;
                    latencies.push(asked.elapsed());
                }
                conn.close().await;
                latencies
            })
        })
        .collect();
    Run::gathered(tasks, started).await
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The CPU time process `pid` has used so far (user and system), from `/proc`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc stat");
    // After the command name, which is in parentheses: fields 14 and 15 are utime and stime.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a stat line") + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

/// The rounds of one row (arrivals or joins), TCP and WebSocket alternating, and its lines;
/// `pid` is the game server's, whose CPU time each run is charged.
async fn transport_row<F, Fut>(label: &str, tcp: Transport, ws: Transport, pid: u32, run: F)
where
    F: Fn(Transport) -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    let run = |t: Transport| {
        let measured = run(t);
        async move {
            let cpu = cpu_time(pid);
            let mut result = measured.await;
            result.server_cpu = Some((cpu_time(pid) - cpu) / result.count as u32);
            result
        }
    };
    let mut rounds: Vec<(Run, Run)> = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let (t, w) = if round % 2 == 0 {
            let t = run(tcp).await;
            (t, run(ws).await)
        } else {
            let w = run(ws).await;
            (run(tcp).await, w)
        };
        rounds.push((t, w));
    }
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|(t, w)| w.per_second / t.per_second)
        .collect();
    let ratio = median(ratios.clone());
    let (low, high) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
    for (transport, pick) in [(tcp, 0), (ws, 1)] {
        let mut runs: Vec<&Run> = rounds
            .iter()
            .map(|(t, w)| if pick == 0 { t } else { w })
            .collect();
        runs.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
        let run = runs[runs.len() / 2];
        let vs = if pick == 0 {
            "1.00x".to_owned()
        } else {
            format!("{ratio:.2}x ({low:.2}x-{high:.2}x)")
        };
        let cpu = run.server_cpu.unwrap_or_default();
        println!(
            "| {label} | {} | {:.0} | {} | {} | {:.0} µs | {vs} |",
            transport.name(),
            run.per_second,
            ms(run.p50),
            ms(run.p99),
            cpu.as_secs_f64() * 1e6,
        );
    }
    if label == "joins" {
        println!(
            "target: joins through WebSocket >= 0.8x through TCP: {} (median of {ROUNDS} per-round ratios {ratio:.2}x)",
            if ratio >= 0.8 { "met" } else { "missed" }
        );
    }
}

/// The resident set of process `pid`, from `/proc`.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Starts a game server resolving at `base`, listening on TCP and WebSocket.
async fn start_game_server(base: &str, max_connections: usize) -> GameServerProcess {
    let max = max_connections.to_string();
    let server = GameServerProcess::start(
        env!("CARGO_BIN_EXE_token-resolver"),
        &[
            "--auth-url",
            base,
            "--ws-listen",
            "127.0.0.1:0",
            "--max-connections",
            &max,
            // Every player of the bench comes from 127.0.0.1.
            "--max-connections-per-address",
            &max,
            "--idle-timeout",
            "3600",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[("TOKEN_RESOLVER_ADMIN_TOKEN", ADMIN_SECRET)],
    )
    .await;
    assert!(
        server.websocket.is_some(),
        "no WebSocket listener in {}",
        server.banner
    );
    server
}

/// Holds `count` WebSocket sessions (each connected and joined) on a fresh game server, then
/// measures its RSS per session and players arriving meanwhile.
async fn sessions_row(base: &str, count: usize) {
    let server = start_game_server(base, count + 1_000).await;
    let ws = Transport::WebSocket(server.websocket.unwrap());
    let players = std::sync::Arc::new(messages(ws, 'w', PLAYERS).await);
    // Warm-up: the runtime's threads, the resolver's connections, the cache of the arrivals.
    arrivals(ws, &players, PLAYERS as usize, CONCURRENCY_WHILE_HELD).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_bytes(server.pid());

    let held_players = messages(ws, 's', count as u64).await;
    let opened = Instant::now();
    let mut held = Vec::with_capacity(count);
    for chunk in held_players.chunks(64) {
        let opening = chunk.iter().map(|player| async move {
            let mut conn = ws.open().await;
            let connected: Value =
                serde_json::from_str(&conn.ask(&player.connect, "connected").await).unwrap();
            conn.ask(&player.join, "joined").await;
            (conn, connected["user"]["id"].as_i64().expect("a user id"))
        });
        held.extend(futures_util::future::join_all(opening).await);
    }
    let opening = opened.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_bytes(server.pid());
    let per_session = after.saturating_sub(before) as f64 / count as f64;

    let meanwhile = arrivals(ws, &players, ARRIVALS_WHILE_HELD, CONCURRENCY_WHILE_HELD).await;
    let joins_meanwhile = joins(ws, &players, JOINS / 4).await;
    // Every held session is still there and answers.
    for (conn, _) in held.iter_mut().step_by((count / 100).max(1)) {
        conn.ask(r#"{"type":"search_room"}"#, "rooms").await;
    }
    let admin = server.admin.expect("the admin listener");
    let revocations = revoked_while_held(admin, &mut held).await;
    println!(
        "| sessions held | {count} (opened in {:.1} s) |",
        opening.as_secs_f64()
    );
    println!(
        "| game-server RSS | {:.1} MiB before, {:.1} MiB held |",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    println!(
        "| RSS per session | {:.1} KiB (target <= 16 KiB: {}) |",
        per_session / 1024.0,
        if per_session <= 16.0 * 1024.0 {
            "met"
        } else {
            "missed"
        }
    );
    println!(
        "| {ARRIVALS_WHILE_HELD} arrivals meanwhile ({CONCURRENCY_WHILE_HELD} at once) | {:.0}/s, p50 {}, p99 {} (open, connect, join) |",
        meanwhile.per_second,
        ms(meanwhile.p50),
        ms(meanwhile.p99)
    );
    println!(
        "| {} joins meanwhile ({CONCURRENCY} connections) | {:.0}/s, p50 {}, p99 {} (the join message) |",
        JOINS / 4,
        joins_meanwhile.per_second,
        ms(joins_meanwhile.p50),
        ms(joins_meanwhile.p99)
    );
    println!(
        "| {} revocations meanwhile (one held player each) | p50 {}, p99 {}, max {} (admin call to the client's read; target p99 < 5 ms: {}) |",
        revocations.len(),
        ms(revocations[revocations.len() / 2]),
        ms(revocations[revocations.len() * 99 / 100]),
        ms(revocations[revocations.len() - 1]),
        if revocations[revocations.len() * 99 / 100] < Duration::from_millis(5) {
            "met"
        } else {
            "missed"
        }
    );
    for (conn, _) in held {
        conn.close().await;
    }
}

/// Revokes `REVOKED_WHILE_HELD` of the `held` sessions' users one at a time at `admin`, each
/// timed from the call until its client reads `revoked`; sorted. The revoked sessions are
/// taken out of `held`.
async fn revoked_while_held(admin: SocketAddr, held: &mut Vec<(Conn, i64)>) -> Vec<Duration> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client");
    let step = (held.len() / REVOKED_WHILE_HELD).max(1);
    let mut delays = Vec::with_capacity(REVOKED_WHILE_HELD);
    for i in (0..REVOKED_WHILE_HELD.min(held.len())).rev() {
        let (mut conn, user_id) = held.swap_remove(i * step);
        let started = Instant::now();
        let revoking = http
            .post(format!("http://{admin}/admin/revoke"))
            .bearer_auth(ADMIN_SECRET)
            .json(&json!({ "user_id": user_id }))
            .send();
        let (answer, ()) = tokio::join!(revoking, conn.pushed("revoked"));
        delays.push(started.elapsed());
        assert!(answer.expect("the admin answers").status().is_success());
    }
    delays.sort();
    delays
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let sessions = args
        .iter()
        .position(|a| a == "--sessions")
        .and_then(|i| args.get(i + 1))
        .map_or(SESSIONS, |n| n.parse().expect("--sessions N"));
    let limit = raise_file_limit();
    let rt = support::runtime();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
    let base = upstream.base();
    let sessions_only = args.iter().any(|a| a == "--sessions-only");
    rt.block_on(async {
        if !sessions_only {
            transports(&base).await;
        }
        println!();
        println!("sessions: {sessions} WebSocket sessions held by one game-server process (file limit {limit})");
        println!();
        if limit < sessions as u64 + 2_000 {
            println!("skipped: the file limit {limit} is below {} (raise the hard limit)", sessions + 2_000);
            return;
        }
        sessions_row(&base, sessions).await;
    });
}

/// The first part: TCP against WebSocket, joins and arrivals.
async fn transports(base: &str) {
    let server = start_game_server(base, 4 * CONCURRENCY).await;
    let tcp = Transport::Tcp(server.addr);
    let ws = Transport::WebSocket(server.websocket.unwrap());
    let over_tcp = std::sync::Arc::new(messages(tcp, 'p', PLAYERS).await);
    let over_ws = std::sync::Arc::new(messages(ws, 'p', PLAYERS).await);
    // Warm-up: every player's answer cached, connections to the upstream open.
    arrivals(tcp, &over_tcp, PLAYERS as usize, CONCURRENCY).await;
    arrivals(ws, &over_ws, PLAYERS as usize, CONCURRENCY).await;

    println!("websocket: the game-server process, TCP against WebSocket, {ROUNDS} alternating rounds of {CONCURRENCY} clients (cache hits)");
    println!();
    println!("| row | transport | per second | p50 | p99 | game-server CPU per op | vs TCP (median, range) |");
    println!("|---|---|---:|---:|---:|---:|---|");
    let players = |t: Transport| {
        if t == tcp {
            over_tcp.clone()
        } else {
            over_ws.clone()
        }
    };
    let pid = server.pid();
    transport_row("joins", tcp, ws, pid, |t| {
        let players = players(t);
        async move { joins(t, &players, JOINS).await }
    })
    .await;
    transport_row("arrivals", tcp, ws, pid, |t| {
        let players = players(t);
        async move { arrivals(t, &players, ARRIVALS, CONCURRENCY).await }
    })
    .await;
}
