//! What a node may promise about a revocation, with real processes on loopback: node B reaches
//! Redis through a relay the test controls, which goes half-open and refuses new connections
//! (a frozen link) while A's link stays healthy.
//!
//! - `POST /admin/revoke` answers 200 only once the revocation is in the shared tier; on a
//!   frozen link, 503 with `Retry-After` within its bound, and the revocation still reaches the
//!   other nodes from B's outbox when the link heals.
//! - While B cannot hear revocations, its cache admits nobody: a cached user is verified by the
//!   API again.
//! - A revocation carries the time it was made: one that arrives late spares the sessions
//!   resolved well after it, on every node.
//! - A revocation for an authUrl the server does not serve says so.

use token_resolver_support as support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use support::redis::RedisServer;
use support::{eventually, in_the_first_room, resolver_for, respond, user_answer, Relay, Scripted};
use token_resolver::{ErrorCode, RedisTier};
use token_resolver_game_server::{
    AdminConfig, AdminSecret, GameServerConfig, RunningAdmin, RunningGameServer,
};
use token_resolver_player::{GameClient, GameClientError};

const ADMIN_SECRET: &str = "integrator-and-game-servers-32b!";
const REDIS_SECRET: &str = "a-redis-secret-of-32-bytes-long!";

/// What the test's API says of Alice's token.
const VALID: u8 = 0;
const BANNED: u8 = 1;

/// An API that answers `alice` as user 1 (while `alice` says so; 401 once she is banned) and
/// `bob` as user 2, and counts its calls.
async fn api(alice: Arc<AtomicU8>) -> Scripted {
    Scripted::start(move |_, seen| {
        let alice = alice.clone();
        async move {
            match (seen.header("authorization"), alice.load(Ordering::SeqCst)) {
                (Some("Bearer bob"), _) => user_answer(2, "Bob"),
                (Some("Bearer alice"), VALID) => user_answer(1, "Alice"),
                _ => respond(401, &[], b""),
            }
        }
    })
    .await
}

/// How long a node's Redis operation may take when its link is direct: its first one makes the
/// connection, which a loaded machine must not turn into an outage (a healthy node's revoke
/// would then answer 503, not 200).
const DIRECT: Duration = Duration::from_secs(2);

/// How long a node's Redis operation may take behind a relay the test freezes: short, so that
/// the frozen link shows quickly.
const BEHIND_A_RELAY: Duration = Duration::from_millis(200);

/// A node on `api`, reaching Redis at `redis` (directly, or through a relay) with operations
/// bounded by `op_timeout`, with its admin listener.
async fn node(api: &str, redis: &str, op_timeout: Duration) -> (RunningGameServer, RunningAdmin) {
    let tier = RedisTier::new(redis, REDIS_SECRET).op_timeout(op_timeout);
    let resolver = resolver_for(api)
        .shared_cache(tier)
        .retries(0)
        .build()
        .unwrap();
    let config = GameServerConfig {
        rooms: vec![support::room("lobby", None)],
        ..GameServerConfig::default()
    };
    let game = support::game_server_with(resolver, config).await;
    let admin = game
        .spawn_admin(
            "127.0.0.1:0".parse().unwrap(),
            AdminConfig {
                revoke_secret: Some(AdminSecret::new(ADMIN_SECRET).unwrap()),
                ..AdminConfig::default()
            },
        )
        .await
        .unwrap();
    eventually("the node reads the revocation stream", || {
        game.resolver().shared_cache_subscribed()
    })
    .await;
    (game, admin)
}

/// `POST /admin/revoke` with `body`: the status, the `Retry-After` header and the JSON answer.
async fn revoke(admin: SocketAddr, body: Value) -> (u16, Option<String>, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{admin}/admin/revoke"))
        .bearer_auth(ADMIN_SECRET)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after =
        (response.headers().get("retry-after")).map(|v| v.to_str().unwrap().to_owned());
    (
        status,
        retry_after,
        response.json().await.unwrap_or(Value::Null),
    )
}

/// Whether `player` reads `revoked` within `within`.
async fn revoked_within(player: &mut GameClient, within: Duration) -> bool {
    matches!(
        tokio::time::timeout(within, player.next_push()).await,
        Ok(Err(GameClientError::Revoked(_)))
    )
}

/// Now, in unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_link_is_frozen_answers_503_at_once_and_delivers_the_revocation_when_it_heals()
{
    // Pins down the acknowledgement of POST /admin/revoke: B's link to Redis is frozen, so B
    // cannot tell the other nodes; it answers 503 with Retry-After within its bound (not 200),
    // after closing its own session; A's session stays open meanwhile. When the link heals, B's
    // outbox delivers the ban and A closes its session too. A healthy node answers 200.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let relay = Relay::start(redis.addr()).await;
    let api = api(Arc::default()).await;
    let (a, admin_a) = node(&api.url(), &redis.url(), DIRECT).await;
    let (b, admin_b) = node(
        &api.url(),
        &format!("redis://{}", relay.addr()),
        BEHIND_A_RELAY,
    )
    .await;
    let mut alice_on_a = in_the_first_room(&a, "alice").await;
    let mut alice_on_b = in_the_first_room(&b, "alice").await;
    let mut bob_on_a = in_the_first_room(&a, "bob").await;

    relay.refuse(true);
    relay.silence_open_connections();
    let asked = Instant::now();
    let (status, retry_after, answer) = revoke(admin_b.local_addr(), json!({"user_id": 1})).await;
    let took = asked.elapsed();
    assert_eq!(status, 503, "{answer}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(answer["error"], "revocation_pending");
    assert_eq!(answer["pending"], true);
    assert_eq!(answer["sessions_closed"], 1, "{answer}");
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    assert!(revoked_within(&mut alice_on_b, Duration::from_secs(2)).await);
    assert!(
        !revoked_within(&mut alice_on_a, Duration::from_millis(500)).await,
        "A cannot know yet"
    );

    relay.refuse(false);
    let healed = Instant::now();
    assert!(
        revoked_within(&mut alice_on_a, Duration::from_secs(15)).await,
        "B's outbox delivered the ban when its link healed"
    );
    eprintln!(
        "the ban reached A {:?} after B's link healed",
        healed.elapsed()
    );

    let (status, _, answer) = revoke(admin_a.local_addr(), json!({"user_id": 2})).await;
    assert_eq!((status, answer), (200, json!({"sessions_closed": 1})));
    assert!(revoked_within(&mut bob_on_a, Duration::from_secs(2)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_hear_revocations_admits_no_cached_user_and_asks_the_api() {
    // Pins down distrust while the revocation channel is lost: Alice is cached on B; B's link
    // freezes; within 5 s B knows it is lost, and from then on a resolve of Alice's token goes
    // to the API (which now says she is banned) instead of admitting her from the cache, and
    // so does every resolve of Bob's. Once the link heals and B has read the stream, its cache
    // answers again.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let relay = Relay::start(redis.addr()).await;
    let alice = Arc::new(AtomicU8::new(VALID));
    let api = api(alice.clone()).await;
    let (b, _admin_b) = node(
        &api.url(),
        &format!("redis://{}", relay.addr()),
        BEHIND_A_RELAY,
    )
    .await;
    let resolver = b.resolver().clone();
    resolver.resolve(&api.url(), "alice").await.unwrap();
    resolver.resolve(&api.url(), "bob").await.unwrap();
    let calls = api.requests();
    resolver.resolve(&api.url(), "alice").await.unwrap();
    assert_eq!(
        api.requests(),
        calls,
        "a cache hit while B hears everything"
    );

    relay.refuse(true);
    relay.silence_open_connections();
    let frozen = Instant::now();
    eventually("B notices its link is lost", || {
        !resolver.shared_cache_subscribed()
    })
    .await;
    assert!(
        frozen.elapsed() <= Duration::from_secs(5),
        "noticed after {:?}",
        frozen.elapsed()
    );
    alice.store(BANNED, Ordering::SeqCst);
    let refused = resolver.resolve(&api.url(), "alice").await.unwrap_err();
    assert_eq!(refused.code(), ErrorCode::TokenRejected);
    assert_eq!(api.requests(), calls + 1, "verified by the API");
    let calls = api.requests();
    for _ in 0..3 {
        assert_eq!(resolver.resolve(&api.url(), "bob").await.unwrap().id, 2);
    }
    assert_eq!(
        api.requests(),
        calls + 3,
        "each resolve verified, none from the cache"
    );

    relay.refuse(false);
    eventually("B reads the stream again", || {
        resolver.shared_cache_subscribed()
    })
    .await;
    resolver.resolve(&api.url(), "bob").await.unwrap();
    let calls = api.requests();
    resolver.resolve(&api.url(), "bob").await.unwrap();
    assert_eq!(api.requests(), calls, "the cache answers again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_that_arrives_late_spares_sessions_resolved_long_after_it_was_made() {
    // Pins down the time a revocation carries: a ban made an hour ago and delivered only now
    // (the integrator's notifier kept retrying) closes no session resolved since, on the node
    // it reaches nor, through the stream, on the other; the same ban made now closes both.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = api(Arc::default()).await;
    let (a, admin_a) = node(&api.url(), &redis.url(), DIRECT).await;
    let (b, _admin_b) = node(&api.url(), &redis.url(), DIRECT).await;
    let mut alice_on_a = in_the_first_room(&a, "alice").await;
    let mut alice_on_b = in_the_first_room(&b, "alice").await;

    let an_hour_ago = now_ms() - 3_600_000;
    let (status, _, answer) = revoke(
        admin_a.local_addr(),
        json!({"user_id": 1, "at": an_hour_ago}),
    )
    .await;
    assert_eq!((status, answer), (200, json!({"sessions_closed": 0})));
    assert!(!revoked_within(&mut alice_on_a, Duration::from_millis(300)).await);
    assert!(
        !revoked_within(&mut alice_on_b, Duration::from_secs(2)).await,
        "B heard the ban with its time, and spared a session resolved since"
    );

    let (status, _, answer) =
        revoke(admin_a.local_addr(), json!({"user_id": 1, "at": now_ms()})).await;
    assert_eq!((status, answer), (200, json!({"sessions_closed": 1})));
    assert!(revoked_within(&mut alice_on_a, Duration::from_secs(2)).await);
    assert!(revoked_within(&mut alice_on_b, Duration::from_secs(5)).await);

    for at in [json!(-1), json!("now"), json!(1.5)] {
        let (status, _, answer) =
            revoke(admin_a.local_addr(), json!({"user_id": 1, "at": at})).await;
        assert_eq!(status, 400, "{at}");
        assert!(answer["message"].as_str().unwrap().starts_with("at:"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_for_an_auth_url_the_server_does_not_serve_says_so() {
    // Pins down the answer to a revocation sent to the wrong server: 422 auth_url_not_served
    // (the integrator's notifier gives it up and logs it), not `sessions_closed: 0`, which
    // would read as "done".
    let api = api(Arc::default()).await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    let game = support::game_server(resolver, vec![support::room("lobby", None)]).await;
    let admin = game
        .spawn_admin(
            "127.0.0.1:0".parse().unwrap(),
            AdminConfig {
                revoke_secret: Some(AdminSecret::new(ADMIN_SECRET).unwrap()),
                ..AdminConfig::default()
            },
        )
        .await
        .unwrap();
    for body in [
        json!({"user_id": 1, "auth_url": "https://elsewhere.example"}),
        json!({"access_token": "alice", "auth_url": "http://127.0.0.1:9/other"}),
    ] {
        let (status, _, answer) = revoke(admin.local_addr(), body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"], "auth_url_not_served", "{body}");
    }
    let (status, _, answer) = revoke(
        admin.local_addr(),
        json!({"user_id": 1, "auth_url": api.url()}),
    )
    .await;
    assert_eq!((status, answer), (200, json!({"sessions_closed": 0})));
}
