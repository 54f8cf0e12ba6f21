//! The hit path: `resolve` of a cached token against a bare moka `get` of the same key type.
//! (The full suite of issue 4 builds on this file.)

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use token_resolver::reference_api::{ApiConfig, ReferenceApi};
use token_resolver::Resolver;

fn hit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (resolver, base, token, _api) = rt.block_on(async {
        let api = ReferenceApi::new(ApiConfig::default())
            .unwrap()
            .spawn(([127, 0, 0, 1], 0).into())
            .await
            .unwrap();
        let base = api.base_url();
        let mut client = token_resolver::client::IntegratorClient::new(&base);
        client.login_password("alice", "wonderland").await.unwrap();
        let token = client
            .fetch_access_token()
            .await
            .unwrap()
            .secret()
            .to_owned();
        let resolver = Resolver::builder().default_auth_url(&base).build().unwrap();
        resolver.resolve(&base, &token).await.unwrap();
        (resolver, base, token, api)
    });

    let mut group = c.benchmark_group("hit");
    group.bench_function("resolve", |b| {
        b.to_async(&rt)
            .iter(|| async { resolver.resolve(&base, &token).await.unwrap() })
    });
    let moka: moka::sync::Cache<(Arc<str>, Box<str>), Arc<u64>> = moka::sync::Cache::new(1000);
    let key: (Arc<str>, Box<str>) = (Arc::from(base.as_str()), token.clone().into_boxed_str());
    moka.insert(key.clone(), Arc::new(1));
    group.bench_function("moka_get", |b| b.iter(|| moka.get(&key).unwrap()));
    group.finish();
}

criterion_group!(benches, hit);
criterion_main!(benches);
