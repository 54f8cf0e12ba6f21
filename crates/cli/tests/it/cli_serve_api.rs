//! `token-resolver serve-api` as a user runs it: HTTPS with `--tls-cert` and `--tls-key`, and
//! `--latency-ms` holding every `/api/user` answer back.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use token_resolver::{ErrorCode, Resolver};
use token_resolver_support::PrivateCa;

/// The running binary; killed when dropped.
struct ServeApi {
    child: Child,
    base: String,
    /// Kept open: the banner goes on after its first line, and a closed pipe would end it.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for ServeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `serve-api` on a free loopback port with `args` and reads its base URL from the
/// first line it prints.
fn serve_api(args: &[&str]) -> ServeApi {
    let mut child = Command::new(env!("CARGO_BIN_EXE_token-resolver"))
        .args(["serve-api", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut first).unwrap();
    let base = first
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_owned();
    ServeApi {
        child,
        base,
        _stdout: stdout,
    }
}

#[tokio::test]
async fn serve_api_serves_https_with_the_given_certificate_and_delays_user_answers() {
    // Pins down --tls-cert/--tls-key (HTTPS that a resolver trusting the CA reaches and one
    // that does not refuses) and --latency-ms (a /api/user answer comes no sooner).
    let ca = PrivateCa::new();
    let dir = std::env::temp_dir().join(format!("serve-api-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, &ca.cert_pem).unwrap();
    std::fs::write(&key, &ca.key_pem).unwrap();
    let api = tokio::task::spawn_blocking(move || {
        serve_api(&[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--latency-ms",
            "300",
        ])
    })
    .await
    .unwrap();
    assert!(api.base.starts_with("https://127.0.0.1:"), "{}", api.base);

    let trusting = Resolver::builder()
        .default_auth_url(&api.base)
        .add_root_certificate(ca.ca_pem.as_bytes())
        .build()
        .unwrap();
    let started = Instant::now();
    let err = trusting
        .resolve(&api.base, "unknown-token")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::TokenRejected, "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );

    let untrusting = Resolver::builder()
        .default_auth_url(&api.base)
        .retries(0)
        .build()
        .unwrap();
    let err = untrusting
        .resolve(&api.base, "unknown-token")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthUnavailable, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_api_refuses_a_certificate_without_its_key() {
    // Pins down the flags' pairing: --tls-cert alone is a usage error (exit 2).
    let out = Command::new(env!("CARGO_BIN_EXE_token-resolver"))
        .args([
            "serve-api",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            "x.pem",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
