//! `token-resolver serve-api`: the reference integrator web API on a socket until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use token_resolver::reference_api::{ApiConfig, ReferenceApi};

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
}

/// Serves until Ctrl-C; exit 2 on a bad users file.
pub(crate) async fn run(args: ServeApiArgs) -> ExitCode {
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
