//! How long a revocation takes to reach a live session: from the integrator's
//! `POST /admin/revoke` to the moment the player's client reads `revoked`.
//!
//! - `same node`: the revocation is made on the node the player is connected to;
//! - `across nodes (Redis)`: it is made on node A and the player is on node B; B hears it on
//!   the shared tier's invalidation channel, from a real `redis-server` on loopback;
//! - `logout at the integrator`: the player logs out at the reference API, which tells the
//!   node (`notify`, as `serve-api --notify` does): from the logout call to the read.
//!
//! Each row is 200 revocations, one per fresh session (connected and joined to a room), with
//! the median, p99 and max of the delay. Targets: same node under 100 ms, across nodes under
//! 250 ms. `cargo bench -p token-resolver-cli --bench revocation`; the cross-node row needs `redis-server` (skipped
//! with a note otherwise).

use token_resolver_support::bench as support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use token_resolver::{RedisTier, Resolver};
use token_resolver_game_server::{
    AdminConfig, AdminSecret, GameServer, GameServerConfig, RoomConfig, RunningAdmin,
    RunningGameServer,
};
use token_resolver_player::{GameClient, GameClientError, IntegratorClient, RoomJoinArgs};
use token_resolver_reference_api::{self as reference_api, ApiConfig, ReferenceApi};

use support::{Upstream, UpstreamConfig};

const REVOCATIONS: usize = 200;
const ADMIN_SECRET: &str = "bench-admin-secret-of-32-bytes!!";
const REDIS_SECRET: &str = "bench-redis-secret-of-32-bytes!!";

/// A game node resolving at `base`, with its admin listener.
async fn node(base: &str, tier: Option<RedisTier>) -> (RunningGameServer, RunningAdmin) {
    let mut builder = Resolver::builder().default_auth_url(base);
    if let Some(tier) = tier {
        builder = builder.shared_cache(tier);
    }
    let config = GameServerConfig {
        rooms: RoomConfig::defaults(None),
        ..GameServerConfig::default()
    };
    let game = GameServer::new(builder.build().expect("a resolver"), config)
        .expect("a game server")
        .spawn(([127, 0, 0, 1], 0).into())
        .await
        .expect("the game port");
    let admin = game
        .spawn_admin(
            ([127, 0, 0, 1], 0).into(),
            AdminConfig {
                revoke_secret: Some(AdminSecret::new(ADMIN_SECRET).expect("a long secret")),
                ..AdminConfig::default()
            },
        )
        .await
        .expect("the admin port");
    (game, admin)
}

/// `REVOCATIONS` times: a fresh player joins on `player_on`; the user is revoked on
/// `revoke_at`; the time until the player reads `revoked`.
async fn delays(player_on: SocketAddr, revoke_at: SocketAddr) -> Vec<Duration> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client");
    let mut delays = Vec::with_capacity(REVOCATIONS);
    for i in 0..REVOCATIONS {
        let token = support::token('r', i as u64);
        let (mut player, user_id) = in_the_first_room(player_on, &token).await;
        let started = Instant::now();
        let revoked = http
            .post(format!("http://{revoke_at}/admin/revoke"))
            .bearer_auth(ADMIN_SECRET)
            .json(&serde_json::json!({ "user_id": user_id }))
            .send()
            .await
            .expect("the admin answers");
        assert!(revoked.status().is_success());
        delays.push(until_revoked(&mut player, started).await);
    }
    delays
}

/// `REVOCATIONS` times: a player logs in at the reference API (which notifies `admin`), joins
/// on `player_on`, and logs out; the time from the logout call until the player reads
/// `revoked`.
async fn logout_delays(player_on: SocketAddr, api_base: &str) -> Vec<Duration> {
    let mut delays = Vec::with_capacity(REVOCATIONS);
    for _ in 0..REVOCATIONS {
        let mut integrator = IntegratorClient::new(api_base).expect("a client");
        integrator
            .login_password("alice", "wonderland")
            .await
            .expect("a login");
        let token = integrator
            .fetch_access_token()
            .await
            .expect("a token")
            .secret()
            .to_owned();
        let (mut player, _) = in_the_first_room(player_on, &token).await;
        let started = Instant::now();
        integrator.logout().await.expect("logged out");
        delays.push(until_revoked(&mut player, started).await);
    }
    delays
}

/// A player connected on `player_on` with `token` and joined to the first room, and the user
/// id it resolved to.
async fn in_the_first_room(player_on: SocketAddr, token: &str) -> (GameClient, i64) {
    let mut player = GameClient::open(player_on).await.expect("a connection");
    let user = player
        .connect(Some(token))
        .await
        .expect("connected")
        .expect("a user");
    let rooms = player.search_rooms().await.expect("rooms");
    let args = RoomJoinArgs::new(&rooms[0], Default::default());
    player.join(&args, Some(token)).await.expect("joined");
    (player, user.id)
}

/// How long after `started` `player` reads `revoked` (within 5 s, or the bench fails).
async fn until_revoked(player: &mut GameClient, started: Instant) -> Duration {
    match tokio::time::timeout(Duration::from_secs(5), player.next_push()).await {
        Ok(Err(GameClientError::Revoked(_))) => started.elapsed(),
        other => panic!("the player was not revoked: {other:?}"),
    }
}

fn row(label: &str, mut delays: Vec<Duration>, target: Duration) {
    delays.sort();
    let at = |q: f64| delays[((delays.len() as f64 * q) as usize).min(delays.len() - 1)];
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let (median, p99, max) = (at(0.5), at(0.99), delays[delays.len() - 1]);
    println!(
        "| {label} | {} | {} | {} | {} | < {} ms: {} |",
        delays.len(),
        ms(median),
        ms(p99),
        ms(max),
        target.as_millis(),
        if p99 < target { "met (p99)" } else { "missed" }
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let rt = support::runtime();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
    let base = upstream.base();
    println!("revocation: from POST /admin/revoke to the client's read of `revoked`");
    println!();
    println!("| path | revocations | median | p99 | max | target |");
    println!("|---|---:|---:|---:|---:|---|");
    rt.block_on(async {
        let (game, admin) = node(&base, None).await;
        let same = delays(game.local_addr(), admin.local_addr()).await;
        row("same node", same, Duration::from_millis(100));
    });
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the API");
        let api_base = format!("http://{}", listener.local_addr().expect("its address"));
        let (game, admin) = node(&api_base, None).await;
        let config = ApiConfig {
            admin_secret: Some(
                reference_api::AdminSecret::new(ADMIN_SECRET).expect("a long secret"),
            ),
            notify: vec![format!("http://{}", admin.local_addr())],
            ..ApiConfig::default()
        };
        let _api = ReferenceApi::new(config)
            .expect("the reference API")
            .spawn_on(listener)
            .expect("the API serves");
        let logouts = logout_delays(game.local_addr(), &api_base).await;
        row(
            "logout at the integrator",
            logouts,
            Duration::from_millis(100),
        );
    });
    let Some(redis) = token_resolver_support::redis::RedisServer::start() else {
        println!("| across nodes (Redis) | skipped: redis-server is not installed | | | | |");
        return;
    };
    rt.block_on(async {
        let tier =
            || RedisTier::new(redis.url(), REDIS_SECRET).op_timeout(Duration::from_millis(200));
        let (_a, admin_a) = node(&base, Some(tier())).await;
        let (b, _admin_b) = node(&base, Some(tier())).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !b.resolver().shared_cache_subscribed() {
            assert!(Instant::now() < deadline, "node B never subscribed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let across = delays(b.local_addr(), admin_a.local_addr()).await;
        row("across nodes (Redis)", across, Duration::from_millis(250));
    });
}
