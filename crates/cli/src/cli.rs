//! The command line: the subcommands, and running one to its exit status. Each subcommand's
//! arguments and behaviour live in its module under `cmd/`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::cmd;
use crate::config_file;

/// Resolve game players' access tokens through the integrator's /api/user.
#[derive(Debug, Parser)]
#[command(name = "token-resolver", version, about)]
pub(crate) struct Cli {
    /// How log lines on stderr are written: text for people, json for a log shipper.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Export spans over OTLP (HTTP/protobuf) to the collector at this base URL
    /// (http://127.0.0.1:4318): each resolution and its call to /api/user, in the trace of the
    /// request that asked (W3C traceparent). Off when unset.
    #[arg(
        long,
        global = true,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL"
    )]
    pub(crate) otlp_endpoint: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The format of the log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One human-readable line per event, with its span's fields.
    Text,
    /// One JSON object per event, with its fields and its spans' fields.
    Json,
}

/// The subcommands. One value per process, so the size of the largest does not matter.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Command {
    /// Serve the reference integrator web API (login, access_token, user, logout; admin ban and
    /// unban; revocations told to game servers with --notify).
    ServeApi(cmd::serve_api::ServeApiArgs),
    /// Resolve one access token and print the user as one JSON line.
    Resolve(cmd::resolve::ResolveArgs),
    /// Walk the whole flow (login, token, connect, join) on loopback, printing each step.
    Demo(cmd::demo::DemoArgs),
    /// Run a game server embedding the resolver (TCP, JSON lines: connect, search_room, join).
    GameServer(cmd::game_server::GameServerArgs),
    /// Run the resolver as a loopback service for game servers in other languages (HTTP/JSON,
    /// Server-Sent Events, forward-auth, Envoy ext_authz over gRPC).
    Sidecar(cmd::sidecar::SidecarArgs),
    /// Check an integrator's user information API against the protocol; exit 1 on a failure.
    Check(cmd::check::CheckArgs),
    /// Measure throughput, latency and memory against the baselines; print one table.
    Load(cmd::load::LoadArgs),
    /// Run the sidecar, then a game server beside it once the sidecar is ready
    /// (TOKEN_RESOLVER_URL in its environment); SIGTERM and SIGINT go to the game server, and
    /// its exit status is this process's: `run [sidecar options] -- GAME_SERVER ARGS...`.
    Run(cmd::run::RunArgs),
}

/// The command line of this process, with `game-server --config FILE` (or `sidecar`'s, or
/// `run`'s) merged in; a usage error (in the flags or in the file) ends the process with exit
/// status 2.
pub(crate) fn parse() -> Cli {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let matches = Cli::command().get_matches_from(&argv);
    let config = match matches.subcommand() {
        Some((name @ ("game-server" | "sidecar" | "run"), sub)) => {
            (sub.get_one::<PathBuf>("config").cloned()).map(|c| (c, name, sub))
        }
        _ => None,
    };
    let Some((path, name, sub)) = config else {
        return Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    };
    let mut command = Cli::command();
    command.build();
    let subcommand = command
        .find_subcommand(name)
        .expect("a subcommand that takes --config");
    // `run`'s game server command line (from `--` on) stays last, after the file's flags.
    let mut argv = argv;
    let command_line = match argv.iter().position(|arg| arg == "--") {
        Some(at) if name == "run" => argv.split_off(at),
        _ => Vec::new(),
    };
    let mut merged = match config_file::merge(argv, &path, subcommand, sub) {
        Ok(merged) => merged,
        Err(e) => usage(&e),
    };
    merged.argv.extend(command_line);
    let parsed = Cli::command()
        .try_get_matches_from(&merged.argv)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    match parsed {
        Ok(cli) => cli,
        Err(error) => match merged.explain(error) {
            Ok(error) => error.exit(),
            Err(e) => usage(&e),
        },
    }
}

/// Ends the process on a usage error.
fn usage(error: &config_file::ConfigFileError) -> ! {
    eprintln!("error: {error}");
    std::process::exit(2)
}

impl Command {
    /// The subcommand's name on the command line: the process's service name in its traces.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Command::ServeApi(_) => "serve-api",
            Command::Resolve(_) => "resolve",
            Command::Demo(_) => "demo",
            Command::GameServer(_) => "game-server",
            Command::Sidecar(_) => "sidecar",
            Command::Check(_) => "check",
            Command::Load(_) => "load",
            // The process is the sidecar, with the game server as its child.
            Command::Run(_) => "sidecar",
        }
    }
}

/// Runs a parsed command line to its exit status.
pub(crate) async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::ServeApi(args) => cmd::serve_api::run(args).await,
        Command::Resolve(args) => cmd::resolve::run(args).await,
        Command::Demo(args) => cmd::demo::run(args).await,
        Command::GameServer(args) => cmd::game_server::run(args).await,
        Command::Sidecar(args) => cmd::sidecar::run(args).await,
        Command::Check(args) => cmd::check::run(args).await,
        Command::Load(args) => cmd::load::run(args).await,
        Command::Run(args) => cmd::run::run(args).await,
    }
}
