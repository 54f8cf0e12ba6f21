//! The reference API under a flood of wrong-password logins: does `/api/user` stay fast, and
//! how many guesses does an attacker get through? Not a criterion bench: it prints one table.
//!
//! `cargo bench --bench login_flood -- [--rate N] [--attack-secs N]`: the paced floods offer
//! N logins a second in all (default 200); the attacker runs N seconds (default 20; its rate
//! is scaled to a minute).
//!
//! Rows (each flood: 64 connections of wrong-password logins, spread over thousands of
//! usernames so that the per-username throttle does not simply absorb them):
//!
//! - `idle`: `/api/user` latency, one connection, one request after another, nothing else.
//! - `N/s, many addresses`: the same while the flood offers N logins a second, each connection
//!   moving to a new loopback source address (127.0.0.0/8) every 4 logins: a botnet that
//!   neither throttle absorbs, so what keeps `/api/user` fast is the bound on argon2 work.
//! - `N/s, one address`: the same flood from one address (the per-address throttle's case).
//! - `flat out, many addresses`: each connection sends its next login as soon as the last is
//!   answered. A refusal (429, 503) is answered in microseconds, so this is an HTTP flood as
//!   fast as the clients can go, on the same 2 cores as the server.
//! - `attacker`: 64 connections from one address guessing one username's password flat out,
//!   an attacker guessing passwords; `401` counts the guesses actually checked.
//! - `guests flat out, many addresses`: device-id logins instead, each a new device, moving
//!   address every 4 logins: every one is admitted (200) and opens a session, the anonymous
//!   flood of anonymous callers. Then `idle after the floods` probes `/api/user` again, and a line says
//!   what the API holds and whether a password user still logs in.
//!
//! The server runs on its own 2-worker runtime, the flood on another, and the `/api/user`
//! probe on a thread of its own, so that flood tasks do not delay the probe in the client;
//! all share the machine's cores. Print `uptime` beside the numbers: the machine may be
//! shared.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use token_resolver_reference_api::{ApiConfig, ReferenceApi};

/// Connections of the flood and of the attacker.
const CONNECTIONS: usize = 64;
/// `/api/user` requests of the idle row.
const IDLE_SAMPLES: usize = 2_000;
/// How long each flood row is measured.
const FLOOD: Duration = Duration::from_secs(10);
/// The flood's start, not measured: the queue fills, the throttles learn.
const WARM_UP: Duration = Duration::from_secs(1);
/// Logins a flood connection sends from one source address before taking the next.
const LOGINS_PER_ADDRESS: u64 = 4;

/// Where a flood's logins come from and whom they guess.
#[derive(Clone, Copy)]
enum Source {
    /// New address every few logins, thousands of usernames.
    ManyAddresses,
    /// 127.100.0.1 only, thousands of usernames.
    OneAddress,
    /// 127.101.0.1 only, one username.
    Attacker,
    /// Device-id logins, each a new device; new address every few logins.
    Guests,
}

/// One flood: its source and its pace.
#[derive(Clone, Copy)]
struct Flood {
    source: Source,
    /// Logins a second offered in all; `None`: flat out.
    rate: Option<u32>,
}

/// Answers counted by status.
#[derive(Default)]
struct Statuses {
    ok: AtomicU64,
    unauthorized: AtomicU64,
    too_many: AtomicU64,
    unavailable: AtomicU64,
    other: AtomicU64,
}

impl Statuses {
    fn count(&self, status: u16) {
        let counter = match status {
            200 => &self.ok,
            401 => &self.unauthorized,
            429 => &self.too_many,
            503 => &self.unavailable,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn total(&self) -> u64 {
        [
            &self.ok,
            &self.unauthorized,
            &self.too_many,
            &self.unavailable,
            &self.other,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

/// The number after `flag` on the command line, if any.
fn arg(flag: &str) -> Option<u64> {
    std::env::args()
        .skip_while(|a| a != flag)
        .nth(1)
        .and_then(|s| s.parse().ok())
}

fn main() {
    let attack = Duration::from_secs(arg("--attack-secs").unwrap_or(20));
    let rate = arg("--rate").unwrap_or(200) as u32;

    let server_rt = runtime(2);
    let running = server_rt
        .block_on(async {
            ReferenceApi::new(ApiConfig::default())
                .expect("demo users")
                .spawn("127.0.0.1:0".parse().unwrap())
                .await
        })
        .expect("bind loopback");
    let base = running.base_url();
    let client_rt = runtime(2);
    let token = client_rt.block_on(take_token(&base));

    println!(
        "login_flood: /api/user latency idle and under {CONNECTIONS} connections of \
         wrong-password logins; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<32} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>6}",
        "row", "user p50", "user p99", "logins/s", "401", "429", "503", "other"
    );
    let idle = probe(&base, &token, Some(IDLE_SAMPLES), None);
    print_row("idle", &idle, None, Duration::ZERO);
    let rows = [
        (
            format!("{rate}/s, many addresses"),
            Source::ManyAddresses,
            Some(rate),
            FLOOD,
        ),
        (
            format!("{rate}/s, one address"),
            Source::OneAddress,
            Some(rate),
            FLOOD,
        ),
        (
            "flat out, many addresses".to_owned(),
            Source::ManyAddresses,
            None,
            FLOOD,
        ),
        (
            "attacker, flat out".to_owned(),
            Source::Attacker,
            None,
            attack,
        ),
        (
            "guests flat out, many addresses".to_owned(),
            Source::Guests,
            None,
            FLOOD,
        ),
    ];
    for (name, source, rate, length) in rows {
        let flood = Flood { source, rate };
        let (latencies, statuses) = under_flood(&client_rt, &base, &token, flood, length);
        print_row(&name, &latencies, Some(&statuses), length);
        if let Source::Attacker = source {
            let checked = statuses.unauthorized.load(Ordering::Relaxed);
            let per_minute = checked as f64 * 60.0 / (length + WARM_UP).as_secs_f64();
            println!(
                "attacker: {checked} guesses checked (401) in {:.0} s from one address on one \
                 username: {per_minute:.0} per minute",
                (length + WARM_UP).as_secs_f64()
            );
        }
    }
    let after = probe(&base, &token, Some(IDLE_SAMPLES), None);
    print_row("idle after the floods", &after, None, Duration::ZERO);
    let held = running.api().held();
    let known = client_rt.block_on(async {
        let answer = reqwest::Client::new()
            .post(format!("{base}/api/login"))
            .json(&json!({ "username": "bob", "password": "builder" }))
            .send()
            .await;
        answer.map_or(0, |response| response.status().as_u16())
    });
    println!(
        "after the floods: {} sessions, {} tokens, {} guests held; a password login answers {known}",
        held.sessions, held.tokens, held.guests
    );
    server_rt.block_on(running.shutdown());
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Logs alice in and takes a token for the `/api/user` probes.
async fn take_token(base: &str) -> String {
    let client = reqwest::Client::new();
    let login = client
        .post(format!("{base}/api/login"))
        .json(&json!({ "username": "alice", "password": "wonderland" }))
        .send()
        .await
        .expect("login");
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .split(';')
        .next()
        .expect("cookie pair")
        .to_owned();
    let answer: Value = client
        .post(format!("{base}/api/access_token"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("access token")
        .json()
        .await
        .expect("token JSON");
    answer["access_token"].as_str().expect("a token").to_owned()
}

/// Runs `flood` on `client_rt` and probes `/api/user` for `length` after the warm-up.
fn under_flood(
    client_rt: &tokio::runtime::Runtime,
    base: &str,
    token: &str,
    flood: Flood,
    length: Duration,
) -> (Vec<Duration>, Arc<Statuses>) {
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(Statuses::default());
    let tasks: Vec<_> = (0..CONNECTIONS as u64)
        .map(|connection| {
            let (base, stop, statuses) = (base.to_owned(), stop.clone(), statuses.clone());
            client_rt.spawn(async move {
                flood_connection(&base, connection, flood, &stop, &statuses).await;
            })
        })
        .collect();
    std::thread::sleep(WARM_UP);
    let latencies = probe(base, token, None, Some(length));
    stop.store(true, Ordering::Relaxed);
    client_rt.block_on(async {
        for task in tasks {
            let _ = task.await;
        }
    });
    (latencies, statuses)
}

/// One flood connection: wrong-password logins until `stop`, paced or flat out.
async fn flood_connection(
    base: &str,
    connection: u64,
    flood: Flood,
    stop: &AtomicBool,
    statuses: &Statuses,
) {
    let mut pace = flood.rate.map(|rate| {
        let period = Duration::from_secs_f64(CONNECTIONS as f64 / f64::from(rate.max(1)));
        let start = tokio::time::Instant::now() + period.mul_f64(connection as f64 / 64.0);
        let mut pace = tokio::time::interval_at(start, period);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        pace
    });
    let mut client = None;
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(pace) = &mut pace {
            pace.tick().await;
        }
        let renew = matches!(flood.source, Source::ManyAddresses | Source::Guests)
            && sent % LOGINS_PER_ADDRESS == 0;
        if client.is_none() || renew {
            client = Some(client_from(source_address(flood.source, connection, sent)));
        }
        let body = match flood.source {
            Source::Guests => json!({ "device_id": format!("flood-{connection}-{sent}") }),
            Source::Attacker => json!({ "username": "alice", "password": format!("guess-{sent}") }),
            _ => json!({
                "username": format!("user-{}", (connection * 1_000 + sent) % 50_000),
                "password": format!("guess-{sent}"),
            }),
        };
        let answer = client
            .as_ref()
            .expect("a client")
            .post(format!("{base}/api/login"))
            .json(&body)
            .send()
            .await;
        match answer {
            Ok(response) => statuses.count(response.status().as_u16()),
            Err(_) => statuses.count(0),
        }
        sent += 1;
    }
}

/// The loopback address the `sent`-th login of `connection` leaves from.
fn source_address(source: Source, connection: u64, sent: u64) -> IpAddr {
    match source {
        Source::ManyAddresses | Source::Guests => {
            let n = (connection << 16) + sent / LOGINS_PER_ADDRESS + 2;
            let [_, b, c, d] = (n as u32).to_be_bytes();
            IpAddr::V4(Ipv4Addr::new(127, b.wrapping_add(1), c, d.max(1)))
        }
        Source::OneAddress => IpAddr::V4(Ipv4Addr::new(127, 100, 0, 1)),
        Source::Attacker => IpAddr::V4(Ipv4Addr::new(127, 101, 0, 1)),
    }
}

fn client_from(address: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(address)
        .pool_max_idle_per_host(1)
        .build()
        .expect("client")
}

/// `/api/user` latencies from a thread of its own: `samples` requests, or as many as fit in
/// `length`, one at a time on one connection.
fn probe(
    base: &str,
    token: &str,
    samples: Option<usize>,
    length: Option<Duration>,
) -> Vec<Duration> {
    let (url, token) = (format!("{base}/api/user"), token.to_owned());
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("probe runtime");
        rt.block_on(async move {
            let client = reqwest::Client::new();
            let started = Instant::now();
            let mut latencies = Vec::new();
            while samples.is_none_or(|n| latencies.len() < n)
                && length.is_none_or(|l| started.elapsed() < l)
            {
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth(&token)
                    .send()
                    .await
                    .expect("/api/user answers");
                assert_eq!(response.status(), 200, "the probe token works");
                let _ = response.bytes().await;
                latencies.push(sent.elapsed());
            }
            latencies
        })
    });
    let mut latencies = thread.join().expect("probe thread");
    latencies.sort();
    latencies
}

fn print_row(name: &str, latencies: &[Duration], statuses: Option<&Statuses>, length: Duration) {
    let at = |q: f64| {
        let i = ((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(i).map_or("-".to_owned(), |d| {
            format!("{:.2} ms", d.as_secs_f64() * 1e3)
        })
    };
    let (rate, counts) = match statuses {
        Some(s) => (
            format!("{:.0}", s.total() as f64 / (length + WARM_UP).as_secs_f64()),
            [&s.unauthorized, &s.too_many, &s.unavailable, &s.other]
                .map(|c| c.load(Ordering::Relaxed).to_string()),
        ),
        None => ("-".to_owned(), ["-", "-", "-", "-"].map(str::to_owned)),
    };
    println!(
        "{name:<32} {:>9} {:>9} {rate:>9} {:>8} {:>8} {:>8} {:>6}",
        at(0.5),
        at(0.99),
        counts[0],
        counts[1],
        counts[2],
        counts[3]
    );
}
