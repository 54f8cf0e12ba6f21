//! `token-resolver serve-api`: the reference integrator web API on a socket until Ctrl-C, over
//! plain HTTP or, with `--tls-cert` and `--tls-key`, HTTPS; `--latency-ms` adds service time to
//! `/api/user`; `--trusted-proxy` names the proxies whose forwarding headers are believed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use token_resolver_reference_api::{
    AdminSecret, ApiConfig, ReferenceApi, SessionLimits, TrustedProxies,
};

/// The environment variable holding the admin secret, shared with the game servers.
const ADMIN_TOKEN_VAR: &str = "TOKEN_RESOLVER_ADMIN_TOKEN";

/// `serve-api` arguments.
#[derive(Debug, Args)]
pub(crate) struct ServeApiArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// JSON list of {id, name, username, password}; without it, demo users are seeded.
    #[arg(long, value_name = "FILE")]
    pub(crate) users: Option<PathBuf>,
    /// Lifetime of an access token, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub(crate) token_ttl: u64,
    /// Serve HTTPS (HTTP/1.1 and HTTP/2 through ALPN) with this certificate chain (PEM);
    /// needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Service time added to every POST /api/user, in milliseconds, for load runs.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) latency_ms: u64,
    /// A game server's admin base URL (such as http://10.0.0.5:9350), told of logouts and
    /// bans at URL/admin/revoke; repeatable. Needs TOKEN_RESOLVER_ADMIN_TOKEN.
    #[arg(long, value_name = "URL")]
    pub(crate) notify: Vec<String>,
    /// How long a notification a game server has not taken is retried, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    pub(crate) notify_retry_for: u64,
    /// How long after the last of a session's tokens expired its logout is still told, in
    /// seconds: at least the largest --clock-skew of the game servers told (default 30).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) notify_expired_for: u64,
    /// This API's base URL as game servers know it (their players' authUrl), named as
    /// auth_url in every notification; default: the address it listens on.
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<String>,
    /// A game server's WebSocket URL (ws:// or wss://) the /play page may open (repeatable;
    /// the first is the page's default). Without one, the page opens no game server.
    #[arg(long = "play-game-url", value_name = "URL")]
    pub(crate) play_game_urls: Vec<String>,
    /// Connections one client address may hold open at once; one more is answered 503.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub(crate) max_connections_per_address: usize,
    /// A reverse proxy (CIDR network or address; repeatable) whose X-Forwarded-For or
    /// Forwarded names the client address logins are throttled by. Without one, those headers
    /// are ignored.
    #[arg(long = "trusted-proxy", value_name = "CIDR")]
    pub(crate) trusted_proxies: Vec<String>,
    /// Sessions one password user may hold; a new login ends the oldest. Raise it to mint
    /// more than N x 4,096 tokens for one user (`load --api`).
    #[arg(long, value_name = "N", default_value_t = SessionLimits::default().sessions_per_user)]
    pub(crate) sessions_per_user: usize,
}

/// Serves until Ctrl-C; exit 2 on a bad users file, notify target or admin secret.
pub(crate) async fn run(args: ServeApiArgs) -> ExitCode {
    let api = match config(&args)
        .and_then(|config| ReferenceApi::new(config).map_err(|e| e.to_string()))
    {
        Ok(api) => api,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    api.set_user_latency(Duration::from_millis(args.latency_ms));
    let served = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
            };
            let (cert, key) = match (read(cert), read(key)) {
                (Ok(cert), Ok(key)) => (cert, key),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            api.spawn_tls(args.listen, &cert, &key).await
        }
        _ => api.spawn(args.listen).await,
    };
    let running = match served {
        Ok(running) => running,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            eprintln!("error: --tls-cert/--tls-key: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    println!("reference integrator API on {}", running.base_url());
    if args.latency_ms > 0 {
        println!("POST /api/user answers after {} ms", args.latency_ms);
    }
    if args.users.is_none() {
        println!("demo users: alice/wonderland (id 1), bob/builder (id 2), carol/carolina (id 3)");
    }
    println!("endpoints: POST /api/login, /api/access_token, /api/user, /api/logout; Ctrl-C stops");
    if std::env::var_os(ADMIN_TOKEN_VAR).is_some() {
        println!("admin: POST /api/admin/ban, /api/admin/unban (bearer {ADMIN_TOKEN_VAR})");
    }
    for target in &args.notify {
        println!("notifying {target}/admin/revoke of logouts and bans");
    }
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}

/// The API's configuration from the flags and TOKEN_RESOLVER_ADMIN_TOKEN; a usage error names
/// the flag, file or variable at fault.
fn config(args: &ServeApiArgs) -> Result<ApiConfig, String> {
    let ttl = Duration::from_secs(args.token_ttl);
    let mut config = match &args.users {
        Some(path) => ApiConfig::from_users_file(path, ttl).map_err(|e| e.to_string())?,
        None => ApiConfig {
            token_ttl: ttl,
            ..ApiConfig::default()
        },
    };
    config.admin_secret = match std::env::var(ADMIN_TOKEN_VAR) {
        Ok(secret) => Some(AdminSecret::new(secret).map_err(|e| e.to_string())?),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(format!("{ADMIN_TOKEN_VAR} is not valid UTF-8"))
        }
    };
    if !args.notify.is_empty() && config.admin_secret.is_none() {
        return Err(format!(
            "--notify needs {ADMIN_TOKEN_VAR}: the game servers' admin secret, at least {} bytes",
            AdminSecret::MIN_BYTES
        ));
    }
    config.notify = args.notify.clone();
    config.notify_retry_for = Duration::from_secs(args.notify_retry_for);
    config.notify_expired_for = Duration::from_secs(args.notify_expired_for);
    config.public_url = args.public_url.clone();
    config.play_game_urls = args.play_game_urls.clone();
    config.serve.max_connections_per_address = args.max_connections_per_address;
    config.trusted_proxies = TrustedProxies::parse(&args.trusted_proxies)
        .map_err(|e| format!("--trusted-proxy: {e}"))?;
    config.session_limits.sessions_per_user = args.sessions_per_user;
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}
