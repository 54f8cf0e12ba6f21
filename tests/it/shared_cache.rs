//! The shared Redis tier against a real `redis-server` on a free loopback port: two resolvers
//! in one process act as two game-server nodes, and API calls are counted at the API.
#![cfg(feature = "redis")]

use token_resolver_support as support;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use support::{eventually, login_and_take_token, reference_api, resolver_for, Scripted};
use token_resolver::RedisTier;
use token_resolver::{ErrorCode, Resolver};
use token_resolver_reference_api::RunningApi;
use token_resolver_support::redis::RedisServer;

const SECRET: &str = "test-secret-of-32-bytes-length!!";

fn node(api_url: &str, redis: &RedisServer) -> Resolver {
    resolver_for(api_url)
        .shared_cache(RedisTier::new(redis.url(), SECRET).op_timeout(Duration::from_millis(200)))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_resolves_from_redis_with_no_api_call() {
    // Pins down read-through: node B answers from what node A fetched, counted at the API.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let (a, b) = (node(&api.base_url(), &redis), node(&api.base_url(), &redis));

    assert_eq!(
        a.resolve(&api.base_url(), &token).await.unwrap().name,
        "Alice"
    );
    eventually("A's answer reaches Redis", || redis.entry_count() > 0).await;
    let user = b.resolve(&api.base_url(), &token).await.unwrap();
    assert_eq!((user.id, user.name.as_str()), (1, "Alice"));
    assert_eq!(api.api().user_requests(), 1, "node B made no API call");
    assert_eq!(b.stats().shared_hits, 1);
    b.resolve(&api.base_url(), &token).await.unwrap();
    assert_eq!(b.stats().hits, 1, "the Redis hit filled B's local cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejections_are_shared_too() {
    // Pins down negative answers (401) travelling through Redis.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let (a, b) = (node(&api.base_url(), &redis), node(&api.base_url(), &redis));
    assert_eq!(
        a.resolve(&api.base_url(), "revoked")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::TokenRejected
    );
    eventually("the rejection reaches Redis", || redis.entry_count() > 0).await;
    assert_eq!(
        b.resolve(&api.base_url(), "revoked")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::TokenRejected
    );
    assert_eq!(api.api().user_requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_nowhere_in_redis() {
    // Pins down key derivation: no token text in any key or value, keys under the prefix.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "bob", "builder").await;
    let a = node(&api.base_url(), &redis);
    a.resolve(&api.base_url(), &token).await.unwrap();
    a.resolve(&api.base_url(), "a-rejected-token-value")
        .await
        .unwrap_err();
    eventually("both answers reach Redis", || redis.entry_count() >= 2).await;

    let dump = redis.dump();
    let everything: Vec<u8> = dump
        .iter()
        .flat_map(|(k, vs)| {
            k.iter()
                .chain(vs.iter().flatten())
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    let text = String::from_utf8_lossy(&everything);
    assert!(!text.contains(&token), "the token is in Redis");
    assert!(!text.contains("a-rejected-token-value"));
    assert!(
        text.contains("\"name\":\"Bob\""),
        "the user's answer is there: {text}"
    );
    assert!(dump.iter().all(|(k, _)| k.starts_with(b"token-resolver:")));
}

/// Carol's token, resolved by node A (so that Redis holds it) and then by node B (from Redis),
/// with B listening to invalidations: the reference API, the token, A and B.
async fn carol_cached_on_two_nodes(
    redis: &RedisServer,
) -> (RunningApi, String, Resolver, Resolver) {
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "carol", "carolina").await;
    let (a, b) = (node(&api.base_url(), redis), node(&api.base_url(), redis));
    a.resolve(&api.base_url(), &token).await.unwrap();
    eventually("A's answer reaches Redis", || redis.entry_count() > 0).await;
    b.resolve(&api.base_url(), &token).await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    assert_eq!(b.stats().entries, 1);
    (api, token, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_on_one_node_reaches_the_other() {
    // Pins down cluster-wide invalidation: A's invalidate evicts B's local entry and Redis's.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (api, token, a, b) = carol_cached_on_two_nodes(&redis).await;

    a.invalidate(&api.base_url(), &token);
    eventually("B evicts the token", || b.stats().entries == 0).await;
    let calls = api.api().user_requests();
    b.resolve(&api.base_url(), &token).await.unwrap();
    assert_eq!(
        api.api().user_requests(),
        calls + 1,
        "B had to ask the API again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_from_a_thread_outside_the_runtime_still_reaches_the_other_node() {
    // Pins down invalidation from plain threads (an admin thread, a callback of another
    // library): with no tokio runtime of its own, it runs on the resolver's, and node B
    // still hears of it.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (api, _token, a, b) = carol_cached_on_two_nodes(&redis).await;

    let url = api.base_url();
    std::thread::spawn(move || a.invalidate_user(&url, 3))
        .join()
        .unwrap();
    eventually("B evicts Carol's token", || b.stats().entries == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_user_and_invalidate_all_reach_the_other_node() {
    // Pins down invalidate_user (through the Redis user index) and invalidate_all.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let base = api.base_url();
    let alice = login_and_take_token(&base, "alice", "wonderland").await;
    let bob = login_and_take_token(&base, "bob", "builder").await;
    let (a, b) = (node(&base, &redis), node(&base, &redis));
    for t in [&alice, &bob] {
        b.resolve(&base, t).await.unwrap();
    }
    eventually("B listens", || b.shared_cache_subscribed()).await;
    eventually("both answers reach Redis", || redis.entry_count() >= 2).await;

    a.invalidate_user(&base, 1);
    eventually("B evicts alice", || b.stats().entries == 1).await;
    let calls = api.api().user_requests();
    a.resolve(&base, &alice).await.unwrap();
    assert_eq!(
        api.api().user_requests(),
        calls + 1,
        "alice's answer left Redis too"
    );

    a.invalidate_all();
    eventually("B is empty", || b.stats().entries == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_costs_nothing_but_a_little_latency_and_recovers() {
    // Pins down "Redis is never a single point of failure": with Redis down every resolution
    // succeeds through the API, errors are counted, and sharing resumes once Redis is back.
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|n, _| async move { support::user_answer(n as i64, "p") }).await;
    let (a, b) = (node(&api.url(), &redis), node(&api.url(), &redis));
    redis.stop();

    let started = Instant::now();
    for i in 0..20 {
        a.resolve(&api.url(), &format!("down-{i}")).await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(a.stats().shared_errors > 0);

    redis.restart();
    // The tier rests a second after an error, then tries again by itself.
    let after = a_writes_to_redis_again(&redis, &a, &api.url()).await;
    let calls = api.requests();
    b.resolve(&api.url(), &after).await.unwrap();
    assert_eq!(api.requests(), calls, "B answered from Redis again");
}

/// Resolves new tokens on `a` until one's answer reaches Redis (after an error the tier rests,
/// then writes again by itself); that token.
async fn a_writes_to_redis_again(redis: &RedisServer, a: &Resolver, url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    for attempt in 0.. {
        assert!(
            Instant::now() < deadline,
            "A never wrote to Redis again: {:?}",
            a.stats()
        );
        let (token, entries) = (format!("after-{attempt}"), redis.entry_count());
        a.resolve(url, &token).await.unwrap();
        // The write runs in the background within the op timeout: half a second is enough for
        // it to land, unless the tier rested and skipped it.
        let landed = eventually("A's answer reaches Redis", || redis.entry_count() > entries);
        if tokio::time::timeout(Duration::from_millis(500), landed)
            .await
            .is_ok()
        {
            return token;
        }
    }
    unreachable!("the loop returns or fails")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_and_restarting_redis_mid_run_loses_no_resolution() {
    // Pins down that a Redis crash under load fails nothing.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|n, _| async move { support::user_answer(n as i64, "p") }).await;
    let resolver = node(&api.url(), &redis);
    let url = api.url();
    let (progress, stop) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let load = {
        let (resolver, progress, stop) = (resolver.clone(), progress.clone(), stop.clone());
        tokio::spawn(async move {
            let mut done = 0;
            for round in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                for i in 0..20 {
                    resolver
                        .resolve(&url, &format!("r{round}-t{i}"))
                        .await
                        .unwrap();
                    done += 1;
                    progress.store(done, Ordering::SeqCst);
                }
                // Paced, so that the load spans the restarts of the real redis-server, which
                // take real time, rather than filling the cache as fast as it can.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            done
        })
    };
    // Redis goes down twice in the middle of the load, with resolutions between and after.
    let mut redis = Some(redis);
    for when in ["before the first restart", "between the restarts"] {
        let at = progress.load(Ordering::SeqCst);
        eventually(&format!("the load goes on {when}"), || {
            progress.load(Ordering::SeqCst) >= at + 100
        })
        .await;
        let mut restarting = redis.take().unwrap();
        redis = Some(
            tokio::task::spawn_blocking(move || {
                restarting.restart();
                restarting
            })
            .await
            .unwrap(),
        );
    }
    let at = progress.load(Ordering::SeqCst);
    eventually("the load goes on after the restarts", || {
        progress.load(Ordering::SeqCst) >= at + 100
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    // Each resolution unwraps in the load task: one failure ends it, and its join fails here.
    let done = load.await.expect("a resolution failed across the restarts");
    assert!(done >= at + 100, "the load ran on after the restarts");
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_hole_redis_is_bounded_by_the_op_timeout() {
    // Pins down "slow Redis": a server that accepts and never answers costs at most the op
    // timeout, and the resolution succeeds through the API.
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", hole.local_addr().unwrap());
    let _keep = std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in hole.incoming().flatten() {
            held.push(conn);
        }
    });
    let api = Scripted::start(|_, _| async { support::user_answer(1, "p") }).await;
    let resolver = resolver_for(&api.url())
        .shared_cache(RedisTier::new(url, SECRET).op_timeout(Duration::from_millis(100)))
        .build()
        .unwrap();
    let started = Instant::now();
    assert_eq!(resolver.resolve(&api.url(), "t").await.unwrap().id, 1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(resolver.stats().shared_errors >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_redis_is_ignored_and_the_api_answers() {
    // Pins down "Redis answers garbage": a value this crate did not write is a miss, not a user.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(3, "real") }).await;
    let (a, b) = (node(&api.url(), &redis), node(&api.url(), &redis));
    a.resolve(&api.url(), "t").await.unwrap();
    eventually("A's answer reaches Redis", || redis.entry_count() > 0).await;
    redis.overwrite_entries(r#"u{"id":666,"name":"forged","id":1}"#);
    assert_eq!(b.resolve(&api.url(), "t").await.unwrap().name, "real");
    assert_eq!(api.requests(), 2);
    assert!(b.stats().shared_errors >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reads_the_stream_again_after_redis_restarts_and_keeps_what_it_knows() {
    // Pins down reconnection without a stampede: Redis restarts while nothing was revoked, so
    // node B keeps its cache (nothing was missed), reads the stream again, and a revocation made
    // afterwards reaches it.
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(4, "p") }).await;
    let (a, b) = (node(&api.url(), &redis), node(&api.url(), &redis));
    b.resolve(&api.url(), "t").await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    assert_eq!(b.stats().entries, 1);

    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .unwrap();
    eventually("B notices the restart", || !b.shared_cache_subscribed()).await;
    eventually("B listens again", || b.shared_cache_subscribed()).await;
    assert_eq!(
        b.stats().entries,
        1,
        "nothing was revoked meanwhile: B keeps it"
    );

    // A's tier may be resting after the restart: it writes to Redis again first.
    a_writes_to_redis_again(&redis, &a, &api.url()).await;
    a.invalidate(&api.url(), "t");
    eventually("B evicts the token", || b.stats().entries == 0).await;
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwts_expiry_survives_the_trip_through_redis_into_the_local_cache() {
    // Pins down read-through of a JWT: Redis keeps no expiry of the token's own, so node B
    // reads it from the token again, and keeps it in what it caches locally too (its later hits
    // and what it would serve stale must know when the token ends).
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(7, "Jay") }).await;
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let token = format!(
        "{}.{}.c2ln",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256"}"#),
        URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"7","exp":{exp}}}"#))
    );
    let (a, b) = (node(&api.url(), &redis), node(&api.url(), &redis));
    a.resolve(&api.url(), &token).await.unwrap();
    eventually("A's answer reaches Redis", || redis.entry_count() > 0).await;
    let from_redis = b.resolve_in_full(&api.url(), &token).await.unwrap();
    let from_local = b.resolve_in_full(&api.url(), &token).await.unwrap();
    assert_eq!((b.stats().shared_hits, b.stats().hits), (1, 1));
    assert_eq!(api.requests(), 1, "node B made no API call");
    let seconds = |user: &token_resolver::Resolution| user.expires_at().map(|e| e.unix_seconds());
    assert_eq!(seconds(&from_redis), Some(exp));
    assert_eq!(
        seconds(&from_local),
        Some(exp),
        "the local copy knows it too"
    );
}
