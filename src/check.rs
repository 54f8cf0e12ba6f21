//! `token-resolver check`: a conformance checker an integrator runs against their own user
//! information API before going live. It owns the checks, their verdicts and hints, and the
//! [`Report`] they make; the CLI only prints it. It does not resolve tokens for a game server
//! (that is [`Resolver`](crate::Resolver)'s job), and it judges the API by the same rules the
//! resolver applies ([`parse_user`], [`Endpoint`], [`check_syntax`]).
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

use std::fmt;
use std::time::{Duration, Instant};

use reqwest::header::{
    HeaderMap, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE,
};

use crate::answer::parse_user;
use crate::client::{ClientError, IntegratorClient};
use crate::token::check_syntax;
use crate::Endpoint;

/// Largest answer body read, as the resolver's default `max_response_bytes`.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// A `max-age` above this many seconds is a warning: a revoked token stays usable that long.
pub const MAX_SANE_MAX_AGE_SECS: u64 = 300;
/// A p95 latency above this is a warning: uncached joins wait on it.
pub const SLOW_P95: Duration = Duration::from_millis(500);
/// Longest header value quoted in a detail.
const MAX_QUOTED_CHARS: usize = 80;

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

/// One check; [`as_str`](Self::as_str) is the name the report prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckId {
    /// The URL's scheme: tokens must not travel in the clear.
    Https,
    /// The token's syntax, as the resolver checks it before any call.
    TokenSyntax,
    /// `POST` with the token is answered 200.
    PostAccepted,
    /// The answer is `{"id": <integer>, "name": <string>}`.
    AnswerShape,
    /// The answer's `Content-Type` is JSON.
    ContentType,
    /// The answer's `Cache-Control` is present and sane.
    CacheControl,
    /// A wrong or missing token gets 401/403.
    BearerRead,
    /// The 401 carries a Bearer challenge.
    WwwAuthenticate,
    /// Latency percentiles over several calls.
    Latency,
    /// Login, access token, then `/api/user` for that token.
    LoginFlow,
}

impl CheckId {
    /// The check's name, e.g. `"bearer_read"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CheckId::Https => "https",
            CheckId::TokenSyntax => "token_syntax",
            CheckId::PostAccepted => "post_accepted",
            CheckId::AnswerShape => "answer_shape",
            CheckId::ContentType => "content_type",
            CheckId::CacheControl => "cache_control",
            CheckId::BearerRead => "bearer_read",
            CheckId::WwwAuthenticate => "www_authenticate",
            CheckId::Latency => "latency",
            CheckId::LoginFlow => "login_flow",
        }
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Conforms.
    Pass,
    /// Works, but should be fixed before going live; does not fail the check run.
    Warn,
    /// Breaks the protocol or security; the check run fails.
    Fail,
    /// Not run: it needs something that is missing (an earlier check's answer, credentials).
    Skip,
}

impl Verdict {
    /// `"PASS"`, `"WARN"`, `"FAIL"` or `"SKIP"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Which check.
    pub check: CheckId,
    /// How it went.
    pub verdict: Verdict,
    /// What was seen, e.g. `a made-up token got HTTP 200`. Never the token.
    pub detail: String,
    /// What to change, for failures and warnings.
    pub hint: Option<String>,
}

impl CheckResult {
    fn new(check: CheckId, verdict: Verdict, detail: impl Into<String>) -> Self {
        CheckResult {
            check,
            verdict,
            detail: detail.into(),
            hint: None,
        }
    }

    fn pass(check: CheckId, detail: impl Into<String>) -> Self {
        Self::new(check, Verdict::Pass, detail)
    }

    fn skip(check: CheckId, detail: impl Into<String>) -> Self {
        Self::new(check, Verdict::Skip, detail)
    }

    fn fail(check: CheckId, detail: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(check, Verdict::Fail, detail).with_hint(hint)
    }

    fn warn(check: CheckId, detail: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(check, Verdict::Warn, detail).with_hint(hint)
    }

    fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Every check's result, in the order printed. `Display` renders the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The `/api/user` URL checked.
    pub endpoint: String,
    /// One result per check.
    pub results: Vec<CheckResult>,
}

impl Report {
    /// `true` when no check failed (warnings and skips do not fail).
    pub fn passed(&self) -> bool {
        self.count(Verdict::Fail) == 0
    }

    /// The result of `check`, if it is in the report.
    pub fn get(&self, check: CheckId) -> Option<&CheckResult> {
        self.results.iter().find(|r| r.check == check)
    }

    /// How many checks ended with `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.results.iter().filter(|r| r.verdict == verdict).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "token-resolver check of {}\n", self.endpoint)?;
        let width = self
            .results
            .iter()
            .map(|r| r.check.as_str().len())
            .max()
            .unwrap_or(0);
        for r in &self.results {
            writeln!(
                f,
                "  {}  {:<width$}  {}",
                r.verdict.as_str(),
                r.check.as_str(),
                r.detail
            )?;
            if let Some(hint) = &r.hint {
                writeln!(f, "  {:4}  {:<width$}  hint: {hint}", "", "")?;
            }
        }
        let verdict = if self.passed() { "ready" } else { "NOT READY" };
        write!(
            f,
            "\nverdict: {verdict} ({} passed, {} failed, {}, {} skipped)",
            self.count(Verdict::Pass),
            self.count(Verdict::Fail),
            plural(self.count(Verdict::Warn), "warning"),
            self.count(Verdict::Skip)
        )
    }
}

/// `1 warning`, `2 warnings`.
fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Why the checks could not start at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The authUrl is not a usable URL (scheme, userinfo, query, fragment).
    #[error("the authUrl is not usable: {reason}")]
    InvalidUrl {
        /// What is wrong with it.
        reason: String,
    },
    /// Neither a token nor credentials to obtain one were given.
    #[error("nothing to check with: give an access token, or credentials to log in")]
    NoToken,
}

/// The `https` check on its own, from the URL alone (no traffic): `https` passes, `http` to
/// a loopback host passes (for local testing), `http` elsewhere is a warning when
/// `allow_insecure_http`, otherwise a failure (and the other checks do not run).
pub fn https_check(auth_url: &str, allow_insecure_http: bool) -> CheckResult {
    let id = CheckId::Https;
    let url = match url::Url::parse(auth_url) {
        Ok(url) => url,
        Err(e) => {
            return CheckResult::fail(
                id,
                format!("not a URL ({e})"),
                "give the API's base URL, e.g. https://api.example.com",
            )
        }
    };
    let host = url.host_str().unwrap_or_default().to_owned();
    match url.scheme() {
        "https" => CheckResult::pass(id, "https"),
        "http" if Endpoint::parse(auth_url, false).is_ok() => CheckResult::pass(
            id,
            format!("http to the loopback host {host}: fine for testing; use https in production"),
        ),
        "http" if allow_insecure_http => CheckResult::warn(
            id,
            format!("http to {host}: tokens travel in the clear"),
            "serve the API over https; game servers refuse http off loopback unless told otherwise",
        ),
        "http" => CheckResult::fail(
            id,
            format!("http to {host}: not sending a token in the clear"),
            "serve the API over https, or pass --allow-insecure-http to check it anyway",
        ),
        other => CheckResult::fail(
            id,
            format!("scheme {other:?}"),
            "the user information API must be served over https",
        ),
    }
}

/// Runs every check against the API at `config.auth_url` and returns the report.
///
/// # Errors
///
/// [`CheckError::InvalidUrl`] when the URL cannot be used at all, [`CheckError::NoToken`]
/// without a token or credentials. Everything the API does wrong is in the [`Report`].
pub async fn run(config: &CheckConfig) -> Result<Report, CheckError> {
    let endpoint = Endpoint::parse(&config.auth_url, true)
        .map_err(|reason| CheckError::InvalidUrl { reason })?;
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
    let after = [
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
    if blocked {
        for id in after {
            report.results.push(CheckResult::skip(
                id,
                "not run: the URL is not safe to send a token to",
            ));
        }
        return Ok(report);
    }

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(config.timeout)
        .connect_timeout(config.timeout)
        .build()
        .unwrap_or_default();
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
    let (token, from_flow) = match (&config.access_token, flow_token) {
        (Some(token), _) => (Some(token.clone()), false),
        (None, token) => (token, true),
    };

    let token = match token {
        None => {
            for id in &after[..after.len() - 1] {
                report.results.push(CheckResult::skip(
                    *id,
                    "not run: no token (the login flow failed)",
                ));
            }
            report.results.push(login_flow);
            return Ok(report);
        }
        Some(token) => token,
    };
    let source = if from_flow {
        " (the login flow's token)"
    } else {
        ""
    };
    match check_syntax(&token) {
        Ok(()) => report.results.push(CheckResult::pass(
            CheckId::TokenSyntax,
            format!(
                "an RFC 6750 b64token, {}{source}",
                plural(token.len(), "byte")
            ),
        )),
        Err(e) => {
            report.results.push(CheckResult::fail(
                CheckId::TokenSyntax,
                format!("{e}{source}"),
                "issue tokens of A-Z a-z 0-9 - . _ ~ + / (then optional =), at most 4096 bytes: game servers refuse others as token_malformed without calling you",
            ));
            for id in &after[1..after.len() - 1] {
                report
                    .results
                    .push(CheckResult::skip(*id, "not run: the token is malformed"));
            }
            report.results.push(login_flow);
            return Ok(report);
        }
    }

    let first = post(&http, user_url, Some(&token)).await;
    let accepted = check_post_accepted(&first);
    let ok = accepted.verdict == Verdict::Pass;
    report.results.push(accepted);
    match (&first, ok) {
        (Ok(answer), true) => {
            report.results.push(check_answer_shape(answer));
            report.results.push(check_content_type(&answer.headers));
            report.results.push(check_cache_control(&answer.headers));
        }
        _ => {
            for id in [
                CheckId::AnswerShape,
                CheckId::ContentType,
                CheckId::CacheControl,
            ] {
                report.results.push(CheckResult::skip(
                    id,
                    "not run: needs a 200 answer to the token",
                ));
            }
        }
    }

    let made_up = format!(
        "check-{}",
        std::iter::repeat_with(fastrand::alphanumeric)
            .take(32)
            .collect::<String>()
    );
    let wrong = post(&http, user_url, Some(&made_up)).await;
    let none = post(&http, user_url, None).await;
    report.results.push(check_bearer_read(&wrong, &none));
    report.results.push(check_www_authenticate(&wrong));

    report.results.push(if !ok {
        CheckResult::skip(CheckId::Latency, "not run: needs a 200 answer to the token")
    } else {
        check_latency(&http, user_url, &token, config.calls).await
    });
    report.results.push(login_flow);
    Ok(report)
}

/// What one `POST /api/user` got.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HeaderMap,
    /// The body, or why it could not be read whole.
    body: Result<Vec<u8>, String>,
    elapsed: Duration,
}

async fn post(http: &reqwest::Client, url: &str, token: Option<&str>) -> Result<Answer, String> {
    let started = Instant::now();
    let mut request = http
        .post(url)
        .header(reqwest::header::ACCEPT, "application/json");
    if let Some(token) = token {
        request = request.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let mut response = request.send().await.map_err(|e| error_chain(&e))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut body = Vec::new();
    let body = loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > MAX_BODY_BYTES => {
                break Err(format!(
                    "the body is larger than {} KiB",
                    MAX_BODY_BYTES / 1024
                ))
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break Ok(body),
            Err(e) => break Err(error_chain(&e)),
        }
    };
    Ok(Answer {
        status,
        headers,
        body,
        elapsed: started.elapsed(),
    })
}

/// An error with its causes, e.g. `error sending request: connection refused`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A header value fit to print: visible ASCII only, cut short.
fn quoted(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<String> {
    let value = headers.get(name)?;
    let text: String = String::from_utf8_lossy(value.as_bytes())
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(MAX_QUOTED_CHARS)
        .collect();
    Some(text)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn check_post_accepted(answer: &Result<Answer, String>) -> CheckResult {
    let id = CheckId::PostAccepted;
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            return CheckResult::fail(
                id,
                format!("no answer: {e}"),
                "check the URL, and that the API is up and reachable from the game server",
            )
        }
    };
    match answer.status {
        200 => CheckResult::pass(id, format!("POST with the token: HTTP 200 in {}", ms(answer.elapsed))),
        405 => CheckResult::fail(
            id,
            format!(
                "POST answered HTTP 405{}",
                quoted(&answer.headers, reqwest::header::ALLOW)
                    .map(|a| format!(" (Allow: {a})"))
                    .unwrap_or_default()
            ),
            "accept POST on /api/user: the game server always calls it with POST and an empty body",
        ),
        404 => CheckResult::fail(
            id,
            "POST answered HTTP 404",
            "serve the user information API at {authUrl}/api/user, or give its full URL",
        ),
        401 | 403 => CheckResult::fail(
            id,
            format!("the token you gave was rejected (HTTP {})", answer.status),
            "take a fresh token from your token acquisition API and pass it with --token (or use --username/--password)",
        ),
        300..=399 => CheckResult::fail(
            id,
            format!(
                "HTTP {} redirect{}",
                answer.status,
                quoted(&answer.headers, LOCATION)
                    .map(|l| format!(" to {l}"))
                    .unwrap_or_default()
            ),
            "answer at this URL directly: the game server never follows redirects",
        ),
        status => CheckResult::fail(
            id,
            format!("POST with the token answered HTTP {status}"),
            "answer 200 with the user for a valid token",
        ),
    }
}

fn check_answer_shape(answer: &Answer) -> CheckResult {
    let id = CheckId::AnswerShape;
    let hint =
        r#"answer one JSON object {"id": <integer>, "name": <string>}; further fields are allowed"#;
    match &answer.body {
        Err(e) => CheckResult::fail(id, e.clone(), hint),
        Ok(body) => match parse_user(body) {
            Ok(user) => CheckResult::pass(
                id,
                format!("id {} (integer), name {:?} (string)", user.id, user.name),
            ),
            Err(e) => CheckResult::fail(id, e, hint),
        },
    }
}

fn check_content_type(headers: &HeaderMap) -> CheckResult {
    let id = CheckId::ContentType;
    let hint = "send Content-Type: application/json";
    match quoted(headers, CONTENT_TYPE) {
        None => CheckResult::fail(id, "no Content-Type", hint),
        Some(value) => {
            let mime = value
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            if mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
            {
                CheckResult::pass(id, format!("Content-Type: {value}"))
            } else {
                CheckResult::fail(id, format!("Content-Type: {value}"), hint)
            }
        }
    }
}

fn check_cache_control(headers: &HeaderMap) -> CheckResult {
    let id = CheckId::CacheControl;
    let Some(value) = quoted(headers, CACHE_CONTROL) else {
        return CheckResult::fail(
            id,
            "no Cache-Control",
            "send Cache-Control: private, max-age=N (N at most 60 and at most the token's remaining life), or no-store: without it game servers cache answers for their own limit",
        );
    };
    let mut max_age = None;
    let mut public = false;
    for directive in value.split(',') {
        let (name, arg) = match directive.split_once('=') {
            Some((name, arg)) => (name.trim(), Some(arg.trim().trim_matches('"'))),
            None => (directive.trim(), None),
        };
        if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
            return CheckResult::pass(id, format!("Cache-Control: {value} (game servers will not cache; every uncached join calls you)"));
        }
        if name.eq_ignore_ascii_case("public") {
            public = true;
        }
        if name.eq_ignore_ascii_case("max-age") {
            match arg.filter(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit())) {
                Some(secs) => max_age = Some(secs.parse::<u64>().unwrap_or(u64::MAX)),
                None => return CheckResult::fail(
                    id,
                    format!("Cache-Control: {value}: max-age is not a number of seconds"),
                    "write max-age=N with N a whole number of seconds, e.g. private, max-age=60",
                ),
            }
        }
    }
    match max_age {
        None => CheckResult::warn(
            id,
            format!("Cache-Control: {value}: neither max-age nor no-store"),
            "say how long the answer may be cached: private, max-age=N (N at most 60), or no-store",
        ),
        Some(secs) if secs > MAX_SANE_MAX_AGE_SECS => CheckResult::warn(
            id,
            format!("Cache-Control: {value}: a revoked token may stay usable for {secs} s"),
            format!("keep max-age at most {MAX_SANE_MAX_AGE_SECS} s (the reference API uses at most 60) and at most the token's remaining life"),
        ),
        Some(_) if public => CheckResult::warn(
            id,
            format!("Cache-Control: {value}: public"),
            "use private: the answer is one user's data",
        ),
        Some(_) => CheckResult::pass(id, format!("Cache-Control: {value}")),
    }
}

fn check_bearer_read(wrong: &Result<Answer, String>, none: &Result<Answer, String>) -> CheckResult {
    let id = CheckId::BearerRead;
    let status = |a: &Result<Answer, String>| match a {
        Ok(a) => format!("HTTP {}", a.status),
        Err(e) => format!("no answer ({e})"),
    };
    let detail = format!(
        "made-up token: {}, no token: {}",
        status(wrong),
        status(none)
    );
    if wrong.is_err() && none.is_err() {
        return CheckResult::skip(id, "not run: the API did not answer");
    }
    let refused =
        |a: &Result<Answer, String>| matches!(a, Ok(a) if a.status == 401 || a.status == 403);
    let accepted = |a: &Result<Answer, String>| matches!(a, Ok(a) if a.status == 200);
    if refused(wrong) && refused(none) {
        CheckResult::pass(id, detail)
    } else if accepted(wrong) || accepted(none) {
        CheckResult::fail(
            id,
            detail,
            "read the token after \"Bearer \" in the Authorization header, look it up, and answer 401 when it is missing, unknown or expired: an API that answers 200 lets anyone in as someone",
        )
    } else {
        CheckResult::fail(
            id,
            detail,
            "answer 401 (or 403) to a missing, unknown or expired token: other statuses reach players as auth_unavailable or auth_bad_response instead of token_rejected",
        )
    }
}

fn check_www_authenticate(wrong: &Result<Answer, String>) -> CheckResult {
    let id = CheckId::WwwAuthenticate;
    let Ok(answer) = wrong else {
        return CheckResult::skip(id, "not run: no answer to a made-up token");
    };
    match answer.status {
        401 => match quoted(&answer.headers, WWW_AUTHENTICATE) {
            Some(v) if v.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("bearer")) => {
                CheckResult::pass(id, format!("401 with WWW-Authenticate: {v}"))
            }
            Some(v) => CheckResult::fail(
                id,
                format!("401 with WWW-Authenticate: {v}"),
                r#"challenge with the Bearer scheme: WWW-Authenticate: Bearer error="invalid_token" (RFC 6750)"#,
            ),
            None => CheckResult::fail(
                id,
                "401 without WWW-Authenticate",
                r#"send WWW-Authenticate: Bearer error="invalid_token" with a 401 (RFC 6750)"#,
            ),
        },
        403 => CheckResult::warn(
            id,
            "a made-up token got 403, not 401",
            r#"RFC 6750 answers an invalid token 401 with WWW-Authenticate: Bearer error="invalid_token" (game servers treat both as token_rejected)"#,
        ),
        status => CheckResult::skip(
            id,
            format!("not run: a made-up token got HTTP {status}, not 401"),
        ),
    }
}

async fn check_latency(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    calls: usize,
) -> CheckResult {
    let id = CheckId::Latency;
    if calls == 0 {
        return CheckResult::skip(id, "not run: --calls 0");
    }
    let mut times = Vec::with_capacity(calls);
    let mut failures = Vec::new();
    for _ in 0..calls {
        match post(http, url, Some(token)).await {
            Ok(a) if a.status == 200 && a.body.is_ok() => times.push(a.elapsed),
            Ok(a) => failures.push(format!("HTTP {}", a.status)),
            Err(e) => failures.push(e),
        }
    }
    if let Some(first) = failures.first() {
        return CheckResult::fail(
            id,
            format!("{} of {calls} calls with the same token failed (first: {first})", failures.len()),
            "answer every call for a valid token with 200: game servers call you on every uncached connect and join",
        );
    }
    times.sort();
    let pick = |p: f64| times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    let (p50, p95, max) = (pick(0.50), pick(0.95), times[times.len() - 1]);
    let detail = format!(
        "{calls} calls: p50 {}, p95 {}, max {}",
        ms(p50),
        ms(p95),
        ms(max)
    );
    if p95 > SLOW_P95 {
        CheckResult::warn(
            id,
            detail,
            format!(
                "keep p95 under {} ms: players wait on every uncached connect and join",
                SLOW_P95.as_millis()
            ),
        )
    } else {
        CheckResult::pass(id, detail)
    }
}

/// The login -> access_token -> user flow; its result and, when it got one, the token.
async fn check_login_flow(
    http: &reqwest::Client,
    base_url: &str,
    user_url: &str,
    login: &Login,
) -> (CheckResult, Option<String>) {
    let id = CheckId::LoginFlow;
    let mut client = IntegratorClient::new(base_url);
    let logged_in = match login {
        Login::Password { username, password } => client.login_password(username, password).await,
        Login::Device { device_id } => client.login_device(device_id).await,
    };
    let me = match logged_in {
        Ok(me) => me,
        Err(ClientError::Status { status: 401, .. }) => {
            return (
                CheckResult::fail(id, "POST /api/login answered 401", "check the credentials (--username/--password or --device-id)"),
                None,
            )
        }
        Err(e) => {
            return (
                CheckResult::fail(
                    id,
                    format!("login: {e}"),
                    "the check logs in as the reference API does: POST /api/login with JSON {\"username\",\"password\"} or {\"device_id\"}, answering {\"id\",\"name\"} and a session cookie; if yours differs, take a token your own way and pass --token",
                ),
                None,
            )
        }
    };
    let token = match client.fetch_access_token().await {
        Ok(token) => token.secret().to_owned(),
        Err(e) => {
            return (
                CheckResult::fail(
                    id,
                    format!("access_token: {e}"),
                    "POST /api/access_token with the session cookie must answer {\"access_token\": \"...\"}, an RFC 6750 b64token",
                ),
                None,
            )
        }
    };
    let result = match post(http, user_url, Some(&token)).await {
        Err(e) => CheckResult::fail(
            id,
            format!("/api/user with the fresh token: no answer ({e})"),
            "check that the API is up",
        ),
        Ok(a) if a.status != 200 => CheckResult::fail(
            id,
            format!(
                "/api/user answered HTTP {} to a token /api/access_token just issued",
                a.status
            ),
            "accept every token the token acquisition API issues, from the moment it is issued",
        ),
        Ok(a) => match a.body.as_deref().map_err(Clone::clone).and_then(parse_user) {
            Err(e) => CheckResult::fail(
                id,
                format!("/api/user: {e}"),
                r#"answer {"id": <integer>, "name": <string>}"#,
            ),
            Ok(user) if user.id != me.id => CheckResult::fail(
                id,
                format!(
                    "login answered id {} but /api/user answered id {} for its token",
                    me.id, user.id
                ),
                "a token must resolve to the user who logged in",
            ),
            Ok(user) => CheckResult::pass(
                id,
                format!(
                    "login (id {}) -> access_token -> /api/user answered id {} {:?}",
                    me.id, user.id, user.name
                ),
            ),
        },
    };
    (result, Some(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(name: reqwest::header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn cache_control_verdicts() {
        let v = |value: &str| check_cache_control(&headers(CACHE_CONTROL, value)).verdict;
        assert_eq!(v("private, max-age=60"), Verdict::Pass);
        assert_eq!(v("no-store"), Verdict::Pass);
        assert_eq!(v("private, max-age=86400"), Verdict::Warn);
        assert_eq!(v("public, max-age=60"), Verdict::Warn);
        assert_eq!(v("private"), Verdict::Warn);
        assert_eq!(v("max-age=soon"), Verdict::Fail);
        assert_eq!(
            check_cache_control(&HeaderMap::new()).verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn content_type_accepts_json_with_parameters() {
        let v = |value: &str| check_content_type(&headers(CONTENT_TYPE, value)).verdict;
        assert_eq!(v("application/json; charset=utf-8"), Verdict::Pass);
        assert_eq!(v("Application/JSON"), Verdict::Pass);
        assert_eq!(v("application/problem+json"), Verdict::Pass);
        assert_eq!(v("text/plain"), Verdict::Fail);
    }

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
