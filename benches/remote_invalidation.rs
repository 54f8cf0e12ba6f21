//! What a remote token invalidation costs the node that receives it, and how that grows with
//! the tokens it caches: node B caches `N` tokens (50,000, then 1,000,000), is cut off from
//! Redis by a relay while node A revokes 50,000 of them, and then catches up on the stream in
//! one burst. Two figures per message: the CPU time B's own runtime threads spend from the heal
//! to B's last revocation event (reading the messages from Redis, checking them, finding each
//! entry through the index, dropping it, telling B's subscribers), and the wall time from B's
//! first event to its last. B runs on a runtime of its own, so that what the harness does (node
//! A, the relay, the bench's own subscriber) is not counted; Redis runs in its own process.
//! Each row is the median of three bursts on one filled cache (filled with `N` plus two bursts'
//! worth, so that every burst meets at least `N` cached tokens), with the lowest and highest
//! beside it. Target: under 10 µs of CPU per message with 1,000,000 tokens cached.
//!
//! The process runs with mimalloc, as the project's binary does (node B stands for that
//! binary's resolver): most of what a message costs beyond moka and the reply's parse is
//! allocation, and the system allocator roughly doubles it (see `docs/performance.md`).
//!
//! `cargo bench --bench remote_invalidation --features redis` prints one row per `N` and the
//! ratio of the two, measured in the same run. Needs `redis-server` on the PATH (skipped with
//! a note otherwise). `REMOTE_INVALIDATION_MAX=N` changes the larger row's size.

use token_resolver_support::bench as support;

/// The allocator the project's binary runs with (`crates/cli/src/main.rs`): node B is that
/// binary's resolver.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use token_resolver::{RedisTier, Resolver, Revocation};
use token_resolver_support::redis::RedisServer;
use token_resolver_support::Relay;

use support::{runtime, token, Upstream, UpstreamConfig};

const SECRET: &str = "bench-secret-of-32-bytes-length!";
/// Revocations in each burst.
const BURST: u64 = 50_000;
/// Bursts in each row, of which the row shows the median.
const BURSTS: u64 = 3;
/// Resolutions in flight while a node's cache is filled.
const FILLERS: u64 = 64;

/// A node resolving at `base` through `tier`, caching up to two million tokens for the run.
fn node(base: &str, tier: RedisTier) -> Resolver {
    Resolver::builder()
        .default_auth_url(base)
        .cache_ttl(Duration::from_secs(3600))
        .max_cache_entries(2_000_000)
        .shared_cache(tier.stream_len(BURST * BURSTS))
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

/// What one burst cost B: CPU and wall time per message, in microseconds.
#[derive(Clone, Copy)]
struct Burst {
    cpu: f64,
    wall: f64,
}

/// The two nodes of a row and what stands between B and Redis.
struct Nodes<'a> {
    redis: &'a RedisServer,
    /// B's only way to Redis.
    path: Relay,
    b_runtime: NodeRuntime,
    a: Resolver,
    b: Resolver,
    base: String,
    /// The revocation stream's key.
    stream: String,
}

/// One row: B caches at least `cached` tokens through `BURSTS` bursts, each of which it misses
/// behind a partition and catches up on. Every burst, the lowest CPU time first.
async fn row(redis: &RedisServer, upstream: &Upstream, set: char, cached: u64) -> Vec<Burst> {
    let base = upstream.base();
    let path = Relay::start(redis.addr()).await;
    let prefix = format!("bench-{set}:");
    let b_url = format!("redis://{}", path.addr());
    let nodes = Nodes {
        redis,
        b_runtime: NodeRuntime::new(),
        a: node(
            &base,
            RedisTier::new(redis.url(), SECRET).key_prefix(&prefix),
        ),
        b: node(&base, RedisTier::new(b_url, SECRET).key_prefix(&prefix)),
        path,
        stream: format!("{prefix}revocations"),
        base,
    };
    assert!(cached >= BURST, "the bursts revoke cached tokens");
    let filled = cached + BURST * (BURSTS - 1);
    let filling = Instant::now();
    let filling_b = {
        let (b, base) = (nodes.b.clone(), nodes.base.clone());
        (nodes.b_runtime.runtime).spawn(async move { fill(&b, &base, set, filled).await })
    };
    filling_b.await.expect("B's cache filled");
    eprintln!("  {filled} tokens cached on B in {:.1?}", filling.elapsed());
    let stride = filled / BURST;
    let mut bursts = Vec::new();
    for burst in 0..BURSTS {
        let tokens = (0..BURST).map(|i| token(set, i * stride + burst));
        let cost = nodes.catch_up(tokens, (burst + 1) * BURST).await;
        eprintln!(
            "  burst {}: {:.2} µs of CPU, {:.2} µs of wall time per message",
            burst + 1,
            cost.cpu,
            cost.wall
        );
        bursts.push(cost);
    }
    let Nodes { b, b_runtime, .. } = nodes;
    drop(b);
    b_runtime.runtime.shutdown_background();
    bursts.sort_by(|x, y| x.cpu.total_cmp(&y.cpu));
    bursts
}

impl Nodes<'_> {
    /// One burst: B is cut off while A revokes `tokens` (the stream then holds `told`), then
    /// heals and catches up; what that cost B.
    async fn catch_up(&self, tokens: impl Iterator<Item = String>, told: u64) -> Burst {
        while !self.b.shared_cache_subscribed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut events = self.b.revocations();
        self.path.silence_open_connections();
        self.path.refuse(true);
        let before = told - BURST;
        for (i, token) in (1..).zip(tokens) {
            self.a.invalidate(&self.base, &token);
            // A's outbox folds more than 1,024 pending revocations into one of everything (a
            // new generation on B, not the burst of messages this measures): let A's writes
            // land as they go. A reaches Redis directly; only B is cut off.
            if i % 512 == 0 {
                while stream_len(self.redis, &self.stream) < before + i {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }
        // Let A's writes land, then heal: B notices the silence and reads what it missed.
        while stream_len(self.redis, &self.stream) < told {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let cpu_before = self.b_runtime.cpu_time();
        self.path.refuse(false);
        let mut first = None;
        let mut told = 0;
        // What B told, and what it told only as one `Recheck` in their place (it fell behind).
        let seen =
            |told: u64, events: &token_resolver::RevocationFeed<Revocation>| told + events.missed();
        while seen(told, &events) < BURST {
            match tokio::time::timeout(Duration::from_secs(60), events.recv()).await {
                Ok(Some(Revocation::Token { .. })) => {
                    first.get_or_insert_with(Instant::now);
                    told += 1;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => panic!("B saw {} of {BURST} revocations", seen(told, &events)),
            }
        }
        let cpu = (self.b_runtime.cpu_time() - cpu_before).as_secs_f64() * 1e6 / BURST as f64;
        let span = first.expect("a first event").elapsed();
        Burst {
            cpu,
            wall: span.as_secs_f64() * 1e6 / (BURST - 1) as f64,
        }
    }
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
        let show = |bursts: &[Burst]| {
            let (low, mid, high) = (bursts[0], bursts[bursts.len() / 2], bursts[bursts.len() - 1]);
            format!(
                "{:>8.2} ({:.2}–{:.2}) | {:>8.2} |",
                mid.cpu, low.cpu, high.cpu, mid.wall
            )
        };
        let median = |bursts: &[Burst]| bursts[bursts.len() / 2].cpu;
        println!("| tokens cached on B (at least) | CPU per message, µs: median (lowest–highest) of {BURSTS} bursts | wall per message (µs) |");
        println!("|---:|---:|---:|");
        println!("| {BURST:>9} | {}", show(&small));
        println!("| {large:>9} | {}", show(&big));
        println!(
            "CPU ratio {large} / {BURST}: {:.2}x (1.00x: the cost does not grow with the cache); \
             target < 10 µs at 1,000,000: {}",
            median(&big) / median(&small),
            if median(&big) < 10.0 { "met" } else { "missed" }
        );
    });
}
