//! The checks themselves: each one request (or a few) to the API, judged by the rules the
//! resolver applies, with a hint for every failure and warning.

use std::time::{Duration, Instant};

use reqwest::header::{
    HeaderMap, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE,
};

use super::report::plural;
use super::{
    CheckId, CheckResult, Login, Report, Verdict, MAX_BODY_BYTES, MAX_QUOTED_CHARS,
    MAX_SANE_MAX_AGE_SECS, SLOW_P95,
};
use token_resolver::answer::parse_user;
use token_resolver::{check_syntax, Endpoint, PlainHttp};
use token_resolver_player::{ClientError, IntegratorClient, LoggedIn};

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
        "http" if Endpoint::parse(auth_url, PlainHttp::LoopbackOnly).is_ok() => CheckResult::pass(
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

/// `token_syntax`, for a token taken from `source` (`""` for the one given).
pub(super) fn check_token_syntax(token: &str, source: &str) -> CheckResult {
    match check_syntax(token) {
        Ok(()) => CheckResult::pass(
            CheckId::TokenSyntax,
            format!(
                "an RFC 6750 b64token, {}{source}",
                plural(token.len(), "byte")
            ),
        ),
        Err(e) => CheckResult::fail(
            CheckId::TokenSyntax,
            format!("{e}{source}"),
            "issue tokens of A-Z a-z 0-9 - . _ ~ + / (then optional =), at most 4096 bytes: game servers refuse others as token_malformed without calling you",
        ),
    }
}

/// The checks that send a token: the valid one, a made-up one and none.
pub(super) async fn check_with_token(
    http: &reqwest::Client,
    user_url: &str,
    token: &str,
    calls: usize,
    report: &mut Report,
) {
    let first = post(http, user_url, Some(token)).await;
    let accepted = check_post_accepted(&first);
    let ok = accepted.verdict == Verdict::Pass;
    report.results.push(accepted);
    match (&first, ok) {
        (Ok(answer), true) => {
            report.results.push(check_answer_shape(answer));
            report.results.push(check_content_type(&answer.headers));
            report.results.push(check_cache_control(&answer.headers));
        }
        _ => report.skip(
            &[
                CheckId::AnswerShape,
                CheckId::ContentType,
                CheckId::CacheControl,
            ],
            "not run: needs a 200 answer to the token",
        ),
    }
    let made_up = format!(
        "check-{}",
        std::iter::repeat_with(fastrand::alphanumeric)
            .take(32)
            .collect::<String>()
    );
    let wrong = post(http, user_url, Some(&made_up)).await;
    let none = post(http, user_url, None).await;
    report.results.push(check_bearer_read(&wrong, &none));
    report.results.push(check_www_authenticate(&wrong));
    report.results.push(if !ok {
        CheckResult::skip(CheckId::Latency, "not run: needs a 200 answer to the token")
    } else {
        check_latency(http, user_url, token, calls).await
    });
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
            Err(e) => CheckResult::fail(id, e.to_string(), hint),
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
pub(super) async fn check_login_flow(
    http: &reqwest::Client,
    base_url: &str,
    user_url: &str,
    login: &Login,
) -> (CheckResult, Option<String>) {
    match log_in(base_url, login).await {
        Ok((me, token)) => {
            let result = check_fresh_token(http, user_url, &token, &me).await;
            (result, Some(token))
        }
        Err(failed) => (failed, None),
    }
}

/// Logs in as `login` says and takes an access token; the failed `login_flow` otherwise.
async fn log_in(base_url: &str, login: &Login) -> Result<(LoggedIn, String), CheckResult> {
    let id = CheckId::LoginFlow;
    let mut client = IntegratorClient::new(base_url)
        .map_err(|e| CheckResult::fail(id, e.to_string(), "see the error"))?;
    let logged_in = match login {
        Login::Password { username, password } => client.login_password(username, password).await,
        Login::Device { device_id } => client.login_device(device_id).await,
    };
    let me = logged_in.map_err(|e| match e {
        ClientError::Status { status: 401, .. } => CheckResult::fail(
            id,
            "POST /api/login answered 401",
            "check the credentials (--username/--password or --device-id)",
        ),
        e => CheckResult::fail(
            id,
            format!("login: {e}"),
            "the check logs in as the reference API does: POST /api/login with JSON {\"username\",\"password\"} or {\"device_id\"}, answering {\"id\",\"name\"} and a session cookie; if yours differs, take a token your own way and pass --token",
        ),
    })?;
    let token = client.fetch_access_token().await.map_err(|e| {
        CheckResult::fail(
            id,
            format!("access_token: {e}"),
            "POST /api/access_token with the session cookie must answer {\"access_token\": \"...\"}, an RFC 6750 b64token",
        )
    })?;
    Ok((me, token.secret().to_owned()))
}

/// `/api/user` for a token just issued to `me`: it must answer `me`.
async fn check_fresh_token(
    http: &reqwest::Client,
    user_url: &str,
    token: &str,
    me: &LoggedIn,
) -> CheckResult {
    let id = CheckId::LoginFlow;
    match post(http, user_url, Some(token)).await {
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
        Ok(a) => match a
            .body
            .as_deref()
            .map_err(Clone::clone)
            .and_then(|body| parse_user(body).map_err(|e| e.to_string()))
        {
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
    }
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
}
