//! The token never leaks on the fault paths either: timeouts, resets, cut and endless bodies,
//! untrusted TLS, redirects, and upstreams that echo the `Authorization` header back in their
//! bodies, headers and status lines. Everything runs under a TRACE subscriber that captures
//! every log line and span field (the crate's, reqwest's, hyper's and rustls's) and a recording
//! metrics recorder; then the logs, every metric label, and the `Display`, `Debug` and source
//! chain of every error are searched for the token. Error messages may carry at most a short
//! sanitised excerpt of a response body, never the body itself.
//!
//! A test binary of its own: it installs the process-wide subscriber and recorder.

use token_resolver_support as support;

use std::time::Duration;

use axum::response::IntoResponse;
use support::{
    close_at_once, endless_chunked, error_texts, never_answer, recorded_metrics, reset_mid_body,
    resolver_for, short_body_then_close, trickle_body, write_raw, RawServer, Scripted,
    UntrustedTls,
};
use token_resolver::{ConnectRequest, ErrorCode, JoinRequest, ResolveError, Resolver};

/// A token that looks like a real one; its random-looking tail is searched for on its own too,
/// so a truncated echo is caught as well as a whole one.
const TOKEN: &str = "ya29.Leak-Check_Q8vN2kPz7RtX4mWb9sLc3Hd6Jf0Gy5==";
const TOKEN_TAIL: &str = "Q8vN2kPz7RtX4mWb9sLc3Hd6";

/// A marker every echoing body carries beside the token: error texts must not quote it either.
const BODY_MARKER: &str = "body-marker-3e7a1c9f5d2b8e40";

fn leaks(text: &str) -> bool {
    text.contains(TOKEN) || text.contains(TOKEN_TAIL)
}

/// A 200 body that puts the token where a careless parser would quote it.
fn echoing_bodies(authorization: &str) -> Vec<String> {
    vec![
        format!(r#"{{"id":"{authorization}","name":"{BODY_MARKER}"}}"#),
        format!(r#"{{"id":1,"name":1,"{authorization}":"{BODY_MARKER}"}}"#),
        format!(r#"{{"id":1,"name":"a","x":1,"x":"{authorization} {BODY_MARKER}"}}"#),
        format!(r#"["{authorization}","{BODY_MARKER}"]"#),
        format!("{authorization} {BODY_MARKER}"),
        format!(r#"{{"id":1,"name":"a"}} {authorization} {BODY_MARKER}"#),
        format!(r#""{authorization} {BODY_MARKER}""#),
        format!(r#"{{"id":1,"name":"a","{authorization}":{BODY_MARKER}}}"#),
        format!("{{\"id\":1,\"name\":\"\u{1}{authorization}{BODY_MARKER}\"}}"),
        format!(
            r#"{{"id":1,"name":"{}{authorization}"}}"#,
            " ".repeat(70_000)
        ),
    ]
}

/// The errors of the fault paths, each with what caused it.
type Errors = Vec<(String, ResolveError)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_appears_nowhere_on_the_fault_paths() {
    // Pins down that no fault path puts the token (or the body that echoed it) in an error, a
    // log line, a span field or a metric.
    let (logs, snapshotter) = support::capture_everything();
    let mut errors = Errors::new();
    transport_faults(&mut errors).await;
    untrusted_tls(&mut errors).await;
    echoing_bodies_fail(&mut errors).await;
    echoing_statuses_fail(&mut errors).await;
    connect_and_join_fail(&mut errors).await;

    for (what, error) in &errors {
        assert_error_keeps_the_secret(what, error);
    }
    let logs = logs.text();
    assert!(
        logs.contains("auth_host") && logs.contains("auth_timeout"),
        "the capture saw the spans: {:.500}",
        logs
    );
    for line in logs.lines() {
        assert!(!leaks(line), "the token is in a log line: {line}");
    }
    for (name, labels) in recorded_metrics(&snapshotter) {
        assert!(!leaks(&name));
        for (key, value) in labels {
            assert!(
                !leaks(&key) && !leaks(&value),
                "the token is in the metric label {key}={value}"
            );
        }
    }
}

/// The deadline of the faults that hang (headers that never come, a trickled body): short, so
/// that they end quickly, and any of their outcomes is accepted.
const HANGING: Duration = Duration::from_millis(400);

/// The deadline of the faults that answer (a refused handshake, a cut, reset, endless or bad
/// body, a closed connection, a status or an echoing status line): long enough that a loaded
/// machine never turns the exact code they are checked for into `auth_timeout`; they end as
/// soon as the answer comes.
const ANSWERING: Duration = Duration::from_secs(10);

/// A resolver for `url` with the given deadline, caching no rejection.
fn resolver(url: &str, deadline: Duration) -> Resolver {
    resolver_for(url)
        .request_timeout(deadline)
        .negative_cache_ttl(Duration::ZERO)
        .build()
        .unwrap()
}

/// Resolves the token at `url` within `deadline`, which must fail.
async fn fail(url: &str, deadline: Duration) -> ResolveError {
    resolver(url, deadline)
        .resolve(url, TOKEN)
        .await
        .expect_err("the fault fails the resolution")
}

/// Transport faults: no headers, trickled, endless, short and reset bodies, a closed
/// connection, and the `Authorization` header echoed as the status line or a reason phrase.
async fn transport_faults(errors: &mut Errors) {
    let raw_cases: Vec<(&str, RawServer)> = vec![
        ("headers never come", RawServer::start(never_answer).await),
        ("trickled body", RawServer::start(trickle_body).await),
        (
            "endless chunked body",
            RawServer::start(endless_chunked).await,
        ),
        ("short body", RawServer::start(short_body_then_close).await),
        ("reset mid-body", RawServer::start(reset_mid_body).await),
        ("closed at once", RawServer::start(close_at_once).await),
        (
            "the Authorization header as the status line",
            RawServer::start(|_, head: String, mut stream| async move {
                let auth = authorization_of(&head);
                write_raw(
                    &mut stream,
                    format!("{auth} {BODY_MARKER}\r\n\r\n").as_bytes(),
                )
                .await;
            })
            .await,
        ),
        (
            "the Authorization header as a reason phrase and a broken header",
            RawServer::start(|_, head: String, mut stream| async move {
                let auth = authorization_of(&head);
                let response =
                    format!("HTTP/1.1 500 {auth}\r\nx-echo {auth}\r\ncontent-length: 0\r\n\r\n");
                write_raw(&mut stream, response.as_bytes()).await;
            })
            .await,
        ),
    ];
    for (what, server) in &raw_cases {
        let hangs = matches!(*what, "headers never come" | "trickled body");
        let error = fail(&server.url(), if hangs { HANGING } else { ANSWERING }).await;
        assert!(
            error.is_retryable() || error.code() == ErrorCode::AuthBadResponse,
            "{what}: {error}"
        );
        assert!(
            server.heads().iter().any(|h| h.contains(TOKEN)),
            "{what}: the token did reach the server, so a leak was possible"
        );
        errors.push((what.to_string(), error));
    }
}

/// Untrusted TLS, by IP and by name.
async fn untrusted_tls(errors: &mut Errors) {
    let tls = UntrustedTls::start().await;
    for url in [tls.url(), tls.localhost_url()] {
        let error = fail(&url, ANSWERING).await;
        assert_eq!(error.code(), ErrorCode::AuthUnavailable, "{error}");
        errors.push((format!("untrusted TLS at {url}"), error));
    }
}

/// Bodies that echo the `Authorization` header, one server per body.
async fn echoing_bodies_fail(errors: &mut Errors) {
    for (n, _) in echoing_bodies("").iter().enumerate() {
        let server = Scripted::start(move |_, seen| async move {
            let auth = seen.header("authorization").unwrap_or_default().to_owned();
            let body = echoing_bodies(&auth).swap_remove(n);
            (
                axum::http::StatusCode::OK,
                [("content-type", "application/json")],
                body,
            )
                .into_response()
        })
        .await;
        let error = fail(&server.url(), ANSWERING).await;
        assert_eq!(
            error.code(),
            ErrorCode::AuthBadResponse,
            "body {n}: {error}"
        );
        errors.push((format!("echoing body {n}"), error));
    }
}

/// Statuses whose bodies and headers echo it: rejected, unavailable, unexpected, redirected.
async fn echoing_statuses_fail(errors: &mut Errors) {
    for status in [401, 403, 404, 429, 500, 503, 302, 307] {
        let server = Scripted::start(move |_, seen| async move {
            let auth = seen.header("authorization").unwrap_or_default().to_owned();
            let mut response = (
                axum::http::StatusCode::from_u16(status).unwrap(),
                format!(r#"{{"error":"{auth}","detail":"{BODY_MARKER}"}}"#),
            )
                .into_response();
            let token = auth.trim_start_matches("Bearer ");
            for (name, value) in [
                ("www-authenticate", format!("Bearer error=\"{token}\"")),
                ("location", format!("http://127.0.0.2:9/api/user?t={token}")),
                ("retry-after", token.to_owned()),
                ("x-echo", auth.clone()),
            ] {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        })
        .await;
        errors.push((
            format!("status {status} echoing"),
            fail(&server.url(), ANSWERING).await,
        ));
    }
}

/// The connect and join paths through a failing upstream, and a join to a disallowed URL
/// naming the token in its path and query.
async fn connect_and_join_fail(errors: &mut Errors) {
    let failing = Scripted::always(503, &[], b"").await;
    let r = resolver(&failing.url(), ANSWERING);
    let connect = ConnectRequest {
        access_token: Some(TOKEN.to_owned()),
    };
    let join = JoinRequest {
        room_id: "r".into(),
        auth_url: format!("https://evil.example/{TOKEN_TAIL}"),
        access_token: Some(TOKEN.to_owned()),
    };
    errors.push((
        "connect to a failing API".into(),
        r.resolve_connect(&connect).await.unwrap_err(),
    ));
    errors.push((
        "join to a disallowed URL".into(),
        r.resolve_join(&join).await.unwrap_err(),
    ));
    assert!(!leaks(&format!("{connect:?}")));
    assert!(!leaks(&format!("{r:?}")));
}

/// An error's code, message, `Debug` and whole source chain keep the token and the body out,
/// and its message stays a sentence (a body excerpt, if one is ever added, must stay short).
fn assert_error_keeps_the_secret(what: &str, error: &ResolveError) {
    for text in error_texts(error) {
        assert!(!leaks(&text), "{what}: the token is in an error: {text}");
        assert!(
            !text.contains(BODY_MARKER),
            "{what}: an error quotes the body: {text}"
        );
    }
    assert!(
        error.to_string().len() <= 300,
        "{what}: an error message of {} bytes: {error}",
        error.to_string().len()
    );
}

/// The `Authorization` header's value in a request head.
fn authorization_of(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("authorization")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default()
}
