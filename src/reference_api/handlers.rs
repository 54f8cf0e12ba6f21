//! The four endpoints: `POST /api/login`, `/api/access_token`, `/api/user` and
//! `/api/logout`, and the small answers they share. Handlers never log a secret.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use argon2::{Argon2, PasswordHash, PasswordVerifier};
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::store::{random_secret, sha256, IssuedToken, Kind, Session};
use super::ReferenceApi;

/// How long a session (the login cookie) stays valid.
const SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Upper bound on the `max-age` of a `/api/user` answer, in seconds.
const MAX_AGE_CAP_SECS: u64 = 60;
/// Most guest users that device-id logins may create.
const MAX_GUESTS: usize = 10_000;

/// The body of `POST /api/login`: a username and password, or a device id.
#[derive(Deserialize)]
pub(super) struct LoginBody {
    /// With `password`: a password login.
    username: Option<String>,
    /// With `username`: a password login.
    password: Option<String>,
    /// Alone: a guest login.
    device_id: Option<String>,
}

/// `POST /api/login`.
pub(super) async fn login(
    State(api): State<ReferenceApi>,
    body: Result<Json<LoginBody>, JsonRejection>,
) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return json_rejection(&rejection),
    };
    let user_id = match body {
        LoginBody {
            username: Some(username),
            password: Some(password),
            device_id: None,
        } => match password_login(&api, &username, password).await {
            Ok(Some(id)) => id,
            Ok(None) => {
                tracing::debug!("login refused: invalid credentials");
                return error(StatusCode::UNAUTHORIZED, "invalid_credentials");
            }
            Err(response) => return response,
        },
        LoginBody {
            username: None,
            password: None,
            device_id: Some(device_id),
        } => {
            if !valid_device_id(&device_id) {
                return error(StatusCode::BAD_REQUEST, "invalid_request");
            }
            match guest_login(&api, &device_id) {
                Some(id) => id,
                None => {
                    tracing::debug!("guest login refused: too many users");
                    return error(StatusCode::SERVICE_UNAVAILABLE, "too_many_users");
                }
            }
        }
        _ => return error(StatusCode::BAD_REQUEST, "invalid_request"),
    };

    let session_id = random_secret();
    let name = {
        let mut store = api.store();
        let now = Instant::now();
        if !store.make_room(now, Kind::Session) {
            drop(store);
            tracing::debug!("login refused: too many sessions");
            return error(StatusCode::SERVICE_UNAVAILABLE, "too_many_sessions");
        }
        let session = Session {
            user_id,
            expires: now + SESSION_TTL,
        };
        store.sessions.insert(sha256(&session_id), session);
        store.names.get(&user_id).cloned().unwrap_or_default()
    };
    tracing::debug!(user_id, "login succeeded");
    let cookie = format!(
        "session={session_id}; HttpOnly; SameSite=Strict; Path=/api; Max-Age={}",
        SESSION_TTL.as_secs()
    );
    let mut response = no_store(Json(json!({ "id": user_id, "name": name })));
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// Checks a password, always running argon2 (against a dummy hash for unknown usernames) so
/// the answer's timing does not tell which usernames exist. `Ok(None)`: wrong credentials.
async fn password_login(
    api: &ReferenceApi,
    username: &str,
    password: String,
) -> Result<Option<i64>, Response> {
    let account = api.inner.accounts.get(username);
    let hash = account
        .map_or(&api.inner.dummy_hash, |a| &a.password_hash)
        .clone();
    let Ok(_slot) = api.inner.verify_slots.acquire().await else {
        return Err(error(StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
    };
    let verified = tokio::task::spawn_blocking(move || {
        PasswordHash::new(&hash).is_ok_and(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false);
    Ok(account.filter(|_| verified).map(|a| a.id))
}

/// Logs a device in as its guest, creating the guest on first sight. `None`: no more guests
/// can be created.
fn guest_login(api: &ReferenceApi, device_id: &str) -> Option<i64> {
    let key = sha256(device_id);
    let mut store = api.store();
    if let Some(&id) = store.guests.get(&key) {
        return Some(id);
    }
    if store.guests.len() >= MAX_GUESTS {
        return None;
    }
    let id = store.next_guest_id;
    store.next_guest_id = id.checked_add(1)?;
    store.guests.insert(key, id);
    store.names.insert(id, format!("Guest-{id}"));
    tracing::debug!(user_id = id, "guest user created");
    Some(id)
}

/// A device id is 1 to 128 printable ASCII characters.
fn valid_device_id(device_id: &str) -> bool {
    (1..=128).contains(&device_id.len())
        && device_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}

/// `POST /api/access_token`.
pub(super) async fn access_token(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
    let Some(session_id) = session_cookie(&headers) else {
        tracing::debug!("access token refused: no session cookie");
        return error(StatusCode::UNAUTHORIZED, "invalid_session");
    };
    let session_key = sha256(session_id);
    let token = random_secret();
    let now = Instant::now();
    let issued = {
        let mut store = api.store();
        match store.sessions.get(&session_key) {
            Some(session) if session.expires > now => {
                let user_id = session.user_id;
                if store.make_room(now, Kind::Token) {
                    let issued = IssuedToken {
                        user_id,
                        session: session_key,
                        expires: now + api.inner.token_ttl,
                    };
                    store.tokens.insert(sha256(&token), issued);
                    Ok(user_id)
                } else {
                    Err(error(StatusCode::SERVICE_UNAVAILABLE, "too_many_tokens"))
                }
            }
            Some(_) => {
                store.sessions.remove(&session_key);
                Err(error(StatusCode::UNAUTHORIZED, "invalid_session"))
            }
            None => Err(error(StatusCode::UNAUTHORIZED, "invalid_session")),
        }
    };
    match issued {
        Ok(user_id) => {
            tracing::debug!(user_id, "access token issued");
            no_store(Json(json!({ "access_token": token })))
        }
        Err(response) => {
            tracing::debug!(status = %response.status(), "access token refused");
            response
        }
    }
}

/// `POST /api/user`, the user information acquisition API that the resolver calls.
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
        match store.tokens.get(&key) {
            Some(issued) if issued.expires > now => {
                let name = store
                    .names
                    .get(&issued.user_id)
                    .cloned()
                    .unwrap_or_default();
                Some((issued.user_id, name, issued.expires - now))
            }
            Some(_) => {
                store.tokens.remove(&key);
                None
            }
            None => None,
        }
    };
    let Some((user_id, name, remaining)) = found else {
        tracing::debug!("user refused: unknown or expired token");
        return unauthorized(r#"Bearer error="invalid_token""#, "invalid_token");
    };
    tracing::debug!(user_id, "user answered");
    let max_age = remaining.as_secs().min(MAX_AGE_CAP_SECS);
    let mut response = Json(json!({ "id": user_id, "name": name })).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!("private, max-age={max_age}")) {
        response.headers_mut().insert(header::CACHE_CONTROL, value);
    }
    response
}

/// `POST /api/logout`: ends the session and revokes every token it issued. Always 204.
pub(super) async fn logout(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
    if let Some(session_id) = session_cookie(&headers) {
        let key = sha256(session_id);
        let mut store = api.store();
        if let Some(session) = store.sessions.remove(&key) {
            store.tokens.retain(|_, token| token.session != key);
            drop(store);
            tracing::debug!(user_id = session.user_id, "logged out");
        }
    }
    let clear =
        HeaderValue::from_static("session=; HttpOnly; SameSite=Strict; Path=/api; Max-Age=0");
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, clear)]).into_response()
}

/// The `session` cookie's value, if the request has a non-empty one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
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
fn bearer_token(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at(value.len().min(6));
    if !scheme.eq_ignore_ascii_case(b"bearer") || !(rest.is_empty() || rest[0] == b' ') {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    Some(&rest[start..])
}

/// A 401 with `WWW-Authenticate: <challenge>` and `{"error": <code>}`.
fn unauthorized(challenge: &'static str, code: &str) -> Response {
    let mut response = error(StatusCode::UNAUTHORIZED, code);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// The answer to a login body axum could not take as JSON: 413 when too large, 415 without a
/// JSON content type, otherwise 400; always with a JSON body.
fn json_rejection(rejection: &JsonRejection) -> Response {
    tracing::debug!(status = %rejection.status(), "login refused: bad request body");
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_request")
        }
        _ => error(StatusCode::BAD_REQUEST, "invalid_request"),
    }
}

/// A response with `status` and the body `{"error": <code>}`.
fn error(status: StatusCode, code: &str) -> Response {
    (status, Json(json!({ "error": code }))).into_response()
}

/// `body` as a response with `Cache-Control: no-store`.
fn no_store(body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
