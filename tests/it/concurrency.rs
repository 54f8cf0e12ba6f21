//! Coalescing and the slot limit, counted at a real upstream server on loopback: concurrent
//! resolutions of one token make one call, distinct tokens one each, and the number of calls in
//! flight never exceeds `max_concurrent_requests`.

use token_resolver_support as support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use support::{eventually, resolver_for, respond, user_answer, Scripted};
use token_resolver::{ErrorCode, Resolver};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// A server whose answers wait at a gate the test holds: `answer(n)` for the `n`th request
/// once the test lets it through. Calls overlap for as long as the test needs, rather than for
/// a delay that a busy machine may outlast.
struct Gated {
    server: Scripted,
    gate: Arc<Semaphore>,
    answered: Arc<AtomicUsize>,
}

impl Gated {
    async fn start(answer: fn(usize) -> Response) -> Gated {
        let gate = Arc::new(Semaphore::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let (g, a) = (gate.clone(), answered.clone());
        let server = Scripted::start(move |n, _| {
            let (gate, answered) = (g.clone(), a.clone());
            async move {
                // A permit lets one answer through; a closed gate lets every one through.
                if let Ok(permit) = gate.acquire().await {
                    permit.forget();
                }
                answered.fetch_add(1, Ordering::SeqCst);
                answer(n)
            }
        })
        .await;
        Gated {
            server,
            gate,
            answered,
        }
    }

    /// Every answer held now or later goes through.
    fn open(&self) {
        self.gate.close();
    }

    /// Calls at the server now, not yet answered.
    fn held(&self) -> usize {
        self.server.requests() - self.answered.load(Ordering::SeqCst)
    }
}

fn player(n: usize) -> Response {
    user_answer(n as i64, "player")
}

/// The resolutions of `tokens`, each a task of its own, and how many of them have been polled
/// once: a resolution's first poll runs it up to its first wait, so each of those found its
/// answer cached or joined a call under way (its own or another's).
fn spawn_all(
    resolver: &Resolver,
    url: &str,
    tokens: Vec<String>,
) -> (Vec<JoinHandle<Resolution>>, Arc<AtomicUsize>) {
    let polled = Arc::new(AtomicUsize::new(0));
    let tasks = tokens
        .into_iter()
        .map(|token| {
            let (resolver, url, polled) = (resolver.clone(), url.to_owned(), polled.clone());
            tokio::spawn(async move {
                let resolution = resolver.resolve(&url, &token);
                tokio::pin!(resolution);
                let mut first = true;
                std::future::poll_fn(|cx| {
                    let poll = resolution.as_mut().poll(cx);
                    if std::mem::take(&mut first) {
                        polled.fetch_add(1, Ordering::SeqCst);
                    }
                    poll
                })
                .await
            })
        })
        .collect();
    (tasks, polled)
}

type Resolution = Result<Arc<token_resolver::User>, token_resolver::ResolveError>;

async fn join_all(tasks: Vec<JoinHandle<Resolution>>) -> Vec<Resolution> {
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// Resolves `n` copies of one token at once, holding the upstream call until every
/// resolution has joined it (or started it).
async fn all_at_once(resolver: &Resolver, server: &Gated, n: usize) -> Vec<Resolution> {
    let (tasks, polled) = spawn_all(resolver, &server.server.url(), vec!["t".to_owned(); n]);
    eventually(
        "every resolution on the call, and the call at the server",
        || polled.load(Ordering::SeqCst) == n && server.server.requests() >= 1,
    )
    .await;
    server.open();
    join_all(tasks).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_resolutions_of_one_token_make_one_call() {
    // Pins down coalescing: exactly one upstream call, and every caller gets its answer.
    let server = Gated::start(player).await;
    let resolver = resolver_for(&server.server.url()).build().unwrap();
    let results = all_at_once(&resolver, &server, 1000).await;

    assert_eq!(server.server.requests(), 1);
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
    let server = Gated::start(|_| respond(500, &[], b"")).await;
    let url = server.server.url();
    let resolver = resolver_for(&url).retries(0).build().unwrap();
    let results = all_at_once(&resolver, &server, 300).await;
    assert_eq!(server.server.requests(), 1);
    assert!(results
        .iter()
        .all(|r| r.as_ref().unwrap_err().code() == ErrorCode::AuthUnavailable));
    resolver.resolve(&url, "t").await.unwrap_err();
    assert_eq!(server.server.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_store_answers_are_still_coalesced() {
    // Pins down the caching rule: no-store means not cached, but concurrent waiters still share.
    let server = Gated::start(|_| {
        let mut r = user_answer(5, "nostore");
        r.headers_mut()
            .insert("cache-control", "no-store".parse().unwrap());
        r
    })
    .await;
    let resolver = resolver_for(&server.server.url()).build().unwrap();
    let results = all_at_once(&resolver, &server, 200).await;
    assert!(results.iter().all(|r| r.as_ref().unwrap().id == 5));
    assert_eq!(server.server.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_distinct_tokens_make_n_calls() {
    // Pins down that coalescing is per token: distinct tokens never share an answer.
    let server = Gated::start(player).await;
    let url = server.server.url();
    // Calls wait in the queue while the test holds the first ones.
    let resolver = resolver_for(&url)
        .queue_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let tokens: Vec<String> = (0..300).map(|i| format!("token-{i}")).collect();
    let (tasks, _) = spawn_all(&resolver, &url, tokens);
    eventually("every slot's call held at the server at once", || {
        server.held() == 64
    })
    .await;
    server.open();
    let results = join_all(tasks).await;
    assert_eq!(server.server.requests(), 300);
    let mut ids: Vec<i64> = results.iter().map(|r| r.as_ref().unwrap().id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 300, "each token got its own answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_never_exceed_the_cap() {
    // Pins down max_concurrent_requests, measured at the server.
    let server = Gated::start(player).await;
    let url = server.server.url();
    let resolver = resolver_for(&url)
        .max_concurrent_requests(4)
        .queue_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let tokens: Vec<String> = (0..100).map(|i| format!("token-{i}")).collect();
    let (tasks, _) = spawn_all(&resolver, &url, tokens);
    // One answer at a time, each once the server holds as many calls as the cap lets in (or
    // all that are left): held calls never end on their own, so without the cap every queued
    // call would pile up at the server.
    for answered in 0..100 {
        let full = (100 - answered).min(4);
        eventually("the cap's worth of calls at the server", || {
            server.held() >= full
        })
        .await;
        server.gate.add_permits(1);
    }
    let results = join_all(tasks).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(server.server.requests(), 100);
    assert_eq!(
        server.server.max_in_flight(),
        4,
        "the cap is reached and never passed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_slot_within_queue_timeout_is_overloaded() {
    // Pins down queue_timeout -> overloaded, and that the waiting resolution made no call.
    let server = Gated::start(player).await;
    let url = server.server.url();
    let resolver = resolver_for(&url)
        .max_concurrent_requests(1)
        .queue_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let busy = {
        let (r, url) = (resolver.clone(), url.clone());
        tokio::spawn(async move { r.resolve(&url, "first").await })
    };
    eventually("the first resolution holds the only slot", || {
        server.server.requests() == 1
    })
    .await;
    let err = resolver.resolve(&url, "second").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Overloaded);
    assert!(err.is_retryable());
    server.open();
    assert!(busy.await.unwrap().is_ok());
    assert_eq!(server.server.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_hits_do_not_wait_for_a_slot() {
    // Pins down "cache hits never wait for a slot": with the only slot busy, a cached token
    // still resolves at once.
    let server = Scripted::start(|n, _| async move {
        if n > 0 {
            // The slow call holds the slot until the test ends.
            std::future::pending::<()>().await;
        }
        user_answer(n as i64, "p")
    })
    .await;
    let resolver = resolver_for(&server.url())
        .max_concurrent_requests(1)
        .request_timeout(Duration::from_secs(30))
        .queue_timeout(Duration::from_secs(1))
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
    // A hit that queued would wait for the slot the slow call never frees: past the 1 s
    // queue_timeout it would be refused `overloaded`, so the wait here can be generous.
    let hit = tokio::time::timeout(
        Duration::from_secs(5),
        resolver.resolve(&server.url(), "cached"),
    )
    .await;
    assert_eq!(hit.expect("a hit does not queue").unwrap().id, 0);
    assert_eq!(server.requests(), 2, "the hit made no call");
}
