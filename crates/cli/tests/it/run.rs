//! `token-resolver run` as a process with a real game server child (a bash script): the child
//! starts only once the sidecar answers, with `TOKEN_RESOLVER_URL` and without the sidecar's
//! secrets; SIGTERM and SIGINT reach it once, in a process group of its own, while the sidecar
//! still serves it; its exit status is the wrapper's (128+N for a signal); the sidecar drains
//! after it, unless a signal cuts the drain short; a sidecar that cannot start or never gets
//! ready ends the wrapper with 1 before any game server starts, and a signal meanwhile with
//! 128+N.

use token_resolver_support as support;

use support::TempDir;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The `token-resolver` binary.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

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
        // A group of its own: a test may signal the wrapper's group as a terminal does.
        .process_group(0)
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
    let scratch = TempDir::new("run-order");
    // The default authUrl from --config: its flags go before the game server's command line.
    let config = scratch.join("run.toml");
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
        scratch.path(),
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

/// The game server records its pid and process group, then waits. It traps SIGTERM and
/// SIGINT: while handling either it resolves `GAME_TOKEN` through the sidecar and records the
/// answer, then writes which signal came and exits with `code`.
fn trapping(code: u8) -> String {
    r#"
resolve() {
    url=${TOKEN_RESOLVER_URL#http://}
    exec 3<>"/dev/tcp/${url%:*}/${url##*:}" || return
    body="{\"access_token\":\"$GAME_TOKEN\"}"
    printf 'POST /v1/resolve HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#body}" "$body" >&3
    cat <&3 >"$1"
    exec 3<&-
}
trap 'kill $sleeper; resolve "$DIR/resolved"; echo TERM >"$DIR/trapped"; exit CODE' TERM
trap 'kill $sleeper; resolve "$DIR/resolved"; echo INT >"$DIR/trapped"; exit CODE' INT
read -r _ _ _ _ group _ </proc/$$/stat
echo "$$ $group" >"$DIR/group"
sleep 60 &
sleeper=$!
: >"$DIR/started"
wait $sleeper
"#
    .replace("CODE", &code.to_string())
}

/// Sends `signal` to the process `pid`, or to its whole process group (as a terminal's Ctrl-C
/// or a supervisor that kills the group does).
fn send(pid: u32, signal: Signal, group: bool) {
    let pid = Pid::from_raw(i32::try_from(pid).unwrap());
    if group {
        killpg(pid, signal).unwrap();
    } else {
        kill(pid, signal).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sigint_reach_the_game_server_once_while_the_sidecar_still_serves_it() {
    // SIGTERM to the wrapper, and SIGINT to the wrapper's whole process group as a terminal
    // sends Ctrl-C: the game server, in a process group of its own, gets only what the wrapper
    // forwards, and the sidecar answers it while it handles the signal.
    let api = support::reference_api().await;
    let token = support::login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    for (signal, name, to_group, code) in [
        (Signal::SIGTERM, "TERM", false, 42),
        (Signal::SIGINT, "INT", true, 43),
    ] {
        let scratch = TempDir::new(&format!("run-signal-{name}"));
        let child = wrapper(
            &["--auth-url", &api.base_url()],
            &["bash", "-c", &trapping(code)],
            scratch.path(),
        )
        .env("GAME_TOKEN", &token)
        .spawn()
        .unwrap();
        let started = scratch.join("started");
        support::eventually("the game server started", || started.exists()).await;
        let wrapper_pid = child.id().unwrap();
        send(wrapper_pid, signal, to_group);
        let output = finished(child).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(i32::from(code)),
            "the wrapper outlived SIG{name} and exited with the game server's status: {stderr}"
        );
        assert_eq!(scratch.read("trapped"), format!("{name}\n"));
        let resolved = scratch.read("resolved");
        assert!(
            resolved.starts_with("HTTP/1.1 200") && resolved.contains(r#""name":"Alice""#),
            "the sidecar resolved for the game server while it handled SIG{name}: {resolved}"
        );
        let group = scratch.read("group");
        let (game_pid, game_group) = group.trim().split_once(' ').unwrap();
        assert_eq!(
            game_pid, game_group,
            "the game server leads a process group of its own"
        );
        assert_ne!(
            game_group,
            wrapper_pid.to_string(),
            "the game server is not in the wrapper's process group"
        );
    }
}

/// The game server at a terminal: it records its process group and its parent's (the
/// wrapper's), then waits; on SIGINT it appends `INT` to a file and exits 44.
const AT_A_TERMINAL: &str = r#"
trap 'kill $sleeper; echo INT >>"$DIR/trapped"; exit 44' INT
read -r _ _ _ _ group _ </proc/$$/stat
read -r _ _ _ _ parent_group _ </proc/$PPID/stat
echo "$group $parent_group" >"$DIR/groups"
sleep 60 &
sleeper=$!
: >"$DIR/started"
wait $sleeper
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_ctrl_c_reaches_the_game_server_from_the_terminal_and_is_not_forwarded() {
    // A real pseudo-terminal (util-linux's `script`): the game server stays in the wrapper's
    // process group, the terminal's foreground, so that it may read the terminal; the Ctrl-C
    // typed there reaches it from the terminal, and the wrapper does not send it a second.
    let Some(script) = support::program("script") else {
        support::present(false, "script", "bsdutils");
        return;
    };
    let scratch = TempDir::new("run-terminal");
    let game = scratch.join("game.sh");
    std::fs::write(&game, AT_A_TERMINAL).unwrap();
    let command = format!(
        "exec '{BIN}' run --listen 127.0.0.1:0 --auth-url http://127.0.0.1:9 -- bash '{}'",
        game.display()
    );
    let mut child = tokio::process::Command::new(script)
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("RUST_LOG", "info")
        .env("DIR", scratch.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = scratch.join("started");
    support::eventually("the game server started", || started.exists()).await;
    // Ctrl-C typed at the terminal; the terminal stays open until the wrapper has exited.
    let mut terminal = child.stdin.take().unwrap();
    terminal.write_all(b"\x03").await.unwrap();
    terminal.flush().await.unwrap();
    let output = finished(child).await;
    drop(terminal);
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(44), "{said}");
    let groups = scratch.read("groups");
    let (game_group, wrapper_group) = groups.trim().split_once(' ').unwrap();
    assert_eq!(
        game_group, wrapper_group,
        "at a terminal the game server is in the wrapper's process group"
    );
    assert!(
        said.contains("not forwarded") && !said.contains("forwarding to the game server"),
        "the wrapper did not forward the terminal's SIGINT: {said}"
    );
    assert_eq!(scratch.read("trapped"), "INT\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_before_the_sidecar_is_ready_ends_the_wrapper_with_128_plus_n_and_no_game_server()
{
    let scratch = TempDir::new("run-stopped-before-ready");
    // Redis down: /readyz stays 503 (as in the never-ready test), here for up to 30 s.
    let redis = format!("redis://127.0.0.1:{}", closed_port());
    let began = Instant::now();
    let mut child = wrapper(
        &[
            "--auth-url",
            "http://127.0.0.1:9",
            "--redis-url",
            &redis,
            "--ready-timeout",
            "30",
        ],
        &["bash", "-c", r#": >"$DIR/started""#],
        scratch.path(),
    )
    .env(
        "TOKEN_RESOLVER_REDIS_SECRET",
        "run-test-redis-secret-of-32-bytes",
    )
    .spawn()
    .unwrap();
    // The banner's admin line: the sidecar is started, and the wrapper waits for /readyz.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = String::new();
    while !stderr.contains("admin listener on") {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the sidecar's banner")
            .unwrap()
            .unwrap_or_else(|| panic!("stderr ended: {stderr}"));
        stderr.push_str(&line);
        stderr.push('\n');
    }
    send(child.id().unwrap(), Signal::SIGTERM, false);
    let status = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            stderr.push_str(&line);
            stderr.push('\n');
        }
        child.wait().await.unwrap()
    })
    .await
    .expect("the wrapper exits");
    assert_eq!(status.code(), Some(128 + 15), "{stderr}");
    assert!(
        stderr.contains("SIGTERM before the sidecar was ready")
            && stderr.contains("the game server was not started"),
        "{stderr}"
    );
    assert!(
        !scratch.join("started").exists(),
        "no game server was started"
    );
    // Not the 30 s of --ready-timeout: the signal ended the wait.
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_during_the_drain_cuts_it_short_and_the_game_servers_status_is_carried() {
    let scratch = TempDir::new("run-drain-cut");
    // An integrator that accepts and never answers: a resolution in flight holds the drain
    // for the resolver's 5 s request timeout.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let auth_url = format!("http://{}", upstream.local_addr().unwrap());
    let listen = format!("127.0.0.1:{}", closed_port());
    let admin = format!("127.0.0.1:{}", closed_port());
    let child = wrapper(
        &[
            "--listen",
            &listen,
            "--admin-listen",
            &admin,
            "--auth-url",
            &auth_url,
            "--drain-secs",
            "30",
        ],
        &["bash", "-c", &trapping(5)],
        scratch.path(),
    )
    .spawn()
    .unwrap();
    let started = scratch.join("started");
    support::eventually("the game server started", || started.exists()).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    // Before the resolution begins: a drain left to run ends with it, 5 s after it began.
    let sent = Instant::now();
    let in_flight = tokio::spawn(
        client
            .post(format!("http://{listen}/v1/resolve"))
            .json(&serde_json::json!({"access_token": "run-drain-test-token-0123456789abcdef"}))
            .send(),
    );
    let (_held, _) = tokio::time::timeout(Duration::from_secs(10), upstream.accept())
        .await
        .expect("the resolution reached the integrator")
        .unwrap();

    // The first SIGTERM is forwarded: the game server exits 5 and the drain begins.
    let pid = child.id().unwrap();
    send(pid, Signal::SIGTERM, false);
    let readyz = format!("http://{admin}/readyz");
    support::eventually_async("the sidecar drains", || async {
        let answer = client.get(&readyz).send().await;
        answer.is_ok_and(|a| a.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE)
    })
    .await;
    // The second cuts the drain short, which would otherwise wait for the resolution.
    let asked = Instant::now();
    send(pid, Signal::SIGTERM, false);
    let output = finished(child).await;
    let took = asked.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains("SIGTERM during the sidecar's drain"),
        "{stderr}"
    );
    // Counted from before the resolution began, an uncut drain takes 5 s or more, and what a
    // loaded machine adds to the signals' handling does not eat the margin.
    assert!(
        sent.elapsed() < Duration::from_millis(4500),
        "the wrapper exited {took:?} after the second SIGTERM, {:?} after the resolution was \
         sent: the drain was not cut short: {stderr}",
        sent.elapsed()
    );
    in_flight.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrapper_exits_with_the_game_servers_code_or_128_plus_its_signal() {
    let scratch = TempDir::new("run-codes");
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("kill -KILL $$", 137)] {
        let child = wrapper(
            &["--auth-url", "http://127.0.0.1:9"],
            &["bash", "-c", script],
            scratch.path(),
        )
        .spawn()
        .unwrap();
        let output = finished(child).await;
        assert_eq!(output.status.code(), Some(code), "{script}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_cannot_start_ends_the_wrapper_before_the_game_server() {
    let scratch = TempDir::new("run-cannot-start");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let game = ["bash", "-c", r#": >"$DIR/started""#];
    // A port already taken: the sidecar cannot do its job (1).
    let child = wrapper(
        &["--listen", &taken, "--auth-url", "http://127.0.0.1:9"],
        &game,
        scratch.path(),
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
    let child = wrapper(&["--auth-url", "ftp://auth.example"], &game, scratch.path())
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
        !scratch.join("started").exists(),
        "no game server was started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_never_ready_ends_the_wrapper_with_1_after_the_bound_naming_why() {
    let scratch = TempDir::new("run-never-ready");
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
        scratch.path(),
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
        !scratch.join("started").exists(),
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
    let scratch = TempDir::new("run-not-found");
    let missing = scratch.join("no-such-game-server");
    let child = wrapper(
        &["--auth-url", "http://127.0.0.1:9"],
        &[missing.to_str().unwrap()],
        scratch.path(),
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
