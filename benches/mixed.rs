//! A game server's mix: a Zipf(s = 1.1) stream over 10,000 players' tokens in which 1% of the
//! resolutions are of a token never seen before (a player who just logged in), at concurrency
//! 1, 8 and 64; throughput in resolutions/s, for the resolver and for the naive baseline (a
//! reqwest POST + serde_json parse per call, no cache). Target: at concurrency 64 the resolver
//! does >= 20x the naive baseline.
//!
//! The resolver's cache is warmed with the 10,000 tokens first, so the run measures the steady
//! state; new tokens keep missing. One iteration is a batch of 1,000 resolutions shared by the
//! tasks. The upstream answers every token with a user (`max-age=3600`) from its own thread.
//! `cargo bench --bench mixed`.

use token_resolver_support::bench as support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use support::{token, Upstream, UpstreamConfig};

/// Distinct tokens the Zipf stream draws from.
const TOKENS: u64 = 10_000;
/// Share of resolutions that are of a new token.
const NEW_SHARE: f64 = 0.01;
/// Length of the precomputed stream; runs wrap around it.
const STREAM: usize = 1 << 20;
/// Resolutions per iteration.
const BATCH: u64 = 1_000;
/// Marks a new token in the stream.
const NEW: u32 = u32::MAX;

/// The precomputed request stream: a Zipf rank (0-based) or `NEW`.
fn stream() -> Vec<u32> {
    let zipf = rand_distr::Zipf::new(TOKENS, 1.1).expect("valid Zipf parameters");
    let mut rng = StdRng::seed_from_u64(0x5eed);
    (0..STREAM)
        .map(|_| {
            if rng.gen_bool(NEW_SHARE) {
                NEW
            } else {
                rng.sample(zipf) as u32 - 1
            }
        })
        .collect()
}

/// Where the stream is, and the next new token, shared by every task of a run.
struct Cursor {
    stream: Vec<u32>,
    tokens: Vec<String>,
    position: AtomicU64,
    next_new: AtomicU64,
}

impl Cursor {
    /// The token of the next resolution, or `None` when `end` is reached.
    fn next(&self, end: u64) -> Option<std::borrow::Cow<'_, str>> {
        let at = self.position.fetch_add(1, Ordering::Relaxed);
        if at >= end {
            return None;
        }
        Some(match self.stream[at as usize % STREAM] {
            NEW => token('n', self.next_new.fetch_add(1, Ordering::Relaxed)).into(),
            rank => self.tokens[rank as usize].as_str().into(),
        })
    }
}

/// Runs `tasks` tasks that share the next `iters * BATCH` resolutions of the stream, and gives
/// the wall time until they are all done.
async fn run<F, Fut>(cursor: &Arc<Cursor>, tasks: usize, iters: u64, resolve: F) -> Duration
where
    F: Fn(Arc<Cursor>, u64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let end = cursor.position.load(Ordering::Relaxed) + iters * BATCH;
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| tokio::spawn(resolve(cursor.clone(), end)))
        .collect();
    for handle in handles {
        handle.await.expect("a bench task");
    }
    let elapsed = start.elapsed();
    // Tasks overshoot `end` by one fetch each; start the next run where this one stopped.
    cursor.position.store(end, Ordering::Relaxed);
    elapsed
}

fn mixed(c: &mut Criterion) {
    let rt = support::runtime();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
    let base = upstream.base();
    let url = upstream.user_url();
    let resolver = support::resolver(&base);
    let naive = support::naive_client();
    let cursor = Arc::new(Cursor {
        stream: stream(),
        tokens: (0..TOKENS).map(|i| token('z', i)).collect(),
        position: AtomicU64::new(0),
        next_new: AtomicU64::new(0),
    });
    rt.block_on(async {
        for t in &cursor.tokens {
            resolver
                .resolve(&base, t)
                .await
                .expect("the warm-up resolves");
        }
    });

    let mut group = c.benchmark_group("mixed");
    group.throughput(Throughput::Elements(BATCH));
    group.sample_size(10);
    for tasks in [1usize, 8, 64] {
        group.bench_with_input(BenchmarkId::new("resolve", tasks), &tasks, |b, &tasks| {
            b.iter_custom(|iters| {
                rt.block_on(run(&cursor, tasks, iters, |cursor, end| {
                    let (resolver, base) = (resolver.clone(), base.clone());
                    async move {
                        while let Some(t) = cursor.next(end) {
                            resolver.resolve(&base, &t).await.expect("a resolution");
                        }
                    }
                }))
            })
        });
        group.bench_with_input(
            BenchmarkId::new("naive_no_cache", tasks),
            &tasks,
            |b, &tasks| {
                b.iter_custom(|iters| {
                    rt.block_on(run(&cursor, tasks, iters, |cursor, end| {
                        let (naive, url) = (naive.clone(), url.clone());
                        async move {
                            while let Some(t) = cursor.next(end) {
                                support::naive_resolve(&naive, &url, &t)
                                    .await
                                    .expect("a user");
                            }
                        }
                    }))
                })
            },
        );
    }
    group.finish();
    let stats = resolver.stats();
    eprintln!(
        "mixed: resolver hits {} misses {} coalesced {}; upstream calls {} (resolver and naive)",
        stats.hits,
        stats.misses,
        stats.coalesced,
        upstream.calls()
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = mixed
}
criterion_main!(benches);
