//! Operating a live game server: the admin listener (metrics, health, readiness, its bounds),
//! draining on SIGTERM, structured logs and the config file, against real `GameServer`s on
//! loopback and the real `token-resolver game-server` process.

use token_resolver_support as support;

/// The `token-resolver` binary these tests run.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    eventually, game_server, login_and_take_token, reference_api, resolver_for, room, Scripted,
};
use support::{user_answer, GameServerProcess};
use token_resolver::{RedisTier, Resolver};
use token_resolver_game_server::{AdminConfig, GameClient, RunningAdmin, RunningGameServer};
use token_resolver_player::RoomJoinArgs;

/// A game server with auth switched off and its admin listener, both on loopback.
async fn anonymous_server_with_admin(config: AdminConfig) -> (RunningGameServer, RunningAdmin) {
    let resolver = Resolver::builder().auth_required(false).build().unwrap();
    let game = game_server(resolver, vec![room("lobby", None)]).await;
    let admin = game
        .spawn_admin("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    (game, admin)
}

/// `METHOD http://admin/path`: the status and the body as JSON (`null` when it is not JSON).
async fn call(admin: SocketAddr, method: &str, path: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .request(method.parse().unwrap(), format!("http://{admin}{path}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn health_readiness_and_unknown_paths_answer_as_documented() {
    // Pins down the admin routes: /healthz and /readyz 200 while serving, 404 elsewhere (and
    // for /metrics without a recorder), 405 for a wrong method.
    let (_game, admin) = anonymous_server_with_admin(AdminConfig::default()).await;
    let addr = admin.local_addr();
    assert_eq!(call(addr, "GET", "/healthz").await.0, 200);
    assert_eq!(
        call(addr, "GET", "/readyz").await,
        (200, json!({"ready": true}))
    );
    assert_eq!(call(addr, "GET", "/nope").await.0, 404);
    assert_eq!(call(addr, "GET", "/metrics").await.0, 404);
    assert_eq!(call(addr, "POST", "/healthz").await.0, 405);
    assert_eq!(call(addr, "DELETE", "/readyz").await.0, 405);
}

#[tokio::test]
async fn readiness_waits_for_the_shared_tiers_invalidation_channel() {
    // Pins down /readyz with a Redis tier: while its invalidation channel is not subscribed
    // (here nothing listens on the Redis port), the server is not ready, and says why.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", closed.local_addr().unwrap());
    drop(closed);
    let resolver = Resolver::builder()
        .auth_required(false)
        .shared_cache(RedisTier::new(url, "a-secret-of-16-bytes-or-more"))
        .build()
        .unwrap();
    let game = game_server(resolver, vec![room("lobby", None)]).await;
    let admin = game
        .spawn_admin("127.0.0.1:0".parse().unwrap(), AdminConfig::default())
        .await
        .unwrap();
    let (status, body) = call(admin.local_addr(), "GET", "/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(body["not_ready"], json!(["shared_cache_invalidation"]));
}

#[tokio::test]
async fn draining_turns_readyz_503_and_tells_an_idle_client_to_go() {
    // Pins down the drain: an idle client reads {"type":"shutdown","retry_after_ms":1000} and
    // the connection closes; /readyz answers 503 naming `draining`; no one is accepted.
    let (game, admin) = anonymous_server_with_admin(AdminConfig::default()).await;
    let game_addr = game.local_addr();
    let mut client = GameClient::open(game_addr).await.unwrap();
    client.search_rooms().await.unwrap();
    let drained = tokio::spawn(game.drain(Duration::from_secs(5)));
    assert_eq!(
        client.read_answer().await.unwrap(),
        json!({"type": "shutdown", "retry_after_ms": 1000})
    );
    assert!(
        client.read_answer().await.is_err(),
        "then the server closes"
    );
    let (status, body) = call(admin.local_addr(), "GET", "/readyz").await;
    assert_eq!(status, 503);
    assert!(
        body["not_ready"]
            .as_array()
            .unwrap()
            .contains(&json!("draining")),
        "{body}"
    );
    tokio::time::timeout(Duration::from_secs(5), drained)
        .await
        .expect("the drain ends once the last session left")
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(game_addr).await.is_err(),
        "the game port no longer accepts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_in_progress_finishes_before_the_shutdown_message() {
    // Pins down "lets messages in progress finish": a connect whose resolution is under way
    // when the drain starts is answered, then the client is told to go.
    // The API answers once the test lets it, when the drain is under way.
    let answer = std::sync::Arc::new(tokio::sync::Notify::new());
    let upstream = {
        let answer = answer.clone();
        Scripted::start(move |_, _| {
            let answer = answer.clone();
            async move {
                answer.notified().await;
                user_answer(7, "grace")
            }
        })
        .await
    };
    let resolver = resolver_for(&upstream.url()).build().unwrap();
    let game = game_server(resolver, vec![room("lobby", None)]).await;
    let game_addr = game.local_addr();
    let mut client = GameClient::open(game_addr).await.unwrap();
    let connecting = tokio::spawn(async move {
        let user = client.connect(Some("a-token")).await;
        (client, user)
    });
    eventually("the resolution reached the API", || {
        upstream.requests() == 1
    })
    .await;
    let drained = tokio::spawn(game.drain(Duration::from_secs(5)));
    // A draining server accepts no connection.
    support::eventually_async("the drain started", || async {
        tokio::net::TcpStream::connect(game_addr).await.is_err()
    })
    .await;
    answer.notify_one();
    let (mut client, user) = connecting.await.unwrap();
    assert_eq!(user.unwrap().unwrap().id, 7, "the connect was answered");
    assert_eq!(client.read_answer().await.unwrap()["type"], "shutdown");
    drained.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_still_open_after_the_grace_are_cut() {
    // Pins down the bound on draining: a session stuck in a resolution is cut when the grace
    // is over, and the drain returns soon after.
    let upstream = Scripted::start(|_, _| async {
        std::future::pending::<()>().await;
        user_answer(1, "never")
    })
    .await;
    let resolver = resolver_for(&upstream.url())
        .request_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let game = game_server(resolver, vec![room("lobby", None)]).await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    client.set_timeout(Duration::from_secs(30));
    let connecting = tokio::spawn(async move { client.connect(Some("a-token")).await });
    eventually("the resolution reached the API", || {
        upstream.requests() == 1
    })
    .await;
    let started = Instant::now();
    game.drain(Duration::from_millis(200)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        connecting.await.unwrap().is_err(),
        "the cut session got no answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_bounds_its_connections_and_slow_clients_apart_from_the_game_port() {
    // Pins down the admin listener's own bounds: one connection over its cap is answered 503
    // at once, a client that never finishes its request head is let go after the header
    // deadline, odd bytes in a path and a huge body get a 4xx quickly, and meanwhile the game
    // port serves.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = AdminConfig {
        max_connections: 2,
        // Long enough that a loaded machine cannot let the slow clients go before the
        // connection over the cap is accepted; the slow clients' reads wait past it.
        header_timeout: Duration::from_secs(1),
        ..AdminConfig::default()
    };
    let (game, admin) = anonymous_server_with_admin(config).await;
    let addr = admin.local_addr();
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    let mut over = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), over.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        read.is_ok() && answer.starts_with("HTTP/1.1 503") && answer.contains("retry-after: 1"),
        "the connection over the cap is answered 503 at once: {answer:?}"
    );
    let mut player = GameClient::open(game.local_addr()).await.unwrap();
    assert_eq!(player.search_rooms().await.unwrap().len(), 1);
    for mut stream in slow {
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "a slow client is let go after the header deadline"
        );
    }
    let started = Instant::now();
    assert_eq!(call(addr, "GET", "/%FF%00%2e%2e/x").await.0, 404);
    let huge = reqwest::Client::new()
        .post(format!("http://{addr}/readyz"))
        .body(vec![b'x'; 10 << 20])
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(huge, Ok(405) | Ok(413) | Err(_)),
        "a 10 MB body is refused: {huge:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The value of the sample `name{labels}` in a Prometheus text exposition; `None` when the
/// exposition has no such sample. Labels not named must not be there either.
fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    exposition.lines().find_map(|line| {
        if line.starts_with('#') {
            return None;
        }
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, label_text) = match series.split_once('{') {
            Some((metric, rest)) => (metric, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            return None;
        }
        let found: HashMap<&str, &str> = label_text
            .split(',')
            .filter(|l| !l.is_empty())
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        let wanted: HashMap<&str, &str> = labels.iter().copied().collect();
        (found == wanted).then(|| value.parse().ok()).flatten()
    })
}

/// A sample expected in an exposition: name, labels, value.
type Sample<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

/// `GET /metrics` of a process's admin listener.
async fn scrape(admin: SocketAddr) -> String {
    reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// What `/metrics` counts after [`play_one_scripted_session`], from a fresh process.
const AFTER_ONE_SCRIPTED_SESSION: &[Sample] = &[
    ("game_server_messages_total", &[("type", "connect")], 2.0),
    (
        "game_server_messages_total",
        &[("type", "search_room")],
        1.0,
    ),
    ("game_server_messages_total", &[("type", "join")], 3.0),
    ("game_server_messages_total", &[("type", "invalid")], 1.0),
    ("game_server_errors_total", &[("code", "bad_request")], 1.0),
    (
        "game_server_errors_total",
        &[("code", "auth_url_not_allowed")],
        1.0,
    ),
    (
        "game_server_errors_total",
        &[("code", "token_rejected")],
        1.0,
    ),
    ("game_server_sessions_total", &[("transport", "tcp")], 1.0),
    ("game_server_sessions_open", &[("transport", "tcp")], 1.0),
    (
        "token_resolver_resolutions_total",
        &[("outcome", "miss")],
        1.0,
    ),
    (
        "token_resolver_resolutions_total",
        &[("outcome", "hit")],
        2.0,
    ),
    (
        "token_resolver_resolutions_total",
        &[("outcome", "token_rejected")],
        1.0,
    ),
    (
        "token_resolver_upstream_requests_total",
        &[("status", "200")],
        1.0,
    ),
    (
        "token_resolver_upstream_requests_total",
        &[("status", "401")],
        1.0,
    ),
    ("token_resolver_upstream_duration_seconds_count", &[], 2.0),
    (
        "token_resolver_upstream_duration_seconds_bucket",
        &[("le", "10")],
        2.0,
    ),
];

/// One session: a connect (a miss: one call), a room search, a join of every room (hits), a
/// line that is not JSON, a join with a forged authUrl (refused, no call) and a connect with a
/// made-up token (rejected: one call). The client, still connected.
async fn play_one_scripted_session(server: &GameServerProcess, token: &str) -> GameClient {
    let mut client = GameClient::open(server.addr).await.unwrap();
    client.connect(Some(token)).await.unwrap(); // a miss: 1 call
    let rooms = client.search_rooms().await.unwrap();
    for room in &rooms {
        client
            .join(&RoomJoinArgs::new(room, Default::default()), Some(token))
            .await
            .unwrap(); // 2 hits
    }
    let bad = client.request_line(b"not json\n").await.unwrap();
    assert_eq!(bad["error"], "bad_request");
    let mut forged = RoomJoinArgs::new(&rooms[1], Default::default());
    forged.auth_url = "https://elsewhere.example".into();
    client.join(&forged, Some(token)).await.unwrap_err(); // auth_url_not_allowed, no call
    client.connect(Some("made-up")).await.unwrap_err(); // token_rejected: 1 call
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_by_exactly_what_a_scripted_session_did() {
    // Pins down /metrics on the real process: after one scripted session, every counter of
    // the game server and of the resolver moved by the exact amount, and the upstream latency
    // renders as a histogram with buckets, not as a summary.
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let server = GameServerProcess::start(
        BIN,
        &["--auth-url", &base, "--admin-listen", "127.0.0.1:0"],
        &[],
    )
    .await;
    let admin = server.admin.expect("the banner names the admin listener");
    let _connected = play_one_scripted_session(&server, &token).await;

    let text = scrape(admin).await;
    for (name, labels, value) in AFTER_ONE_SCRIPTED_SESSION {
        assert_eq!(
            sample(&text, name, labels),
            Some(*value),
            "{name}{labels:?} in\n{text}"
        );
    }
    assert!(
        sample(
            &text,
            "token_resolver_upstream_duration_seconds_bucket",
            &[("le", "0.0005")]
        )
        .is_some(),
        "the buckets start at 0.5 ms"
    );
    assert!(!text.contains(&token), "no token in /metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_process_and_it_exits_0() {
    // Pins down SIGTERM on the real process: a connected client reads the shutdown message,
    // and the process exits 0 within the drain window.
    let mut server =
        GameServerProcess::start(BIN, &["--auth-required", "false", "--drain-secs", "5"], &[])
            .await;
    let mut client = GameClient::open(server.addr).await.unwrap();
    client.search_rooms().await.unwrap();
    server.terminate();
    assert_eq!(
        client.read_answer().await.unwrap(),
        json!({"type": "shutdown", "retry_after_ms": 1000})
    );
    let status = server
        .exited_within(Duration::from_secs(7))
        .await
        .expect("the process exits within the drain window");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_connection_and_the_outcome_and_never_the_token() {
    // Pins down --log-format json: every line is one JSON object; each resolution event
    // names its connection and its outcome; the token appears nowhere in the logs.
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let server = GameServerProcess::start_raw(
        BIN,
        &["--listen", "127.0.0.1:0"],
        &["--auth-url", &base, "--log-format", "json"],
        &[("RUST_LOG", "trace")],
    )
    .await;
    let mut client = GameClient::open(server.addr).await.unwrap();
    client.connect(Some(&token)).await.unwrap();
    let wrong = format!("{token}x");
    client.connect(Some(&wrong)).await.unwrap_err();
    drop(client);
    eventually("the connection's close is logged", || {
        server.stderr().contains("connection closed")
    })
    .await;
    let logs = server.stderr();
    assert!(!logs.contains(&token), "the token is in the logs");
    let events: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let resolutions: Vec<&Value> = events
        .iter()
        .filter(|e| e["fields"]["request"] == "connect")
        .collect();
    let outcomes: Vec<&Value> = resolutions
        .iter()
        .map(|e| &e["fields"]["outcome"])
        .collect();
    assert_eq!(outcomes, [&json!("ok"), &json!("token_rejected")]);
    for event in resolutions {
        assert_eq!(event["fields"]["connection"], 1, "{event}");
        assert_eq!(event["span"]["connection"], 1, "{event}");
    }
}

/// The annotated config file of docs/operations.md: the ```toml block that starts
/// `# game-server.toml`.
fn readme_config_example() -> String {
    let readme = include_str!("../../../../docs/operations.md");
    let start = readme
        .find("```toml\n# game-server.toml")
        .expect("docs/operations.md shows a config file")
        + "```toml\n".len();
    let end = start + readme[start..].find("```").unwrap();
    readme[start..end].to_owned()
}

/// Writes `text` to a fresh file and returns its path.
fn file_with(name: &str, text: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("token-resolver-ops-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("game-server.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_config_file_loads_and_flags_win_over_it() {
    // Pins down --config with the README's complete example: the server starts with its
    // settings, and the flags given on the command line (the addresses here) win over it.
    let path = file_with("readme", &readme_config_example());
    let path = path.to_str().unwrap();
    let server = GameServerProcess::start_raw(
        BIN,
        &["--config", path],
        &[
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--advertise-host",
            "from-the-flag.example",
        ],
        &[],
    )
    .await;
    assert!(server.admin.is_some(), "{}", server.banner);
    assert!(
        server
            .banner
            .contains("default authUrl https://auth.example.com"),
        "{}",
        server.banner
    );
    let mut client = GameClient::open(server.addr).await.unwrap();
    let rooms = client.search_rooms().await.unwrap();
    assert!(rooms.iter().all(|r| r.host == "from-the-flag.example"));
}

/// Runs `game-server --config` on `text`, expecting it to refuse at once, and returns its
/// exit status and stderr; a server that starts instead is killed after 10 s.
fn run_with_config(name: &str, text: &str) -> (Option<i32>, String) {
    let path = file_with(name, text);
    let child = std::process::Command::new("timeout")
        .args(["10", env!("CARGO_BIN_EXE_token-resolver")])
        .args(["game-server", "--listen", "127.0.0.1:0", "--config"])
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn config_file_errors_are_usage_errors_naming_the_key_and_the_line() {
    // Pins down the config file's errors: exit 2, with the key and its line.
    let cases = [
        (
            "unknown",
            "auth-required = false\nlisten-port = 7350\n",
            "line 2: unknown key `listen-port`",
        ),
        (
            "bad-value",
            "auth-required = false\n\nmax-connections = \"many\"\n",
            "line 3: key `max-connections`: invalid value \"many\"",
        ),
        (
            "list",
            "auth-required = false\nadvertise-host = [\"a\", \"b\"]\n",
            "line 2: key `advertise-host`: takes one value",
        ),
        ("syntax", "auth-required = \n", "is not valid TOML"),
    ];
    for (name, text, expected) in cases {
        let (code, stderr) = run_with_config(name, text);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_token-resolver"))
        .args(["game-server", "--config", "/nonexistent/game-server.toml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read the config file"));
}
