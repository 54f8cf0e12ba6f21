//! `POST /api/login`: a password login (throttled per username and client address, then
//! checked by argon2 in a bounded pool) or a device-id login (a guest), then a session for a
//! user who is not banned.
//!
//! It does not own the throttle's bookkeeping (`throttle`) nor the sessions' store (`store`).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use argon2::{Argon2, PasswordHash, PasswordVerifier};
use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Semaphore, TryAcquireError};

use super::handlers::{error, json_rejection, no_store, retry_after};
use super::store::{random_secret, sha256, Kind, Session};
use super::ReferenceApi;

/// How long a session (the login cookie) stays valid.
pub(super) const SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Most guest users that device-id logins may create.
const MAX_GUESTS: usize = 10_000;
/// The wait asked of a login refused because the password checks are all busy.
const BUSY_RETRY: Duration = Duration::from_secs(1);

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

/// `POST /api/login`. The client's address comes from the connection (when the server was
/// started with it, as [`ReferenceApi::spawn`] does), never from a header such as
/// `X-Forwarded-For`, which the client writes.
pub(super) async fn login(
    State(api): State<ReferenceApi>,
    connection: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Result<Json<LoginBody>, JsonRejection>,
) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return json_rejection(&rejection),
    };
    let address = connection.map(|Extension(ConnectInfo(peer))| peer.ip());
    let user_id = match body {
        LoginBody {
            username: Some(username),
            password: Some(password),
            device_id: None,
        } => match password_login(&api, address, &username, password).await {
            Ok(id) => id,
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
    start_session(&api, user_id)
}

/// Opens a session for `user_id` unless the user is banned, and answers with its cookie.
fn start_session(api: &ReferenceApi, user_id: i64) -> Response {
    let session_id = random_secret();
    let name = {
        let mut store = api.store();
        if store.banned.contains(&user_id) {
            drop(store);
            tracing::debug!(user_id, "login refused: banned");
            return error(StatusCode::FORBIDDEN, "banned");
        }
        let now = Instant::now();
        if !store.make_room(now, Kind::Session) {
            drop(store);
            tracing::debug!("login refused: too many sessions");
            return error(StatusCode::SERVICE_UNAVAILABLE, "too_many_sessions");
        }
        let session = Session {
            user_id,
            expires: now + SESSION_TTL,
            tokens_issued: 0,
            sid: api.inner.token_key.public_session_id(&session_id),
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

/// Checks a password: refused at once (429) when the username or the address is locked out;
/// otherwise argon2 runs, against a dummy hash for unknown usernames so that the answer's
/// timing does not tell which usernames exist. 401 for wrong credentials, 503 when the
/// password checks are all busy.
async fn password_login(
    api: &ReferenceApi,
    address: Option<IpAddr>,
    username: &str,
    password: String,
) -> Result<i64, Response> {
    let attempt = match api.inner.throttle.admit(username, address, Instant::now()) {
        Ok(attempt) => attempt,
        Err(wait) => {
            tracing::debug!("login refused: throttled");
            return Err(retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_attempts",
                wait,
            ));
        }
    };
    let account = api.inner.accounts.get(username);
    let hash = account
        .map_or(&api.inner.dummy_hash, |a| &a.password_hash)
        .clone();
    let Ok(verified) = api.inner.verifier.verify(hash, password).await else {
        tracing::debug!("login refused: password checks busy");
        return Err(retry_after(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            BUSY_RETRY,
        ));
    };
    match account.filter(|_| verified) {
        Some(account) => {
            attempt.succeeded();
            Ok(account.id)
        }
        None => {
            attempt.failed();
            tracing::debug!("login refused: invalid credentials");
            Err(error(StatusCode::UNAUTHORIZED, "invalid_credentials"))
        }
    }
}

/// Runs argon2 verifications on the blocking pool, a bounded number at once, with a bounded
/// queue of waiters.
pub(super) struct Verifier {
    /// One permit per verification allowed to run at once.
    slots: Arc<Semaphore>,
    /// Verifications waiting for a slot now.
    waiting: AtomicUsize,
    /// Most verifications allowed to wait.
    max_waiting: usize,
    /// Verifications started so far.
    started: AtomicU64,
}

/// The password checks are all busy and the queue is full.
#[derive(Debug)]
pub(super) struct Busy;

impl Verifier {
    pub(super) fn new(concurrent: usize, max_waiting: usize) -> Self {
        Verifier {
            slots: Arc::new(Semaphore::new(concurrent)),
            waiting: AtomicUsize::new(0),
            max_waiting,
            started: AtomicU64::new(0),
        }
    }

    /// Verifications started so far.
    pub(super) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Whether `password` matches the PHC string `hash`. The slot is held by the blocking
    /// task itself, so a client that leaves does not free it before argon2 is done.
    pub(super) async fn verify(&self, hash: String, password: String) -> Result<bool, Busy> {
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(TryAcquireError::Closed) => return Err(Busy),
            Err(TryAcquireError::NoPermits) => {
                if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    return Err(Busy);
                }
                let _waiting = Waiting(&self.waiting);
                self.slots.clone().acquire_owned().await.map_err(|_| Busy)?
            }
        };
        self.started.fetch_add(1, Ordering::Relaxed);
        let verified = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            PasswordHash::new(&hash).is_ok_and(|hash| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &hash)
                    .is_ok()
            })
        })
        .await;
        Ok(verified.unwrap_or(false))
    }
}

/// One place in the queue of waiters, given back on drop.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
