//! The three parties the demo starts on loopback: the integrator's web API, a game server whose
//! resolver calls it, and the game server's admin listener, which the API tells of logouts and
//! bans.

use std::io::Write;
use std::time::Duration;

use rand::distributions::{Alphanumeric, DistString};
use token_resolver::Resolver;
use token_resolver_game_server::telemetry::Metrics;
use token_resolver_game_server::{
    AdminConfig, AdminSecret, GameServer, GameServerConfig, RoomConfig, RunningAdmin,
    RunningGameServer,
};
use token_resolver_reference_api::{self as reference_api, ApiConfig, ReferenceApi, RunningApi};

use super::narration::DemoError;

/// The three parties' servers, and what the client knows of them.
pub(super) struct Parties {
    /// The integrator's web API.
    pub(super) api: RunningApi,
    /// Its base URL, the resolver's default authUrl.
    pub(super) base: String,
    /// The game server, embedding a resolver.
    pub(super) game: RunningGameServer,
    /// The game server's admin listener, for its `/metrics`.
    pub(super) admin: RunningAdmin,
    /// The arena's authUrl: the same API, spelt with a trailing slash.
    pub(super) arena_auth_url: String,
    /// The secret the integrator and the game server share for revocations and bans.
    pub(super) admin_secret: String,
}

/// Starts the integrator's web API and a game server whose resolver calls it; the API tells
/// the game server's admin listener of logouts and bans.
pub(super) async fn start(out: &mut (dyn Write + Send)) -> Result<Parties, DemoError> {
    // The API's address first: the game server resolves there, and the API notifies the game
    // server, whose address comes after.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let admin_secret = Alphanumeric.sample_string(&mut rand::thread_rng(), 32);
    // Installed before the resolver's first resolution, which registers its counters.
    let metrics = Metrics::install()?;
    // A second of leeway on token expiry (30 s by default), so that a short-lived token
    // expires while the demo watches.
    let resolver = Resolver::builder()
        .default_auth_url(&base)
        .clock_skew(Duration::from_secs(1))
        .build()?;
    let arena_auth_url = format!("{base}/");
    let config = GameServerConfig {
        rooms: RoomConfig::defaults(Some(&arena_auth_url)),
        ..GameServerConfig::default()
    };
    let game = GameServer::new(resolver, config)?
        .spawn(([127, 0, 0, 1], 0).into())
        .await?;
    writeln!(
        out,
        "[game server] tcp://{} (JSON lines), resolver default authUrl {base}",
        game.local_addr()
    )?;
    writeln!(
        out,
        "              rooms: lobby (no authUrl: the default), arena (authUrl {arena_auth_url})"
    )?;
    let admin_config = AdminConfig {
        metrics: Some(metrics),
        revoke_secret: Some(AdminSecret::new(admin_secret.as_str())?),
        ..AdminConfig::default()
    };
    let admin = game
        .spawn_admin(([127, 0, 0, 1], 0).into(), admin_config)
        .await?;
    writeln!(
        out,
        "              admin listener http://{} (/metrics, /healthz, /readyz, /admin/revoke)",
        admin.local_addr()
    )?;
    let api_config = ApiConfig {
        admin_secret: Some(reference_api::AdminSecret::new(admin_secret.as_str())?),
        notify: vec![format!("http://{}", admin.local_addr())],
        ..ApiConfig::default()
    };
    let api = ReferenceApi::new(api_config)?.spawn_on(listener)?;
    writeln!(out, "[integrator]  reference web API on {base} (HTTP)")?;
    writeln!(
        out,
        "              demo users: alice/wonderland, bob/builder, carol/carolina"
    )?;
    writeln!(
        out,
        "              tells the game server of logouts and bans (POST /admin/revoke)\n"
    )?;
    Ok(Parties {
        api,
        base,
        game,
        admin,
        arena_auth_url,
        admin_secret,
    })
}
