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
use token_resolver::{RedisTier, Resolver};
use token_resolver_support::redis::{RedisCluster, RedisServer, RedisTls};

use support::{runtime, token, Upstream, UpstreamConfig};

const SECRET: &str = "bench-secret-of-32-bytes-length!";

/// One form of the shared tier: a node that writes to it, a node that keeps nothing locally (so
/// each of its resolutions goes to Redis), and how many keys its servers hold (the closure owns
/// them: they stop when the form is dropped).
struct Form {
    name: &'static str,
    writer: Resolver,
    via: Resolver,
    keys: Box<dyn Fn() -> usize>,
}

/// A resolver for `base` caching for the whole run; `local: false` keeps nothing locally.
fn node(base: &str, tier: Option<RedisTier>, local: bool) -> Resolver {
    let mut builder = Resolver::builder()
        .default_auth_url(base)
        .cache_ttl(Duration::from_secs(3600));
    if !local {
        builder = builder.max_cache_entries(0);
    }
    if let Some(tier) = tier {
        builder = builder.shared_cache(tier);
    }
    builder.build().unwrap()
}

/// The forms this machine can run: one server always, TLS and Cluster when redis-server can.
fn forms(base: &str, redis: RedisServer) -> Vec<Form> {
    let op = Duration::from_millis(200);
    let plain = RedisTier::new(redis.url(), SECRET).op_timeout(op);
    let mut forms = vec![Form {
        name: "redis_hit",
        writer: node(base, Some(plain.clone()), true),
        via: node(base, Some(plain), false),
        keys: Box::new(move || redis.entry_count()),
    }];
    let tls = RedisTls::start(&[]).expect("redis-server is installed");
    let tls_tier = RedisTier::new(tls.url(""), SECRET)
        .root_certificate(&tls.ca_pem)
        .op_timeout(op);
    forms.push(Form {
        name: "redis_hit_tls",
        writer: node(base, Some(tls_tier.clone()), true),
        via: node(base, Some(tls_tier), false),
        keys: Box::new(move || tls.server.entry_count()),
    });
    if let Some(cluster) = RedisCluster::start(0) {
        let tier = RedisTier::cluster(cluster.urls(), SECRET).op_timeout(op);
        forms.push(Form {
            name: "redis_hit_cluster",
            writer: node(base, Some(tier.clone()), true),
            via: node(base, Some(tier), false),
            keys: Box::new(move || cluster.entry_count()),
        });
    }
    forms
}

fn tiers(c: &mut Criterion) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
    let base = upstream.base();
    let local = node(&base, None, true);
    let no_cache = node(&base, None, false);
    let forms = forms(&base, redis);
    let t = token('r', 1);
    rt.block_on(async {
        local.resolve(&base, &t).await.unwrap();
        for form in &forms {
            form.writer.resolve(&base, &t).await.unwrap();
            while (form.keys)() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            form.via.resolve(&base, &t).await.unwrap();
        }
    });
    let calls_before = upstream.calls();

    let mut group = c.benchmark_group("tiers");
    group.bench_function("local_hit", |b| {
        b.to_async(&rt)
            .iter(|| async { local.resolve(&base, &t).await.unwrap() })
    });
    for form in &forms {
        group.bench_function(form.name, |b| {
            b.to_async(&rt)
                .iter(|| async { form.via.resolve(&base, &t).await.unwrap() })
        });
    }
    assert_eq!(
        upstream.calls(),
        calls_before,
        "every redis_hit was answered by Redis"
    );
    for form in &forms {
        let stats = form.via.stats();
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
