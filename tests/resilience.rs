//! Serving stale answers through an outage (`serve_stale_for`) and the per-API circuit breaker,
//! against a real upstream on loopback that the test switches between healthy and failing.

use token_resolver_support as support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{resolver_for, respond, user_answer, Scripted};
use token_resolver::ErrorCode;

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const REJECTING: u8 = 2;
const HANGING: u8 = 3;

/// An upstream whose behaviour the test switches: healthy, 503, 401 or never answering.
async fn switchable() -> (Scripted, Arc<AtomicU8>) {
    let mode = Arc::new(AtomicU8::new(HEALTHY));
    let m = mode.clone();
    let server = Scripted::start(move |_, _| {
        let m = m.clone();
        async move {
            match m.load(Ordering::SeqCst) {
                HEALTHY => user_answer(7, "sam"),
                FAILING => respond(503, &[], b""),
                REJECTING => respond(401, &[], b""),
                _ => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    user_answer(7, "sam")
                }
            }
        }
    })
    .await;
    (server, mode)
}

#[tokio::test]
async fn an_expired_answer_is_served_stale_while_the_api_is_down() {
    // Pins down serve_stale_for inside its window: flagged stale, counted.
    let (server, mode) = switchable().await;
    let resolver = resolver_for(&server.url())
        .cache_ttl(Duration::from_millis(100))
        .serve_stale_for(Duration::from_secs(5))
        .build()
        .unwrap();
    let fresh = resolver.resolve(&server.url(), "t").await.unwrap();
    assert!(!fresh.stale);
    tokio::time::sleep(Duration::from_millis(150)).await;
    mode.store(FAILING, Ordering::SeqCst);

    let stale = resolver.resolve(&server.url(), "t").await.unwrap();
    assert!(stale.stale);
    assert_eq!((stale.id, stale.name.as_str()), (7, "sam"));
    assert_eq!(resolver.stats().stale_served, 1);

    mode.store(HEALTHY, Ordering::SeqCst);
    assert!(
        !resolver.resolve(&server.url(), "t").await.unwrap().stale,
        "fresh again once the API is back"
    );
}

#[tokio::test]
async fn past_the_window_the_outage_is_an_error() {
    // Pins down the other side of the window.
    let (server, mode) = switchable().await;
    let resolver = resolver_for(&server.url())
        .cache_ttl(Duration::from_millis(100))
        .serve_stale_for(Duration::from_millis(200))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "t").await.unwrap();
    mode.store(FAILING, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let err = resolver.resolve(&server.url(), "t").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthUnavailable);
}

#[tokio::test]
async fn a_timeout_also_falls_back_to_the_stale_answer() {
    // Pins down that auth_timeout, like auth_unavailable, may be answered stale.
    let (server, mode) = switchable().await;
    let resolver = resolver_for(&server.url())
        .cache_ttl(Duration::from_millis(50))
        .serve_stale_for(Duration::from_secs(5))
        .request_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "t").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    mode.store(HANGING, Ordering::SeqCst);
    assert!(resolver.resolve(&server.url(), "t").await.unwrap().stale);
}

#[tokio::test]
async fn a_rejection_is_never_answered_stale() {
    // Pins down "never when it rejects the token": a revoked token is refused at once.
    let (server, mode) = switchable().await;
    let resolver = resolver_for(&server.url())
        .cache_ttl(Duration::from_millis(50))
        .serve_stale_for(Duration::from_secs(5))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "t").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    mode.store(REJECTING, Ordering::SeqCst);
    assert_eq!(
        resolver
            .resolve(&server.url(), "t")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::TokenRejected
    );
    mode.store(FAILING, Ordering::SeqCst);
    assert_eq!(
        resolver
            .resolve(&server.url(), "t")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::TokenRejected,
        "the rejection replaced the stale answer"
    );
}

#[tokio::test]
async fn stale_serving_is_off_by_default() {
    // Pins down the default: an expired answer is gone.
    let (server, mode) = switchable().await;
    let resolver = resolver_for(&server.url())
        .cache_ttl(Duration::from_millis(50))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "t").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    mode.store(FAILING, Ordering::SeqCst);
    assert_eq!(
        resolver
            .resolve(&server.url(), "t")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::AuthUnavailable
    );
}

#[tokio::test]
async fn an_open_breaker_fails_fast_without_calling_the_dead_api() {
    // Pins down the circuit breaker: after the run of failures, callers do not wait for
    // request_timeout and no request reaches the API.
    let (server, mode) = switchable().await;
    mode.store(HANGING, Ordering::SeqCst);
    let timeout = Duration::from_millis(300);
    let resolver = resolver_for(&server.url())
        .request_timeout(timeout)
        .retries(0)
        .circuit_breaker(3, Duration::from_secs(30))
        .build()
        .unwrap();
    for i in 0..3 {
        let err = resolver
            .resolve(&server.url(), &format!("t{i}"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthTimeout);
    }
    assert_eq!(server.requests(), 3);

    for i in 0..50 {
        let started = Instant::now();
        let err = resolver
            .resolve(&server.url(), &format!("u{i}"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthUnavailable);
        assert!(err.to_string().contains("circuit breaker"), "{err}");
        assert!(
            started.elapsed() < timeout / 3,
            "failed fast: {:?}",
            started.elapsed()
        );
    }
    assert_eq!(server.requests(), 3, "an open breaker sends nothing");
    assert_eq!(resolver.stats().short_circuited, 50);
}

#[tokio::test]
async fn cache_hits_are_served_while_the_breaker_is_open() {
    // Pins down that the breaker only guards calls.
    let (server, mode) = switchable().await;
    let resolver = resolver_for(&server.url())
        .retries(0)
        .circuit_breaker(2, Duration::from_secs(30))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "cached").await.unwrap();
    mode.store(FAILING, Ordering::SeqCst);
    for t in ["a", "b", "c"] {
        resolver.resolve(&server.url(), t).await.unwrap_err();
    }
    assert_eq!(
        resolver.resolve(&server.url(), "cached").await.unwrap().id,
        7
    );
}

#[tokio::test]
async fn the_breaker_closes_by_itself_when_the_api_recovers() {
    // Pins down the half-open probe: after the cool-down one call goes through, and its success
    // closes the breaker.
    let (server, mode) = switchable().await;
    mode.store(FAILING, Ordering::SeqCst);
    let resolver = resolver_for(&server.url())
        .retries(0)
        .circuit_breaker(2, Duration::from_millis(200))
        .build()
        .unwrap();
    for t in ["a", "b"] {
        resolver.resolve(&server.url(), t).await.unwrap_err();
    }
    assert!(resolver
        .resolve(&server.url(), "c")
        .await
        .unwrap_err()
        .to_string()
        .contains("circuit breaker"));
    mode.store(HEALTHY, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(resolver.resolve(&server.url(), "c").await.unwrap().id, 7);
    assert_eq!(resolver.resolve(&server.url(), "d").await.unwrap().id, 7);
    assert_eq!(server.requests(), 4);
}

#[tokio::test]
async fn a_failed_probe_keeps_the_breaker_open() {
    // Pins down that a probe that fails re-opens the breaker for another cool-down.
    let (server, mode) = switchable().await;
    mode.store(FAILING, Ordering::SeqCst);
    let resolver = resolver_for(&server.url())
        .retries(3)
        .circuit_breaker(1, Duration::from_millis(150))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "a").await.unwrap_err();
    assert_eq!(
        server.requests(),
        1,
        "the breaker opened at the first failure and stopped the retries"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    resolver.resolve(&server.url(), "b").await.unwrap_err();
    assert_eq!(server.requests(), 2, "the probe is a single call");
    resolver.resolve(&server.url(), "c").await.unwrap_err();
    assert_eq!(server.requests(), 2, "open again");
}

#[tokio::test]
async fn stale_answers_cover_an_open_breaker() {
    // Pins down that the two features compose: a dead API behind an open breaker still lets
    // recently seen players in, flagged stale.
    let (server, mode) = switchable().await;
    let resolver = resolver_for(&server.url())
        .cache_ttl(Duration::from_millis(50))
        .serve_stale_for(Duration::from_secs(10))
        .retries(0)
        .circuit_breaker(1, Duration::from_secs(30))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "known").await.unwrap();
    mode.store(FAILING, Ordering::SeqCst);
    resolver.resolve(&server.url(), "other").await.unwrap_err();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = server.requests();
    assert!(
        resolver
            .resolve(&server.url(), "known")
            .await
            .unwrap()
            .stale
    );
    assert_eq!(server.requests(), before);
}
