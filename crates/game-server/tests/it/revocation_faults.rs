//! Revocations across nodes on their worst day, with real processes on loopback: node B reaches
//! Redis through a relay the test controls, which goes half-open (its connections stop carrying
//! bytes, without a FIN or RST) or refuses connections (a partition), while node A revokes.

use token_resolver_support as support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use support::redis::RedisServer;
use support::{eventually, in_the_first_room, resolver_for, respond, user_answer, Relay, Scripted};
use token_resolver::{Delivery, RedisTier, Revoke};
use token_resolver_game_server::{GameServerConfig, RunningGameServer};
use token_resolver_player::GameClientError;

const REDIS_SECRET: &str = "a-redis-secret-of-32-bytes-long!";

/// What the test's API says of Alice's token.
const VALID: u8 = 0;
const DOWN: u8 = 1;
const REJECTED: u8 = 2;

/// An API that answers `alice` as user 1 (as `alice` says: valid, 503, or 401) and `bob` as
/// user 2.
async fn api(alice: Arc<AtomicU8>) -> Scripted {
    Scripted::start(move |_, seen| {
        let alice = alice.clone();
        async move {
            match (seen.header("authorization"), alice.load(Ordering::SeqCst)) {
                (Some("Bearer bob"), _) => user_answer(2, "Bob"),
                (Some("Bearer alice"), VALID) => user_answer(1, "Alice"),
                (Some("Bearer alice"), DOWN) => respond(503, &[], b""),
                _ => respond(401, &[], b""),
            }
        }
    })
    .await
}

/// A node on `api`, reaching Redis at `redis` (directly, or through a relay), keeping `stream`
/// revocations there for nodes that fall behind.
async fn node(api: &str, redis: &str, stream: u64) -> RunningGameServer {
    let tier = RedisTier::new(redis, REDIS_SECRET)
        .op_timeout(Duration::from_millis(200))
        .stream_len(stream);
    let resolver = resolver_for(api)
        .shared_cache(tier)
        .retries(0)
        .circuit_breaker(0, Duration::ZERO)
        .build()
        .unwrap();
    let config = GameServerConfig {
        rooms: vec![support::room("lobby", None)],
        recheck_rate: 50,
        ..GameServerConfig::default()
    };
    let game = support::game_server_with(resolver, config).await;
    eventually("the node reads the revocation stream", || {
        game.resolver().shared_cache_subscribed()
    })
    .await;
    game
}

/// The URL of `addr` as Redis.
fn redis_url(addr: std::net::SocketAddr) -> String {
    format!("redis://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_made_while_a_nodes_link_is_half_open_reaches_its_session_within_15_s() {
    // Pins down liveness of the revocation stream: B's connections to Redis go silent without
    // a FIN; B notices within seconds (and says so: not subscribed), reads the stream again on
    // a new connection, and applies the ban A made meanwhile to its live session.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let relay = Relay::start(redis.addr()).await;
    let api = api(Arc::default()).await;
    let a = node(&api.url(), &redis.url(), 1000).await;
    let b = node(&api.url(), &redis_url(relay.addr()), 1000).await;
    let mut alice = in_the_first_room(&b, "alice").await;

    relay.silence_open_connections();
    let banned = Instant::now();
    a.resolver().invalidate_user(&api.url(), 1);
    let pushed = tokio::time::timeout(Duration::from_secs(15), alice.next_push()).await;
    let took = banned.elapsed();
    assert!(
        matches!(pushed, Ok(Err(GameClientError::Revoked(_)))),
        "{pushed:?} after {took:?}"
    );
    eprintln!("half-open link: the ban reached B's session in {took:?}");
    assert!(took < Duration::from_secs(15));
    eventually("B reads the stream again", || {
        b.resolver().shared_cache_subscribed()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_past_what_the_stream_keeps_rechecks_and_never_takes_an_outage_for_valid() {
    // Pins down catching up when it cannot be exact: while B is partitioned from Redis, A bans
    // Alice, then makes enough other revocations that the stream no longer holds Alice's.
    // Back, B empties its cache and its sessions check their tokens again: the API is down
    // then, so Alice stays (an outage is not "valid", and not "revoked"); once the API answers,
    // with her ban, she is closed. Bob's session, still valid, stays.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let relay = Relay::start(redis.addr()).await;
    let alice_state = Arc::new(AtomicU8::new(VALID));
    let api = api(alice_state.clone()).await;
    let a = node(&api.url(), &redis.url(), 10).await;
    let b = node(&api.url(), &redis_url(relay.addr()), 10).await;
    let mut alice = in_the_first_room(&b, "alice").await;
    let mut bob = in_the_first_room(&b, "bob").await;

    relay.refuse(true);
    relay.silence_open_connections();
    eventually("B notices", || !b.resolver().shared_cache_subscribed()).await;
    alice_state.store(DOWN, Ordering::SeqCst);
    // Each ban is in Redis (its tombstone written, its message on the stream) before the next:
    // B must come back to a stream that has dropped Alice's ban, not to one that A is still
    // writing, where her ban would still be on its way and reach B through the stream.
    for user in std::iter::once(1).chain(100..400) {
        let ban = Revoke::User {
            auth_url: api.url(),
            user_id: user,
        };
        let delivered = a
            .resolver()
            .revoke(ban, SystemTime::now(), Duration::from_secs(5));
        assert_eq!(delivered.await.unwrap(), Delivery::Shared, "user {user}");
    }
    eventually("the stream forgot Alice's ban", || {
        redis.revocations_trimmed()
    })
    .await;

    // Counted before the heal: B's sessions may check their tokens as soon as it reads the
    // stream again, before this test sees that it does. Alice's token, as Bob's answer may
    // rightly come from the shared tier, which A's revocations left as it was.
    let asked_about_alice = || {
        (api.seen().iter())
            .filter(|seen| seen.header("authorization") == Some("Bearer alice"))
            .count()
    };
    let before = asked_about_alice();
    relay.refuse(false);
    eventually("B reads the stream again", || {
        b.resolver().shared_cache_subscribed()
    })
    .await;
    // Twice: her session re-checked, and tried again after the outage's answer rather than
    // taking it as valid.
    eventually(
        "Alice's session checks her token with the API, twice",
        || asked_about_alice() >= before + 2,
    )
    .await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), alice.next_push())
            .await
            .is_err(),
        "Alice stays while the API is down"
    );
    alice_state.store(REJECTED, Ordering::SeqCst);
    let pushed = tokio::time::timeout(Duration::from_secs(15), alice.next_push()).await;
    assert!(
        matches!(pushed, Ok(Err(GameClientError::Revoked(_)))),
        "{pushed:?}"
    );
    assert_eq!(bob.search_rooms().await.unwrap().len(), 1, "Bob stays");
}
