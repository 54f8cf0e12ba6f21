//! The whole revocation path, as it runs in production: the reference API (the integrator)
//! bans a user or logs a session out and tells one game-server node (`--notify` to its admin
//! listener); that node publishes the revocation on the shared tier, and the player connected
//! to the *other* node reads `revoked`. Real servers on loopback and a real `redis-server`.

use token_resolver_support as support;

use std::time::Duration;

use support::{eventually, game_server_with, in_the_first_room, logged_in, room};
use token_resolver::{RedisTier, Resolver};
use token_resolver_game_server::{
    AdminConfig, AdminSecret, GameClient, GameClientError, GameServerConfig, RunningAdmin,
    RunningGameServer,
};
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
