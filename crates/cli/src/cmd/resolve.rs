//! `token-resolver resolve`: one token resolved, one JSON line on stdout: the
//! user and exit 0, `{"error","message"}` and exit 1, or a usage error and exit 2.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use token_resolver::{ErrorCode, Resolver};

/// `resolve` arguments.
#[derive(Debug, Args)]
pub(crate) struct ResolveArgs {
    /// The authUrl (base URL of the integrator's web API, or its /api/user).
    #[arg(long, value_name = "URL")]
    pub(crate) auth_url: String,
    /// The access token (or set TOKEN_RESOLVER_TOKEN; --token-stdin keeps it out of `ps`).
    /// A token may begin with `-` (base64url): it is taken as the value, not as a flag.
    #[arg(
        long,
        allow_hyphen_values = true,
        env = "TOKEN_RESOLVER_TOKEN",
        hide_env_values = true,
        conflicts_with = "token_stdin",
        required_unless_present = "token_stdin"
    )]
    pub(crate) token: Option<String>,
    /// Read the access token from the first line of stdin.
    #[arg(long)]
    pub(crate) token_stdin: bool,
    /// Deadline for the whole resolution, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub(crate) timeout_ms: u64,
    /// Permit http:// to non-loopback hosts (sends the token in the clear).
    #[arg(long)]
    pub(crate) allow_insecure_http: bool,
}

/// Resolves the token and prints the line.
pub(crate) async fn run(args: ResolveArgs) -> ExitCode {
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
        // clap requires one of the two.
        (None, false) => {
            eprintln!(
                "error: resolve needs a token: --token, --token-stdin or TOKEN_RESOLVER_TOKEN"
            );
            return ExitCode::from(2);
        }
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
            ErrorCode::AuthUrlNotAllowed.as_str(),
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
