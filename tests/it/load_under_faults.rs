//! Load under faults: 100,000 resolutions over 10,000 tokens, at high concurrency, against an
//! upstream that fails 30% of its calls with a 5xx and adds a random 0-5 ms delay to every
//! answer. The resolver must keep its promises under that pressure: never more calls in flight
//! at the server than its cap, every resolution ends with the right user or a retryable code
//! (`auth_unavailable`, `auth_timeout`, `overloaded`), the cache never holds more than its
//! capacity, and once the upstream recovers every token resolves. Sized to finish in seconds in
//! a debug build on 2 cores.

use token_resolver_support as support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{respond, user_answer, Scripted};
use token_resolver::{ErrorCode, Resolver};

const TOKENS: usize = 10_000;
const RESOLUTIONS: usize = 100_000;
/// Tasks resolving at once: far more than the upstream slots, so the slot limit is what holds.
const WORKERS: usize = 256;
const MAX_IN_FLIGHT: usize = 32;
const CACHE_ENTRIES: u64 = 2_000;
/// What the cache may hold past its capacity for a moment: moka applies the bound at its
/// passes over the writes, and stores run one per upstream call, so at most this many.
const IN_FLIGHT_SLACK: u64 = MAX_IN_FLIGHT as u64;
const FAILURE_RATE: f64 = 0.3;
/// Tokens whose resolutions are interleaved at a time.
const BURST: usize = 250;
/// A whole run's time bound, against a hang or a collapse of throughput (a debug build on
/// 2 cores takes 15-45 s, depending on what else runs).
const TIME_BOUND: Duration = Duration::from_secs(90);

fn token(i: usize) -> String {
    format!("load-{i}")
}

/// The user the upstream vouches for behind `Authorization: Bearer load-<i>`.
fn index_of(authorization: Option<&str>) -> usize {
    authorization
        .and_then(|a| a.strip_prefix("Bearer load-"))
        .and_then(|i| i.parse().ok())
        .expect("a load token")
}

/// The cache's size is read after every this many resolutions (a thousand times in the load).
const WATCH_EVERY: usize = 100;

/// Resolves `order` (token indices) with `tasks` tasks, checking each outcome and, every
/// [`WATCH_EVERY`] resolutions, that the cache holds no more than its capacity; returns how
/// many ended with each outcome, and the largest cache size seen.
async fn run(
    resolver: &Resolver,
    url: &str,
    order: Arc<Vec<usize>>,
    tasks: usize,
) -> (BTreeMap<&'static str, u64>, u64) {
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes: Arc<Mutex<BTreeMap<&'static str, u64>>> = Arc::default();
    let largest_seen = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (resolver, url, order, next, outcomes, largest_seen) = (
            resolver.clone(),
            url.to_owned(),
            order.clone(),
            next.clone(),
            outcomes.clone(),
            largest_seen.clone(),
        );
        workers.spawn(async move {
            let mut mine = BTreeMap::new();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = order.get(k) else { break };
                if k % WATCH_EVERY == 0 {
                    let entries = resolver.stats().entries;
                    largest_seen.fetch_max(entries, Ordering::Relaxed);
                    assert!(
                        entries <= CACHE_ENTRIES + IN_FLIGHT_SLACK,
                        "the cache holds {entries} entries, over its capacity of {CACHE_ENTRIES}"
                    );
                }
                let outcome = match resolver.resolve(&url, &token(i)).await {
                    Ok(user) => {
                        assert_eq!(user.id, i as i64, "token {i} resolved to another user");
                        assert_eq!(user.name, format!("user-{i}"));
                        "ok"
                    }
                    Err(e) => {
                        assert!(
                            matches!(
                                e.code(),
                                ErrorCode::AuthUnavailable
                                    | ErrorCode::AuthTimeout
                                    | ErrorCode::Overloaded
                            ),
                            "token {i} failed with {}: {e}",
                            e.code().as_str()
                        );
                        e.code().as_str()
                    }
                };
                *mine.entry(outcome).or_insert(0) += 1;
            }
            let mut all = outcomes.lock().unwrap();
            for (outcome, n) in mine {
                *all.entry(outcome).or_insert(0) += n;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.expect("a worker panicked");
    }
    let outcomes = Arc::try_unwrap(outcomes).unwrap().into_inner().unwrap();
    (outcomes, largest_seen.load(Ordering::Relaxed))
}

/// An upstream that answers after up to 5 ms, failing a share of calls with 5xx until it is
/// told it `recovered`; it counts the `failures` it made.
struct FlakyUpstream {
    server: Scripted,
    recovered: Arc<AtomicBool>,
    failures: Arc<AtomicU64>,
}

impl FlakyUpstream {
    async fn start() -> FlakyUpstream {
        let recovered = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(AtomicU64::new(0));
        let (r, f) = (recovered.clone(), failures.clone());
        let server = Scripted::start(move |_, seen| {
            let (recovered, failures) = (r.clone(), f.clone());
            async move {
                let i = index_of(seen.header("authorization"));
                // Real time: the slowness is the fault under load (calls overlap and fill the
                // slots), on two worker threads, which a paused clock cannot drive.
                tokio::time::sleep(Duration::from_micros(fastrand::u64(0..=5_000))).await;
                if !recovered.load(Ordering::SeqCst) && fastrand::f64() < FAILURE_RATE {
                    failures.fetch_add(1, Ordering::Relaxed);
                    return respond([500, 502, 503][fastrand::usize(0..3)], &[], b"");
                }
                user_answer(i as i64, &format!("user-{i}"))
            }
        })
        .await;
        FlakyUpstream {
            server,
            recovered,
            failures,
        }
    }
}

/// Every token ten times, in bursts as players connect and join: the tokens in a fixed
/// shuffled order, cut into windows of `BURST` tokens whose resolutions are shuffled together.
/// Within a burst a token's look-ups coalesce or hit; across bursts the cache (a fifth of the
/// tokens) keeps evicting.
fn bursts() -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut tokens: Vec<usize> = (0..TOKENS).collect();
    rng.shuffle(&mut tokens);
    let mut order = Vec::with_capacity(RESOLUTIONS);
    for burst in tokens.chunks(BURST) {
        let mut resolutions: Vec<usize> = burst
            .iter()
            .flat_map(|&i| std::iter::repeat_n(i, RESOLUTIONS / TOKENS))
            .collect();
        rng.shuffle(&mut resolutions);
        order.extend(resolutions);
    }
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolutions_under_a_failing_slow_upstream_keep_every_bound() {
    // Pins down the slot cap, the error codes, the cache capacity and recovery under load.
    let upstream = FlakyUpstream::start().await;
    let url = upstream.server.url();
    let resolver = support::resolver_for(&url)
        .max_concurrent_requests(MAX_IN_FLIGHT)
        .max_cache_entries(CACHE_ENTRIES)
        .queue_timeout(Duration::from_millis(500))
        .request_timeout(Duration::from_secs(2))
        // The breaker would turn most of the load into instant refusals; this test is about
        // the bounds that hold while calls really go out.
        .circuit_breaker(0, Duration::ZERO)
        .build()
        .unwrap();

    let started = Instant::now();
    let (outcomes, largest_seen) = run(&resolver, &url, Arc::new(bursts()), WORKERS).await;
    let load_time = started.elapsed();
    eprintln!(
        "load: {RESOLUTIONS} resolutions in {load_time:?}: {outcomes:?}; {} upstream requests, \
         {} failed on purpose; max in flight {}; largest cache seen {largest_seen}; {:?}",
        upstream.server.requests(),
        upstream.failures.load(Ordering::Relaxed),
        upstream.server.max_in_flight(),
        resolver.stats(),
    );
    every_bound_held(&upstream, &resolver, &outcomes);

    // The upstream recovers: every token resolves, to its own user, at the first try. As many
    // tasks as slots, so no resolution waits for one.
    upstream.recovered.store(true, Ordering::SeqCst);
    let recovery_started = Instant::now();
    let all = Arc::new((0..TOKENS).collect());
    let (outcomes, _) = run(&resolver, &url, all, MAX_IN_FLIGHT).await;
    eprintln!(
        "recovery: {TOKENS} resolutions in {:?}: {outcomes:?}",
        recovery_started.elapsed()
    );
    assert_eq!(outcomes.get("ok"), Some(&(TOKENS as u64)), "{outcomes:?}");
    assert!(upstream.server.max_in_flight() <= MAX_IN_FLIGHT);
    assert!(resolver.stats().entries <= CACHE_ENTRIES + IN_FLIGHT_SLACK);
    assert!(
        started.elapsed() < TIME_BOUND,
        "load and recovery took {:?}",
        started.elapsed()
    );
}

/// Under the failing load: every resolution ended, calls ran concurrently but within the slot
/// cap, the cache within its capacity, most players got in and the faults reached some.
fn every_bound_held(
    upstream: &FlakyUpstream,
    resolver: &Resolver,
    outcomes: &BTreeMap<&'static str, u64>,
) {
    let resolved: u64 = outcomes.values().sum();
    assert_eq!(resolved, RESOLUTIONS as u64);
    let max_in_flight = upstream.server.max_in_flight();
    assert!(
        max_in_flight <= MAX_IN_FLIGHT,
        "{max_in_flight} calls in flight at the server, over the cap of {MAX_IN_FLIGHT}"
    );
    assert!(max_in_flight > 1, "the load never ran calls concurrently");
    let stats = resolver.stats();
    assert!(
        stats.entries <= CACHE_ENTRIES + IN_FLIGHT_SLACK,
        "{stats:?}"
    );
    assert!(
        outcomes.get("ok").copied().unwrap_or(0) > (RESOLUTIONS / 2) as u64,
        "most resolutions succeed despite the faults: {outcomes:?}"
    );
    assert!(
        outcomes.get("auth_unavailable").copied().unwrap_or(0) > 0,
        "the faults reached some callers: {outcomes:?}"
    );
    assert!(
        upstream.failures.load(Ordering::Relaxed) > 1_000,
        "the upstream failed calls"
    );
}
