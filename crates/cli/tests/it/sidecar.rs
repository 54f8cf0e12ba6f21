//! `token-resolver sidecar` as a process: its banner, the three listeners its flags open, its
//! settings from `--config`, and SIGTERM draining it to exit 0.

use token_resolver_support as support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

/// The `token-resolver` binary.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

/// A `token-resolver sidecar` process, killed on drop.
pub(crate) struct SidecarProcess {
    pub(crate) child: Child,
    banner: String,
}

impl SidecarProcess {
    /// Starts `sidecar` with `args` and waits for its banner (up to its last line).
    fn start(args: &[&str]) -> SidecarProcess {
        let mut command = SidecarProcess::command(args);
        command.env("RUST_LOG", "warn");
        SidecarProcess::spawn(command)
    }

    /// `token-resolver sidecar --listen 127.0.0.1:0 ARGS`, with an admin token, its standard
    /// output piped for the banner: for a test to add to, then [`spawn`](Self::spawn).
    pub(crate) fn command(args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .arg("sidecar")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env(
                "TOKEN_RESOLVER_ADMIN_TOKEN",
                "sidecar-cli-test-secret-of-32-bytes",
            )
            .stdout(Stdio::piped());
        command
    }

    /// Starts `command` and waits for its banner (up to its last line).
    pub(crate) fn spawn(mut command: Command) -> SidecarProcess {
        let mut child = command.spawn().unwrap();
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
        SidecarProcess { child, banner }
    }

    /// Sends SIGTERM and waits for the exit, at most 15 s: its drain may take up to its default
    /// 10 s, then the admin listener's stop and the last export of spans.
    pub(crate) async fn terminate(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        support::eventually_within(
            "the sidecar exits after SIGTERM",
            Duration::from_secs(15),
            || {
                let exited = self.child.try_wait().unwrap().is_some();
                async move { exited }
            },
        )
        .await;
    }

    /// The address on the banner line that starts with `prefix`.
    pub(crate) fn addr(&self, prefix: &str) -> SocketAddr {
        let line = (self.banner.lines())
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {:?}", self.banner));
        line.split_whitespace()
            .find_map(|w| w.trim_start_matches("http://").parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_subcommand_serves_its_three_listeners_and_drains_on_sigterm() {
    let api = support::reference_api().await;
    let token = support::login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let config = std::env::temp_dir().join(format!("sidecar-{}.toml", std::process::id()));
    let grants = std::env::temp_dir().join(format!("sidecar-{}.grants", std::process::id()));
    let settings = format!(
        "auth-url = \"{}\"\nnginx-purge-url = \"http://127.0.0.1:9/purge\"\nnginx-cache-secs = 30\n\
         nginx-grants-file = \"{}\"\n",
        api.base_url(),
        grants.display()
    );
    std::fs::write(&config, settings).unwrap();
    let mut sidecar = SidecarProcess::start(&[
        "--config",
        config.to_str().unwrap(),
        "--admin-listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
    ]);
    let http = sidecar.addr("sidecar listening on");
    let admin = sidecar.addr("admin listener on");
    sidecar.addr("ext_authz gRPC listener on");
    let client = reqwest::Client::new();
    let resolved = client
        .post(format!("http://{http}/v1/resolve"))
        .json(&json!({"access_token": token}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resolved.status(),
        200,
        "the default authUrl came from --config"
    );
    let answer: serde_json::Value = resolved.json().await.unwrap();
    assert_eq!(answer["user"]["name"], "Alice");
    let authorized = client
        .get(format!("http://{http}/v1/authorize"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(authorized.status(), 200);
    assert_eq!(
        authorized.headers()["x-accel-expires"],
        "30",
        "nginx may keep the answer as long as --config's nginx-cache-secs says"
    );
    let recorded = std::fs::read_to_string(&grants).unwrap();
    assert!(
        recorded.lines().count() == 1 && recorded.ends_with(&format!(" Bearer {token}\n")),
        "the grant was recorded in --config's nginx-grants-file"
    );
    let ready = client
        .get(format!("http://{admin}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);

    sidecar.terminate().await;
    // The status try_wait saw.
    let exited = sidecar.child.wait().unwrap();
    assert!(exited.success(), "{exited:?}");
    let _ = std::fs::remove_file(config);
    let _ = std::fs::remove_file(grants);
}

#[test]
fn a_purge_url_off_loopback_is_a_usage_error_naming_the_flag() {
    let output = Command::new(BIN)
        .args(["sidecar", "--listen", "127.0.0.1:0"])
        .args(["--auth-url", "http://127.0.0.1:9"])
        .args(["--nginx-purge-url", "http://10.0.0.1/purge"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--nginx-purge-url") && stderr.contains("loopback"),
        "{stderr}"
    );
}

#[test]
fn a_grants_file_without_a_purge_url_or_a_directory_is_a_usage_error_naming_the_flag() {
    let missing = std::env::temp_dir().join("no-such-directory-for-grants/grants");
    for extra in [
        vec!["--nginx-grants-file", "/tmp/grants"],
        vec![
            "--nginx-purge-url",
            "http://127.0.0.1:9/purge",
            "--nginx-grants-file",
            missing.to_str().unwrap(),
        ],
    ] {
        let output = Command::new(BIN)
            .args(["sidecar", "--listen", "127.0.0.1:0"])
            .args(["--auth-url", "http://127.0.0.1:9"])
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--nginx-grants-file"), "{stderr}");
    }
}
