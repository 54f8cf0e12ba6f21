//! The shared Redis tier's place between a local hit and an API call, in one criterion group:
//! `local_hit` (the token is in this node's cache), `redis_hit` (this node caches nothing, so
//! every resolution is a Redis GET+PTTL answered by a real `redis-server` on loopback),
//! `redis_hit_tls` (the same over `rediss://`, certificate from a CA made at run time),
//! `redis_hit_cluster` (the same on a three-master Redis Cluster) and `api_call` (no cache at
//! all: every resolution is a POST to a loopback upstream).
//!
//! Needs `redis-server` (and `redis-cli` for the cluster) on the PATH; without them the group,
//! or the cluster row, is skipped with a note.

use token_resolver_support::bench as support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use token_resolver::RedisTier;
use token_resolver::Resolver;

use support::{runtime, token, Upstream, UpstreamConfig};

const SECRET: &str = "bench-secret-of-32-bytes-length!";

fn tiers(c: &mut Criterion) {
    let Some(redis) = token_resolver_support::redis::RedisServer::start() else {
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
    let tls =
        token_resolver_support::redis::RedisTls::start(&[]).expect("redis-server is installed");
    let tls_tier = || {
        RedisTier::new(tls.url(""), SECRET)
            .root_certificate(&tls.ca_pem)
            .op_timeout(Duration::from_millis(200))
    };
    let tls_writer = builder().shared_cache(tls_tier()).build().unwrap();
    let via_tls = builder()
        .max_cache_entries(0)
        .shared_cache(tls_tier())
        .build()
        .unwrap();
    let cluster = token_resolver_support::redis::RedisCluster::start(0);
    let cluster_nodes = |cluster: &token_resolver_support::redis::RedisCluster| {
        let tier =
            RedisTier::cluster(cluster.urls(), SECRET).op_timeout(Duration::from_millis(200));
        (
            builder().shared_cache(tier.clone()).build().unwrap(),
            builder()
                .max_cache_entries(0)
                .shared_cache(tier)
                .build()
                .unwrap(),
        )
    };
    let (cluster_writer, via_cluster) = match cluster.as_ref().map(cluster_nodes) {
        Some((writer, via)) => (Some(writer), Some(via)),
        None => (None, None),
    };

    let t = token('r', 1);
    rt.block_on(async {
        local.resolve(&base, &t).await.unwrap();
        writer.resolve(&base, &t).await.unwrap();
        while redis.key_count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        via_redis.resolve(&base, &t).await.unwrap();
        tls_writer.resolve(&base, &t).await.unwrap();
        while tls.server.key_count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        via_tls.resolve(&base, &t).await.unwrap();
        if let (Some(cluster), Some(writer), Some(via)) = (&cluster, &cluster_writer, &via_cluster)
        {
            writer.resolve(&base, &t).await.unwrap();
            while cluster.key_count() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            via.resolve(&base, &t).await.unwrap();
        }
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
    group.bench_function("redis_hit_tls", |b| {
        b.to_async(&rt)
            .iter(|| async { via_tls.resolve(&base, &t).await.unwrap() })
    });
    if let Some(via_cluster) = &via_cluster {
        group.bench_function("redis_hit_cluster", |b| {
            b.to_async(&rt)
                .iter(|| async { via_cluster.resolve(&base, &t).await.unwrap() })
        });
    }
    assert_eq!(
        upstream.calls(),
        calls_before,
        "every redis_hit was answered by Redis"
    );
    for via in [Some(&via_redis), Some(&via_tls), via_cluster.as_ref()]
        .into_iter()
        .flatten()
    {
        let stats = via.stats();
        assert_eq!(
            (stats.upstream_calls, stats.hits, stats.shared_errors),
            (0, 0, 0),
            "no API call, no local hit, no Redis error"
        );
        assert!(stats.shared_hits > 100, "{stats:?}");
    }
    group.bench_function("api_call", |b| {
        b.to_async(&rt)
            .iter(|| async { no_cache.resolve(&base, &t).await.unwrap() })
    });
    group.finish();
}

criterion_group!(benches, tiers);
criterion_main!(benches);
