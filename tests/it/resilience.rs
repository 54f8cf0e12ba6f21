//! Serving stale answers through an outage (`serve_stale_for`) and the per-API circuit breaker,
//! against a real upstream on loopback that the test switches between healthy and failing.
//!
//! These run on tokio's paused clock, which the library's deadlines read (an answer's freshness
//! and stale window, the breaker's cool-down, the request timeout): a test moves it with
//! `advance`, and a hanging upstream's timeout passes as soon as nothing else is left to run.
//! One test runs on real time: a user fresh for the whole `cache_ttl` with stale serving off is
//! expired by moka's own clock (see `stale_serving_is_off_by_default`).

use token_resolver_support as support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{advance, Instant};

use support::{resolver_for, respond, user_answer, Scripted};
use token_resolver::{ErrorCode, Resolution, ResolveError, Resolver, ResolverBuilder};

/// How the test's upstream answers now.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Mode {
    /// 200 with user 7, "sam".
    Healthy,
    /// 503.
    Failing,
    /// 401.
    Rejecting,
    /// Nothing, ever.
    Hanging,
}

impl Mode {
    /// Every mode, by its `u8`.
    const ALL: [Mode; 4] = [Mode::Healthy, Mode::Failing, Mode::Rejecting, Mode::Hanging];
}

/// An upstream whose behaviour the test switches, and a resolver for it.
struct Outage {
    server: Scripted,
    mode: Arc<AtomicU8>,
    resolver: Resolver,
}

impl Outage {
    /// The upstream answering as `mode`, and a resolver for it that `configure` sets up.
    async fn start(
        mode: Mode,
        configure: impl FnOnce(ResolverBuilder) -> ResolverBuilder,
    ) -> Outage {
        let shared = Arc::new(AtomicU8::new(mode as u8));
        let m = shared.clone();
        let server = Scripted::start(move |_, _| {
            let m = m.clone();
            async move {
                match Mode::ALL[usize::from(m.load(Ordering::SeqCst))] {
                    Mode::Healthy => user_answer(7, "sam"),
                    Mode::Failing => respond(503, &[], b""),
                    Mode::Rejecting => respond(401, &[], b""),
                    Mode::Hanging => std::future::pending().await,
                }
            }
        })
        .await;
        let resolver = configure(resolver_for(&server.url())).build().unwrap();
        Outage {
            server,
            mode: shared,
            resolver,
        }
    }

    /// From now on the upstream answers as `mode`.
    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    async fn resolve(&self, token: &str) -> Result<Resolution, ResolveError> {
        self.resolver
            .resolve_in_full(&self.server.url(), token)
            .await
    }

    /// The code `token` fails with now.
    async fn refusal(&self, token: &str) -> ErrorCode {
        self.resolve(token).await.unwrap_err().code()
    }

    /// Requests that reached the upstream so far.
    fn requests(&self) -> usize {
        self.server.requests()
    }
}

#[tokio::test(start_paused = true)]
async fn an_expired_answer_is_served_stale_while_the_api_is_down() {
    // Pins down serve_stale_for inside its window: flagged stale, counted.
    let outage = Outage::start(Mode::Healthy, |b| {
        b.cache_ttl(Duration::from_millis(100))
            .serve_stale_for(Duration::from_secs(5))
    })
    .await;
    let fresh = outage.resolve("t").await.unwrap();
    assert!(!fresh.is_stale());
    advance(Duration::from_millis(150)).await;
    outage.set(Mode::Failing);

    let stale = outage.resolve("t").await.unwrap();
    assert!(stale.is_stale());
    assert_eq!((stale.id, stale.name.as_str()), (7, "sam"));
    assert_eq!(outage.resolver.stats().stale_served, 1);

    outage.set(Mode::Healthy);
    assert!(
        !outage.resolve("t").await.unwrap().is_stale(),
        "fresh again once the API is back"
    );
}

#[tokio::test(start_paused = true)]
async fn past_the_window_the_outage_is_an_error() {
    // Pins down the other side of the window.
    let outage = Outage::start(Mode::Healthy, |b| {
        b.cache_ttl(Duration::from_millis(100))
            .serve_stale_for(Duration::from_millis(200))
    })
    .await;
    outage.resolve("t").await.unwrap();
    outage.set(Mode::Failing);
    advance(Duration::from_millis(400)).await;
    assert_eq!(outage.refusal("t").await, ErrorCode::AuthUnavailable);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_also_falls_back_to_the_stale_answer() {
    // Pins down that auth_timeout, like auth_unavailable, may be answered stale.
    let outage = Outage::start(Mode::Healthy, |b| {
        b.cache_ttl(Duration::from_millis(50))
            .serve_stale_for(Duration::from_secs(5))
            .request_timeout(Duration::from_millis(200))
    })
    .await;
    outage.resolve("t").await.unwrap();
    advance(Duration::from_millis(100)).await;
    outage.set(Mode::Hanging);
    assert!(outage.resolve("t").await.unwrap().is_stale());
}

#[tokio::test(start_paused = true)]
async fn a_rejection_is_never_answered_stale() {
    // Pins down "never when it rejects the token": a revoked token is refused at once.
    let outage = Outage::start(Mode::Healthy, |b| {
        b.cache_ttl(Duration::from_millis(50))
            .serve_stale_for(Duration::from_secs(5))
    })
    .await;
    outage.resolve("t").await.unwrap();
    advance(Duration::from_millis(100)).await;
    outage.set(Mode::Rejecting);
    assert_eq!(outage.refusal("t").await, ErrorCode::TokenRejected);
    outage.set(Mode::Failing);
    assert_eq!(
        outage.refusal("t").await,
        ErrorCode::TokenRejected,
        "the rejection replaced the stale answer"
    );
}

#[tokio::test]
async fn stale_serving_is_off_by_default() {
    // Pins down the default: an expired answer is gone.
    let outage = Outage::start(Mode::Healthy, |b| b.cache_ttl(Duration::from_millis(50))).await;
    outage.resolve("t").await.unwrap();
    // Real time: with stale serving off, a user fresh for the whole cache_ttl is kept without a
    // deadline of its own (a hit there reads no clock), and moka expires it on its own clock.
    tokio::time::sleep(Duration::from_millis(100)).await;
    outage.set(Mode::Failing);
    assert_eq!(outage.refusal("t").await, ErrorCode::AuthUnavailable);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_fails_fast_without_calling_the_dead_api() {
    // Pins down the circuit breaker: after the run of failures, callers do not wait for
    // request_timeout and no request reaches the API.
    let timeout = Duration::from_millis(300);
    let outage = Outage::start(Mode::Hanging, |b| {
        b.request_timeout(timeout)
            .retries(0)
            .circuit_breaker(3, Duration::from_secs(30))
    })
    .await;
    for i in 0..3 {
        let err = outage.resolve(&format!("t{i}")).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthTimeout);
    }
    assert_eq!(outage.requests(), 3);

    for i in 0..50 {
        // tokio's clock: on the paused clock a wait for any timer (the request timeout)
        // would show here in full, however little real time it took.
        let started = Instant::now();
        let err = outage.resolve(&format!("u{i}")).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthUnavailable);
        assert!(err.to_string().contains("circuit breaker"), "{err}");
        assert!(
            started.elapsed() < timeout / 3,
            "failed fast: {:?}",
            started.elapsed()
        );
    }
    assert_eq!(outage.requests(), 3, "an open breaker sends nothing");
    assert_eq!(outage.resolver.stats().short_circuited, 50);
}

#[tokio::test(start_paused = true)]
async fn cache_hits_are_served_while_the_breaker_is_open() {
    // Pins down that the breaker only guards calls.
    let outage = Outage::start(Mode::Healthy, |b| {
        b.retries(0).circuit_breaker(2, Duration::from_secs(30))
    })
    .await;
    outage.resolve("cached").await.unwrap();
    outage.set(Mode::Failing);
    for t in ["a", "b", "c"] {
        outage.resolve(t).await.unwrap_err();
    }
    assert_eq!(outage.resolve("cached").await.unwrap().id, 7);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_closes_by_itself_when_the_api_recovers() {
    // Pins down the half-open probe: after the cool-down one call goes through, and its success
    // closes the breaker.
    let outage = Outage::start(Mode::Failing, |b| {
        b.retries(0).circuit_breaker(2, Duration::from_millis(200))
    })
    .await;
    for t in ["a", "b"] {
        outage.resolve(t).await.unwrap_err();
    }
    assert!(outage
        .resolve("c")
        .await
        .unwrap_err()
        .to_string()
        .contains("circuit breaker"));
    outage.set(Mode::Healthy);
    advance(Duration::from_millis(250)).await;
    assert_eq!(outage.resolve("c").await.unwrap().id, 7);
    assert_eq!(outage.resolve("d").await.unwrap().id, 7);
    assert_eq!(outage.requests(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_keeps_the_breaker_open() {
    // Pins down that a probe that fails re-opens the breaker for another cool-down.
    let outage = Outage::start(Mode::Failing, |b| {
        b.retries(3).circuit_breaker(1, Duration::from_millis(150))
    })
    .await;
    outage.resolve("a").await.unwrap_err();
    assert_eq!(
        outage.requests(),
        1,
        "the breaker opened at the first failure and stopped the retries"
    );
    advance(Duration::from_millis(200)).await;
    outage.resolve("b").await.unwrap_err();
    assert_eq!(outage.requests(), 2, "the probe is a single call");
    outage.resolve("c").await.unwrap_err();
    assert_eq!(outage.requests(), 2, "open again");
}

#[tokio::test(start_paused = true)]
async fn stale_answers_cover_an_open_breaker() {
    // Pins down that the two features compose: a dead API behind an open breaker still lets
    // recently seen players in, flagged stale.
    let outage = Outage::start(Mode::Healthy, |b| {
        b.cache_ttl(Duration::from_millis(50))
            .serve_stale_for(Duration::from_secs(10))
            .retries(0)
            .circuit_breaker(1, Duration::from_secs(30))
    })
    .await;
    outage.resolve("known").await.unwrap();
    outage.set(Mode::Failing);
    outage.resolve("other").await.unwrap_err();
    advance(Duration::from_millis(100)).await;
    let before = outage.requests();
    assert!(outage.resolve("known").await.unwrap().is_stale());
    assert_eq!(outage.requests(), before);
}

/// How the call the test holds ends once released.
#[derive(Clone, Copy)]
enum Ending {
    /// 503 at once.
    Fails,
    /// No answer: the resolver's `request_timeout` ends it.
    TimesOut,
}

/// A user answered once, then a call the test holds, then 503 for everything: a resolver with
/// stale serving on, its answer for "t" expired, and `callers` resolutions of "t" coalesced on
/// the held call. `during` runs while the call is held; then the call ends as `ending` says,
/// and each caller's result comes back.
async fn held_outage(
    callers: usize,
    ending: Ending,
    during: impl FnOnce(&Resolver, &str),
) -> (Vec<Result<Resolution, ResolveError>>, Resolver) {
    let release = Arc::new(tokio::sync::Notify::new());
    let held = Arc::new(tokio::sync::Notify::new());
    let (r, h) = (release.clone(), held.clone());
    let server = Scripted::start(move |n, _| {
        let (release, held) = (r.clone(), h.clone());
        async move {
            match n {
                0 => user_answer(7, "sam"),
                1 => {
                    held.notify_one();
                    release.notified().await;
                    if let Ending::TimesOut = ending {
                        std::future::pending::<()>().await;
                    }
                    respond(503, &[], b"")
                }
                _ => respond(503, &[], b""),
            }
        }
    })
    .await;
    let url = server.url();
    let resolver = resolver_for(&url)
        .cache_ttl(Duration::from_millis(50))
        .serve_stale_for(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(1))
        .retries(0)
        .build()
        .unwrap();
    assert!(!resolver
        .resolve_in_full(&url, "t")
        .await
        .unwrap()
        .is_stale());
    advance(Duration::from_millis(100)).await;

    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (resolver, url) = (resolver.clone(), url.clone());
            tokio::spawn(async move { resolver.resolve_in_full(&url, "t").await })
        })
        .collect();
    // The call is held: every caller spawned before it was polled first (one thread), and has
    // joined the flight.
    held.notified().await;
    tokio::task::yield_now().await;
    during(&resolver, &url);
    release.notify_one();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(server.requests(), 2, "one call for every caller");
    (results, resolver)
}

#[tokio::test(start_paused = true)]
async fn a_ban_during_the_call_is_never_answered_stale() {
    // Pins down that a revocation landing while a coalesced call is in flight wins over the
    // stale answer captured before it: every caller of the flight is refused (token_rejected,
    // the revocation's code, not the outage's), none is handed the banned user.
    let (results, resolver) = held_outage(8, Ending::Fails, |resolver, url| {
        resolver.invalidate_user(url, 7)
    })
    .await;
    for result in &results {
        match result {
            Ok(user) => panic!("the banned user was served (stale: {})", user.is_stale()),
            Err(error) => assert_eq!(error.code(), ErrorCode::TokenRejected, "{error}"),
        }
    }
    assert_eq!(resolver.stats().stale_served, 0);
}

#[tokio::test(start_paused = true)]
async fn a_ban_during_a_call_that_times_out_is_never_answered_stale() {
    // Pins down the same when the integrator does not answer at all: the call ends at the
    // request timeout (auth_timeout, which stale serving covers), and the ban still wins.
    let (results, _) = held_outage(4, Ending::TimesOut, |resolver, url| {
        resolver.invalidate_user(url, 7)
    })
    .await;
    for result in results {
        assert_eq!(result.unwrap_err().code(), ErrorCode::TokenRejected);
    }
}

#[tokio::test(start_paused = true)]
async fn a_ban_of_everyone_during_the_call_is_never_answered_stale() {
    // Pins down the same for a revocation of everything.
    let (results, _) = held_outage(4, Ending::Fails, |resolver, _| resolver.invalidate_all()).await;
    for result in results {
        assert_eq!(result.unwrap_err().code(), ErrorCode::TokenRejected);
    }
}

#[tokio::test(start_paused = true)]
async fn someone_else_banned_during_the_call_leaves_the_stale_answer() {
    // Pins down that the check names what the stale answer stands for: another user's ban
    // does not cost this one its fallback.
    let (results, resolver) = held_outage(4, Ending::Fails, |resolver, url| {
        resolver.invalidate_user(url, 8)
    })
    .await;
    for result in results {
        let user = result.unwrap();
        assert!(user.is_stale());
        assert_eq!(user.id, 7);
    }
    assert_eq!(resolver.stats().stale_served, 4);
}
