//! `check`, the integrator's conformance checker: every check passes against the reference
//! API, and each way a misbehaving API breaks the protocol is reported with its hint.

use token_resolver_support as support;

use std::process::Command;

use support::{
    api_answering, conforming_answer, login_and_take_token, reference_api, respond, Scripted,
    GOOD_TOKEN,
};
use token_resolver_check::{
    self as check, https_check, CheckConfig, CheckId, Login, Report, Verdict,
};

async fn check_with(url: &str, token: &str) -> Report {
    let mut config = CheckConfig::new(url, Some(token.to_owned()));
    config.calls = 3;
    check::run(&config).await.expect("the checks run")
}

/// Asserts that `id` failed with a hint mentioning `hint_part`, and that the run failed.
fn assert_fails(report: &Report, id: CheckId, hint_part: &str) {
    let result = report
        .get(id)
        .unwrap_or_else(|| panic!("{id} missing:\n{report}"));
    assert_eq!(result.verdict, Verdict::Fail, "{id}:\n{report}");
    let hint = result.hint.as_deref().unwrap_or_default();
    assert!(hint.contains(hint_part), "{id} hint {hint:?}:\n{report}");
    assert!(!report.passed());
    assert!(report.to_string().contains(&format!("hint: {hint}")));
}

#[tokio::test]
async fn reference_api_passes_every_check() {
    // Pins down the baseline: the reference API conforms, with a token and with credentials,
    // and the printed report never shows the token.
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let mut config = CheckConfig::new(&base, Some(token.clone()));
    config.login = Some(Login::Password {
        username: "bob".into(),
        password: "builder".into(),
    });
    let report = check::run(&config).await.unwrap();
    let shown = report.to_string();
    assert!(report.passed(), "{shown}");
    for r in &report.results {
        assert_eq!(r.verdict, Verdict::Pass, "{}: {shown}", r.check);
    }
    assert_eq!(report.results.len(), 10, "{shown}");
    assert!(!shown.contains(&token), "{shown}");
    assert!(shown.contains("verdict: ready"), "{shown}");
}

#[tokio::test]
async fn credentials_alone_check_with_the_login_flows_token() {
    // Pins down --device-id without --token: the login flow's token drives the other checks.
    let api = reference_api().await;
    let mut config = CheckConfig::new(api.base_url(), None);
    config.login = Some(Login::Device {
        device_id: "check-device-1".into(),
    });
    config.calls = 2;
    let report = check::run(&config).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(report.get(CheckId::Latency).unwrap().verdict, Verdict::Pass);
}

#[tokio::test]
async fn wrong_credentials_fail_the_login_flow() {
    // Pins down login_flow's failure with its hint.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let mut config = CheckConfig::new(api.base_url(), Some(token));
    config.login = Some(Login::Password {
        username: "alice".into(),
        password: "wrong".into(),
    });
    let report = check::run(&config).await.unwrap();
    assert_fails(&report, CheckId::LoginFlow, "credentials");
}

#[tokio::test]
async fn an_api_accepting_any_token_fails_bearer_read() {
    // Pins down the most dangerous bug: 200 to a made-up token (and to no token).
    let api = Scripted::start(|_, _| async { conforming_answer() }).await;
    let report = check_with(&api.url(), GOOD_TOKEN).await;
    assert_fails(&report, CheckId::BearerRead, "answer 401");
    assert!(report
        .get(CheckId::BearerRead)
        .unwrap()
        .detail
        .contains("made-up token: HTTP 200"));
    assert_eq!(
        report.get(CheckId::AnswerShape).unwrap().verdict,
        Verdict::Pass
    );
}

#[tokio::test]
async fn an_id_sent_as_a_string_fails_answer_shape() {
    // Pins down answer_shape: "id": "7" is not an integer.
    let api = api_answering(|_| {
        respond(
            200,
            &[
                ("content-type", "application/json"),
                ("cache-control", "private, max-age=30"),
            ],
            br#"{"id":"7","name":"grace"}"#,
        )
    })
    .await;
    let report = check_with(&api.url(), GOOD_TOKEN).await;
    assert_fails(
        &report,
        CheckId::AnswerShape,
        r#"{"id": <integer>, "name": <string>}"#,
    );
    assert!(report
        .get(CheckId::AnswerShape)
        .unwrap()
        .detail
        .contains("\"id\" is a string"));
    assert_eq!(
        report.get(CheckId::BearerRead).unwrap().verdict,
        Verdict::Pass
    );
}

#[tokio::test]
async fn a_missing_content_type_fails() {
    // Pins down content_type.
    let api = api_answering(|_| {
        respond(
            200,
            &[("cache-control", "private, max-age=30")],
            br#"{"id":7,"name":"grace"}"#,
        )
    })
    .await;
    let report = check_with(&api.url(), GOOD_TOKEN).await;
    assert_fails(&report, CheckId::ContentType, "application/json");
}

#[tokio::test]
async fn a_missing_cache_control_fails() {
    // Pins down cache_control: absent is a failure.
    let api = api_answering(|_| {
        respond(
            200,
            &[("content-type", "application/json")],
            br#"{"id":7,"name":"grace"}"#,
        )
    })
    .await;
    let report = check_with(&api.url(), GOOD_TOKEN).await;
    assert_fails(&report, CheckId::CacheControl, "max-age");
}

#[tokio::test]
async fn an_api_refusing_post_fails_post_accepted() {
    // Pins down post_accepted on a GET-only API: 405 to POST; the checks that need a 200
    // answer are skipped, not failed.
    let api = Scripted::always(405, &[("allow", "GET")], b"").await;
    let report = check_with(&api.url(), GOOD_TOKEN).await;
    assert_fails(&report, CheckId::PostAccepted, "accept POST");
    assert!(report
        .get(CheckId::PostAccepted)
        .unwrap()
        .detail
        .contains("Allow: GET"));
    for id in [
        CheckId::AnswerShape,
        CheckId::ContentType,
        CheckId::CacheControl,
        CheckId::Latency,
    ] {
        assert_eq!(report.get(id).unwrap().verdict, Verdict::Skip, "{id}");
    }
}

#[tokio::test]
async fn a_401_without_www_authenticate_fails() {
    // Pins down www_authenticate: RFC 6750's challenge on a 401.
    let api = Scripted::start(|_, seen| async move {
        if seen.header("authorization") == Some("Bearer good-token") {
            conforming_answer()
        } else {
            respond(401, &[], b"")
        }
    })
    .await;
    let report = check_with(&api.url(), GOOD_TOKEN).await;
    assert_fails(
        &report,
        CheckId::WwwAuthenticate,
        "WWW-Authenticate: Bearer",
    );
    assert_eq!(
        report.get(CheckId::BearerRead).unwrap().verdict,
        Verdict::Pass
    );
}

#[tokio::test]
async fn a_rejected_token_fails_post_accepted_with_a_fresh_token_hint() {
    // Pins down the integrator's own mistake: the token given is not valid.
    let api = api_answering(|_| conforming_answer()).await;
    let report = check_with(&api.url(), "stale-token").await;
    assert_fails(&report, CheckId::PostAccepted, "fresh token");
}

#[tokio::test]
async fn failing_latency_calls_fail_latency() {
    // Pins down latency: every call must answer 200, not only the first.
    let api = Scripted::start(|n, seen| async move {
        match seen.header("authorization") {
            Some("Bearer good-token") if n == 0 => conforming_answer(),
            Some("Bearer good-token") => respond(503, &[], b""),
            _ => respond(401, &[("www-authenticate", "Bearer")], b""),
        }
    })
    .await;
    let report = check_with(&api.url(), GOOD_TOKEN).await;
    assert_fails(&report, CheckId::Latency, "every call");
    assert!(report
        .get(CheckId::Latency)
        .unwrap()
        .detail
        .contains("HTTP 503"));
}

#[tokio::test]
async fn the_checker_only_calls_the_given_url() {
    // Pins down the traffic rule: POST to /api/user of the given URL, nothing else.
    let api = api_answering(|_| conforming_answer()).await;
    let report = check_with(&format!("{}/", api.url()), GOOD_TOKEN).await;
    assert!(report.passed(), "{report}");
    let seen = api.seen();
    assert_eq!(
        seen.len(),
        1 + 2 + 3,
        "first call, two wrong-token calls, three latency calls"
    );
    for s in seen {
        assert_eq!(
            (s.method.as_str(), s.path.as_str(), s.body_len),
            ("POST", "/api/user", 0)
        );
    }
}

#[test]
fn http_off_loopback_is_a_warning_only_when_allowed() {
    // Pins down the https check's URL logic, which needs no traffic.
    let v = |url: &str, allow: bool| https_check(url, allow).verdict;
    assert_eq!(v("https://auth.example.com", false), Verdict::Pass);
    assert_eq!(v("http://127.0.0.1:8080", false), Verdict::Pass);
    assert_eq!(v("http://localhost:8080", false), Verdict::Pass);
    assert_eq!(v("http://[::1]:8080", false), Verdict::Pass);
    assert_eq!(v("http://auth.example.com", true), Verdict::Warn);
    assert_eq!(v("http://auth.example.com", false), Verdict::Fail);
    assert!(https_check("http://auth.example.com", true)
        .hint
        .unwrap()
        .contains("https"));
}

#[tokio::test]
async fn http_off_loopback_without_permission_sends_nothing() {
    // Pins down that a token is not sent in the clear: the run stops after the https check.
    let config = CheckConfig::new("http://auth.example.invalid", Some("t".into()));
    let report = check::run(&config).await.unwrap();
    assert_eq!(report.get(CheckId::Https).unwrap().verdict, Verdict::Fail);
    assert!(report.results[1..]
        .iter()
        .all(|r| r.verdict == Verdict::Skip));
    assert!(!report.passed());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_exits_0_when_ready_1_on_a_failure_and_2_without_a_token() {
    // Pins down `token-resolver check`'s exit status and printed table (never the token).
    let good = reference_api().await;
    let token = login_and_take_token(&good.base_url(), "alice", "wonderland").await;
    let broken = Scripted::start(|_, _| async { conforming_answer() }).await;
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_token-resolver"))
                .arg("check")
                .args(args)
                .env_remove("TOKEN_RESOLVER_TOKEN")
                .env("RUST_LOG", "trace")
                .output()
                .unwrap()
        })
    };
    let ok = run(vec![
        "--auth-url".into(),
        good.base_url(),
        "--token".into(),
        token.clone(),
        "--calls".into(),
        "2".into(),
    ])
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("PASS  bearer_read"), "{stdout}");
    assert!(!stdout.contains(&token) && !String::from_utf8_lossy(&ok.stderr).contains(&token));

    let bad = run(vec![
        "--auth-url".into(),
        broken.url(),
        "--token".into(),
        GOOD_TOKEN.into(),
    ])
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL  bearer_read") && stdout.contains("hint: "),
        "{stdout}"
    );
    assert!(stdout.contains("verdict: NOT READY"), "{stdout}");

    // base64url tokens may begin with dashes: a value the API rejects, not a flag.
    let dashed = run(vec![
        "--auth-url".into(),
        good.base_url(),
        "--token".into(),
        "--not-a-flag".into(),
    ])
    .await
    .unwrap();
    assert_eq!(
        dashed.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&dashed.stderr)
    );

    let usage = run(vec!["--auth-url".into(), good.base_url()])
        .await
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
}
