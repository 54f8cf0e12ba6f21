//! `token-resolver run` as a process with a real game server child (a bash script): the child
//! starts only once the sidecar answers, with `TOKEN_RESOLVER_URL` and without the sidecar's
//! secrets; SIGTERM and SIGINT reach it; its exit status is the wrapper's (128+N for a
//! signal); the sidecar drains after it; and a sidecar that cannot start or never gets ready
//! ends the wrapper with 1 before any game server starts.

use token_resolver_support as support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// The `token-resolver` binary.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

/// A directory of its own for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("run-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path(file))
            .unwrap_or_else(|e| panic!("{file} was not written: {e}"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `token-resolver run ARGS -- GAME...` (with `--listen 127.0.0.1:0` unless ARGS name one),
/// with `DIR` (the scratch directory) in its environment for the game server's script, stdout
/// and stderr piped.
fn wrapper(args: &[&str], game: &[&str], dir: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(BIN);
    command.arg("run");
    if !args.contains(&"--listen") {
        command.args(["--listen", "127.0.0.1:0"]);
    }
    command
        .args(args)
        .arg("--")
        .args(game)
        .env("RUST_LOG", "warn")
        .env("DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Waits (at most 20 s: the sidecar's drain is bounded by --drain-secs) for the wrapper's end.
async fn finished(child: tokio::process::Child) -> Output {
    tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the wrapper exits")
        .unwrap()
}

/// A loopback port nothing listens on (bound, then let go).
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The address on the stderr line that starts with `prefix`.
fn addr_on(stderr: &str, prefix: &str) -> SocketAddr {
    let line = (stderr.lines())
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {stderr:?}"));
    line.split_whitespace()
        .find_map(|w| w.trim_start_matches("http://").parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// The game server: at its very start it resolves a token through `TOKEN_RESOLVER_URL` and
/// asks the admin listener's /readyz (over bash's /dev/tcp), records both answers and its
/// environment, then exits 7.
const RESOLVE_AT_START: &str = r#"
url=${TOKEN_RESOLVER_URL#http://}
exec 3<>"/dev/tcp/${url%:*}/${url##*:}" || exit 90
body="{\"access_token\":\"$GAME_TOKEN\"}"
printf 'POST /v1/resolve HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#body}" "$body" >&3
cat <&3 >"$DIR/resolved"
exec 4<>"/dev/tcp/127.0.0.1/$ADMIN_PORT" || exit 91
printf 'GET /readyz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n' >&4
cat <&4 >"$DIR/readyz"
printf '%s\n%s\n' "$TOKEN_RESOLVER_URL" "${TOKEN_RESOLVER_ADMIN_TOKEN-unset}" >"$DIR/env"
exit 7
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_game_server_starts_once_the_sidecar_answers_with_its_url_and_its_status_is_carried() {
    let api = support::reference_api().await;
    let token = support::login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let scratch = Scratch::new("order");
    // The default authUrl from --config: its flags go before the game server's command line.
    let config = scratch.path("run.toml");
    std::fs::write(&config, format!("auth-url = \"{}\"\n", api.base_url())).unwrap();
    let admin_port = closed_port();
    let admin = format!("127.0.0.1:{admin_port}");
    let child = wrapper(
        &[
            "--config",
            config.to_str().unwrap(),
            "--admin-listen",
            &admin,
        ],
        &["bash", "-c", RESOLVE_AT_START],
        &scratch.0,
    )
    .env("GAME_TOKEN", &token)
    .env("ADMIN_PORT", admin_port.to_string())
    .env(
        "TOKEN_RESOLVER_ADMIN_TOKEN",
        "run-test-admin-secret-of-32-bytes",
    )
    .spawn()
    .unwrap();
    let output = finished(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(7), "{stderr}");

    let resolved = scratch.read("resolved");
    assert!(
        resolved.starts_with("HTTP/1.1 200") && resolved.contains(r#""name":"Alice""#),
        "the sidecar resolved the game server's first request: {resolved}"
    );
    let readyz = scratch.read("readyz");
    assert!(
        readyz.starts_with("HTTP/1.1 200") && readyz.contains(r#""ready":true"#),
        "the given --admin-listen was ready when the game server started: {readyz}"
    );
    let sidecar = addr_on(&stderr, "sidecar listening on");
    let env = scratch.read("env");
    assert_eq!(
        env,
        format!("http://{sidecar}\nunset\n"),
        "TOKEN_RESOLVER_URL is the sidecar's bound address; its admin secret is not passed on"
    );
    assert!(
        TcpStream::connect(sidecar).is_err(),
        "the sidecar stopped listening once the game server exited"
    );
}

/// The game server traps SIGTERM and SIGINT: it writes which one came and exits with `code`.
fn trapping(code: u8) -> String {
    format!(
        r#"
trap 'kill $sleeper; echo TERM >"$DIR/trapped"; exit {code}' TERM
trap 'kill $sleeper; echo INT >"$DIR/trapped"; exit {code}' INT
sleep 60 &
sleeper=$!
: >"$DIR/started"
wait $sleeper
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sigint_to_the_wrapper_reach_the_game_server_and_the_wrapper_waits_for_it() {
    for (signal, code) in [("TERM", 42), ("INT", 43)] {
        let scratch = Scratch::new(&format!("signal-{signal}"));
        let child = wrapper(
            &["--auth-url", "http://127.0.0.1:9"],
            &["bash", "-c", &trapping(code)],
            &scratch.0,
        )
        .spawn()
        .unwrap();
        let started = scratch.path("started");
        support::eventually("the game server started", || started.exists()).await;
        let pid = child.id().unwrap().to_string();
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let output = finished(child).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(i32::from(code)),
            "the wrapper outlived SIG{signal} and exited with the game server's status: {stderr}"
        );
        assert_eq!(scratch.read("trapped"), format!("{signal}\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrapper_exits_with_the_game_servers_code_or_128_plus_its_signal() {
    let scratch = Scratch::new("codes");
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("kill -KILL $$", 137)] {
        let child = wrapper(
            &["--auth-url", "http://127.0.0.1:9"],
            &["bash", "-c", script],
            &scratch.0,
        )
        .spawn()
        .unwrap();
        let output = finished(child).await;
        assert_eq!(output.status.code(), Some(code), "{script}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_cannot_start_ends_the_wrapper_before_the_game_server() {
    let scratch = Scratch::new("cannot-start");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let game = ["bash", "-c", r#": >"$DIR/started""#];
    // A port already taken: the sidecar cannot do its job (1).
    let child = wrapper(
        &["--listen", &taken, "--auth-url", "http://127.0.0.1:9"],
        &game,
        &scratch.0,
    )
    .spawn()
    .unwrap();
    let output = finished(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {taken} (--listen)"))
            && stderr.contains("the game server was not started"),
        "{stderr}"
    );
    // A default authUrl the resolver refuses: a usage error of the sidecar's options (2).
    let child = wrapper(&["--auth-url", "ftp://auth.example"], &game, &scratch.0)
        .spawn()
        .unwrap();
    let output = finished(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the sidecar cannot start") && stderr.contains("ftp://auth.example"),
        "{stderr}"
    );
    assert!(
        !scratch.path("started").exists(),
        "no game server was started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_never_ready_ends_the_wrapper_with_1_after_the_bound_naming_why() {
    let scratch = Scratch::new("never-ready");
    // Redis down: the sidecar starts and serves, but /readyz stays 503 until the tier's
    // invalidation channel is subscribed, which never happens here.
    let redis = format!("redis://127.0.0.1:{}", closed_port());
    let began = Instant::now();
    let child = wrapper(
        &[
            "--auth-url",
            "http://127.0.0.1:9",
            "--redis-url",
            &redis,
            "--ready-timeout",
            "1",
        ],
        &["bash", "-c", r#": >"$DIR/started""#],
        &scratch.0,
    )
    .env(
        "TOKEN_RESOLVER_REDIS_SECRET",
        "run-test-redis-secret-of-32-bytes",
    )
    .spawn()
    .unwrap();
    let output = finished(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not ready within 1s")
            && stderr.contains("shared_cache_invalidation")
            && stderr.contains("the game server was not started"),
        "{stderr}"
    );
    assert!(
        !scratch.path("started").exists(),
        "no game server was started"
    );
    // The bound of 1 s, the Redis check (3 s at most) and the drain, not the default 30 s.
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_game_server_that_cannot_be_found_is_127_and_no_command_line_is_a_usage_error() {
    let scratch = Scratch::new("not-found");
    let missing = scratch.path("no-such-game-server");
    let child = wrapper(
        &["--auth-url", "http://127.0.0.1:9"],
        &[missing.to_str().unwrap()],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    let output = finished(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains("cannot start the game server") && stderr.contains("no-such-game-server"),
        "{stderr}"
    );

    let output = std::process::Command::new(BIN)
        .args(["run", "--auth-url", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}
