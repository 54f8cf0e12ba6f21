//! What a remote token invalidation costs the node that receives it, and how that grows with
//! the tokens it caches: node B caches `N` tokens (50,000, then 1,000,000), is cut off from
//! Redis by a relay while node A revokes 50,000 of them, and then catches up on the stream in
//! one burst. Two figures per message: the CPU time B's own runtime threads spend from the heal
//! to B's last revocation event (reading the messages from Redis, checking them, finding each
//! entry through the index, dropping it, telling B's subscribers), and the wall time from B's
//! first event to its last. B runs on a runtime of its own, so that what the harness does (node
//! A, the relay, the bench's own subscriber) is not counted; Redis runs in its own process.
//! Target: under 10 µs of CPU per message with 1,000,000 tokens cached.
//!
//! `cargo bench --bench remote_invalidation --features redis` prints one row per `N` and the
//! ratio of the two, measured in the same run. Needs `redis-server` on the PATH (skipped with
//! a note otherwise). `REMOTE_INVALIDATION_MAX=N` changes the larger row's size.

use token_resolver_support::bench as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use token_resolver::{RedisTier, Resolver, Revocation};
use token_resolver_support::redis::RedisServer;
use token_resolver_support::Relay;

use support::{runtime, token, Upstream, UpstreamConfig};

const SECRET: &str = "bench-secret-of-32-bytes-length!";
/// Revocations in each burst.
const BURST: u64 = 50_000;
/// Resolutions in flight while a node's cache is filled.
const FILLERS: u64 = 64;

/// A node resolving at `base` through `tier`, caching up to two million tokens for the run.
fn node(base: &str, tier: RedisTier) -> Resolver {
    Resolver::builder()
        .default_auth_url(base)
        .cache_ttl(Duration::from_secs(3600))
        .max_cache_entries(2_000_000)
        .shared_cache(tier)
        .build()
        .expect("a resolver")
}

/// Resolves tokens `0..count` of set `set` at `base` on `node`, `FILLERS` at a time.
async fn fill(node: &Resolver, base: &str, set: char, count: u64) {
    let tasks: Vec<_> = (0..FILLERS)
        .map(|filler| {
            let (node, base) = (node.clone(), base.to_owned());
            tokio::spawn(async move {
                for i in (filler..count).step_by(FILLERS as usize) {
                    node.resolve(&base, &token(set, i))
                        .await
                        .expect("the upstream answers");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a filler");
    }
}

/// A runtime for node B alone, one worker, and the ids of the threads it runs (the worker and
/// any blocking thread), to count their CPU time apart from the rest of the process.
struct NodeRuntime {
    runtime: tokio::runtime::Runtime,
    threads: Arc<Mutex<Vec<String>>>,
}

impl NodeRuntime {
    fn new() -> NodeRuntime {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let seen = threads.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .on_thread_start(move || {
                // `/proc/thread-self` links to `<pid>/task/<tid>`.
                if let Ok(link) = std::fs::read_link("/proc/thread-self") {
                    let tid = link.file_name().map(|t| t.to_string_lossy().into_owned());
                    seen.lock().unwrap().extend(tid);
                }
            })
            .build()
            .expect("a runtime for node B");
        NodeRuntime { runtime, threads }
    }

    /// The CPU time (user and system) B's threads have used, from `/proc/self/task/<tid>/stat`
    /// (in USER_HZ ticks, 100 a second on Linux).
    fn cpu_time(&self) -> Duration {
        let ticks: u64 = (self.threads.lock().unwrap().iter())
            .filter_map(|tid| std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok())
            .map(|stat| {
                let fields: Vec<&str> = stat[stat.rfind(')').expect("a stat line") + 2..]
                    .split_whitespace()
                    .collect();
                fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
            })
            .sum();
        Duration::from_millis(ticks * 10)
    }
}

/// One row: B caches `cached` tokens, misses `BURST` revocations of them behind a partition,
/// and catches up. The CPU time and the wall time per message, in microseconds.
async fn row(redis: &RedisServer, upstream: &Upstream, set: char, cached: u64) -> (f64, f64) {
    let base = upstream.base();
    let path = Relay::start(redis.addr()).await;
    let b_runtime = NodeRuntime::new();
    let b = node(
        &base,
        RedisTier::new(format!("redis://{}", path.addr()), SECRET)
            .key_prefix(format!("bench-{set}:")),
    );
    let a = node(
        &base,
        RedisTier::new(redis.url(), SECRET).key_prefix(format!("bench-{set}:")),
    );
    assert!(cached >= BURST, "the burst revokes cached tokens");
    let filling = Instant::now();
    let filling_b = {
        let (b, base) = (b.clone(), base.clone());
        b_runtime
            .runtime
            .spawn(async move { fill(&b, &base, set, cached).await })
    };
    filling_b.await.expect("B's cache filled");
    eprintln!("  {cached} tokens cached on B in {:.1?}", filling.elapsed());
    while !b.shared_cache_subscribed() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut events = b.revocations();
    path.silence_open_connections();
    path.refuse(true);
    for i in 0..BURST {
        a.invalidate(&base, &token(set, i * (cached / BURST).max(1)));
    }
    // Let A's writes land, then heal: B notices the silence and reads what it missed.
    let stream = format!("bench-{set}:revocations");
    while stream_len(redis, &stream) < BURST {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cpu_before = b_runtime.cpu_time();
    path.refuse(false);
    let mut first = None;
    let mut seen = 0;
    while seen < BURST {
        match tokio::time::timeout(Duration::from_secs(60), events.recv()).await {
            Ok(Ok(Revocation::Token { .. })) => {
                first.get_or_insert_with(Instant::now);
                seen += 1;
            }
            Ok(Ok(_)) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(n))) => seen += n,
            Ok(Err(_)) | Err(_) => panic!("B saw {seen} of {BURST} revocations"),
        }
    }
    let cpu = (b_runtime.cpu_time() - cpu_before).as_secs_f64() * 1e6 / BURST as f64;
    let span = first.expect("a first event").elapsed();
    drop(b);
    b_runtime.runtime.shutdown_background();
    (cpu, span.as_secs_f64() * 1e6 / (BURST - 1) as f64)
}

/// Entries in the stream `key`.
fn stream_len(redis: &RedisServer, key: &str) -> u64 {
    match redis.command(&["XLEN", key]) {
        Ok(redis::Value::Int(n)) => n as u64,
        other => panic!("XLEN {key}: {other:?}"),
    }
}

fn main() {
    let Some(redis) = RedisServer::start() else {
        eprintln!("remote_invalidation: skipped, redis-server is not on the PATH");
        return;
    };
    let large: u64 = std::env::var("REMOTE_INVALIDATION_MAX")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = runtime();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream");
    runtime.block_on(async {
        eprintln!("remote invalidation: a burst of {BURST} token revocations caught up by B");
        let small = row(&redis, &upstream, 's', BURST).await;
        let big = row(&redis, &upstream, 'l', large).await;
        println!("| tokens cached on B | CPU per message (µs) | wall per message (µs) |");
        println!("|---:|---:|---:|");
        println!("| {BURST:>9} | {:>8.2} | {:>8.2} |", small.0, small.1);
        println!("| {large:>9} | {:>8.2} | {:>8.2} |", big.0, big.1);
        println!(
            "CPU ratio {large} / {BURST}: {:.2}x (1.00x: the cost does not grow with the cache); \
             target < 10 µs at 1,000,000: {}",
            big.0 / small.0,
            if big.0 < 10.0 { "met" } else { "missed" }
        );
    });
}
