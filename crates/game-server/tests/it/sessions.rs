//! Live sessions on real game servers on loopback: an expiring token renewed in place, a
//! refresh for another user, a grace that runs out, periodic revalidation, and revocation
//! through the admin listener, on the same node and across nodes sharing a real Redis.

use token_resolver_support as support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::response::Response;
use serde_json::{json, Value};
use support::{
    eventually, game_server_with, in_the_first_room, resolver_for, respond, room, Scripted, Seen,
};
use token_resolver::{RedisTier, Resolver, ResolverBuilder};
use token_resolver_game_server::{
    AdminConfig, AdminSecret, GameServerConfig, RunningAdmin, RunningGameServer,
};
use token_resolver_player::{GameClient, GameClientError, Player, Push};
use token_resolver_support::redis::RedisServer;

const SECRET: &str = "an-admin-secret-of-32-bytes-long";
const REDIS_SECRET: &str = "a-redis-secret-of-32-bytes-long!";

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An API that knows tokens by name: `short` is Alice's for one to two more seconds (`exp` is in
/// whole seconds: one second ahead could be a millisecond ahead), `long` Alice's for
/// an hour, `bob` Bob's with no expiry, `alice` Alice's with no expiry until `revoked` is set,
/// then rejected (401).
async fn api(revoked: Arc<AtomicBool>) -> Scripted {
    Scripted::start(move |_, seen: Seen| {
        let revoked = revoked.clone();
        async move { answer(&seen, revoked.load(Ordering::SeqCst)) }
    })
    .await
}

fn answer(seen: &Seen, revoked: bool) -> Response {
    let user = |id: i64, name: &str, exp: Option<u64>| {
        let mut body = json!({"id": id, "name": name});
        if let Some(exp) = exp {
            body["exp"] = json!(exp);
        }
        let body: &'static [u8] = Box::leak(body.to_string().into_bytes().into_boxed_slice());
        respond(200, &[("content-type", "application/json")], body)
    };
    match seen.header("authorization").unwrap_or_default() {
        "Bearer short" => user(1, "Alice", Some(unix_now() + 2)),
        "Bearer long" => user(1, "Alice", Some(unix_now() + 3600)),
        "Bearer bob" => user(2, "Bob", None),
        "Bearer alice" if !revoked => user(1, "Alice", None),
        _ => respond(
            401,
            &[("www-authenticate", "Bearer error=\"invalid_token\"")],
            b"",
        ),
    }
}

/// A resolver for `url` with no leeway on expiry, so that `short` expires within seconds.
fn strict(url: &str) -> ResolverBuilder {
    resolver_for(url).clock_skew(Duration::ZERO)
}

/// A game server with one room and a 1 s grace to refresh.
async fn server(resolver: Resolver) -> RunningGameServer {
    server_with_grace(resolver, Duration::from_secs(1)).await
}

/// The grace of the tests that refresh within it and never wait for its end: long, so that a
/// loaded machine cannot end the session before the refreshes are answered.
const LONG_GRACE: Duration = Duration::from_secs(10);

/// A game server with one room and `grace` to refresh.
async fn server_with_grace(resolver: Resolver, grace: Duration) -> RunningGameServer {
    let config = GameServerConfig {
        rooms: vec![room("lobby", None)],
        reauth_grace: grace,
        ..GameServerConfig::default()
    };
    game_server_with(resolver, config).await
}

#[tokio::test(start_paused = true)]
async fn an_expiring_token_is_renewed_in_place_and_the_player_stays_in_the_room() {
    // Pins down renewal: at the token's exp the server asks for a refresh; the client's
    // callback gives a fresh token of the same user; the session stays in its room, and no
    // session_expired follows once the grace is over. On a paused clock: the session's timers
    // are set from `exp` once, then run on this runtime's clock, the servers in it.
    let api = api(Arc::default()).await;
    let game = server(strict(&api.url()).build().unwrap()).await;
    let mut client = in_the_first_room(&game, "short").await;
    client.on_reauth(|| async { Some("long".to_owned()) });
    let refreshed = tokio::time::timeout(Duration::from_secs(5), client.next_push())
        .await
        .expect("reauth_required comes at the token's exp")
        .unwrap();
    assert_eq!(
        refreshed,
        Push::Refreshed(Some(Player {
            id: 1,
            name: "Alice".into()
        }))
    );
    let after_the_grace =
        tokio::time::timeout(Duration::from_millis(1300), client.next_push()).await;
    assert!(
        after_the_grace.is_err(),
        "nothing comes once the grace is over: {after_the_grace:?}"
    );
    assert_eq!(
        client.search_rooms().await.unwrap().len(),
        1,
        "still served"
    );
    assert_eq!(game.members("lobby").len(), 1, "still in the room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_for_another_user_is_refused_and_the_session_closed() {
    // Pins down refresh_mismatch: a token of another user ends the session.
    let api = api(Arc::default()).await;
    let game = server_with_grace(strict(&api.url()).build().unwrap(), LONG_GRACE).await;
    let mut client = in_the_first_room(&game, "short").await;
    let push = client.next_push().await.unwrap();
    assert!(matches!(push, Push::ReauthRequired(within) if within == LONG_GRACE));
    let refused = client.refresh("bob").await.unwrap_err();
    assert_eq!(refused.code(), Some("refresh_mismatch"));
    assert!(
        client.read_answer().await.is_err(),
        "then the server closes"
    );
    eventually("the player left the room", || {
        game.members("lobby").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_refresh_in_time_the_session_expires() {
    // Pins down the grace: no refresh within it, session_expired and close.
    let api = api(Arc::default()).await;
    let game = server(strict(&api.url()).build().unwrap()).await;
    let mut client = in_the_first_room(&game, "short").await;
    assert!(matches!(
        client.next_push().await.unwrap(),
        Push::ReauthRequired(_)
    ));
    let expired = tokio::time::timeout(Duration::from_secs(5), client.read_answer())
        .await
        .expect("session_expired after the grace")
        .unwrap();
    assert_eq!(expired["error"], "session_expired");
    assert!(
        client.read_answer().await.is_err(),
        "then the server closes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_rejected_refresh_is_refused_and_the_session_may_try_again() {
    // Pins down bad refreshes: a malformed token and a rejected one are refused with their
    // codes; the session goes on and a good refresh still renews it.
    let api = api(Arc::default()).await;
    let game = server_with_grace(strict(&api.url()).build().unwrap(), LONG_GRACE).await;
    let mut client = in_the_first_room(&game, "short").await;
    client.next_push().await.unwrap();
    let malformed = client.refresh("not a token").await.unwrap_err();
    assert_eq!(malformed.code(), Some("token_malformed"));
    let rejected = client.refresh("unknown").await.unwrap_err();
    assert_eq!(rejected.code(), Some("token_rejected"));
    assert_eq!(client.refresh("long").await.unwrap().unwrap().id, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidation_closes_a_session_whose_token_is_rejected_since() {
    // Pins down --revalidate: a session re-resolves its token; once the API rejects it, the
    // session is told revoked and closed.
    let revoked = Arc::new(AtomicBool::new(false));
    let api = api(revoked.clone()).await;
    let resolver = resolver_for(&api.url())
        .cache_ttl(Duration::from_millis(100))
        .build()
        .unwrap();
    let config = GameServerConfig {
        rooms: vec![room("lobby", None)],
        revalidate: Some(Duration::from_millis(300)),
        ..GameServerConfig::default()
    };
    let game = game_server_with(resolver, config).await;
    let mut client = in_the_first_room(&game, "alice").await;
    revoked.store(true, Ordering::SeqCst);
    let ended = tokio::time::timeout(Duration::from_secs(5), client.next_push())
        .await
        .expect("revoked at the next revalidation")
        .unwrap_err();
    assert!(matches!(ended, GameClientError::Revoked(_)), "{ended:?}");
}

/// An API that answers `alice` as user 1 while `state` is 0, fails with 503 while it is 1, and
/// rejects her while it is 2.
async fn flaky_api(state: Arc<std::sync::atomic::AtomicU8>) -> Scripted {
    Scripted::start(move |_, seen: Seen| {
        let state = state.clone();
        async move {
            match state.load(Ordering::SeqCst) {
                0 => answer(&seen, false),
                1 => respond(503, &[], b""),
                _ => answer(&seen, true),
            }
        }
    })
    .await
}

/// A game server revalidating every 100 ms, with `unverified_grace`, on `api`.
async fn revalidating(api: &Scripted, unverified_grace: Option<Duration>) -> RunningGameServer {
    let resolver = resolver_for(&api.url())
        .cache_ttl(Duration::from_millis(50))
        .retries(0)
        .circuit_breaker(0, Duration::ZERO)
        .build()
        .unwrap();
    let config = GameServerConfig {
        rooms: vec![room("lobby", None)],
        revalidate: Some(Duration::from_millis(100)),
        unverified_grace,
        ..GameServerConfig::default()
    };
    game_server_with(resolver, config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_the_integrator_cannot_answer_keeps_the_session_and_never_counts_as_valid() {
    // Pins down re-checks during an outage: while the API answers 503 the session stays (the
    // default grace is the whole outage) and its check keeps trying; when the API answers
    // again, with a rejection, the session is revoked: the outage was never taken for "valid".
    let state = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let api = flaky_api(state.clone()).await;
    let game = revalidating(&api, None).await;
    let mut client = in_the_first_room(&game, "alice").await;
    state.store(1, Ordering::SeqCst);
    let calls = api.requests();
    eventually("the checks try the API", || api.requests() >= calls + 2).await;
    assert_eq!(
        client.search_rooms().await.unwrap().len(),
        1,
        "still served during the outage"
    );
    state.store(2, Ordering::SeqCst);
    let ended = tokio::time::timeout(Duration::from_secs(10), client.next_push())
        .await
        .expect("the check that gets an answer revokes")
        .unwrap_err();
    assert!(matches!(ended, GameClientError::Revoked(_)), "{ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_grace_a_session_unverified_for_longer_is_closed_as_auth_unavailable() {
    // Pins down --unverified-grace: a session whose checks get no answer for longer than the
    // grace is closed with the retryable code that says why.
    let state = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let api = flaky_api(state.clone()).await;
    let game = revalidating(&api, Some(Duration::from_millis(300))).await;
    let mut client = in_the_first_room(&game, "alice").await;
    state.store(1, Ordering::SeqCst);
    let ended = tokio::time::timeout(Duration::from_secs(10), client.next_push())
        .await
        .expect("closed once the grace is over")
        .unwrap_err();
    assert_eq!(ended.code(), Some("auth_unavailable"), "{ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_answered_stale_is_not_taken_for_valid() {
    // Pins down that a stale answer confirms nothing: with serve_stale_for on and the API down,
    // each re-check gets the cached user flagged stale; the session's standing stays unknown,
    // so once the grace has passed it is closed as unverified, not kept as if confirmed.
    let state = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let api = flaky_api(state.clone()).await;
    let resolver = resolver_for(&api.url())
        .cache_ttl(Duration::from_millis(50))
        .serve_stale_for(Duration::from_secs(60))
        .retries(0)
        .circuit_breaker(0, Duration::ZERO)
        .build()
        .unwrap();
    let config = GameServerConfig {
        rooms: vec![room("lobby", None)],
        revalidate: Some(Duration::from_millis(100)),
        unverified_grace: Some(Duration::from_millis(300)),
        ..GameServerConfig::default()
    };
    let game = game_server_with(resolver.clone(), config).await;
    let mut client = in_the_first_room(&game, "alice").await;
    state.store(1, Ordering::SeqCst);
    let ended = tokio::time::timeout(Duration::from_secs(5), client.next_push())
        .await
        .expect("closed once the grace is over, stale answers notwithstanding")
        .unwrap_err();
    assert_eq!(ended.code(), Some("auth_unavailable"), "{ended:?}");
    assert!(
        resolver.stats().stale_served > 0,
        "the re-checks were answered stale"
    );
}

/// The admin listener of `game`, with the revocation secret.
async fn admin(game: &RunningGameServer) -> RunningAdmin {
    let config = AdminConfig {
        revoke_secret: Some(AdminSecret::new(SECRET).unwrap()),
        ..AdminConfig::default()
    };
    game.spawn_admin("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap()
}

/// `POST /admin/revoke` with `body` and `secret`: the status and the JSON answer.
async fn revoke(admin: SocketAddr, secret: Option<&str>, body: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{admin}/admin/revoke"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(secret) = secret {
        request = request.bearer_auth(secret);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integrator_revokes_a_user_a_token_or_everyone_and_is_told_how_many_sessions_closed() {
    // Pins down POST /admin/revoke on one node: each scope closes the sessions it names (told
    // `revoked`), answers their count, and leaves the others alone.
    let api = api(Arc::default()).await;
    let game = server(resolver_for(&api.url()).build().unwrap()).await;
    let admin = admin(&game).await;
    let addr = admin.local_addr();
    let mut alice = in_the_first_room(&game, "alice").await;
    let mut alice_too = in_the_first_room(&game, "long").await;
    let mut bob = in_the_first_room(&game, "bob").await;
    assert_eq!(
        revoke(addr, Some(SECRET), r#"{"user_id": 1234}"#).await,
        (200, json!({"sessions_closed": 0}))
    );
    assert_eq!(
        revoke(addr, Some(SECRET), r#"{"access_token": "long"}"#).await,
        (200, json!({"sessions_closed": 1}))
    );
    assert!(matches!(
        alice_too.next_push().await,
        Err(GameClientError::Revoked(_))
    ));
    assert_eq!(
        revoke(
            addr,
            Some(SECRET),
            &format!(r#"{{"user_id": 1, "auth_url": "{}"}}"#, api.url())
        )
        .await,
        (200, json!({"sessions_closed": 1}))
    );
    assert!(matches!(
        alice.next_push().await,
        Err(GameClientError::Revoked(_))
    ));
    assert!(bob.search_rooms().await.is_ok(), "Bob was not named");
    assert_eq!(
        revoke(addr, Some(SECRET), r#"{"all": true}"#).await,
        (200, json!({"sessions_closed": 1}))
    );
    assert!(matches!(
        bob.next_push().await,
        Err(GameClientError::Revoked(_))
    ));
}

#[tokio::test]
async fn the_revoke_endpoint_refuses_what_it_cannot_trust_or_read() {
    // Pins down the guard of POST /admin/revoke: no secret configured 404, a wrong or missing
    // secret 401, a bad body 400 naming the field (never quoting a value), a secret shorter
    // than 16 bytes refused.
    let resolver = Resolver::builder().auth_required(false).build().unwrap();
    let game = server(resolver).await;
    let without = game
        .spawn_admin("127.0.0.1:0".parse().unwrap(), AdminConfig::default())
        .await
        .unwrap();
    assert_eq!(
        revoke(without.local_addr(), Some(SECRET), r#"{"all": true}"#)
            .await
            .0,
        404
    );
    let admin = admin(&game).await;
    let addr = admin.local_addr();
    assert_eq!(revoke(addr, None, r#"{"all": true}"#).await.0, 401);
    assert_eq!(
        revoke(addr, Some("not-the-secret-at-all"), r#"{"all": true}"#)
            .await
            .0,
        401
    );
    for (body, field) in [
        (r#"{"user_id": "42"}"#, "user_id:"),
        (r#"{"access_token": "a b SECRET-VALUE"}"#, "access_token:"),
        (r#"{"all": false}"#, "all:"),
        (r#"{"user_id": 1, "all": true}"#, "exactly one"),
        (r#"{"user_id": 1}"#, "auth_url:"),
        (r#"{"user": 1}"#, "unknown field"),
        ("not json", "JSON object"),
    ] {
        let (status, answer) = revoke(addr, Some(SECRET), body).await;
        assert_eq!(status, 400, "{body}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
        assert!(!message.contains("SECRET-VALUE"), "{message}");
    }
    assert!(AdminSecret::new("fifteen-bytes!!").is_err());
}

/// A node: a game server sharing `redis`, with its admin listener.
async fn node(api: &str, redis: &RedisServer) -> (RunningGameServer, RunningAdmin) {
    let resolver = resolver_for(api)
        .shared_cache(
            RedisTier::new(redis.url(), REDIS_SECRET).op_timeout(Duration::from_millis(200)),
        )
        .build()
        .unwrap();
    let game = server(resolver).await;
    let admin = admin(&game).await;
    eventually("the node listens to the invalidation channel", || {
        game.resolver().shared_cache_subscribed()
    })
    .await;
    (game, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_one_node_closes_the_session_on_another_through_redis() {
    // Pins down revocation across nodes: revoking a user on node A closes that user's session
    // on node B, which hears it through the shared tier; by token too.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = api(Arc::default()).await;
    let (_a, admin_a) = node(&api.url(), &redis).await;
    let (b, _admin_b) = node(&api.url(), &redis).await;
    let mut on_b = in_the_first_room(&b, "alice").await;
    let mut by_token = in_the_first_room(&b, "long").await;
    let (status, _) = revoke(
        admin_a.local_addr(),
        Some(SECRET),
        r#"{"access_token": "long"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert!(matches!(
        tokio::time::timeout(Duration::from_secs(5), by_token.next_push()).await,
        Ok(Err(GameClientError::Revoked(_)))
    ));
    let (status, answer) = revoke(admin_a.local_addr(), Some(SECRET), r#"{"user_id": 1}"#).await;
    assert_eq!(
        (status, answer),
        (200, json!({"sessions_closed": 0})),
        "none on A"
    );
    assert!(matches!(
        tokio::time::timeout(Duration::from_secs(5), on_b.next_push()).await,
        Ok(Err(GameClientError::Revoked(_)))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_made_while_redis_is_down_reaches_the_other_node_once_it_is_back() {
    // Pins down the outage path: a ban on node A while Redis is down closes what A holds at
    // once and is answered 503 (pending: the other nodes cannot know yet), and A keeps telling
    // Redis until it is back; then node B hears it and closes its session too. Nothing is
    // emptied: B had missed nothing else.
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let api = api(Arc::default()).await;
    let (_a, admin_a) = node(&api.url(), &redis).await;
    let (b, _admin_b) = node(&api.url(), &redis).await;
    let mut on_b = in_the_first_room(&b, "alice").await;
    let bob = in_the_first_room(&b, "bob").await;
    redis.stop();
    let (status, answer) = revoke(admin_a.local_addr(), Some(SECRET), r#"{"user_id": 1}"#).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"], "revocation_pending");
    assert_eq!(answer["sessions_closed"], 0);
    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .unwrap();
    assert!(matches!(
        tokio::time::timeout(Duration::from_secs(15), on_b.next_push()).await,
        Ok(Err(GameClientError::Revoked(_)))
    ));
    assert_eq!(b.resolver().stats().entries, 1, "Bob's entry was kept");
    drop((bob, redis));
}

#[tokio::test(start_paused = true)]
async fn a_revocation_that_lands_while_the_token_is_resolved_wins_the_race() {
    // Pins down revocations racing a connect: the API decided "valid" before a ban and answers
    // after it. That answer is neither cached nor handed to anyone, the player who was waiting
    // for it and a second one who joined the same look-up after the ban both get the API's
    // answer to a new look-up (the ban: token_rejected). A ban of someone else in the same
    // window leaves a player connected.
    let release = Arc::new(tokio::sync::Notify::new());
    let revoked = Arc::new(AtomicBool::new(false));
    let gated = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let api = Scripted::start({
        let (release, revoked) = (release.clone(), revoked.clone());
        move |_, seen: Seen| {
            let (release, revoked, gated) = (release.clone(), revoked.clone(), gated.clone());
            async move {
                // Decided now; the first call for each token answers only once released.
                let response = answer(&seen, revoked.load(Ordering::SeqCst));
                let token = seen.header("authorization").unwrap_or_default().to_owned();
                if gated.lock().unwrap().insert(token) {
                    release.notified().await;
                }
                response
            }
        }
    })
    .await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    let game = server(resolver.clone()).await;
    let addr = game.local_addr();
    let connect = |token: &'static str| {
        tokio::spawn(async move {
            let mut client = GameClient::open(addr).await.unwrap();
            client.connect(Some(token)).await
        })
    };

    let alice = connect("alice");
    eventually("Alice's call is under way", || api.requests() == 1).await;
    revoked.store(true, Ordering::SeqCst);
    resolver.invalidate_user(&api.url(), 1);
    let mut alice_again = connect("alice");
    // She joins the call under way: held with it, she has no answer while time runs on (on the
    // paused clock, once everything else waits).
    let early = tokio::time::timeout(Duration::from_millis(100), &mut alice_again).await;
    assert!(early.is_err(), "she did not wait for the call: {early:?}");
    release.notify_one();
    for connected in [alice.await.unwrap(), alice_again.await.unwrap()] {
        assert!(
            matches!(&connected, Err(e) if e.code() == Some("token_rejected")),
            "{connected:?}"
        );
    }
    assert_eq!(api.requests(), 2, "one call before the ban, one after");

    let bob = connect("bob");
    eventually("Bob's call is under way", || api.requests() == 3).await;
    resolver.invalidate_user(&api.url(), 1);
    release.notify_one();
    let connected = bob.await.unwrap();
    assert!(connected.is_ok(), "Bob was not named: {connected:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidation_during_the_grace_leaves_the_expired_session_its_refresh() {
    // Pins down revalidation and the grace together: once the token has expired, checking it
    // again would only hear that it expired; that is the grace timer's business, so the player
    // told `reauth_required` keeps the whole grace to refresh and stays in the room.
    // One to two seconds ahead: one second could be a millisecond, passed before the login.
    let expires = unix_now() + 2;
    let api = Scripted::start(move |_, seen: Seen| async move {
        let exp = match seen.header("authorization").unwrap_or_default() {
            "Bearer expiring" => expires,
            _ => unix_now() + 3600,
        };
        let body = json!({"id": 1, "name": "Alice", "exp": exp}).to_string();
        let body: &'static [u8] = Box::leak(body.into_bytes().into_boxed_slice());
        respond(200, &[("content-type", "application/json")], body)
    })
    .await;
    let config = GameServerConfig {
        rooms: vec![room("lobby", None)],
        reauth_grace: Duration::from_secs(3),
        revalidate: Some(Duration::from_millis(50)),
        ..GameServerConfig::default()
    };
    let game = game_server_with(strict(&api.url()).build().unwrap(), config).await;
    let mut client = in_the_first_room(&game, "expiring").await;
    assert!(matches!(
        client.next_push().await.unwrap(),
        Push::ReauthRequired(_)
    ));
    // A revalidation every 50 ms: ten of them come during this part of the grace. Real time:
    // the token's expiry is the API's `exp`, on the wall clock, which no tokio clock moves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refreshed = client.refresh("fresh").await;
    assert!(refreshed.is_ok(), "{refreshed:?}");
    assert_eq!(game.members("lobby").len(), 1, "still in the room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_closed_on_time_however_often_the_session_revalidates() {
    // Pins down the idle timeout beside the session's own timers: silence counts from the
    // client's last message, so revalidations every 50 ms do not keep a silent client in.
    let api = api(Arc::default()).await;
    let config = GameServerConfig {
        rooms: vec![room("lobby", None)],
        idle_timeout: Duration::from_millis(300),
        revalidate: Some(Duration::from_millis(50)),
        ..GameServerConfig::default()
    };
    let game = game_server_with(resolver_for(&api.url()).build().unwrap(), config).await;
    let mut client = in_the_first_room(&game, "long").await;
    let closed = tokio::time::timeout(Duration::from_secs(5), client.next_push())
        .await
        .expect("closed within the idle timeout, not kept open by revalidation");
    let refused = closed.unwrap_err();
    assert_eq!(refused.code(), Some("idle_timeout"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logout_acknowledged_while_a_connect_resolves_closes_the_session_it_opens() {
    // Pins down issue 34's suspected race (seed 2027, a connect answered 18 ms before a logout
    // was acknowledged, the session told 1.3 s late): the integrator's logout notice for the
    // user's login session `s1` is acknowledged by this node's POST /admin/revoke while the
    // connect's call to the API, decided "valid" before it, is still under way. The session
    // the connect opens must be told `revoked` (or the connect refused), never left playing.
    // (The late notices were the reference API's notifier, fixed there; this pins that the
    // node's side has no such hole.)
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Arc::new(AtomicBool::new(true));
    let api = Scripted::start({
        let (release, gate) = (release.clone(), gate.clone());
        move |_, _seen: Seen| {
            let (release, gate) = (release.clone(), gate.clone());
            async move {
                // Decided now (valid, of login session s1); the first call answers once released.
                let body = br#"{"id": 1, "name": "Alice", "sid": "s1"}"#;
                if gate.swap(false, Ordering::SeqCst) {
                    release.notified().await;
                }
                respond(200, &[("content-type", "application/json")], body)
            }
        }
    })
    .await;
    let game = server(resolver_for(&api.url()).build().unwrap()).await;
    let admin = admin(&game).await;
    let addr = game.local_addr();
    let connecting = tokio::spawn(async move {
        let mut client = GameClient::open(addr).await.unwrap();
        let connected = client.connect(Some("alice")).await;
        (client, connected)
    });
    eventually("the connect's call is under way", || api.requests() == 1).await;
    let logout = format!(
        r#"{{"user_id": 1, "session": "s1", "auth_url": "{}"}}"#,
        api.url()
    );
    assert_eq!(
        revoke(admin.local_addr(), Some(SECRET), &logout).await,
        (200, json!({"sessions_closed": 0})),
        "acknowledged before the session exists"
    );
    release.notify_one();
    let (mut client, connected) = connecting.await.unwrap();
    if connected.is_ok() {
        let told = tokio::time::timeout(Duration::from_secs(5), client.next_push()).await;
        assert!(
            matches!(told, Ok(Err(GameClientError::Revoked(_)))),
            "connected, then not told: {told:?}"
        );
    } else {
        let refused = connected.as_ref().err().and_then(|e| e.code()) == Some("token_rejected");
        assert!(
            refused || matches!(connected, Err(GameClientError::Revoked(_))),
            "{connected:?}"
        );
    }
    assert!(
        client.search_rooms().await.is_err(),
        "the session is closed"
    );
}
