//! `token-resolver check`: the conformance checker's report on stdout; exit 0 when nothing
//! failed, 1 on a failure, 2 on a usage error.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use token_resolver_check::{self as check, CheckConfig, Login};

/// `check` arguments. `Debug` hides the token and the password.
#[derive(Args)]
pub(crate) struct CheckArgs {
    /// The authUrl to check (the API's base URL, or its /api/user).
    #[arg(long, value_name = "URL")]
    pub(crate) auth_url: String,
    /// A valid access token (or set TOKEN_RESOLVER_TOKEN); optional with credentials. A token
    /// may begin with `-` (base64url): it is taken as the value, not as a flag.
    #[arg(
        long,
        allow_hyphen_values = true,
        env = "TOKEN_RESOLVER_TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
    /// Log in with this username to check login -> access_token -> user.
    #[arg(long, requires = "password", conflicts_with = "device_id")]
    pub(crate) username: Option<String>,
    /// The password for --username (or set TOKEN_RESOLVER_PASSWORD).
    #[arg(
        long,
        env = "TOKEN_RESOLVER_PASSWORD",
        hide_env_values = true,
        requires = "username"
    )]
    pub(crate) password: Option<String>,
    /// Log in with this device id instead of a password.
    #[arg(long, value_name = "ID")]
    pub(crate) device_id: Option<String>,
    /// Calls for the latency percentiles.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub(crate) calls: usize,
    /// Check an http:// URL on a non-loopback host (a warning instead of a failure).
    #[arg(long)]
    pub(crate) allow_insecure_http: bool,
    /// Deadline for each request, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub(crate) timeout_ms: u64,
}

impl std::fmt::Debug for CheckArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "[redacted]");
        f.debug_struct("CheckArgs")
            .field("auth_url", &self.auth_url)
            .field("token", &hidden(&self.token))
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("device_id", &hidden(&self.device_id))
            .field("calls", &self.calls)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// Runs the checks and prints the report.
pub(crate) async fn run(args: CheckArgs) -> ExitCode {
    let login = match (&args.username, &args.password, &args.device_id) {
        (Some(username), Some(password), _) => Some(Login::Password {
            username: username.clone(),
            password: password.clone(),
        }),
        (_, _, Some(device_id)) => Some(Login::Device {
            device_id: device_id.clone(),
        }),
        _ => None,
    };
    let config = CheckConfig {
        login,
        calls: args.calls,
        allow_insecure_http: args.allow_insecure_http,
        timeout: Duration::from_millis(args.timeout_ms.max(1)),
        ..CheckConfig::new(args.auth_url, args.token)
    };
    match check::run(&config).await {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e} (see token-resolver check --help)");
            ExitCode::from(2)
        }
    }
}
