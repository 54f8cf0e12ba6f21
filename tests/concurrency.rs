//! Coalescing and the slot limit, counted at a real upstream server on loopback: concurrent
//! resolutions of one token make one call, distinct tokens one each, and the number of calls in
//! flight never exceeds `max_concurrent_requests`.

use token_resolver_support as support;

use std::sync::Arc;
use std::time::Duration;

use support::{eventually, resolver_for, respond, user_answer, Scripted};
use token_resolver::{ErrorCode, Resolver};

/// A server answering every token after `delay`, so concurrent calls overlap.
async fn slow_server(delay: Duration) -> Scripted {
    Scripted::start(move |n, _| async move {
        tokio::time::sleep(delay).await;
        user_answer(n as i64, "player")
    })
    .await
}

async fn resolve_all(
    resolver: &Resolver,
    url: &str,
    tokens: Vec<String>,
) -> Vec<Result<Arc<token_resolver::User>, token_resolver::ResolveError>> {
    let tasks: Vec<_> = tokens
        .into_iter()
        .map(|token| {
            let (resolver, url) = (resolver.clone(), url.to_owned());
            tokio::spawn(async move { resolver.resolve(&url, &token).await })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_resolutions_of_one_token_make_one_call() {
    // Pins down coalescing: exactly one upstream call, and every caller gets its answer.
    let server = slow_server(Duration::from_millis(200)).await;
    let resolver = resolver_for(&server.url()).build().unwrap();
    let results = resolve_all(
        &resolver,
        &server.url(),
        vec!["same-token".to_owned(); 1000],
    )
    .await;

    assert_eq!(server.requests(), 1);
    let first = results[0].as_ref().unwrap().clone();
    assert!(results
        .iter()
        .all(|r| r.as_ref().is_ok_and(|u| Arc::ptr_eq(u, &first))));
    let stats = resolver.stats();
    assert_eq!(stats.misses, 1);
    assert_eq!(stats.coalesced + stats.hits, 999);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resolutions_share_a_failure_too() {
    // Pins down that waiters get the one call's error, and that it is not cached afterwards.
    let server = Scripted::start(|_, _| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        respond(500, &[], b"")
    })
    .await;
    let resolver = resolver_for(&server.url()).retries(0).build().unwrap();
    let results = resolve_all(&resolver, &server.url(), vec!["t".to_owned(); 300]).await;
    assert_eq!(server.requests(), 1);
    assert!(results
        .iter()
        .all(|r| r.as_ref().unwrap_err().code() == ErrorCode::AuthUnavailable));
    resolver.resolve(&server.url(), "t").await.unwrap_err();
    assert_eq!(server.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_store_answers_are_still_coalesced() {
    // Pins down the caching rule: no-store means not cached, but concurrent waiters still share.
    let server = Scripted::start(|_, _| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut r = user_answer(5, "nostore");
        r.headers_mut()
            .insert("cache-control", "no-store".parse().unwrap());
        r
    })
    .await;
    let resolver = resolver_for(&server.url()).build().unwrap();
    let results = resolve_all(&resolver, &server.url(), vec!["t".to_owned(); 200]).await;
    assert!(results.iter().all(|r| r.as_ref().unwrap().id == 5));
    assert_eq!(server.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_distinct_tokens_make_n_calls() {
    // Pins down that coalescing is per token: distinct tokens never share an answer.
    let server = slow_server(Duration::from_millis(20)).await;
    let resolver = resolver_for(&server.url()).build().unwrap();
    let tokens: Vec<String> = (0..300).map(|i| format!("token-{i}")).collect();
    let results = resolve_all(&resolver, &server.url(), tokens).await;
    assert_eq!(server.requests(), 300);
    let mut ids: Vec<i64> = results.iter().map(|r| r.as_ref().unwrap().id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 300, "each token got its own answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_never_exceed_the_cap() {
    // Pins down max_concurrent_requests, measured at the server.
    let server = slow_server(Duration::from_millis(50)).await;
    let resolver = resolver_for(&server.url())
        .max_concurrent_requests(4)
        .queue_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let tokens: Vec<String> = (0..100).map(|i| format!("token-{i}")).collect();
    let results = resolve_all(&resolver, &server.url(), tokens).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(server.requests(), 100);
    assert_eq!(
        server.max_in_flight(),
        4,
        "the cap is reached and never passed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_slot_within_queue_timeout_is_overloaded() {
    // Pins down queue_timeout -> overloaded, and that the waiting resolution made no call.
    let server = slow_server(Duration::from_millis(800)).await;
    let resolver = resolver_for(&server.url())
        .max_concurrent_requests(1)
        .queue_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let busy = {
        let (r, url) = (resolver.clone(), server.url());
        tokio::spawn(async move { r.resolve(&url, "first").await })
    };
    eventually("the first resolution holds the only slot", || {
        server.requests() == 1
    })
    .await;
    let err = resolver.resolve(&server.url(), "second").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Overloaded);
    assert!(err.is_retryable());
    assert!(busy.await.unwrap().is_ok());
    assert_eq!(server.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_hits_do_not_wait_for_a_slot() {
    // Pins down "cache hits never wait for a slot": with the only slot busy, a cached token
    // still resolves at once.
    let server = Scripted::start(|n, _| async move {
        if n > 0 {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        user_answer(n as i64, "p")
    })
    .await;
    let resolver = resolver_for(&server.url())
        .max_concurrent_requests(1)
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    resolver.resolve(&server.url(), "cached").await.unwrap();
    let _busy = {
        let (r, url) = (resolver.clone(), server.url());
        tokio::spawn(async move { r.resolve(&url, "slow").await })
    };
    eventually("the slow resolution holds the only slot", || {
        server.requests() == 2
    })
    .await;
    let hit = tokio::time::timeout(
        Duration::from_millis(500),
        resolver.resolve(&server.url(), "cached"),
    )
    .await;
    assert_eq!(hit.expect("a hit does not queue").unwrap().id, 0);
}
