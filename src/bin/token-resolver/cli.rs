//! The command line: the subcommands, and running one to its exit status. Each subcommand's
//! arguments and behaviour live in its module under `cmd/`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cmd;

/// Resolve game players' access tokens through the integrator's /api/user.
#[derive(Debug, Parser)]
#[command(name = "token-resolver", version, about)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the reference integrator web API (login, access_token, user, logout).
    ServeApi(cmd::serve_api::ServeApiArgs),
    /// Resolve one access token and print the user as one JSON line.
    Resolve(cmd::resolve::ResolveArgs),
    /// Walk the seed's whole flow on loopback, printing each step.
    Demo,
    /// Run a game server embedding the resolver (TCP, JSON lines: connect, search_room, join).
    GameServer(cmd::game_server::GameServerArgs),
    /// Check an integrator's user information API against the protocol; exit 1 on a failure.
    Check(cmd::check::CheckArgs),
    /// Measure throughput, latency and memory against the baselines; print one table.
    Load(cmd::load::LoadArgs),
}

/// Runs a parsed command line to its exit status.
pub(crate) async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::ServeApi(args) => cmd::serve_api::run(args).await,
        Command::Resolve(args) => cmd::resolve::run(args).await,
        Command::Demo => cmd::demo::run().await,
        Command::GameServer(args) => cmd::game_server::run(args).await,
        Command::Check(args) => cmd::check::run(args).await,
        Command::Load(args) => cmd::load::run(args).await,
    }
}
