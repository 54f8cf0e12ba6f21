//! The hit path: `resolve` of a cached token, next to the caches a user could pick instead.
//!
//! - `hit` (one task): `resolve` of a cached token; `hand_written_get`, the hit of the cache a
//!   user writes by hand (`baselines::HandWritten`: a moka sync `Cache<String, Arc<_>>` keyed
//!   by the token alone, moka's default hasher, one time to live), the target; a bare moka
//!   `get` of the resolver's own key type, built and configured as the resolver's cache
//!   (capacity, one time to live, the same hasher, the `Arc<User>` alone as the value, look-up
//!   from a borrowed key through `moka::Equivalent`): the cost of the cache we chose; a
//!   `RwLock<HashMap>` look-up, the floor; and `quick_cache`, the fastest alternative. Each
//!   holds the same 1,000 entries.
//!   Targets: `resolve` <= 1.0x `hand_written_get`, and < 500 ns.
//! - `hit, interleaved` (a table at the end): `resolve`, `hand_written_get` and `moka_get` in
//!   rounds of 200,000 hits each, in a rotating order; the ratios are medians of the per-round
//!   ratios, so that the machine's drift between criterion's stretches cannot tilt them. This
//!   table is what the hit target is read from.
//! - `hit_contended`: 1, 2 and 8 tasks on a 2-worker multi-thread runtime, each resolving
//!   cached tokens (different ones per task, as different players); throughput in
//!   resolutions/s, next to the same load on the bare moka cache, and `hash_only`: hashing the
//!   same keys and nothing else, work that shares no memory between tasks, to show what a
//!   second core gives on this machine at best. Reported, no longer a target (see
//!   `docs/performance.md`).
//!
//! `cargo bench --bench resolve`; `docs/performance.md` has numbers.

use token_resolver_support::bench as support;

use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use support::{
    token, HandWritten, Key, KeyRef, KeyView, NaiveUser, Upstream, UpstreamConfig, User, Value,
};
use token_resolver::Resolver;

/// Entries in every cache of the `hit` group.
const ENTRIES: usize = 1_000;

/// A resolver with `ENTRIES` tokens cached from a loopback upstream, and the baseline caches
/// holding the same keys.
struct Fixture {
    rt: tokio::runtime::Runtime,
    /// Kept alive for the resolver's warm-up; hits never reach it.
    _upstream: Upstream,
    resolver: Resolver,
    base: String,
    /// The resolver's normalised endpoint, the first half of every baseline key.
    endpoint: String,
    tokens: Arc<Vec<String>>,
}

impl Fixture {
    fn new() -> Fixture {
        let rt = support::runtime();
        let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
        let base = upstream.base();
        let resolver = support::resolver(&base);
        let tokens: Vec<String> = (0..ENTRIES as u64).map(|i| token('h', i)).collect();
        rt.block_on(async {
            for t in &tokens {
                resolver
                    .resolve(&base, t)
                    .await
                    .expect("the warm-up resolves");
            }
        });
        assert_eq!(upstream.calls(), ENTRIES as u64, "one call per token");
        Fixture {
            rt,
            endpoint: upstream.user_url(),
            _upstream: upstream,
            resolver,
            base,
            tokens: Arc::new(tokens),
        }
    }

    fn keys(&self) -> impl Iterator<Item = (Key, Value)> + '_ {
        let endpoint: Arc<str> = Arc::from(self.endpoint.as_str());
        self.tokens
            .iter()
            .enumerate()
            .map(move |(i, t)| (Key::new(&endpoint, t), Value::user(i as i64 + 1)))
    }

    /// The hand-written cache of `token-resolver load`, holding the same tokens.
    fn hand_written(&self) -> HandWritten {
        let cache = HandWritten::new(self.endpoint.clone(), 100_000, Duration::from_secs(3600));
        for (i, t) in self.tokens.iter().enumerate() {
            let user = NaiveUser {
                id: i as i64 + 1,
                name: support::name(i as u64 + 1),
            };
            cache.cache.insert(t.clone(), Arc::new(user));
        }
        cache.cache.run_pending_tasks();
        cache
    }

    /// A bare moka cache as the resolver's users: the same key, the `Arc<User>` alone.
    fn moka(&self) -> moka::sync::Cache<Key, Arc<User>, support::KeyHasher> {
        let cache = support::moka_cache(100_000);
        for (k, v) in self.keys() {
            cache.insert(k, v.user_alone().expect("a user"));
        }
        cache.run_pending_tasks();
        cache
    }
}

fn hit(c: &mut Criterion) {
    let f = Fixture::new();
    let hot = &f.tokens[ENTRIES / 2];
    let key_ref = KeyRef::new(&f.endpoint, hot);
    let key = &key_ref as &dyn KeyView;
    let hand_written = f.hand_written();

    let moka = f.moka();
    let rwlock = RwLock::new(f.keys().collect::<std::collections::HashMap<_, _>>());
    let quick = quick_cache::sync::Cache::<Key, Value>::new(ENTRIES * 2);
    for (k, v) in f.keys() {
        quick.insert(k, v);
    }
    assert!(moka.get(&key_ref).is_some() && quick.get(key).is_some());
    assert!(hand_written.cache.get(hot.as_str()).is_some());

    let mut group = c.benchmark_group("hit");
    group.throughput(Throughput::Elements(1));
    // All of a sample's resolutions in one `block_on`, as the baselines run in one loop:
    // criterion's `to_async` would enter the runtime once per resolution and bill it here.
    group.bench_function("resolve", |b| {
        b.iter_custom(|iters| {
            f.rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(f.resolver.resolve(&f.base, hot).await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("hand_written_get", |b| {
        b.iter(|| hand_written.cache.get(hot.as_str()).unwrap())
    });
    group.bench_function("moka_get", |b| b.iter(|| moka.get(&key_ref).unwrap()));
    group.bench_function("rwlock_hashmap", |b| {
        b.iter(|| rwlock.read().unwrap().get(key).cloned().unwrap())
    });
    group.bench_function("quick_cache", |b| b.iter(|| quick.get(key).unwrap()));
    group.finish();
}

/// Runs `tasks` tasks of `iters` look-ups each, task `t` starting at its own token, and gives
/// the wall time until the last one is done.
async fn run_tasks<F, Fut>(tasks: usize, iters: u64, lookups: F) -> Duration
where
    F: Fn(usize, u64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| tokio::spawn(lookups(t, iters)))
        .collect();
    for handle in handles {
        handle.await.expect("a bench task");
    }
    start.elapsed()
}

/// Where task `t` starts in the token list, so tasks touch different entries.
fn offset(t: usize) -> usize {
    t * (ENTRIES / 8) + 1
}

fn hit_contended(c: &mut Criterion) {
    let f = Fixture::new();
    let moka = f.moka();
    let endpoint: Arc<str> = Arc::from(f.endpoint.as_str());
    let hasher = std::hash::RandomState::new();

    let mut group = c.benchmark_group("hit_contended");
    for tasks in [1usize, 2, 8] {
        // One iteration is one look-up in each task: throughput is look-ups per second overall.
        group.throughput(Throughput::Elements(tasks as u64));
        group.bench_with_input(BenchmarkId::new("resolve", tasks), &tasks, |b, &tasks| {
            b.iter_custom(|iters| {
                f.rt.block_on(run_tasks(tasks, iters, |t, iters| {
                    let (resolver, base, tokens) =
                        (f.resolver.clone(), f.base.clone(), f.tokens.clone());
                    async move {
                        let mut i = offset(t);
                        for _ in 0..iters {
                            i = if i + 1 == ENTRIES { 0 } else { i + 1 };
                            black_box(resolver.resolve(&base, &tokens[i]).await.unwrap());
                        }
                    }
                }))
            })
        });
        let moka = moka.clone();
        let moka_get = move |key: &KeyRef| {
            black_box(moka.get(key).unwrap());
        };
        sync_lookups(&mut group, "moka_get", tasks, &f, &endpoint, moka_get);
        let hasher = hasher.clone();
        let hash_only = move |key: &KeyRef| {
            black_box(hasher.hash_one(key));
        };
        sync_lookups(&mut group, "hash_only", tasks, &f, &endpoint, hash_only);
    }
    group.finish();
}

/// Benches `lookup` of the fixture's keys from `tasks` tasks at once, each going round the
/// tokens from its own place.
fn sync_lookups<L>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    tasks: usize,
    f: &Fixture,
    endpoint: &Arc<str>,
    lookup: L,
) where
    L: Fn(&KeyRef) + Clone + Send + 'static,
{
    group.bench_with_input(BenchmarkId::new(name, tasks), &tasks, |b, &tasks| {
        b.iter_custom(|iters| {
            f.rt.block_on(run_tasks(tasks, iters, |t, iters| {
                let (lookup, endpoint, tokens) =
                    (lookup.clone(), endpoint.clone(), f.tokens.clone());
                let endpoint_hash = support::endpoint_hash(&endpoint);
                async move {
                    let mut i = offset(t);
                    for _ in 0..iters {
                        i = if i + 1 == ENTRIES { 0 } else { i + 1 };
                        lookup(&KeyRef {
                            endpoint: &endpoint,
                            endpoint_hash,
                            token: &tokens[i],
                        });
                    }
                }
            }))
        })
    });
}

/// Rounds of the interleaved hit comparison, and hits of each contender per round.
const ROUNDS: usize = 30;
const PER_ROUND: u64 = 200_000;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The hit comparison with every contender in every round, in a rotating order, so that the
/// machine's drift between criterion's per-function stretches cannot tilt it; prints one table
/// whose ratios are medians of the per-round ratios.
fn hit_interleaved() {
    let f = Fixture::new();
    let hot = f.tokens[ENTRIES / 2].clone();
    let hand_written = f.hand_written();
    let moka = f.moka();
    let key = KeyRef::new(&f.endpoint, &hot);
    let names = ["resolve", "hand_written_get", "moka_get"];
    let time = |which: usize| -> f64 {
        let start = Instant::now();
        match which {
            0 => f.rt.block_on(async {
                for _ in 0..PER_ROUND {
                    black_box(f.resolver.resolve(&f.base, &hot).await.unwrap());
                }
            }),
            1 => {
                for _ in 0..PER_ROUND {
                    black_box(hand_written.cache.get(hot.as_str()).unwrap());
                }
            }
            _ => {
                for _ in 0..PER_ROUND {
                    black_box(moka.get(&key).unwrap());
                }
            }
        }
        start.elapsed().as_secs_f64() / PER_ROUND as f64
    };
    for which in 0..names.len() {
        time(which);
    }
    let mut times = vec![Vec::new(); names.len()];
    for round in 0..ROUNDS {
        for i in 0..names.len() {
            let which = (i + round) % names.len();
            times[which].push(time(which));
        }
    }
    let ratio =
        |of: usize, to: usize| median((0..ROUNDS).map(|r| times[of][r] / times[to][r]).collect());
    println!(
        "\nhit, interleaved: {ROUNDS} rounds x {PER_ROUND} hits of each, rotating order; medians \
         of the per-round values"
    );
    println!("| contender | per hit | / hand_written_get | / moka_get |");
    println!("|---|---:|---:|---:|");
    for (i, name) in names.iter().enumerate() {
        println!(
            "| {name} | {:.1} ns | {:.3}x | {:.3}x |",
            median(times[i].clone()) * 1e9,
            ratio(i, 1),
            ratio(i, 2)
        );
    }
    let (per_hit, to_hand) = (median(times[0].clone()) * 1e9, ratio(0, 1));
    println!(
        "targets: resolve <= 1.00x hand_written_get: {to_hand:.3}x -> {}; resolve < 500 ns: \
         {per_hit:.1} ns -> {}",
        if to_hand <= 1.0 { "met" } else { "MISSED" },
        if per_hit < 500.0 { "met" } else { "MISSED" }
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = hit, hit_contended
}

fn main() {
    benches();
    // Criterion's own `main`, plus the interleaved table; `--list` and `--test` (as from
    // `cargo test --benches`) ask for no measurement.
    if !std::env::args().any(|a| a == "--list" || a == "--test") {
        hit_interleaved();
    }
    Criterion::default().configure_from_args().final_summary();
}
