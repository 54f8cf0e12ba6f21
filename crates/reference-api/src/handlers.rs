//! `POST /api/access_token`, `/api/user` and `/api/logout`, and the small answers every
//! endpoint shares. Handlers never log a secret.
//!
//! `/api/login` is in `login`, the admin endpoints in `admin`.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::notify::Notice;
use super::store::{sha256, Ended, MAX_TOKENS_PER_SESSION};
use super::ReferenceApi;

/// Upper bound on the `max-age` of a `/api/user` answer, in seconds.
const MAX_AGE_CAP_SECS: u64 = 60;

/// `POST /api/access_token`: a new token for the session's user. An optional JSON body
/// `{"expires_in": N}` asks for a token that lives N seconds (at least 1; more than the
/// API's token lifetime is cut to it). A token never outlives its session.
pub(super) async fn access_token(
    State(api): State<ReferenceApi>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(session_id) = session_cookie(&headers) else {
        tracing::debug!("access token refused: no session cookie");
        return error(StatusCode::UNAUTHORIZED, "invalid_session");
    };
    let lifetime = match requested_lifetime(&headers, body, api.inner.token_ttl) {
        Ok(lifetime) => lifetime,
        Err(refusal) => return refusal.into_response(),
    };
    match issue_token(&api, session_id, lifetime) {
        Ok((user_id, token, lifetime)) => {
            tracing::debug!(user_id, "access token issued");
            let expires_in = lifetime.as_secs();
            no_store(Json(
                json!({ "access_token": token, "expires_in": expires_in }),
            ))
        }
        Err(refusal) => {
            let response = refusal.into_response();
            tracing::debug!(status = %response.status(), "access token refused");
            response
        }
    }
}

/// How long the token asked for should live: the API's token lifetime without a body, or the
/// body's `expires_in` (JSON, at least 1) capped at it.
fn requested_lifetime(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    ttl: Duration,
) -> Result<Duration, Refusal> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Refusal::Error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large")
        } else {
            Refusal::Error(StatusCode::BAD_REQUEST, "invalid_request")
        }
    })?;
    if body.is_empty() {
        return Ok(ttl);
    }
    if !is_json(headers) {
        return Err(Refusal::Error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request",
        ));
    }
    let fields = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(fields)) => fields,
        _ => {
            return Err(Refusal::field(
                "expires_in",
                "the body must be {\"expires_in\": N}",
            ))
        }
    };
    if let Some(other) = fields.keys().find(|key| *key != "expires_in") {
        return Err(Refusal::field(other, "unknown field"));
    }
    match fields.get("expires_in") {
        None => Ok(ttl),
        Some(value) => match value.as_u64().filter(|secs| *secs >= 1) {
            Some(secs) => Ok(Duration::from_secs(secs).min(ttl)),
            None => Err(Refusal::field(
                "expires_in",
                "must be a whole number of seconds, at least 1",
            )),
        },
    }
}

/// Issues the session's next token, living `lifetime` at most (and no longer than the
/// session): the user, the token and its lifetime.
fn issue_token(
    api: &ReferenceApi,
    session_id: &str,
    lifetime: Duration,
) -> Result<(i64, String, Duration), Refusal> {
    let session_key = sha256(session_id);
    let now = Instant::now();
    let mut store = api.store();
    let Some(session) = store.session(&session_key, now) else {
        return Err(Refusal::Error(StatusCode::UNAUTHORIZED, "invalid_session"));
    };
    if session.tokens_issued >= MAX_TOKENS_PER_SESSION {
        return Err(Refusal::Error(StatusCode::FORBIDDEN, "too_many_tokens"));
    }
    let (user_id, index) = (session.user_id, session.tokens_issued);
    let lifetime = lifetime.min(session.expires - now);
    // Derived and stored under the lock that counts it, so that two requests of one session
    // never derive the same index.
    let token = api.inner.token_key.token(session_id, index);
    let unix_now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let exp = (unix_now + lifetime).as_secs();
    if !store.issue(&session_key, sha256(&token), (now, now + lifetime), exp) {
        return Err(Refusal::Error(StatusCode::UNAUTHORIZED, "invalid_session"));
    }
    Ok((user_id, token, lifetime))
}

/// `POST /api/user`, the user information acquisition API that the resolver calls: `id`,
/// `name`, `exp`, when the token expires, in Unix seconds (RFC 7662), and `sid`, the public id
/// of the session that issued the token (what a logout names to the game servers).
pub(super) async fn user(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
    api.inner.user_requests.fetch_add(1, Ordering::Relaxed);
    let latency = api.user_latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let Some(token) = bearer_token(&headers) else {
        tracing::debug!("user refused: no bearer token");
        return unauthorized("Bearer", "missing_token");
    };
    let key = sha256(token);
    let now = Instant::now();
    let found = {
        let mut store = api.store();
        let live =
            (store.token(&key, now)).map(|t| (t.user_id, t.exp, t.sid.clone(), t.expires - now));
        live.map(|(user_id, exp, sid, remaining)| {
            (user_id, store.name(user_id), exp, sid, remaining)
        })
    };
    let Some((user_id, name, exp, sid, remaining)) = found else {
        tracing::debug!("user refused: unknown or expired token");
        return unauthorized(r#"Bearer error="invalid_token""#, "invalid_token");
    };
    tracing::debug!(user_id, "user answered");
    let max_age = remaining.as_secs().min(MAX_AGE_CAP_SECS);
    let mut response =
        Json(json!({ "id": user_id, "name": name, "exp": exp, "sid": &*sid })).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!("private, max-age={max_age}")) {
        response.headers_mut().insert(header::CACHE_CONTROL, value);
    }
    response
}

/// `POST /api/logout`: ends the session and revokes every token it issued, telling the
/// notify targets (in the background) when any was still live or expired less than
/// [`ApiConfig::notify_expired_for`](super::ApiConfig::notify_expired_for) ago (the game
/// servers honour a token until `exp` plus their clock skew): one notice naming the session's
/// `sid`. Always 204.
pub(super) async fn logout(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
    if let Some(session_id) = session_cookie(&headers) {
        if let (Some(notifier), Some(ended)) = (&api.inner.notifier, end_session(&api, session_id))
        {
            if ended.live_tokens > 0
                || notifier.tells_logout(ended.last_token_expires, Instant::now())
            {
                notifier.send(Notice::Session {
                    user_id: ended.user_id,
                    session: ended.sid,
                });
            }
        }
    }
    let clear =
        HeaderValue::from_static("session=; HttpOnly; SameSite=Strict; Path=/api; Max-Age=0");
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, clear)]).into_response()
}

/// Ends the session `session_id` and removes its tokens; `None` when there is no such session.
fn end_session(api: &ReferenceApi, session_id: &str) -> Option<Ended> {
    let ended = api
        .store()
        .end_session(&sha256(session_id), Instant::now())?;
    tracing::debug!(
        user_id = ended.user_id,
        live_tokens = ended.live_tokens,
        "logged out"
    );
    Some(ended)
}

/// The `session` cookie's value, if the request has a non-empty one.
pub(super) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix("session="))
        .filter(|value| !value.is_empty())
}

/// The credential of an `Authorization: Bearer <token>` header (scheme case-insensitive, one or
/// more spaces). `None` when there is no such header or its scheme is not Bearer; an empty
/// credential is returned as `""`, which no token matches.
pub(super) fn bearer_token(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at(value.len().min(6));
    if !scheme.eq_ignore_ascii_case(b"bearer") || !(rest.is_empty() || rest[0] == b' ') {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    Some(&rest[start..])
}

/// A 401 with `WWW-Authenticate: <challenge>` and `{"error": <code>}`.
pub(super) fn unauthorized(challenge: &'static str, code: &str) -> Response {
    let mut response = error(StatusCode::UNAUTHORIZED, code);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// The answer to a body axum could not take as JSON: 413 when too large, 415 without a
/// JSON content type, otherwise 400; always with a JSON body.
pub(super) fn json_rejection(rejection: &JsonRejection) -> Response {
    tracing::debug!(status = %rejection.status(), "request refused: bad request body");
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_request")
        }
        _ => error(StatusCode::BAD_REQUEST, "invalid_request"),
    }
}

/// Why a request is refused, before it is made into its answer (a [`Response`] is too large
/// to pass around in a `Result`).
pub(super) enum Refusal {
    /// `status` with `{"error": <code>}`.
    Error(StatusCode, &'static str),
    /// 400 `invalid_request` naming the field at fault, and what is wrong with it.
    Field(String, &'static str),
    /// 401 with `WWW-Authenticate: <challenge>` and `{"error": <code>}`.
    Unauthorized(&'static str, &'static str),
}

impl Refusal {
    /// [`Refusal::Field`] for `field`.
    pub(super) fn field(field: &str, message: &'static str) -> Self {
        Refusal::Field(field.to_owned(), message)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Error(status, code) => error(status, code),
            Refusal::Field(field, message) => invalid_field(&field, message),
            Refusal::Unauthorized(challenge, code) => unauthorized(challenge, code),
        }
    }
}

/// A response with `status` and the body `{"error": <code>}`.
pub(super) fn error(status: StatusCode, code: &str) -> Response {
    (status, Json(json!({ "error": code }))).into_response()
}

/// A 400 `{"error": "invalid_request", "field": <field>, "message": <message>}`.
fn invalid_field(field: &str, message: &str) -> Response {
    let body = json!({ "error": "invalid_request", "field": field, "message": message });
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

/// A response with `status`, `{"error": <code>}` and `Retry-After` of `wait` in whole
/// seconds, rounded up (at least 1).
pub(super) fn retry_after(status: StatusCode, code: &str, wait: Duration) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut response = error(status, code);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    response
}

/// Whether the request says its body is JSON (`application/json`, any parameters).
pub(super) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// `body` as a response with `Cache-Control: no-store`.
pub(super) fn no_store(body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
