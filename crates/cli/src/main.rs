//! The `token-resolver` binary: parses arguments, sets up logging on stderr, runs the command.
//!
//! - `cli`: the subcommands, parsing the command line, and running one to its exit status;
//! - `config_file`: `game-server --config FILE`, merged into the command line;
//! - `observe`: log lines on stderr, and spans over OTLP with `--otlp-endpoint`;
//! - `cmd/`: one module per subcommand with its arguments: `serve_api`, `resolve`,
//!   `game_server`, `check`, `demo` (the whole flow, narrated) and `load/` (the throughput and
//!   memory harness, whose baselines it shares with the benches), `run` (the sidecar, then a
//!   game server beside it).

mod cli;
mod cmd;
mod config_file;
mod observe;

use std::process::ExitCode;

use crate::cli::run;

/// mimalloc, for the cache's many small allocations: see `docs/performance.md` ("Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let service = format!("token-resolver-{}", cli.command.name());
        let export = observe::Export::configured(cli.otlp_endpoint.as_deref(), service);
        let telemetry = match observe::install(cli.log_format, export) {
            Ok(telemetry) => telemetry,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let code = run(cli).await;
        telemetry.shutdown().await;
        code
    })
}
