//! The `token-resolver` binary as a user runs it: `resolve`'s one JSON line and exit status,
//! `serve-api`'s usage errors, and `demo` completing the whole flow.

use token_resolver_support as support;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use support::{login_and_take_token, reference_api};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_token-resolver"));
    cmd.env_remove("TOKEN_RESOLVER_TOKEN")
        .env_remove("TOKEN_RESOLVER_ADMIN_TOKEN")
        .env("RUST_LOG", "trace");
    cmd
}

/// Runs the binary off the async runtime's threads.
async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn json_line(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one line: {stdout:?}");
    serde_json::from_str(stdout.trim_end()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn resolve_prints_the_user_and_exits_0() {
    // Pins down `resolve` success: {"id","name"} on one line, exit 0, and the token not in the
    // logs even at TRACE.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let mut cmd = bin();
    cmd.args(["resolve", "--auth-url", &api.base_url(), "--token", &token]);
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The reference API also answers `exp` and `sid`, which the resolver keeps among the extra
    // fields.
    let mut line = json_line(&out);
    line.as_object_mut().unwrap().remove("exp");
    assert!(line
        .as_object_mut()
        .unwrap()
        .remove("sid")
        .is_some_and(|sid| sid.is_string()));
    assert_eq!(line, serde_json::json!({"id": 1, "name": "Alice"}));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(&token));
}

#[tokio::test(flavor = "multi_thread")]
async fn resolve_reads_the_token_from_stdin_and_the_environment() {
    // Pins down --token-stdin and TOKEN_RESOLVER_TOKEN.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "bob", "builder").await;

    let mut cmd = bin();
    cmd.args(["resolve", "--auth-url", &api.base_url(), "--token-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let line = format!("{token}\n");
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(json_line(&out)["name"], "Bob");

    let mut cmd = bin();
    cmd.args(["resolve", "--auth-url", &api.base_url()])
        .env("TOKEN_RESOLVER_TOKEN", &token);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_line(&out)["id"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn resolve_prints_the_error_code_and_exits_1() {
    // Pins down `resolve` failure: {"error": code, "message"} on one line, exit 1.
    let api = reference_api().await;
    for (auth_url, token, code) in [
        (api.base_url(), "unknown-token", "token_rejected"),
        // base64url tokens may begin with dashes: a value, not a flag.
        (api.base_url(), "--unknown-token", "token_rejected"),
        (api.base_url(), "bad token", "token_malformed"),
        (api.base_url(), "", "token_missing"),
        (
            "http://auth.example.com".to_owned(),
            "t",
            "auth_url_not_allowed",
        ),
    ] {
        let mut cmd = bin();
        cmd.args(["resolve", "--auth-url", &auth_url, "--token", token]);
        let out = output(cmd).await;
        assert_eq!(out.status.code(), Some(1), "{code}");
        let line = json_line(&out);
        assert_eq!(line["error"], code);
        assert!(line["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_errors_exit_2_with_nothing_on_stdout() {
    // Pins down exit 2 for a usage error, including a missing token source.
    for args in [
        vec!["resolve"],
        vec!["resolve", "--auth-url", "http://127.0.0.1:1"],
        vec!["no-such-command"],
    ] {
        let mut cmd = bin();
        cmd.args(&args);
        let out = output(cmd).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_api_notify_needs_a_good_admin_token() {
    // Pins down `serve-api --notify`: without TOKEN_RESOLVER_ADMIN_TOKEN, with one under 16
    // bytes, or with a target that is not an http(s) base URL, it exits 2 at once, saying
    // why, and never prints the secret.
    let short = "fifteen-bytes!!";
    let good = "a-good-admin-token-0123456789";
    for (token, target, says) in [
        (None, "http://127.0.0.1:9", "TOKEN_RESOLVER_ADMIN_TOKEN"),
        (Some(short), "http://127.0.0.1:9", "at least 16"),
        (Some(good), "ftp://127.0.0.1:9", "ftp://127.0.0.1:9"),
        (
            Some(good),
            "http://admin:hunter2-in-the-url@127.0.0.1:9",
            "http://redacted@127.0.0.1:9",
        ),
    ] {
        let mut cmd = bin();
        cmd.args(["serve-api", "--listen", "127.0.0.1:0", "--notify", target]);
        if let Some(token) = token {
            cmd.env("TOKEN_RESOLVER_ADMIN_TOKEN", token);
        }
        let out = output(cmd).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{token:?} {target}: {stderr}");
        assert!(stderr.contains(says), "{token:?} {target}: {stderr}");
        for secret in [short, good, "hunter2-in-the-url"] {
            assert!(!stderr.contains(secret), "{stderr}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn game_server_refuses_an_admin_token_that_no_client_could_send() {
    // Pins down TOKEN_RESOLVER_ADMIN_TOKEN on the game server: one with a trailing newline (as
    // `$(cat secret-file)` in some shells gives) or under 16 bytes is a usage error at start,
    // not a server whose every revocation then answers 401; the secret is never printed.
    let newline = "a-good-admin-token-0123456789\n";
    for (token, says) in [
        (newline, "visible ASCII"),
        ("fifteen-bytes!!", "at least 16"),
    ] {
        let mut cmd = bin();
        cmd.args(["game-server", "--listen", "127.0.0.1:0"])
            .env("TOKEN_RESOLVER_ADMIN_TOKEN", token);
        let out = output(cmd).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!stderr.contains(token.trim_end()), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_walks_the_whole_flow_and_exits_0() {
    // Pins down the main job: the demo completes every step of the flow.
    let mut cmd = bin();
    cmd.arg("demo").env("RUST_LOG", "warn");
    let out = output(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in [
        "POST /api/login",
        "POST /api/access_token",
        "SearchRoom",
        "cache hit",
        "auth_url_not_allowed",
        "token_rejected",
        "revoked",
        "403 banned",
        "reauth_required",
        "refreshed",
    ] {
        assert!(stdout.contains(step), "missing step {step:?} in:\n{stdout}");
    }
}

#[tokio::test]
async fn demo_sidecar_walks_a_foreign_servers_flow_and_exits_0() {
    // Pins down `demo --sidecar`: resolve through the sidecar, a ban pushed as an event, the
    // foreign server closing the socket.
    let mut cmd = bin();
    cmd.args(["demo", "--sidecar"]).env("RUST_LOG", "warn");
    let out = output(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for step in [
        "POST /v1/resolve",
        "X-User-Id: 1",
        "event: revoked",
        "socket closed",
    ] {
        assert!(stdout.contains(step), "missing step {step:?} in:\n{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn load_mints_more_tokens_than_one_session_may_issue() {
    // Pins down `load` against its in-process reference API when the run needs more distinct
    // tokens than one login session issues: it logs in again rather than failing on 403
    // `too_many_tokens`, and its rows complete without an error.
    let tokens = token_resolver_reference_api::MAX_TOKENS_PER_SESSION + 100;
    let mut cmd = bin();
    cmd.env("RUST_LOG", "warn").args([
        "load",
        "--tokens",
        &tokens.to_string(),
        "--requests",
        "2000",
        "--rounds",
        "1",
        "--fill",
        "0",
    ]);
    let out = output(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| token-resolver |"))
        .unwrap_or_else(|| panic!("no resolver row: {stdout}"));
    // | row | resolutions/s | p50 | p99 | upstream calls | errors | peak RSS | CPU per resolution |
    let columns: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(columns.get(6), Some(&"0"), "errors: {row}");
    // The process's CPU time over the row, per resolution: read, and more than nothing.
    let cpu = columns
        .get(8)
        .and_then(|cpu| cpu.strip_suffix(" µs"))
        .and_then(|cpu| cpu.parse::<f64>().ok());
    assert!(
        cpu.is_some_and(|cpu| cpu > 0.0),
        "CPU per resolution: {row}"
    );
}
