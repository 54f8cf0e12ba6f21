//! The whole revocation path, as it runs in production: the reference API (the integrator)
//! bans a user or logs a session out and tells one game-server node (`--notify` to its admin
//! listener); that node publishes the revocation on the shared tier, and the player connected
//! to the *other* node reads `revoked`. Real servers on loopback and a real `redis-server`.

use token_resolver_support as support;

use std::time::Duration;

use support::{eventually, game_server_with, in_the_first_room, logged_in, room};
use token_resolver::{RedisTier, Resolver};
use token_resolver_game_server::{
    AdminConfig, AdminSecret, GameServerConfig, RunningAdmin, RunningGameServer,
};
use token_resolver_player::{GameClient, GameClientError};
use token_resolver_reference_api::{self as reference_api, ApiConfig, ReferenceApi, RunningApi};
use token_resolver_support::redis::RedisServer;

/// The secret the integrator and the game servers share (`TOKEN_RESOLVER_ADMIN_TOKEN`).
const ADMIN_SECRET: &str = "integrator-and-game-servers-32b!";
const REDIS_SECRET: &str = "a-redis-secret-of-32-bytes-long!";

/// Two game-server nodes sharing `redis`, resolving at `api_base`; node A with its admin
/// listener.
async fn two_nodes(
    api_base: &str,
    redis: &RedisServer,
) -> (RunningGameServer, RunningAdmin, RunningGameServer) {
    let node = || async {
        let resolver = Resolver::builder()
            .default_auth_url(api_base)
            .shared_cache(
                RedisTier::new(redis.url(), REDIS_SECRET).op_timeout(Duration::from_millis(200)),
            )
            .build()
            .unwrap();
        let config = GameServerConfig {
            rooms: vec![room("arena", None)],
            ..GameServerConfig::default()
        };
        let game = game_server_with(resolver, config).await;
        eventually("the node listens to the invalidation channel", || {
            game.resolver().shared_cache_subscribed()
        })
        .await;
        game
    };
    let a = node().await;
    let admin_a = a
        .spawn_admin(
            "127.0.0.1:0".parse().unwrap(),
            AdminConfig {
                revoke_secret: Some(AdminSecret::new(ADMIN_SECRET).unwrap()),
                ..AdminConfig::default()
            },
        )
        .await
        .unwrap();
    (a, admin_a, node().await)
}

/// The reference API on `listener`, telling `admin` of logouts and bans.
fn integrator(listener: tokio::net::TcpListener, admin: &RunningAdmin) -> RunningApi {
    let config = ApiConfig {
        admin_secret: Some(reference_api::AdminSecret::new(ADMIN_SECRET).unwrap()),
        notify: vec![format!("http://{}", admin.local_addr())],
        ..ApiConfig::default()
    };
    ReferenceApi::new(config)
        .unwrap()
        .spawn_on(listener)
        .unwrap()
}

/// Whether `player` reads `revoked` within a few seconds.
async fn is_revoked(player: &mut GameClient) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(5), player.next_push()).await,
        Ok(Err(GameClientError::Revoked(_)))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_at_the_integrator_kicks_the_player_from_another_node_and_a_logout_too() {
    // Pins down the path end to end: ban -> notify node A -> Redis -> node B kicks; logout ->
    // the same for that session's token only; the banned user cannot log in again.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (_a, admin_a, b) = two_nodes(&base, &redis).await;
    let api = integrator(listener, &admin_a);

    let alice = logged_in(&base, "alice", "wonderland").await;
    let alice_token = alice.authorization_access_token.clone().unwrap();
    let mut alice_on_b = in_the_first_room(&b, alice_token.secret()).await;
    let mut bob = logged_in(&base, "bob", "builder").await;
    let bob_token = bob.authorization_access_token.clone().unwrap();
    let mut bob_on_b = in_the_first_room(&b, bob_token.secret()).await;

    let banned = reqwest::Client::new()
        .post(format!("{base}/api/admin/ban"))
        .bearer_auth(ADMIN_SECRET)
        .json(&serde_json::json!({"user_id": 1}))
        .send()
        .await
        .unwrap();
    assert!(banned.status().is_success(), "{}", banned.status());
    assert!(
        is_revoked(&mut alice_on_b).await,
        "alice is kicked from node B"
    );
    let again = reqwest::Client::new()
        .post(format!("{base}/api/login"))
        .json(&serde_json::json!({"username": "alice", "password": "wonderland"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 403, "a banned user cannot log in again");

    // Bob is still playing; his logout ends his session on node B too.
    assert!(bob_on_b.search_rooms().await.is_ok(), "bob was left alone");
    bob.logout().await.unwrap();
    assert!(
        is_revoked(&mut bob_on_b).await,
        "bob's logout reaches node B"
    );
    let mut reconnect = GameClient::open(b.local_addr()).await.unwrap();
    let refused = reconnect
        .connect(Some(bob_token.secret()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("token_rejected"));
    drop(api);
}

/// One game server resolving at `default_api`, with the room `guild` on `guild_api` (both
/// allowed), and its admin listener.
async fn node_with_a_guild_room(
    default_api: &str,
    guild_api: &str,
) -> (RunningGameServer, RunningAdmin) {
    let resolver = Resolver::builder()
        .default_auth_url(default_api)
        .allow_auth_url(guild_api)
        .build()
        .unwrap();
    let config = GameServerConfig {
        rooms: vec![room("guild", Some(guild_api))],
        ..GameServerConfig::default()
    };
    let game = game_server_with(resolver, config).await;
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
    (game, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logout_at_a_rooms_own_integrator_closes_the_session_in_that_room() {
    // Pins down that a notification names its integrator: a player connected through the
    // default authUrl and joined to a room on a second integrator logs out at the second one;
    // the game server, told with that integrator's `auth_url`, closes the session.
    let default_api = support::reference_api().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let guild_base = format!("http://{}", listener.local_addr().unwrap());
    let (game, admin) = node_with_a_guild_room(&default_api.base_url(), &guild_base).await;
    let _guild_api = integrator(listener, &admin);

    let at_home = logged_in(&default_api.base_url(), "alice", "wonderland").await;
    let mut at_guild = logged_in(&guild_base, "alice", "wonderland").await;
    let guild_token = at_guild.authorization_access_token.clone().unwrap();
    let mut player = GameClient::open(game.local_addr()).await.unwrap();
    let home_token = at_home.authorization_access_token.clone().unwrap();
    player.connect(Some(home_token.secret())).await.unwrap();
    let rooms = player.search_rooms().await.unwrap();
    let args = token_resolver_player::RoomJoinArgs::new(&rooms[0], Default::default());
    player
        .join(&args, Some(guild_token.secret()))
        .await
        .unwrap();

    at_guild.logout().await.unwrap();
    assert!(
        is_revoked(&mut player).await,
        "the logout at the room's integrator closes the session"
    );
}

#[tokio::test(start_paused = true)]
async fn a_ban_made_while_the_game_server_is_unreachable_kicks_the_player_once_the_path_heals() {
    // Pins down delivery through a partition: the path from the integrator to the game
    // server's admin listener drops its open connections and refuses new ones for longer than
    // the notifier once retried (about 7.5 s); the ban waits in the outbox, shown as pending,
    // and once the path heals the player is kicked. On a paused clock: the integrator, the
    // path and the game server all run in this runtime, on loopback.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (game, admin) = node_with_a_guild_room(&base, &base).await;
    let path = support::Relay::start(admin.local_addr()).await;
    let api = ReferenceApi::new(ApiConfig {
        admin_secret: Some(reference_api::AdminSecret::new(ADMIN_SECRET).unwrap()),
        notify: vec![format!("http://{}", path.addr())],
        ..ApiConfig::default()
    })
    .unwrap()
    .spawn_on(listener)
    .unwrap();
    let alice = logged_in(&base, "alice", "wonderland").await;
    let token = alice.authorization_access_token.clone().unwrap();
    let mut player = in_the_first_room(&game, token.secret()).await;

    path.silence_open_connections();
    path.refuse(true);
    let banned = reqwest::Client::new()
        .post(format!("{base}/api/admin/ban"))
        .bearer_auth(ADMIN_SECRET)
        .json(&serde_json::json!({"user_id": 1}))
        .send()
        .await
        .unwrap();
    assert!(banned.status().is_success());
    let meanwhile = tokio::time::timeout(Duration::from_secs(9), player.next_push()).await;
    assert!(
        meanwhile.is_err(),
        "nothing reaches the player while the path is down: {meanwhile:?}"
    );
    assert_eq!(api.api().pending_notifications(), 1, "the ban waits");
    assert!(player.search_rooms().await.is_ok(), "not kicked yet");

    path.refuse(false);
    assert!(
        tokio::time::timeout(Duration::from_secs(10), player.next_push())
            .await
            .is_ok_and(|push| matches!(push, Err(GameClientError::Revoked(_)))),
        "the ban reaches the player once the path heals"
    );
    eventually("the outbox is empty", || {
        api.api().pending_notifications() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_delivered_late_closes_what_it_named_then_not_a_session_opened_after_the_unban() {
    // Pins down the notice's `at`: the ban waits in the outbox behind a partition while the
    // user is unbanned and logs in again; when it arrives, it closes the session resolved
    // before it was made, not the one resolved after (past the cache TTL and the clock skew,
    // so it could not hold a cached answer from before the ban). Without `at` the game server
    // would date the ban at its arrival and close both.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let resolver = Resolver::builder()
        .default_auth_url(&base)
        .cache_ttl(Duration::from_millis(300))
        .clock_skew(Duration::ZERO)
        .build()
        .unwrap();
    let config = GameServerConfig {
        rooms: vec![room("arena", None)],
        ..GameServerConfig::default()
    };
    let game = game_server_with(resolver, config).await;
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
    let path = support::Relay::start(admin.local_addr()).await;
    let api = ReferenceApi::new(ApiConfig {
        admin_secret: Some(reference_api::AdminSecret::new(ADMIN_SECRET).unwrap()),
        notify: vec![format!("http://{}", path.addr())],
        ..ApiConfig::default()
    })
    .unwrap()
    .spawn_on(listener)
    .unwrap();
    let admin_call = |action: &'static str| {
        let base = base.clone();
        async move {
            let answer = reqwest::Client::new()
                .post(format!("{base}/api/admin/{action}"))
                .bearer_auth(ADMIN_SECRET)
                .json(&serde_json::json!({"user_id": 1}))
                .send()
                .await
                .unwrap();
            assert!(
                answer.status().is_success(),
                "{action}: {}",
                answer.status()
            );
        }
    };
    let before = logged_in(&base, "alice", "wonderland").await;
    let token = before.authorization_access_token.clone().unwrap();
    let mut resolved_before = in_the_first_room(&game, token.secret()).await;
    let bob = logged_in(&base, "bob", "builder").await;
    let bob_token = bob.authorization_access_token.clone().unwrap();
    let mut bob_in_game = in_the_first_room(&game, bob_token.secret()).await;

    path.refuse(true);
    admin_call("ban").await;
    // Real time: the ban's `at` and a session's resolution are wall-clock times, which no
    // tokio clock moves; the login after the unban must come past `at` and the cache TTL.
    tokio::time::sleep(Duration::from_secs(1)).await;
    admin_call("unban").await;
    let after = logged_in(&base, "alice", "wonderland").await;
    let token = after.authorization_access_token.clone().unwrap();
    let mut resolved_after = in_the_first_room(&game, token.secret()).await;
    assert_eq!(api.api().pending_notifications(), 1, "the ban waits");

    path.refuse(false);
    assert!(
        is_revoked(&mut resolved_before).await,
        "the late ban closes the session it named"
    );
    eventually("the ban is delivered", || {
        api.api().pending_notifications() == 0
    })
    .await;
    // The node's revocation follower applies the ban too, after the admin listener did, and
    // applies revocations in order: once it kicked Bob for one made now, it has applied it.
    game.resolver().invalidate_user(&base, 2);
    assert!(
        is_revoked(&mut bob_in_game).await,
        "the follower applies a revocation made after the ban"
    );
    assert!(
        resolved_after.search_rooms().await.is_ok(),
        "the session opened after the unban stays"
    );
}
