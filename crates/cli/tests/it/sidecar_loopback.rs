//! `token-resolver sidecar` stays on loopback unless told otherwise: `--listen` or
//! `--grpc-listen` beyond it is a usage error naming the flag, and with `--allow-non-loopback`
//! (or its key in `--config`) the sidecar starts and warns of what it then exposes.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The `token-resolver` binary.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

/// `sidecar` with `args` and a default authUrl nobody is asked.
fn sidecar(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("sidecar")
        .args(["--auth-url", "http://127.0.0.1:9"])
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("TOKEN_RESOLVER_ADMIN_TOKEN");
    command
}

#[test]
fn a_listener_beyond_loopback_is_a_usage_error_naming_the_flag() {
    for (args, flag) in [
        (vec!["--listen", "0.0.0.0:0"], "--listen"),
        (vec!["--listen", "[::]:0"], "--listen"),
        (vec!["--listen", "[::ffff:10.0.0.1]:0"], "--listen"),
        (
            vec!["--listen", "127.0.0.1:0", "--grpc-listen", "0.0.0.0:0"],
            "--grpc-listen",
        ),
    ] {
        let output = exit_within(&mut sidecar(&args), Duration::from_secs(10));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("loopback")
                && stderr.contains(&format!("{flag} "))
                && stderr.contains("--allow-non-loopback"),
            "{args:?}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "nothing listened: {args:?}");
    }
}

#[test]
fn loopback_in_any_spelling_is_accepted() {
    for listen in ["127.0.0.1:0", "127.0.0.2:0", "[::1]:0"] {
        let banner = banner_and_stderr(&mut sidecar(&["--listen", listen])).0;
        assert!(
            banner.contains("sidecar listening on"),
            "{listen}: {banner}"
        );
    }
}

#[test]
fn allow_non_loopback_starts_it_with_a_warning_naming_what_is_exposed() {
    // Bound on 0.0.0.0 at port 0 and stopped at once: no traffic is sent to it.
    let config = std::env::temp_dir().join(format!("sidecar-loopback-{}.toml", std::process::id()));
    std::fs::write(&config, "allow-non-loopback = true\n").unwrap();
    let from_flag = sidecar(&["--listen", "0.0.0.0:0", "--allow-non-loopback"]);
    let from_file = sidecar(&[
        "--listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "0.0.0.0:0",
        "--config",
        config.to_str().unwrap(),
    ]);
    for (mut command, flag) in [(from_flag, "--listen"), (from_file, "--grpc-listen")] {
        let (banner, stderr) = banner_and_stderr(command.arg("--drain-secs=0"));
        assert!(banner.contains("SIGTERM"), "it started: {banner}");
        assert!(banner.contains("0.0.0.0:"), "{banner}");
        let warning = (stderr.lines())
            .find(|line| line.contains("WARN") && line.contains("loopback"))
            .unwrap_or_else(|| panic!("a warning: {stderr}"));
        for exposed in [
            flag,
            "/v1/events",
            "DELETE /v1/sessions",
            "/v1/resolve",
            "token oracle",
        ] {
            assert!(warning.contains(exposed), "{exposed:?} in {warning}");
        }
    }
    let _ = std::fs::remove_file(config);
}

/// What `command` printed and its exit status, killed if it still runs after `within`.
fn exit_within(command: &mut Command, within: Duration) -> Output {
    let child = (command.stdout(Stdio::piped()).stderr(Stdio::piped()))
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output().unwrap()));
    exited.recv_timeout(within).unwrap_or_else(|_| {
        // Still running: the waiting thread reaps it and sends what it printed.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        exited.recv().unwrap()
    })
}

/// Runs `command` until its banner is out, kills it, and returns the banner and its stderr.
fn banner_and_stderr(command: &mut Command) -> (String, String) {
    let mut child = (command.stdout(Stdio::piped()).stderr(Stdio::piped()))
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        banner.push_str(&line);
        if line.starts_with("SIGTERM") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    (banner, stderr)
}
