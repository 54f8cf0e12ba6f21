//! The `token-resolver` binary: parses arguments, sets up logging on stderr, runs the command.
//!
//! - `cli`: the subcommands, and running one to its exit status;
//! - `cmd/`: one module per subcommand with its arguments: `serve_api`, `resolve`,
//!   `game_server`, `check`, `demo` (the seed's flow, narrated) and `load/` (the throughput and
//!   memory harness, whose baselines it shares with the benches).

mod cli;
mod cmd;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{run, Cli};

/// mimalloc, for the cache's many small allocations: see `docs/performance.md` ("Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}
