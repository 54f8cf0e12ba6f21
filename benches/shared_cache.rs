//! The shared Redis tier's place between a local hit and an API call, in one criterion group:
//! `local_hit` (the token is in this node's cache), `redis_hit` (this node caches nothing, so
//! every resolution is a Redis GET+PTTL answered by a real `redis-server` on loopback) and
//! `api_call` (no cache at all: every resolution is a POST to a loopback upstream).
//!
//! Needs `redis-server` on the PATH; without it the group is skipped with a note.

#[path = "../tests/support/redis_server.rs"]
mod redis_server;
mod support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use token_resolver::RedisTier;
use token_resolver::Resolver;

use support::{runtime, token, Upstream, UpstreamConfig};

const SECRET: &str = "bench-secret-of-32-bytes-length!";

fn tiers(c: &mut Criterion) {
    let Some(redis) = redis_server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
    let base = upstream.base();
    let tier = || RedisTier::new(redis.url(), SECRET).op_timeout(Duration::from_millis(200));
    let builder = || {
        Resolver::builder()
            .default_auth_url(&base)
            .cache_ttl(Duration::from_secs(3600))
    };

    let local = builder().build().unwrap();
    let writer = builder().shared_cache(tier()).build().unwrap();
    // A node that keeps nothing locally: each of its resolutions goes to Redis.
    let via_redis = builder()
        .max_cache_entries(0)
        .shared_cache(tier())
        .build()
        .unwrap();
    let no_cache = builder().max_cache_entries(0).build().unwrap();

    let t = token('r', 1);
    rt.block_on(async {
        local.resolve(&base, &t).await.unwrap();
        writer.resolve(&base, &t).await.unwrap();
        while redis.key_count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        via_redis.resolve(&base, &t).await.unwrap();
    });
    let calls_before = upstream.calls();

    let mut group = c.benchmark_group("tiers");
    group.bench_function("local_hit", |b| {
        b.to_async(&rt)
            .iter(|| async { local.resolve(&base, &t).await.unwrap() })
    });
    group.bench_function("redis_hit", |b| {
        b.to_async(&rt)
            .iter(|| async { via_redis.resolve(&base, &t).await.unwrap() })
    });
    assert_eq!(
        upstream.calls(),
        calls_before,
        "every redis_hit was answered by Redis"
    );
    let stats = via_redis.stats();
    assert_eq!(
        (stats.upstream_calls, stats.hits),
        (0, 0),
        "no API call, no local hit"
    );
    assert!(stats.shared_hits > 100, "{stats:?}");
    group.bench_function("api_call", |b| {
        b.to_async(&rt)
            .iter(|| async { no_cache.resolve(&base, &t).await.unwrap() })
    });
    group.finish();
}

criterion_group!(benches, tiers);
criterion_main!(benches);
