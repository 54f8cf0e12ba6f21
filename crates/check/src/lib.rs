//! `token-resolver check`: a conformance checker an integrator runs against their own user
//! information API before going live. It owns the checks, their verdicts and hints, and the
//! [`Report`] they make; the CLI only prints it. It does not resolve tokens for a game server
//! (that is [`Resolver`](token_resolver::Resolver)'s job), and it judges the API by the same rules the
//! resolver applies ([`parse_user`](token_resolver::answer::parse_user), [`Endpoint`],
//! [`check_syntax`](token_resolver::check_syntax)).
//!
//! Traffic goes only to the given URL's origin: `POST {authUrl}/api/user`, and, with
//! credentials, `POST /api/login` and `POST /api/access_token` beside it. Redirects are not
//! followed. The token is never printed: not in the report, not in a `Debug` output.
//!
//! | check | passes when |
//! |---|---|
//! | `https` | the URL is `https` (`http` to loopback passes, `http` elsewhere warns or fails) |
//! | `token_syntax` | the token is an RFC 6750 `b64token` of at most 4096 bytes |
//! | `post_accepted` | `POST` with the token is answered 200 |
//! | `answer_shape` | that answer is one JSON object with integer `id` and string `name` |
//! | `content_type` | that answer is `application/json` |
//! | `cache_control` | that answer has `Cache-Control` with `max-age` ≤ 300 s, or `no-store` |
//! | `bearer_read` | a made-up token, and no token, get 401 or 403 |
//! | `www_authenticate` | that 401 carries `WWW-Authenticate: Bearer` |
//! | `latency` | N calls all answer 200 (warns when p95 > 500 ms) |
//! | `login_flow` | with credentials: login, access token, then `/api/user` answers that user |
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod checks;
mod report;

use std::fmt;
use std::time::Duration;

pub use self::checks::https_check;
use self::checks::{check_login_flow, check_token_syntax, check_with_token};
pub use self::report::{CheckId, CheckResult, Report, Verdict};
use token_resolver::{Endpoint, PlainHttp, ResolveError};

/// Largest answer body read, as the resolver's default `max_response_bytes`.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;
/// A `max-age` above this many seconds is a warning: a revoked token stays usable that long.
pub const MAX_SANE_MAX_AGE_SECS: u64 = 300;
/// A p95 latency above this is a warning: uncached joins wait on it.
pub const SLOW_P95: Duration = Duration::from_millis(500);
/// Longest header value quoted in a detail.
pub(crate) const MAX_QUOTED_CHARS: usize = 80;

/// How to log in for the `login_flow` check.
#[derive(Clone)]
pub enum Login {
    /// `POST /api/login {"username", "password"}`.
    Password {
        /// The login name.
        username: String,
        /// The password; never printed.
        password: String,
    },
    /// `POST /api/login {"device_id"}`.
    Device {
        /// The device identifier; never printed.
        device_id: String,
    },
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Login::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .field("password", &"[redacted]")
                .finish(),
            Login::Device { .. } => f
                .debug_struct("Device")
                .field("device_id", &"[redacted]")
                .finish(),
        }
    }
}

/// What to check and how.
#[derive(Clone)]
pub struct CheckConfig {
    /// The authUrl: the API's base URL, or its `/api/user` URL.
    pub auth_url: String,
    /// A valid access token to check with. Optional when [`login`](Self::login) is given:
    /// then the login flow's token is used.
    pub access_token: Option<String>,
    /// Credentials for the `login_flow` check; `None` skips it.
    pub login: Option<Login>,
    /// How many calls the `latency` check makes. Default: 10; 0 skips it.
    pub calls: usize,
    /// Check an `http://` URL on a non-loopback host anyway (a warning instead of a failure).
    /// Default: `false`.
    pub allow_insecure_http: bool,
    /// Deadline for each request. Default: 5 s.
    pub timeout: Duration,
}

impl CheckConfig {
    /// A configuration for `auth_url` with `access_token` and the defaults above.
    pub fn new(auth_url: impl Into<String>, access_token: Option<String>) -> Self {
        CheckConfig {
            auth_url: auth_url.into(),
            access_token,
            login: None,
            calls: 10,
            allow_insecure_http: false,
            timeout: Duration::from_secs(5),
        }
    }
}

impl fmt::Debug for CheckConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckConfig")
            .field("auth_url", &self.auth_url)
            .field(
                "access_token",
                &self.access_token.as_ref().map(|_| "[redacted]"),
            )
            .field("login", &self.login)
            .field("calls", &self.calls)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why the checks could not start at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The authUrl is not a usable URL (scheme, userinfo, query, fragment).
    #[error("the authUrl is not usable: {0}")]
    InvalidUrl(#[source] ResolveError),
    /// Neither a token nor credentials to obtain one were given.
    #[error("nothing to check with: give an access token, or credentials to log in")]
    NoToken,
    /// The HTTP client could not be set up (its TLS backend failed to start).
    #[error("cannot start the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
}

/// The checks after `https`, in the order printed.
const AFTER_HTTPS: [CheckId; 9] = [
    CheckId::TokenSyntax,
    CheckId::PostAccepted,
    CheckId::AnswerShape,
    CheckId::ContentType,
    CheckId::CacheControl,
    CheckId::BearerRead,
    CheckId::WwwAuthenticate,
    CheckId::Latency,
    CheckId::LoginFlow,
];

/// Runs every check against the API at `config.auth_url` and returns the report.
///
/// # Errors
///
/// [`CheckError::InvalidUrl`] when the URL cannot be used at all, [`CheckError::NoToken`]
/// without a token or credentials, [`CheckError::HttpClient`] when no HTTP client can start.
/// Everything the API does wrong is in the [`Report`].
pub async fn run(config: &CheckConfig) -> Result<Report, CheckError> {
    let endpoint =
        Endpoint::parse(&config.auth_url, PlainHttp::Anywhere).map_err(CheckError::InvalidUrl)?;
    if config.access_token.is_none() && config.login.is_none() {
        return Err(CheckError::NoToken);
    }
    let mut report = Report {
        endpoint: endpoint.as_str().to_owned(),
        results: Vec::new(),
    };
    let https = https_check(&config.auth_url, config.allow_insecure_http);
    let blocked = https.verdict == Verdict::Fail;
    report.results.push(https);
    if blocked {
        report.skip(
            &AFTER_HTTPS,
            "not run: the URL is not safe to send a token to",
        );
        return Ok(report);
    }
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(config.timeout)
        .connect_timeout(config.timeout)
        .build()
        .map_err(CheckError::HttpClient)?;
    let user_url = endpoint.as_str();
    let base_url = user_url.strip_suffix("/api/user").unwrap_or(user_url);
    let (login_flow, flow_token) = match &config.login {
        Some(login) => check_login_flow(&http, base_url, user_url, login).await,
        None => (
            CheckResult::skip(
                CheckId::LoginFlow,
                "not run: give --username/--password or --device-id to check login -> access_token -> user",
            ),
            None,
        ),
    };
    let (token, source) = match (&config.access_token, flow_token) {
        (Some(token), _) => (Some(token.clone()), ""),
        (None, token) => (token, " (the login flow's token)"),
    };
    let with_token = &AFTER_HTTPS[..AFTER_HTTPS.len() - 1];
    match token {
        None => report.skip(with_token, "not run: no token (the login flow failed)"),
        Some(token) => match check_token_syntax(&token, source) {
            syntax if syntax.verdict == Verdict::Fail => {
                report.results.push(syntax);
                report.skip(&with_token[1..], "not run: the token is malformed");
            }
            syntax => {
                report.results.push(syntax);
                check_with_token(&http, user_url, &token, config.calls, &mut report).await;
            }
        },
    }
    report.results.push(login_flow);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_a_config_hides_the_token_and_the_password() {
        let mut config = CheckConfig::new("https://a.example", Some("SECRET-TOKEN".into()));
        config.login = Some(Login::Password {
            username: "alice".into(),
            password: "SECRET-PASSWORD".into(),
        });
        let shown = format!("{config:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("alice"), "{shown}");
    }
}
