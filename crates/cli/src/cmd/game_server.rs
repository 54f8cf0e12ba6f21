//! `token-resolver game-server`: a game server embedding the resolver, built from flags (and
//! `--config FILE`), with an optional admin listener, a banner on stdout, until SIGTERM or
//! Ctrl-C, which drain it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use token_resolver::{RedisTier, Resolver};
use token_resolver_game_server::telemetry::Metrics;
use token_resolver_game_server::{
    AdminConfig, GameServer, GameServerConfig, RoomConfig, RunningAdmin, RunningGameServer,
    WebSocketConfig,
};

use super::redis::{check_at_start, RedisArgs};
use super::serving::{admin_secret, stop_signal, LiveArgs, ResolverArgs, StartFailed};

/// `game-server` arguments.
#[derive(Debug, Args)]
pub(crate) struct GameServerArgs {
    /// A TOML file of settings: its keys are these flags' long names (`auth-url = "…"`,
    /// `allow-auth-url = ["…"]`); a flag given here wins over the file.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7350")]
    pub(crate) listen: SocketAddr,
    /// Address of the WebSocket listener (GET /ws; one message per text frame); off unless
    /// given.
    #[arg(long, value_name = "ADDR")]
    pub(crate) ws_listen: Option<SocketAddr>,
    /// A browser origin allowed to open WebSocket sessions, e.g. https://play.example.com
    /// (repeatable); a browser from any other origin is refused with 403.
    #[arg(long, value_name = "ORIGIN", requires = "ws_listen")]
    pub(crate) allow_origin: Vec<String>,
    /// Address of the admin listener (/metrics, /healthz, /readyz); off unless given. Keep it
    /// on loopback or a private network.
    #[arg(long, value_name = "ADDR")]
    pub(crate) admin_listen: Option<SocketAddr>,
    /// Seconds a draining server (SIGTERM, Ctrl-C) lets sessions finish before it cuts them.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub(crate) drain_secs: u64,
    /// Where the resolver may resolve: the default authUrl and the allowlist.
    #[command(flatten)]
    pub(crate) resolver: ResolverArgs,
    /// JSON list of rooms: [{"roomId": "arena", "authUrl": "https://..."}]; without it, a
    /// lobby (no authUrl) and an arena protected by --auth-url.
    #[arg(long, value_name = "FILE")]
    pub(crate) rooms: Option<PathBuf>,
    /// The options-screen switch: false makes connects and joins anonymous, with no call.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) auth_required: bool,
    /// Connections open at once; more are refused with server_busy.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub(crate) max_connections: usize,
    /// Connections one client address (an IPv6 /64) may hold on the game port and the
    /// WebSocket listener together; more are refused with too_many_connections.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub(crate) max_connections_per_address: usize,
    /// Seconds from accept to a connect (or join) that resolves; then login_timeout and close.
    /// Messages before it do not extend it.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub(crate) login_timeout: u64,
    /// Tokens of one client address the integrator may reject per --rejection-window; past
    /// it, connects, joins and refreshes from there get rate_limited without a call (0: off).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub(crate) rejection_budget: u32,
    /// The window --rejection-budget counts in, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) rejection_window: u64,
    /// Seconds a connection may stay silent before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) idle_timeout: u64,
    /// Host that rooms advertise to clients (default: the listening IP).
    #[arg(long, value_name = "HOST")]
    pub(crate) advertise_host: Option<String>,
    /// How live sessions are kept: expiry, refresh, re-checks.
    #[command(flatten)]
    pub(crate) live: LiveArgs,
    /// The shared cache tier on Redis.
    #[command(flatten)]
    pub(crate) redis: RedisArgs,
}

/// Serves until SIGTERM or Ctrl-C, then drains and exits 0; exit 2 on a usage error (a shared
/// tier that cannot work included), 1 when a port cannot be bound.
pub(crate) async fn run(args: GameServerArgs) -> ExitCode {
    // Before anything can say it is ready: see `stop_signal`.
    let stop = stop_signal();
    let (running, admin) = match start(&args).await {
        Ok(started) => started,
        Err(failed) => {
            eprintln!("error: {}", failed.message);
            return ExitCode::from(failed.exit);
        }
    };
    // Written with errors ignored: a closed stdout must not stop the server.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(banner(&args, &running, admin.as_ref()).as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    stop.await;
    running.drain(Duration::from_secs(args.drain_secs)).await;
    if let Some(admin) = admin {
        admin.shutdown().await;
    }
    ExitCode::SUCCESS
}

/// Everything up to serving: the metrics recorder, the secrets, the shared tier, the game
/// listener, the WebSocket listener and the admin listener, in that order.
async fn start(
    args: &GameServerArgs,
) -> Result<(RunningGameServer, Option<RunningAdmin>), StartFailed> {
    // Before anything records a metric: the resolver registers its counters with the recorder
    // installed at its first resolution.
    let metrics = Metrics::install().map_err(|e| StartFailed::fatal(e.to_string()))?;
    let revoke_secret = admin_secret().map_err(StartFailed::usage)?;
    let tier = args.redis.tier().map_err(StartFailed::usage)?;
    if let Some(tier) = &tier {
        check_at_start(tier)
            .await
            .map_err(|e| StartFailed::usage(format!("shared cache (Redis): {e}")))?;
    }
    let server = server(args, tier).map_err(StartFailed::usage)?;
    let mut running = server
        .spawn(args.listen)
        .await
        .map_err(|e| StartFailed::fatal(format!("cannot listen on {}: {e}", args.listen)))?;
    if let Some(addr) = args.ws_listen {
        let config = WebSocketConfig {
            allowed_origins: args.allow_origin.clone(),
            ..WebSocketConfig::default()
        };
        running.listen_websocket(addr, config).await.map_err(|e| {
            StartFailed::fatal(format!("cannot listen on {addr} (--ws-listen): {e}"))
        })?;
    }
    let Some(addr) = args.admin_listen else {
        return Ok((running, None));
    };
    let config = AdminConfig {
        metrics: Some(metrics),
        revoke_secret,
        ..AdminConfig::default()
    };
    let admin = running.spawn_admin(addr, config).await.map_err(|e| {
        StartFailed::fatal(format!("cannot listen on {addr} (--admin-listen): {e}"))
    })?;
    Ok((running, Some(admin)))
}

/// The game server the flags describe; a usage error names the flag at fault.
fn server(args: &GameServerArgs, tier: Option<RedisTier>) -> Result<GameServer, String> {
    let rooms = match &args.rooms {
        Some(path) => RoomConfig::load(path).map_err(|e| e.to_string())?,
        None => RoomConfig::defaults(args.resolver.auth_url.as_deref()),
    };
    if args.auth_required {
        let allowed: Vec<&str> = args
            .resolver
            .auth_url
            .iter()
            .chain(&args.resolver.allow_auth_url)
            .map(String::as_str)
            .collect();
        let uncovered =
            RoomConfig::uncovered_auth_urls(&rooms, &allowed, args.resolver.plain_http());
        if let Some(url) = uncovered.first() {
            return Err(format!(
                "room authUrl {url:?} is not allowed, so every join to its room would fail: add --allow-auth-url {url}"
            ));
        }
    }
    let config = GameServerConfig {
        rooms,
        max_connections: args.max_connections,
        max_connections_per_address: args.max_connections_per_address,
        login_timeout: Duration::from_secs(args.login_timeout),
        rejection_budget: args.rejection_budget,
        rejection_window: Duration::from_secs(args.rejection_window),
        idle_timeout: Duration::from_secs(args.idle_timeout),
        advertised_host: args.advertise_host.clone(),
        reauth_grace: Duration::from_secs(args.live.reauth_grace),
        revalidate: args.live.revalidate.map(Duration::from_secs),
        recheck_rate: args.live.recheck_rate,
        unverified_grace: args.live.unverified_grace.map(Duration::from_secs),
        ..GameServerConfig::default()
    };
    GameServer::new(resolver(args, tier)?, config).map_err(|e| e.to_string())
}

/// The resolver the flags describe, with the shared tier when one is given.
fn resolver(args: &GameServerArgs, tier: Option<RedisTier>) -> Result<Resolver, String> {
    let builder = Resolver::builder().auth_required(args.auth_required);
    args.resolver.build(builder, &args.live, tier)
}

/// What the server prints once it listens: the addresses, the auth setting and the rooms.
fn banner(
    args: &GameServerArgs,
    running: &RunningGameServer,
    admin: Option<&RunningAdmin>,
) -> String {
    let mut banner = format!(
        "game server listening on {} (JSON lines over TCP)\n",
        running.local_addr()
    );
    if let Some(addr) = running.websocket_addr() {
        banner.push_str(&format!(
            "WebSocket listener on ws://{addr}/ws (one message per text frame)\n"
        ));
    }
    if let Some(admin) = admin {
        banner.push_str(&format!(
            "admin listener on http://{} (/metrics, /healthz, /readyz)\n",
            admin.local_addr()
        ));
    }
    match (&args.resolver.auth_url, args.auth_required) {
        (_, false) => banner.push_str("auth: off (joins are anonymous)\n"),
        (Some(url), true) => banner.push_str(&format!("auth: required, default authUrl {url}\n")),
        (None, true) => {}
    }
    for room in running.rooms() {
        let auth = room.auth_url();
        let shown = if auth.is_empty() {
            "(none: the default)".to_owned()
        } else {
            auth
        };
        banner.push_str(&format!("room {:<12} authUrl {shown}\n", room.room_id));
    }
    banner.push_str("messages: connect, search_room, join; SIGTERM or Ctrl-C drains and stops\n");
    banner
}
