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
