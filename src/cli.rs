//! The `token-resolver` command line: argument definitions and what each subcommand does.
//!
//! `main.rs` only parses, sets up logging and calls [`run`]; the behaviour lives here so that
//! tests reach it. Output contracts (SPEC section 8): `resolve` prints exactly one JSON line on
//! stdout and exits 0 on success, 1 on a resolution error, 2 on a usage error.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::reference_api::{ApiConfig, ReferenceApi};
use crate::{demo, Resolver};

/// Resolve game players' access tokens through the integrator's /api/user.
#[derive(Debug, Parser)]
#[command(name = "token-resolver", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the reference integrator web API (login, access_token, user, logout).
    ServeApi(ServeApiArgs),
    /// Resolve one access token and print the user as one JSON line.
    Resolve(ResolveArgs),
    /// Walk the seed's whole flow on loopback, printing each step.
    Demo,
    /// Run a game server embedding the resolver (TCP, JSON lines: connect, search_room, join).
    GameServer(GameServerArgs),
    /// Check an integrator's user information API against the protocol; exit 1 on a failure.
    Check(CheckArgs),
    /// Measure throughput, latency and memory against the baselines; print one table.
    Load(crate::load::LoadArgs),
}

/// `serve-api` arguments.
#[derive(Debug, Args)]
pub struct ServeApiArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// JSON list of {id, name, username, password}; without it, demo users are seeded.
    #[arg(long, value_name = "FILE")]
    pub users: Option<PathBuf>,
    /// Lifetime of an access token, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub token_ttl: u64,
}

/// `resolve` arguments.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The authUrl (base URL of the integrator's web API, or its /api/user).
    #[arg(long, value_name = "URL")]
    pub auth_url: String,
    /// The access token (or set TOKEN_RESOLVER_TOKEN; --token-stdin keeps it out of `ps`).
    #[arg(
        long,
        env = "TOKEN_RESOLVER_TOKEN",
        hide_env_values = true,
        conflicts_with = "token_stdin"
    )]
    pub token: Option<String>,
    /// Read the access token from the first line of stdin.
    #[arg(long)]
    pub token_stdin: bool,
    /// Deadline for the whole resolution, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub timeout_ms: u64,
    /// Permit http:// to non-loopback hosts (sends the token in the clear).
    #[arg(long)]
    pub allow_insecure_http: bool,
}

/// Runs a parsed command line to its exit status.
pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::ServeApi(args) => serve_api(args).await,
        Command::Resolve(args) => resolve(args).await,
        Command::Demo => {
            let mut out = std::io::stdout();
            match demo::run(&mut out).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("demo failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::GameServer(args) => game_server(args).await,
        Command::Check(args) => check(args).await,
        Command::Load(args) => crate::load::run(args).await,
    }
}

async fn serve_api(args: ServeApiArgs) -> ExitCode {
    let ttl = Duration::from_secs(args.token_ttl);
    let config = match &args.users {
        Some(path) => ApiConfig::from_users_file(path, ttl),
        None => Ok(ApiConfig {
            token_ttl: ttl,
            ..ApiConfig::default()
        }),
    };
    let api = match config.and_then(ReferenceApi::new) {
        Ok(api) => api,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let running = match api.spawn(args.listen).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    println!("reference integrator API on {}", running.base_url());
    if args.users.is_none() {
        println!("demo users: alice/wonderland (id 1), bob/builder (id 2), carol/carolina (id 3)");
    }
    println!("endpoints: POST /api/login, /api/access_token, /api/user, /api/logout; Ctrl-C stops");
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}

async fn resolve(args: ResolveArgs) -> ExitCode {
    let token = match (&args.token, args.token_stdin) {
        (Some(token), _) => token.clone(),
        (None, true) => {
            let mut line = String::new();
            if let Err(e) = std::io::stdin().lock().read_line(&mut line) {
                eprintln!("error: cannot read the token from stdin: {e}");
                return ExitCode::from(2);
            }
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
        (None, false) => Cli::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "resolve needs a token: --token, --token-stdin or TOKEN_RESOLVER_TOKEN",
            )
            .exit(),
    };
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let line = match Resolver::builder()
        .default_auth_url(&args.auth_url)
        .allow_insecure_http(args.allow_insecure_http)
        .request_timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(2)))
        .build()
    {
        Err(e) => Err(error_line(
            crate::ErrorCode::AuthUrlNotAllowed.as_str(),
            &e.to_string(),
        )),
        Ok(resolver) => match resolver.resolve(&args.auth_url, &token).await {
            Ok(user) => Ok(serde_json::to_string(&*user).unwrap_or_default()),
            Err(e) => Err(error_line(e.code().as_str(), &e.to_string())),
        },
    };
    let (line, status) = match line {
        Ok(line) => (line, ExitCode::SUCCESS),
        Err(line) => (line, ExitCode::FAILURE),
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    status
}

fn error_line(code: &str, message: &str) -> String {
    serde_json::json!({ "error": code, "message": message }).to_string()
}

/// `game-server` arguments.
#[derive(Debug, Args)]
pub struct GameServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7350")]
    pub listen: SocketAddr,
    /// The default authUrl ("user resource acquisition API URL"): for connects and rooms
    /// without one. Required while auth is required.
    #[arg(long, value_name = "URL")]
    pub auth_url: Option<String>,
    /// A further authUrl rooms may name (repeatable); every room's authUrl must be allowed.
    #[arg(long, value_name = "URL")]
    pub allow_auth_url: Vec<String>,
    /// JSON list of rooms: [{"roomId": "arena", "authUrl": "https://..."}]; without it, a
    /// lobby (no authUrl) and an arena protected by --auth-url.
    #[arg(long, value_name = "FILE")]
    pub rooms: Option<PathBuf>,
    /// The options-screen switch: false makes connects and joins anonymous, with no call.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub auth_required: bool,
    /// Permit http:// to non-loopback auth APIs (sends tokens in the clear).
    #[arg(long)]
    pub allow_insecure_http: bool,
    /// Connections open at once; more are refused with server_busy.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds a connection may stay silent before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub idle_timeout: u64,
    /// Host that rooms advertise to clients (default: the listening IP).
    #[arg(long, value_name = "HOST")]
    pub advertise_host: Option<String>,
    /// Share cached answers and invalidations with other nodes through this Redis
    /// (`redis://host:port`); the key-derivation secret comes from TOKEN_RESOLVER_REDIS_SECRET.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Prefix of the shared tier's Redis keys and channel.
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "token-resolver:",
        requires = "redis_url"
    )]
    pub redis_prefix: String,
}

/// `check` arguments. `Debug` hides the token and the password.
#[derive(Args)]
pub struct CheckArgs {
    /// The authUrl to check (the API's base URL, or its /api/user).
    #[arg(long, value_name = "URL")]
    pub auth_url: String,
    /// A valid access token (or set TOKEN_RESOLVER_TOKEN); optional with credentials.
    #[arg(long, env = "TOKEN_RESOLVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Log in with this username to check login -> access_token -> user.
    #[arg(long, requires = "password", conflicts_with = "device_id")]
    pub username: Option<String>,
    /// The password for --username (or set TOKEN_RESOLVER_PASSWORD).
    #[arg(
        long,
        env = "TOKEN_RESOLVER_PASSWORD",
        hide_env_values = true,
        requires = "username"
    )]
    pub password: Option<String>,
    /// Log in with this device id instead of a password.
    #[arg(long, value_name = "ID")]
    pub device_id: Option<String>,
    /// Calls for the latency percentiles.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub calls: usize,
    /// Check an http:// URL on a non-loopback host (a warning instead of a failure).
    #[arg(long)]
    pub allow_insecure_http: bool,
    /// Deadline for each request, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub timeout_ms: u64,
}

impl std::fmt::Debug for CheckArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "[redacted]");
        f.debug_struct("CheckArgs")
            .field("auth_url", &self.auth_url)
            .field("token", &hidden(&self.token))
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("device_id", &hidden(&self.device_id))
            .field("calls", &self.calls)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

async fn game_server(args: GameServerArgs) -> ExitCode {
    use crate::game_server::{GameServer, GameServerConfig, RoomConfig};

    let usage = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let rooms = match &args.rooms {
        Some(path) => match RoomConfig::load(path) {
            Ok(rooms) => rooms,
            Err(e) => return usage(e.to_string()),
        },
        None => RoomConfig::defaults(args.auth_url.as_deref()),
    };
    if args.auth_required {
        let allowed: Vec<&str> = args
            .auth_url
            .iter()
            .chain(&args.allow_auth_url)
            .map(String::as_str)
            .collect();
        let uncovered = RoomConfig::uncovered_auth_urls(&rooms, &allowed, args.allow_insecure_http);
        if let Some(url) = uncovered.first() {
            return usage(format!(
                "room authUrl {url:?} is not allowed, so every join to its room would fail: add --allow-auth-url {url}"
            ));
        }
    }
    let mut builder = Resolver::builder()
        .auth_required(args.auth_required)
        .allow_insecure_http(args.allow_insecure_http);
    if let Some(url) = &args.auth_url {
        builder = builder.default_auth_url(url);
    }
    for url in &args.allow_auth_url {
        builder = builder.allow_auth_url(url);
    }
    if let Some(url) = &args.redis_url {
        let Ok(secret) = std::env::var("TOKEN_RESOLVER_REDIS_SECRET") else {
            return usage("--redis-url needs TOKEN_RESOLVER_REDIS_SECRET (at least 16 bytes, the same on every node)".to_owned());
        };
        let tier = crate::shared_cache::RedisTier::new(url, secret).key_prefix(&args.redis_prefix);
        builder = builder.shared_cache(tier);
    }
    let resolver = match builder.build() {
        Ok(resolver) => resolver,
        Err(e) => return usage(e.to_string()),
    };
    let config = GameServerConfig {
        rooms,
        max_connections: args.max_connections,
        idle_timeout: Duration::from_secs(args.idle_timeout),
        advertised_host: args.advertise_host.clone(),
        ..GameServerConfig::default()
    };
    let server = match GameServer::new(resolver, config) {
        Ok(server) => server,
        Err(e) => return usage(e.to_string()),
    };
    let running = match server.spawn(args.listen).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    // Written with errors ignored: a closed stdout must not stop the server.
    let mut banner = format!(
        "game server listening on {} (JSON lines over TCP)\n",
        running.local_addr()
    );
    match (&args.auth_url, args.auth_required) {
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
    banner.push_str("messages: connect, search_room, join; Ctrl-C stops\n");
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(banner.as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}

async fn check(args: CheckArgs) -> ExitCode {
    use crate::check::{self, CheckConfig, Login};

    let login = match (&args.username, &args.password, &args.device_id) {
        (Some(username), Some(password), _) => Some(Login::Password {
            username: username.clone(),
            password: password.clone(),
        }),
        (_, _, Some(device_id)) => Some(Login::Device {
            device_id: device_id.clone(),
        }),
        _ => None,
    };
    let config = CheckConfig {
        login,
        calls: args.calls,
        allow_insecure_http: args.allow_insecure_http,
        timeout: Duration::from_millis(args.timeout_ms.max(1)),
        ..CheckConfig::new(args.auth_url, args.token)
    };
    match check::run(&config).await {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e} (see token-resolver check --help)");
            ExitCode::from(2)
        }
    }
}
