//! `token-resolver-chaos`: the seeded chaos run (issue 34). Thin: the command line, the seed
//! printed first, and the run (`token_resolver_chaos_run::run`).

use std::process::ExitCode;

use clap::Parser;
use token_resolver_chaos_run::args::Args;

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Some(file) = &args.judge {
        return ExitCode::from(token_resolver_chaos_run::run::judge(file));
    }
    let checked = match args.check() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // First thing, so that a run cut short can still be reproduced.
    println!("seed: {}", checked.seed);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    ExitCode::from(runtime.block_on(token_resolver_chaos_run::run::run(checked)))
}
