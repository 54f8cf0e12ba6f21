//! The `token-resolver` binary: parses arguments, sets up logging on stderr, runs the command.
//!
//! - `cli`: the subcommands, parsing the command line, and running one to its exit status;
//! - `config_file`: `game-server --config FILE`, merged into the command line;
//! - `cmd/`: one module per subcommand with its arguments: `serve_api`, `resolve`,
//!   `game_server`, `check`, `demo` (the whole flow, narrated) and `load/` (the throughput and
//!   memory harness, whose baselines it shares with the benches), `run` (the sidecar, then a
//!   game server beside it).

mod cli;
mod cmd;
mod config_file;

use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use crate::cli::{run, LogFormat};

/// mimalloc, for the cache's many small allocations: see `docs/performance.md` ("Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        // Every event with its own fields and those of the spans it is in (the connection's
        // id, the resolution's host and outcome), one JSON object per line.
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}
