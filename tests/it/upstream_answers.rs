//! Every status, header and body case of the call's rules (request shape, answer, transient failures) against a scripted upstream on
//! loopback, each asserting the exact error code and how many requests reached the server.

use token_resolver_support as support;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use support::{resolver_for, respond, user_answer, Scripted};
use token_resolver::{ErrorCode, ResolveError};

const TOKEN: &str = "tok-123._~+/==";

async fn resolve(server: &Scripted) -> Result<std::sync::Arc<token_resolver::User>, ResolveError> {
    resolver_for(&server.url())
        .build()
        .unwrap()
        .resolve(&server.url(), TOKEN)
        .await
}

async fn code_of(server: &Scripted) -> ErrorCode {
    resolve(server)
        .await
        .expect_err("resolution must fail")
        .code()
}

#[tokio::test]
async fn the_call_is_a_post_with_bearer_accept_and_an_empty_body() {
    // Pins down the request shape of the call.
    let server = Scripted::start(|_, _| async { user_answer(7, "eve") }).await;
    resolve(&server).await.unwrap();
    let seen = &server.seen()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/api/user");
    assert_eq!(
        seen.header("authorization"),
        Some(&*format!("Bearer {TOKEN}"))
    );
    assert_eq!(seen.header("accept"), Some("application/json"));
    assert_eq!(seen.header("content-length"), Some("0"));
    assert_eq!(seen.body_len, 0);
}

#[tokio::test]
async fn a_valid_answer_keeps_extra_fields() {
    // Pins down that unknown fields are allowed and kept.
    let server = Scripted::always(200, &[], br#"{"id": 9, "name": "zed", "level": 3}"#).await;
    let user = resolve(&server).await.unwrap();
    assert_eq!((user.id, user.name.as_str()), (9, "zed"));
    assert_eq!(user.extra["level"], 3);
}

#[tokio::test]
async fn status_401_and_403_are_token_rejected_without_retry() {
    // Pins down the error codes: 401/403 -> token_rejected, which is not transient.
    for status in [401, 403] {
        let server = Scripted::always(status, &[("www-authenticate", "Bearer")], b"").await;
        assert_eq!(code_of(&server).await, ErrorCode::TokenRejected, "{status}");
        assert_eq!(server.requests(), 1);
    }
}

#[tokio::test]
async fn other_statuses_are_bad_responses_without_retry() {
    // Pins down that a status outside 200/401/403 and the transient list breaks the protocol.
    for status in [201, 204, 400, 404, 405, 410, 418, 501] {
        let server = Scripted::always(status, &[], b"{}").await;
        assert_eq!(
            code_of(&server).await,
            ErrorCode::AuthBadResponse,
            "{status}"
        );
        assert_eq!(server.requests(), 1, "{status}");
    }
}

#[tokio::test]
async fn transient_statuses_are_retried_then_unavailable() {
    // Pins down the retry rule: 408/429/500/502/503/504 are tried 1 + retries times.
    for status in [408, 429, 500, 502, 503, 504] {
        let server = Scripted::always(status, &[], b"").await;
        assert_eq!(
            code_of(&server).await,
            ErrorCode::AuthUnavailable,
            "{status}"
        );
        assert_eq!(server.requests(), 2, "{status}: one try and one retry");
    }
}

#[tokio::test]
async fn retries_setting_bounds_the_tries() {
    // Pins down retries(n): n extra tries, and retries(0): none.
    for retries in [0, 3] {
        let server = Scripted::always(503, &[], b"").await;
        let resolver = resolver_for(&server.url())
            .retries(retries)
            .build()
            .unwrap();
        let err = resolver.resolve(&server.url(), TOKEN).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthUnavailable);
        assert!(err.is_retryable());
        assert_eq!(server.requests(), 1 + retries as usize);
    }
}

#[tokio::test]
async fn a_transient_failure_then_success_resolves() {
    // Pins down that a retry can succeed.
    let server = Scripted::start(|n, _| async move {
        if n == 0 {
            respond(502, &[], b"")
        } else {
            user_answer(1, "ann")
        }
    })
    .await;
    assert_eq!(resolve(&server).await.unwrap().name, "ann");
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn retry_after_beyond_the_deadline_ends_the_tries_at_once() {
    // Pins down the retry rule: a Retry-After that does not fit in the remaining time -> unavailable now.
    let server = Scripted::always(503, &[("retry-after", "30")], b"").await;
    let started = Instant::now();
    assert_eq!(code_of(&server).await, ErrorCode::AuthUnavailable);
    assert_eq!(server.requests(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "did not wait for the deadline"
    );
}

#[tokio::test]
async fn retry_after_within_the_deadline_is_honoured() {
    // Pins down that the retry waits at least Retry-After.
    let server = Scripted::start(|n, _| async move {
        if n == 0 {
            respond(429, &[("retry-after", "1")], b"")
        } else {
            user_answer(2, "bo")
        }
    })
    .await;
    let resolver = resolver_for(&server.url())
        .request_timeout(Duration::from_secs(4))
        .build()
        .unwrap();
    let started = Instant::now();
    resolver.resolve(&server.url(), TOKEN).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn redirects_are_not_followed_and_the_token_does_not_move() {
    // Pins down "redirects are never followed": the redirect target sees no request.
    let elsewhere = Scripted::start(|_, _| async { user_answer(666, "mallory") }).await;
    for status in [301, 302, 303, 307, 308] {
        let location = format!("{}/api/user", elsewhere.url());
        let server = Scripted::start(move |_, _| {
            let location = location.clone();
            async move {
                (
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    [("location", location)],
                )
                    .into_response()
            }
        })
        .await;
        assert_eq!(
            code_of(&server).await,
            ErrorCode::AuthBadResponse,
            "{status}"
        );
    }
    assert_eq!(elsewhere.requests(), 0);
}

#[tokio::test]
async fn connection_refused_is_unavailable() {
    // Pins down the error codes: a connect failure -> auth_unavailable.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = resolver_for(&url)
        .build()
        .unwrap()
        .resolve(&url, TOKEN)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthUnavailable);
}

// On the paused clock: the deadline passes as soon as nothing else is left to run, and the
// resolution's length is read on the clock its timers run on.
#[tokio::test(start_paused = true)]
async fn headers_that_never_come_time_out_at_the_deadline() {
    // Pins down request_timeout -> auth_timeout, and that the resolution ends near it.
    let server = Scripted::start(|_, _| std::future::pending()).await;
    let resolver = resolver_for(&server.url())
        .request_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = resolver.resolve(&server.url(), TOKEN).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthTimeout);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn bad_bodies_are_bad_responses_without_retry() {
    // Pins down the strict answer rules: each way a 200 body can be wrong.
    let deep = format!(
        r#"{{"id":1,"name":"a","x":{}{}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let deep: &'static [u8] = Box::leak(deep.into_bytes().into_boxed_slice());
    let cases: [&'static [u8]; 17] = [
        br#"{"id":"42","name":"a"}"#,
        br#"{"id":42.5,"name":"a"}"#,
        br#"{"id":true,"name":"a"}"#,
        br#"{"id":null,"name":"a"}"#,
        br#"{"id":9223372036854775808,"name":"a"}"#,
        br#"{"id":1,"name":7}"#,
        br#"{"id":1,"name":null}"#,
        br#"{"name":"a"}"#,
        br#"{"id":1}"#,
        br#"{"id":1,"id":2,"name":"a"}"#,
        br#"[{"id":1,"name":"a"}]"#,
        b"",
        br#"{"id":1,"name":"a"} trailing"#,
        b"{\"id\":1,\"name\":\"\xff\xfe\"}",
        b"not json",
        br#""just a string""#,
        deep,
    ];
    for body in cases {
        let server = Scripted::always(200, &[("content-type", "application/json")], body).await;
        let err = resolve(&server)
            .await
            .expect_err(&String::from_utf8_lossy(&body[..body.len().min(40)]));
        assert_eq!(err.code(), ErrorCode::AuthBadResponse, "{err}");
        assert_eq!(server.requests(), 1);
    }
}

#[tokio::test]
async fn a_declared_oversize_body_is_refused_unread() {
    // Pins down max_response_bytes with a Content-Length over the cap.
    let big: &'static [u8] = Box::leak(
        format!(r#"{{"id":1,"name":"{}"}}"#, "a".repeat(70_000))
            .into_bytes()
            .into_boxed_slice(),
    );
    let server = Scripted::always(200, &[], big).await;
    let err = resolve(&server).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthBadResponse);
    assert!(err.to_string().contains("max_response_bytes"), "{err}");
}

#[tokio::test]
async fn an_endless_streamed_body_is_cut_at_the_cap() {
    // Pins down that the cap is enforced while streaming: an endless chunked body fails fast,
    // not at the deadline and not after buffering it all.
    let server = Scripted::start(|_, _| async {
        let chunks = futures_chunks();
        Response::new(Body::from_stream(chunks))
    })
    .await;
    let resolver = resolver_for(&server.url())
        .max_response_bytes(16 * 1024)
        .request_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = resolver.resolve(&server.url(), TOKEN).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthBadResponse);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// An endless stream of 1 KiB chunks.
fn futures_chunks() -> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send {
    struct Endless;
    impl futures_core::Stream for Endless {
        type Item = Result<Vec<u8>, std::io::Error>;
        fn poll_next(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(Some(Ok(vec![b' '; 1024])))
        }
    }
    Endless
}

// On the paused clock, which the answer's deadline reads.
#[tokio::test(start_paused = true)]
async fn max_age_bounds_the_cached_life() {
    // Pins down min(cache_ttl, max-age): max-age=1 makes the second look-up after 1 s a call.
    let server = Scripted::always(
        200,
        &[("cache-control", "private, max-age=1")],
        br#"{"id":1,"name":"a"}"#,
    )
    .await;
    let resolver = resolver_for(&server.url()).build().unwrap();
    resolver.resolve(&server.url(), TOKEN).await.unwrap();
    resolver.resolve(&server.url(), TOKEN).await.unwrap();
    tokio::time::advance(Duration::from_millis(999)).await;
    resolver.resolve(&server.url(), TOKEN).await.unwrap();
    assert_eq!(server.requests(), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    resolver.resolve(&server.url(), TOKEN).await.unwrap();
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn cache_ttl_bounds_a_longer_max_age() {
    // Pins down that cache_ttl caps what the API allows.
    let server = Scripted::always(
        200,
        &[("cache-control", "max-age=3600")],
        br#"{"id":1,"name":"a"}"#,
    )
    .await;
    let resolver = resolver_for(&server.url())
        .cache_ttl(Duration::from_millis(200))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), TOKEN).await.unwrap();
    // Real time: an answer fresh for the whole cache_ttl (stale serving off) is kept without a
    // deadline of its own, so that a hit reads no clock, and moka expires it on its own clock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    resolver.resolve(&server.url(), TOKEN).await.unwrap();
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn no_store_and_no_cache_answers_are_not_cached() {
    // Pins down Cache-Control no-store / no-cache.
    for directive in ["no-store", "no-cache", "private, max-age=60, no-store"] {
        let server = Scripted::start(move |_, _| async move {
            let mut r = user_answer(1, "a");
            r.headers_mut()
                .insert("cache-control", directive.parse().unwrap());
            r
        })
        .await;
        let resolver = resolver_for(&server.url()).build().unwrap();
        resolver.resolve(&server.url(), TOKEN).await.unwrap();
        resolver.resolve(&server.url(), TOKEN).await.unwrap();
        assert_eq!(server.requests(), 2, "{directive}");
        assert_eq!(resolver.stats().entries, 0);
    }
}

#[tokio::test]
async fn failures_other_than_rejection_are_not_cached() {
    // Pins down "Nothing else is cached": an unavailable API is asked again next time.
    let server = Scripted::always(500, &[], b"").await;
    let resolver = resolver_for(&server.url()).retries(0).build().unwrap();
    for _ in 0..2 {
        assert_eq!(
            resolver
                .resolve(&server.url(), TOKEN)
                .await
                .unwrap_err()
                .code(),
            ErrorCode::AuthUnavailable
        );
    }
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_disallowed_auth_url_makes_no_request() {
    // Pins down the allowlist being checked before any traffic: the server under the
    // disallowed URL is never called.
    let allowed = Scripted::start(|_, _| async { user_answer(1, "a") }).await;
    let other = Scripted::start(|_, _| async { user_answer(666, "vouches-for-anyone") }).await;
    let resolver = resolver_for(&format!("{}/game", allowed.url()))
        .build()
        .unwrap();
    for url in [
        other.url(),
        format!("{}/gamex", allowed.url()),
        format!("{}/other", allowed.url()),
    ] {
        let err = resolver.resolve(&url, TOKEN).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthUrlNotAllowed, "{url}");
    }
    assert_eq!(other.requests() + allowed.requests(), 0);
    let user = resolver
        .resolve(&format!("{}/game/eu", allowed.url()), TOKEN)
        .await
        .unwrap();
    assert_eq!(user.id, 1);
    assert_eq!(allowed.seen()[0].path, "/game/eu/api/user");
}

#[tokio::test]
async fn a_malformed_token_makes_no_request() {
    // Pins down the token rule being checked before any traffic.
    let server = Scripted::start(|_, _| async { user_answer(1, "a") }).await;
    let resolver = resolver_for(&server.url()).build().unwrap();
    for bad in ["a b", "tok\r\nX-Injected: 1", "é", &"a".repeat(4097)] {
        assert_eq!(
            resolver
                .resolve(&server.url(), bad)
                .await
                .unwrap_err()
                .code(),
            ErrorCode::TokenMalformed
        );
    }
    assert_eq!(
        resolver
            .resolve(&server.url(), "")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::TokenMissing
    );
    assert_eq!(server.requests(), 0);
}
