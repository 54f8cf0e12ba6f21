//! Steady players against real processes, sampling their resources: the harness that
//! reproduced issue 34's sidecar memory growth (docs/chaos-soak.md).
//!
//! It starts the release binary's `serve-api` (with `--notify` to both admin listeners),
//! `game-server` and `sidecar` on loopback, follows the sidecar's `/v1/events` as a game server
//! does, and sends `--rate` players a second, each: a device login and a token from the API, a
//! TCP `connect` and `join` on the game server, a `/v1/resolve` naming a session on the
//! sidecar, a forward-auth `GET /v1/authorize`; every 97th is banned. After `--hold-ms` the
//! player leaves: its TCP connection closes and its session is `DELETE`d. Every
//! `--sample-every` seconds it reads each process's RSS, descriptors and threads from `/proc`
//! and its alive tokio tasks from `/metrics` ([`token_resolver_chaos::soak`]), prints them with
//! the rate achieved, and appends them to `--samples FILE`; at the end it prints the soak
//! report.
//!
//! ```sh
//! cargo build --release -p token-resolver-cli
//! cargo run -p token-resolver-cli --example steady_players -- \
//!     --binary target/release/token-resolver --seconds 900 --rate 300 --samples soak.jsonl
//! ```
//!
//! Parts of the load are turned off for bisecting with `--no-ban`, `--no-session`,
//! `--no-authorize`, `--no-game`, `--no-delete` (sessions are left for the sidecar to keep);
//! `--leave-every N` leaves every Nth player's session behind (never `DELETE`d, as by a game
//! server that lost track of it); `--wrap CMD` starts the sidecar under a profiler (`--wrap
//! heaptrack`); `--sidecar-arg ARG` and `--api-arg ARG` (repeatable) pass further options to the
//! sidecar and to `serve-api`; `--redis-url URL` gives the game server and the sidecar a shared
//! tier.
//!
//! Clients come from many loopback addresses (127.1.x.y for the API, 127.2.x.y for the game
//! port), as players do from their own: the reference API allows 60 device logins a minute
//! per address and the game server 64 connections per address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use token_resolver_chaos::soak::{check_soak, Sample, SoakBounds};
use token_resolver_player::{GameClient, RoomInfo, RoomJoinArgs};

/// The admin secret the three processes share.
const ADMIN_SECRET: &str = "steady-players-admin-secret-0001";
/// The shared tier's secret (`--redis-url`).
const REDIS_SECRET: &str = "steady-players-redis-secret-0001";
/// Loopback addresses the API's clients are spread over (60 device logins a minute each).
const API_ADDRESSES: u32 = 512;
/// Loopback addresses the game clients are spread over.
const GAME_ADDRESSES: u32 = 256;
/// Players in progress at once, at most; a tick past it is counted as skipped.
const MAX_IN_FLIGHT: u64 = 4096;

#[derive(Debug, Clone)]
struct Options {
    binary: PathBuf,
    seconds: u64,
    rate: u64,
    hold: Duration,
    sample_every: Duration,
    samples: Option<PathBuf>,
    ban_every: u64,
    session: bool,
    authorize: bool,
    game: bool,
    delete: bool,
    wrap: Option<String>,
    sidecar_args: Vec<String>,
    api_args: Vec<String>,
    leave_every: u64,
    redis_url: Option<String>,
    warm_up: Duration,
}

fn options() -> Options {
    let mut o = Options {
        binary: PathBuf::from("target/release/token-resolver"),
        seconds: 600,
        rate: 300,
        hold: Duration::from_millis(2000),
        sample_every: Duration::from_secs(5),
        samples: None,
        ban_every: 97,
        session: true,
        authorize: true,
        game: true,
        delete: true,
        wrap: None,
        sidecar_args: Vec::new(),
        api_args: Vec::new(),
        leave_every: 0,
        redis_url: None,
        warm_up: Duration::from_secs(600),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} takes a value"));
        match arg.as_str() {
            "--binary" => o.binary = value().into(),
            "--seconds" => o.seconds = value().parse().expect("--seconds N"),
            "--rate" => o.rate = value().parse().expect("--rate N"),
            "--hold-ms" => o.hold = Duration::from_millis(value().parse().expect("--hold-ms N")),
            "--sample-every" => {
                o.sample_every = Duration::from_secs(value().parse().expect("--sample-every S"));
            }
            "--warm-up" => o.warm_up = Duration::from_secs(value().parse().expect("--warm-up S")),
            "--samples" => o.samples = Some(value().into()),
            "--ban-every" => o.ban_every = value().parse().expect("--ban-every N"),
            "--wrap" => o.wrap = Some(value()),
            "--sidecar-arg" => o.sidecar_args.push(value()),
            "--api-arg" => o.api_args.push(value()),
            "--leave-every" => o.leave_every = value().parse().expect("--leave-every N"),
            "--redis-url" => o.redis_url = Some(value()),
            "--no-ban" => o.ban_every = 0,
            "--no-session" => o.session = false,
            "--no-authorize" => o.authorize = false,
            "--no-game" => o.game = false,
            "--no-delete" => o.delete = false,
            other => panic!("unknown option {other}"),
        }
    }
    o
}

/// A free port on loopback (bound, then let go for the child to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child process, killed on drop, its output in a file of the run's folder.
struct Proc {
    name: &'static str,
    child: Child,
    /// The `--binary` it runs (perhaps under a wrapper).
    binary: PathBuf,
    /// The admin listener whose `/metrics` has its task count.
    admin: Option<SocketAddr>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGTERM to the binary first (under a profiler, the wrapped program), so that a
        // profiler writes its data.
        let _ = Command::new("kill")
            .args(["-TERM", &measured_pid(self, &self.binary).to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(
    o: &Options,
    dir: &std::path::Path,
    name: &'static str,
    wrap: Option<&str>,
    args: &[String],
    admin: Option<SocketAddr>,
) -> Proc {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let mut command = match wrap {
        Some(wrapper) => {
            let mut words = wrapper.split_whitespace();
            let mut c = Command::new(words.next().expect("a wrapper"));
            c.args(words).arg(&o.binary);
            c
        }
        None => Command::new(&o.binary),
    };
    let child = command
        .args(args)
        .env("TOKEN_RESOLVER_ADMIN_TOKEN", ADMIN_SECRET)
        .env("TOKEN_RESOLVER_REDIS_SECRET", REDIS_SECRET)
        .env("RUST_LOG", "warn")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    Proc {
        name,
        child,
        binary: o.binary.clone(),
        admin,
    }
}

/// The pid whose resources count: the wrapped program's when a wrapper started it (the
/// wrapper's child whose executable is the `--binary`).
fn measured_pid(proc: &Proc, binary: &std::path::Path) -> u32 {
    let pid = proc.child.id();
    let is_binary =
        |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e.as_path() == binary);
    if is_binary(pid) {
        return pid;
    }
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find(|&c| is_binary(c))
        .unwrap_or(pid)
}

async fn wait_listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `token_resolver_runtime_alive_tasks` from the admin listener's `/metrics`, if it has it.
async fn alive_tasks(http: &reqwest::Client, admin: SocketAddr) -> Option<u64> {
    let text = http
        .get(format!("http://{admin}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    token_resolver_chaos::soak::alive_tasks(&text)
}

/// What the players did, counted.
#[derive(Default)]
struct Counts {
    started: AtomicU64,
    done: AtomicU64,
    skipped: AtomicU64,
    failed: AtomicU64,
    bans: AtomicU64,
    in_flight: AtomicU64,
    revoked_events: AtomicU64,
}

struct Shared {
    o: Options,
    api: String,
    game: SocketAddr,
    sidecar: String,
    arena: RoomJoinArgs,
    api_clients: Vec<reqwest::Client>,
    sidecar_client: reqwest::Client,
    counts: Counts,
    run: u64,
}

async fn player(shared: Arc<Shared>, i: u64) -> Result<(), String> {
    let o = &shared.o;
    let api = &shared.api_clients[(i % u64::from(API_ADDRESSES)) as usize];
    let login = api
        .post(format!("{}/api/login", shared.api))
        .json(&serde_json::json!({"device_id": format!("soak-{}-{i}", shared.run)}))
        .send()
        .await
        .map_err(|e| format!("login: {e}"))?;
    if !login.status().is_success() {
        return Err(format!("login: {}", login.status()));
    }
    let cookie = login
        .headers()
        .get(reqwest::header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::to_owned)
        .ok_or("login: no cookie")?;
    let user: serde_json::Value = login.json().await.map_err(|e| format!("login: {e}"))?;
    let user_id = user["id"].as_i64().ok_or("login: no id")?;
    let token: serde_json::Value = api
        .post(format!("{}/api/access_token", shared.api))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("token: {e}"))?
        .json()
        .await
        .map_err(|e| format!("token: {e}"))?;
    let token = token["access_token"].as_str().ok_or("no token")?.to_owned();

    let mut game = None;
    if o.game {
        let k = (i % u64::from(GAME_ADDRESSES)) as u32;
        let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
        socket
            .bind(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(0x7f02_0000 + k + 1)),
                0,
            ))
            .map_err(|e| format!("bind: {e}"))?;
        let stream = socket
            .connect(shared.game)
            .await
            .map_err(|e| format!("game: {e}"))?;
        let mut client = GameClient::over(stream, shared.game);
        client
            .connect(Some(&token))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        client
            .join(&shared.arena, Some(&token))
            .await
            .map_err(|e| format!("join: {e}"))?;
        game = Some(client);
    }

    let session = format!("p{}-{i}", shared.run);
    let mut body = serde_json::json!({"access_token": token});
    if o.session {
        body["session"] = serde_json::Value::from(session.as_str());
    }
    let resolved = shared
        .sidecar_client
        .post(format!("{}/v1/resolve", shared.sidecar))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("resolve: {e}"))?;
    if !resolved.status().is_success() {
        return Err(format!("resolve: {}", resolved.status()));
    }
    if o.authorize {
        let authorized = shared
            .sidecar_client
            .get(format!("{}/v1/authorize", shared.sidecar))
            .bearer_auth(&token)
            .send()
            .await
            .map_err(|e| format!("authorize: {e}"))?;
        if !authorized.status().is_success() {
            return Err(format!("authorize: {}", authorized.status()));
        }
    }
    let banned = o.ban_every > 0 && i % o.ban_every == 0;
    if banned {
        shared
            .sidecar_client
            .post(format!("{}/api/admin/ban", shared.api))
            .bearer_auth(ADMIN_SECRET)
            .json(&serde_json::json!({"user_id": user_id}))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("ban: {e}"))?;
        shared.counts.bans.fetch_add(1, Ordering::Relaxed);
    }
    tokio::time::sleep(o.hold).await;
    drop(game);
    // A game server that lost track of a player (`--leave-every`) never forgets its session.
    let left = o.leave_every > 0 && i % o.leave_every == 1;
    if o.session && o.delete && !banned && !left {
        shared
            .sidecar_client
            .delete(format!("{}/v1/sessions/{session}", shared.sidecar))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("delete: {e}"))?;
    }
    Ok(())
}

/// Follows the sidecar's `/v1/events` as a game server does, counting `revoked`; comes back
/// when the stream ends.
async fn follow_events(shared: Arc<Shared>) {
    loop {
        let Ok(mut response) = shared
            .sidecar_client
            .get(format!("{}/v1/events", shared.sidecar))
            .timeout(Duration::from_secs(24 * 3600))
            .send()
            .await
        else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut partial = String::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            partial.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = partial.find('\n') {
                if partial[..end].trim() == "event: revoked" {
                    shared.counts.revoked_events.fetch_add(1, Ordering::Relaxed);
                }
                partial.drain(..=end);
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let o = options();
    let dir = std::env::temp_dir().join(format!("steady-players-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("run folder");
    let binary = std::fs::canonicalize(&o.binary).expect("--binary exists");
    let o = Options { binary, ..o };
    let run = u64::from(std::process::id());

    let (api_port, game_port, game_admin, sidecar_port, sidecar_admin) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let lo = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let api_url = format!("http://127.0.0.1:{api_port}");
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let mut redis = Vec::new();
    if let Some(url) = &o.redis_url {
        redis = s(&["--redis-url", url]);
    }
    let mut api_args = s(&[
        "serve-api",
        "--listen",
        &lo(api_port).to_string(),
        "--notify",
        &format!("http://{}", lo(game_admin)),
        "--notify",
        &format!("http://{}", lo(sidecar_admin)),
        // The game server's and the sidecar's pools reach it from 127.0.0.1 alone.
        "--max-connections-per-address",
        "4096",
    ]);
    api_args.extend(o.api_args.iter().cloned());
    let api = start(&o, &dir, "api", None, &api_args, None);
    let mut game_args = s(&[
        "game-server",
        "--listen",
        &lo(game_port).to_string(),
        "--admin-listen",
        &lo(game_admin).to_string(),
        "--auth-url",
        &api_url,
        "--max-connections",
        "20000",
    ]);
    game_args.extend(redis.iter().cloned());
    let game = start(
        &o,
        &dir,
        "game-server",
        None,
        &game_args,
        Some(lo(game_admin)),
    );
    let mut sidecar_args = s(&[
        "sidecar",
        "--listen",
        &lo(sidecar_port).to_string(),
        "--admin-listen",
        &lo(sidecar_admin).to_string(),
        "--auth-url",
        &api_url,
    ]);
    sidecar_args.extend(redis.iter().cloned());
    sidecar_args.extend(o.sidecar_args.iter().cloned());
    let sidecar = start(
        &o,
        &dir,
        "sidecar",
        o.wrap.as_deref(),
        &sidecar_args,
        Some(lo(sidecar_admin)),
    );
    wait_listening(lo(api_port), "serve-api").await;
    wait_listening(lo(game_port), "game-server").await;
    wait_listening(lo(sidecar_port), "sidecar").await;
    wait_listening(lo(game_admin), "game-server admin").await;
    wait_listening(lo(sidecar_admin), "sidecar admin").await;

    let mut finder = GameClient::open(lo(game_port)).await.expect("game port");
    let rooms: Vec<RoomInfo> = finder.search_rooms().await.expect("rooms");
    let arena = rooms
        .iter()
        .find(|r| r.room_id == "arena")
        .expect("an arena room");
    let arena = RoomJoinArgs::new(arena, serde_json::Map::new());
    drop(finder);

    let api_clients = (0..API_ADDRESSES)
        .map(|k| {
            reqwest::Client::builder()
                .local_address(IpAddr::V4(Ipv4Addr::from(0x7f01_0000 + k + 1)))
                .pool_max_idle_per_host(4)
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client")
        })
        .collect();
    let shared = Arc::new(Shared {
        o: o.clone(),
        api: api_url,
        game: lo(game_port),
        sidecar: format!("http://{}", lo(sidecar_port)),
        arena,
        api_clients,
        sidecar_client: reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client"),
        counts: Counts::default(),
        run,
    });
    tokio::spawn(follow_events(shared.clone()));

    let procs = [&api, &game, &sidecar];
    let metrics_http = reqwest::Client::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut samples_file = o
        .samples
        .as_ref()
        .map(|p| std::io::BufWriter::new(std::fs::File::create(p).expect("--samples file")));
    println!("run folder {}", dir.display());

    let began = Instant::now();
    let length = Duration::from_secs(o.seconds);
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / o.rate as f64));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut next_sample = began;
    let mut last = (began, 0u64);
    let mut i = 0u64;
    let mut errors: std::collections::BTreeMap<String, u64> = Default::default();
    let (error_tx, mut error_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    while began.elapsed() < length {
        if Instant::now() >= next_sample {
            next_sample += o.sample_every;
            let t_s = began.elapsed().as_secs_f64();
            let mut line = format!("t={t_s:>6.0}s");
            for p in procs {
                let tasks = match p.admin {
                    Some(admin) => alive_tasks(&metrics_http, admin).await,
                    None => None,
                };
                if let Ok(sample) = Sample::read(measured_pid(p, &o.binary), p.name, t_s, tasks) {
                    line += &format!(
                        " | {} {:.1} MiB fds {} thr {} tasks {}",
                        p.name,
                        sample.rss_bytes as f64 / 1048576.0,
                        sample.fds,
                        sample.threads,
                        sample.tasks.map_or("-".into(), |t| t.to_string())
                    );
                    if let Some(f) = &mut samples_file {
                        token_resolver_chaos::write_samples(&mut *f, [&sample]).expect("written");
                    }
                    samples.push(sample);
                }
            }
            let done = shared.counts.done.load(Ordering::Relaxed);
            let rate = (done - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), done);
            line += &format!(
                " | players/s {rate:.0} done {done} failed {} skipped {} bans {} revoked-events {}",
                shared.counts.failed.load(Ordering::Relaxed),
                shared.counts.skipped.load(Ordering::Relaxed),
                shared.counts.bans.load(Ordering::Relaxed),
                shared.counts.revoked_events.load(Ordering::Relaxed),
            );
            println!("{line}");
        }
        while let Ok(e) = error_rx.try_recv() {
            let key: String = e.chars().take(60).collect();
            if !errors.contains_key(&key) {
                eprintln!("first error of its kind: {e}");
            }
            *errors.entry(key).or_default() += 1;
        }
        ticks.tick().await;
        if shared.counts.in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            shared.counts.skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        i += 1;
        let shared = shared.clone();
        let errors = error_tx.clone();
        shared.counts.started.fetch_add(1, Ordering::Relaxed);
        shared.counts.in_flight.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            match player(shared.clone(), i).await {
                Ok(()) => shared.counts.done.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    let _ = errors.send(e);
                    shared.counts.failed.fetch_add(1, Ordering::Relaxed)
                }
            };
            shared.counts.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
    let elapsed = began.elapsed().as_secs_f64();
    let done = shared.counts.done.load(Ordering::Relaxed);
    println!(
        "players: {} started, {done} done ({:.1} a second), {} failed, {} skipped, {} bans",
        shared.counts.started.load(Ordering::Relaxed),
        done as f64 / elapsed,
        shared.counts.failed.load(Ordering::Relaxed),
        shared.counts.skipped.load(Ordering::Relaxed),
        shared.counts.bans.load(Ordering::Relaxed),
    );
    for (e, n) in &errors {
        println!("  error x{n}: {e}");
    }
    let bounds = SoakBounds {
        warm_up: o.warm_up,
        ..SoakBounds::default()
    };
    print!("{}", check_soak(&samples, &bounds));
}
