//! The shared Redis tier against someone who can write to Redis but has not the tier's secret,
//! and against a Redis that loses writes or whose clock differs from a node's: real
//! `redis-server` processes on loopback, two or three resolvers in one process as game-server
//! nodes, and the writer a raw Redis connection.
#![cfg(feature = "redis")]

use token_resolver_support as support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::{eventually, login_and_take_token, reference_api, resolver_for, Scripted};
use token_resolver::{
    telemetry, Delivery, RedisTier, Resolver, Revocation, RevocationFeed, Revoke,
};
use token_resolver_support::redis::RedisServer;

const SECRET: &str = "test-secret-of-32-bytes-length!!";
const STREAM: &str = "token-resolver:revocations";

fn tier(redis: &RedisServer) -> RedisTier {
    RedisTier::new(redis.url(), SECRET).op_timeout(Duration::from_secs(2))
}

fn node(api_url: &str, redis: &RedisServer) -> Resolver {
    resolver_for(api_url)
        .shared_cache(tier(redis))
        .build()
        .unwrap()
}

/// The recording metrics recorder, installed once for this test binary, and what each counter
/// (name, `what` label) has counted so far: reading the recorder resets it, and the tests run
/// side by side.
fn forged(what: &str) -> u64 {
    static RECORDER: OnceLock<metrics_util::debugging::Snapshotter> = OnceLock::new();
    static TOTALS: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);
    let snapshotter = RECORDER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    });
    let mut totals = TOTALS.lock().unwrap();
    let totals = totals.get_or_insert_with(HashMap::new);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() != telemetry::SHARED_FORGED_TOTAL {
            continue;
        }
        let Some(label) = key.labels().find(|l| l.key() == "what") else {
            continue;
        };
        if let metrics_util::debugging::DebugValue::Counter(n) = value {
            *totals.entry(label.value().to_owned()).or_default() += n;
        }
    }
    totals.get(what).copied().unwrap_or(0)
}

/// Every token entry in Redis, its key and value, as a writer would copy them.
fn entries(redis: &RedisServer) -> Vec<(String, String)> {
    redis
        .dump()
        .into_iter()
        .filter(|(key, _)| String::from_utf8_lossy(key).contains(":tok:"))
        .map(|(key, values)| {
            (
                String::from_utf8(key).unwrap(),
                String::from_utf8(values[0].clone()).unwrap(),
            )
        })
        .collect()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Whether `revocations` holds a `Recheck` now.
fn told_recheck(revocations: &mut RevocationFeed<Revocation>) -> bool {
    std::iter::from_fn(|| revocations.try_recv()).any(|r| r == Revocation::Recheck)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_written_back_after_a_ban_admits_nobody_on_any_node() {
    // Would have caught: a copy of Carol's sealed answer, written back after her ban (with no
    // expiry, and with an hour's), serving her again on nodes that read it.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "carol", "carolina").await;
    let (a, b) = (node(&base, &redis), node(&base, &redis));
    a.resolve(&base, &token).await.unwrap();
    eventually("A's answer reaches Redis", || redis.entry_count() > 0).await;
    let copied = entries(&redis);
    assert_eq!(copied.len(), 1);

    b.resolve(&base, &token).await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    a.invalidate_user(&base, 3);
    eventually("the ban reaches B", || b.stats().entries == 0).await;
    eventually("the ban empties Redis", || redis.entry_count() == 0).await;

    let replays_before = forged("replayed_value");
    for expiry in [&[][..], &["EX", "3600"][..]] {
        for (key, value) in &copied {
            let mut set = vec!["SET", key.as_str(), value.as_str()];
            set.extend_from_slice(expiry);
            redis.command(&set).unwrap();
        }
        // A node that heard the ban, and one that started after it.
        for reader in [&b, &node(&base, &redis)] {
            let (calls, hits) = (api.api().user_requests(), reader.stats().shared_hits);
            // A ban this node hears while it resolves may answer first: that admits nobody.
            let resolved = reader.resolve(&base, &token).await;
            assert_eq!(
                reader.stats().shared_hits,
                hits,
                "the value written back ({expiry:?}) was not taken"
            );
            match resolved {
                Ok(_) => assert!(api.api().user_requests() > calls, "the API was asked"),
                Err(e) => assert!(e.was_revoked(), "{e}"),
            }
            a.invalidate_user(&base, 3);
            eventually("the reader forgets Carol again", || {
                reader.stats().entries == 0
            })
            .await;
        }
    }
    assert!(
        forged("replayed_value") > replays_before,
        "the replay is counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_written_back_after_its_sealed_expiry_admits_nobody() {
    // Would have caught: a value whose freshness has passed, copied and written back with a
    // fresh Redis TTL, serving its answer again: the expiry sealed in it wins over Redis's.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(9, "p") }).await;
    let short = |redis: &RedisServer| {
        resolver_for(&api.url())
            .cache_ttl(Duration::from_millis(400))
            .shared_cache(tier(redis))
            .build()
            .unwrap()
    };
    let a = short(&redis);
    a.resolve(&api.url(), "t").await.unwrap();
    eventually("A's answer reaches Redis", || redis.entry_count() > 0).await;
    let copied = entries(&redis);
    // Redis drops the entry at its TTL, set when it was written from what was left of its
    // freshness: no earlier than the expiry sealed in it, which has passed once it is gone.
    eventually("Redis drops A's entry at its TTL", || {
        redis.entry_count() == 0
    })
    .await;
    for (key, value) in &copied {
        redis.command(&["SET", key, value, "EX", "3600"]).unwrap();
    }
    let b = short(&redis);
    let calls = api.requests();
    b.resolve(&api.url(), "t").await.unwrap();
    assert_eq!(b.stats().shared_hits, 0, "the copy was not taken");
    assert!(api.requests() > calls, "B asked the API");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_revocations_on_the_stream_are_dropped_and_counted() {
    // Would have caught: anyone who can XADD kicking every player (`all`) or one (`user`):
    // messages without the tier's MAC, or with a wrong one, drop nothing and tell nothing.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "carol", "carolina").await;
    let (a, b) = (node(&base, &redis), node(&base, &redis));
    b.resolve(&base, &token).await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    let mut told = b.revocations();
    let forged_before = forged("message");

    let at = unix_ms().to_string();
    let all = format!(r#"{{"node":"0000000000000001","at":{at},"op":"all","generation":0}}"#);
    let user = format!(
        r#"{{"node":"0000000000000001","at":{at},"op":"user","endpoint":"{base}","user_id":3}}"#
    );
    redis.command(&["XADD", STREAM, "*", "m", &all]).unwrap();
    let wrong = "ab".repeat(32);
    redis
        .command(&["XADD", STREAM, "*", "m", &user, "s", &wrong])
        .unwrap();
    redis
        .command(&["XADD", STREAM, "*", "m", &all, "s", "not hex"])
        .unwrap();
    eventually("the forgeries are counted", || {
        forged("message") >= forged_before + 3
    })
    .await;
    // A real revocation told after them reaches B: B has read past the forgeries.
    a.invalidate(&base, "another-token");
    let real = tokio::time::timeout(Duration::from_secs(10), told.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(real, Revocation::Token { .. }),
        "the first revocation B tells is the real one: {real:?}"
    );
    assert_eq!(b.stats().entries, 1, "B kept Carol");
    let calls = api.api().user_requests();
    b.resolve(&base, &token).await.unwrap();
    assert_eq!(
        api.api().user_requests(),
        calls,
        "B answered from its cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_is_ahead_still_hears_a_revocation_made_right_after_it_subscribed() {
    // Would have caught: a node 10 s ahead of Redis starting to read the stream 5 s in
    // Redis's future, and so skipping every revocation of its first 5 s.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(4, "p") }).await;
    let a = node(&api.url(), &redis);
    let ahead = resolver_for(&api.url())
        .shared_cache(tier(&redis).node_clock_offset_ms(10_000))
        .build()
        .unwrap();
    ahead.resolve(&api.url(), "t").await.unwrap();
    eventually("the node ahead listens", || ahead.shared_cache_subscribed()).await;
    assert_eq!(ahead.stats().entries, 1);
    a.invalidate(&api.url(), "t");
    eventually("the node ahead evicts the token", || {
        ahead.stats().entries == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocations_still_travel_when_redis_clock_is_minutes_off_the_nodes() {
    // Would have caught: every revocation dropped as a replay because its time (the nodes'
    // clocks) and its entry's id (Redis's clock) are further apart than the replay window.
    // Both nodes 3 minutes ahead stand for a Redis 3 minutes behind.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(6, "p") }).await;
    let skewed = || {
        resolver_for(&api.url())
            .shared_cache(tier(&redis).node_clock_offset_ms(180_000))
            .build()
            .unwrap()
    };
    let (a, b) = (skewed(), skewed());
    b.resolve(&api.url(), "t").await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    let replays = forged("replayed_message");
    a.invalidate(&api.url(), "t");
    eventually("B evicts the token", || b.stats().entries == 0).await;
    assert_eq!(forged("replayed_message"), replays);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_lost_entries_while_a_node_reads_makes_it_resync() {
    // Would have caught: a stream that is not the continuation of what a node read (entries
    // lost to a failover; here deleted by a raw client) being read on in silence, the lost
    // revocations never applied.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|n, _| async move { support::user_answer(n as i64, "p") }).await;
    let (a, b) = (node(&api.url(), &redis), node(&api.url(), &redis));
    b.resolve(&api.url(), "kept").await.unwrap();
    b.resolve(&api.url(), "first").await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    let mut told = b.revocations();
    a.invalidate(&api.url(), "first");
    eventually("B reads A's revocation", || b.stats().entries == 1).await;
    assert!(!told_recheck(&mut told));

    // What B read is gone, as after a failover to a replica that had not got it.
    redis.command(&["DEL", STREAM]).unwrap();
    a.invalidate(&api.url(), "unrelated");
    eventually("B empties its cache", || b.stats().entries == 0).await;
    assert!(told_recheck(&mut told), "B told its sessions to re-check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_that_goes_back_in_redis_is_not_adopted_and_is_raised_again() {
    // Would have caught: an `invalidate_all` lost to a failover (the generation's INCR gone)
    // bringing back, on every node that reads the generation again, the answers it revoked.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(5, "p") }).await;
    let (a, b) = (node(&api.url(), &redis), node(&api.url(), &redis));
    a.resolve(&api.url(), "t").await.unwrap();
    eventually("A's answer reaches Redis", || redis.entry_count() > 0).await;
    b.resolve(&api.url(), "other").await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    a.invalidate_all();
    eventually("B hears it", || b.stats().entries == 0).await;
    let generation = || {
        redis
            .dump()
            .into_iter()
            .find(|(key, _)| key == b"token-resolver:gen")
            .and_then(|(_, values)| String::from_utf8(values[0].clone()).ok())
            .and_then(|text| text.parse::<u64>().ok())
    };
    assert_eq!(generation(), Some(1));
    let (mut told_a, mut told_b) = (a.revocations(), b.revocations());

    redis.command(&["SET", "token-resolver:gen", "0"]).unwrap();
    eventually("a node raises the generation again", || {
        generation() == Some(1)
    })
    .await;
    // The node whose reader saw the lowered generation re-syncs and raises it; the other may
    // read it raised already, and then has nothing to re-sync for.
    support::eventually_async("a node re-syncs", || {
        std::future::ready(told_recheck(&mut told_a) | told_recheck(&mut told_b))
    })
    .await;
    // A node that reads the generation now reads it raised: the old generation's answer,
    // still in Redis, is not served.
    let c = node(&api.url(), &redis);
    let calls = api.requests();
    c.resolve(&api.url(), "t").await.unwrap();
    assert_eq!(
        c.stats().shared_hits,
        0,
        "the answer of the old generation is not served"
    );
    assert!(api.requests() > calls, "the API was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authentic_revocation_told_again_is_applied_once() {
    // Would have caught: a copy of a real ban, added again to the stream by someone, kicking
    // the user again (or a retry whose first try got through telling it twice).
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "carol", "carolina").await;
    let (a, b) = (node(&base, &redis), node(&base, &redis));
    b.resolve(&base, &token).await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    a.invalidate_user(&base, 3);
    eventually("the ban reaches B", || b.stats().entries == 0).await;

    // The ban's entry as the stream holds it: its message and its MAC.
    let (_, fields) = redis
        .dump()
        .into_iter()
        .find(|(key, _)| key == STREAM.as_bytes())
        .unwrap();
    let fields: Vec<String> = fields
        .into_iter()
        .map(|f| String::from_utf8(f).unwrap())
        .collect();
    let at = fields
        .chunks(2)
        .position(|pair| pair[0] == "m" && pair[1].contains(r#""op":"user""#))
        .unwrap();
    let (message, mac) = (&fields[2 * at + 1], &fields[2 * at + 3]);
    assert_eq!(fields[2 * at + 2], "s");

    // Carol comes back (unbanned), and a copy of the ban is told again.
    b.resolve(&base, &token).await.unwrap();
    assert_eq!(b.stats().entries, 1);
    let mut told = b.revocations();
    redis
        .command(&["XADD", STREAM, "*", "m", message, "s", mac])
        .unwrap();
    a.invalidate(&base, "another-token");
    let first = tokio::time::timeout(Duration::from_secs(10), told.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, Revocation::Token { .. }),
        "the copy was not applied: {first:?}"
    );
    assert_eq!(b.stats().entries, 1, "B kept Carol");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_all_steps_past_the_generation_its_node_knows_even_when_redis_lost_it() {
    // Would have caught: an `invalidate_all` after Redis lost earlier `INCR`s (a failover)
    // moving to a generation the nodes had already left, so that it revoked nothing there.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(8, "p") }).await;
    let a = node(&api.url(), &redis);
    let generation = || {
        redis
            .dump()
            .into_iter()
            .find(|(key, _)| key == b"token-resolver:gen")
            .and_then(|(_, values)| String::from_utf8(values[0].clone()).ok())
            .and_then(|text| text.parse::<u64>().ok())
    };
    // Each step acknowledged: A knows the generation it moved to.
    let step = || a.revoke(Revoke::All, SystemTime::now(), Duration::from_secs(10));
    assert_eq!(step().await.unwrap(), Delivery::Shared);
    assert_eq!(generation(), Some(1));
    assert_eq!(step().await.unwrap(), Delivery::Shared);
    assert_eq!(generation(), Some(2));
    redis.command(&["SET", "token-resolver:gen", "0"]).unwrap();
    assert_eq!(step().await.unwrap(), Delivery::Shared);
    assert_eq!(generation(), Some(3), "a step past what A knew");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_on_a_node_that_missed_a_new_generation_lands_at_the_current_one() {
    // Would have caught: a node that had not heard another node's `invalidate_all` (its
    // reader lost) tombstoning a ban at the generation it remembered, while the user's answer
    // written at the new generation kept admitting them on every node.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = Scripted::start(|_, _| async { support::user_answer(6, "p") }).await;
    let b = node(&api.url(), &redis);
    b.resolve(&api.url(), "other").await.unwrap();
    eventually("B's answer reaches Redis", || redis.entry_count() > 0).await;
    // Another node's `invalidate_all`, which B does not hear of.
    redis.command(&["SET", "token-resolver:gen", "7"]).unwrap();
    let c = node(&api.url(), &redis);
    c.resolve(&api.url(), "t").await.unwrap();
    eventually("C's answer reaches Redis at the new generation", || {
        entries(&redis).iter().any(|(key, _)| key.contains(":g7:"))
    })
    .await;

    let ban = Revoke::User {
        auth_url: api.url(),
        user_id: 6,
    };
    let delivered = b.revoke(ban, SystemTime::now(), Duration::from_secs(10));
    assert_eq!(delivered.await.unwrap(), Delivery::Shared);
    let d = node(&api.url(), &redis);
    let calls = api.requests();
    let resolved = d.resolve(&api.url(), "t").await;
    assert_eq!(
        d.stats().shared_hits,
        0,
        "the banned user's answer is not served"
    );
    match resolved {
        Ok(_) => assert!(api.requests() > calls, "the API was asked"),
        Err(e) => assert!(e.was_revoked(), "{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_pushed_far_ahead_on_the_stream_does_not_silence_later_revocations() {
    // Would have caught: a writer without the secret adding one entry with a far-future id,
    // so that every authentic revocation after it (whose id Redis then puts after that one)
    // was dropped as told long after it was made: bans silenced on every node.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "carol", "carolina").await;
    let (a, b) = (node(&base, &redis), node(&base, &redis));
    b.resolve(&base, &token).await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;
    let mut told = b.revocations();
    let forged_before = forged("message");
    redis
        .command(&["XADD", STREAM, "99999999999999-0", "m", "pushed ahead"])
        .unwrap();
    eventually("B reads the forgery", || forged("message") > forged_before).await;

    let ban = Revoke::User {
        auth_url: base.clone(),
        user_id: 3,
    };
    let delivered = a.revoke(ban, SystemTime::now(), Duration::from_secs(10));
    assert_eq!(delivered.await.unwrap(), Delivery::Shared);
    let heard = tokio::time::timeout(Duration::from_secs(10), told.recv())
        .await
        .expect("B tells the ban")
        .unwrap();
    assert!(
        matches!(heard, Revocation::User { .. }),
        "B applied the ban itself: {heard:?}"
    );
    assert_eq!(b.stats().entries, 0, "B dropped Carol");
}
