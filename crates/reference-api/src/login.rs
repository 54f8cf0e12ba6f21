//! `POST /api/login`: a password login (throttled per username and client address, then
//! checked by argon2 in a bounded pool) or a device-id login (a guest; throttled per client
//! address and per device id), then a session for a user who is not banned.
//!
//! The client address is the TCP peer's, or what the operator's trusted proxies forwarded
//! ([`TrustedProxies`](token_resolver_listener::TrustedProxies)); never a header a client
//! wrote. It does not own the throttle's bookkeeping (`throttle`) nor the sessions' store and
//! caps (`store`).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use argon2::{Argon2, PasswordHash, PasswordVerifier};
use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;
use token_resolver_listener::Budget;
use tokio::sync::{Semaphore, TryAcquireError};
use tokio::time::Instant;

use super::config::SessionLimits;
use super::handlers::{error, json_rejection, no_store, retry_after};
use super::store::{random_secret, sha256, Digest32, Opener};
use super::throttle::address_key;
use super::ReferenceApi;

/// How long a session (the login cookie) stays valid.
pub(super) const SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);
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

/// What a login body asks for.
pub(super) enum Asked {
    /// A password login.
    Password { username: String, password: String },
    /// A guest login, with a valid device id.
    Guest { device_id: String },
}

impl LoginBody {
    /// What the body asks for: a username and a password alone, or a valid device id alone;
    /// `None` for anything else (answered 400 `invalid_request`).
    pub(super) fn asks(self) -> Option<Asked> {
        match self {
            LoginBody {
                username: Some(username),
                password: Some(password),
                device_id: None,
            } => Some(Asked::Password { username, password }),
            LoginBody {
                username: None,
                password: None,
                device_id: Some(device_id),
            } => valid_device_id(&device_id).then_some(Asked::Guest { device_id }),
            _ => None,
        }
    }
}

/// `POST /api/login`. The client's address comes from the connection (when the server was
/// started with it, as [`ReferenceApi::spawn`] does), or from `X-Forwarded-For`/`Forwarded`
/// when the connection is from a trusted proxy.
pub(super) async fn login(
    State(api): State<ReferenceApi>,
    connection: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Result<Json<LoginBody>, JsonRejection>,
) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return json_rejection(&rejection),
    };
    let address = connection.map(|Extension(ConnectInfo(peer))| {
        address_key(api.inner.trusted_proxies.client_address(peer, &headers))
    });
    let who = match body.asks() {
        Some(Asked::Password { username, password }) => {
            match password_login(&api, address, &username, password).await {
                Ok(id) => Who::Password(id),
                Err(response) => return response,
            }
        }
        Some(Asked::Guest { device_id }) => {
            let device = sha256(&device_id);
            if let Err(wait) = admit_device(&api, address, device) {
                tracing::debug!("guest login refused: throttled");
                return retry_after(StatusCode::TOO_MANY_REQUESTS, "too_many_attempts", wait);
            }
            Who::Guest(device, address)
        }
        None => return error(StatusCode::BAD_REQUEST, "invalid_request"),
    };
    start_session(&api, who)
}

/// Who logs in: a password user by id, or a device (the SHA-256 of its id) from an address.
enum Who {
    Password(i64),
    Guest(Digest32, Option<IpAddr>),
}

/// Spends one device-id login of `address` and of `device`; the wait when either has spent its
/// budget.
fn admit_device(
    api: &ReferenceApi,
    address: Option<IpAddr>,
    device: Digest32,
) -> Result<(), Duration> {
    if let Some(address) = address {
        api.inner.device_logins.per_address.spend(address)?;
    }
    api.inner.device_logins.per_device.spend(device)
}

/// Opens a session for `who` (creating a device's guest on first sight) unless the user is
/// banned, and answers with its cookie. Every cap makes room by ending older sessions, so a
/// login is never refused for want of room.
fn start_session(api: &ReferenceApi, who: Who) -> Response {
    let session_id = random_secret();
    let sid = api.inner.token_key.public_session_id(&session_id);
    let (user_id, name) = {
        let mut store = api.store();
        let now = Instant::now();
        let (user_id, opener) = match who {
            Who::Password(id) => (id, Opener::Password),
            Who::Guest(device, address) => match store.guest(device, now) {
                Some(id) => (id, Opener::Guest(address)),
                None => {
                    drop(store);
                    tracing::debug!("guest login refused: guest ids ran out");
                    return error(StatusCode::SERVICE_UNAVAILABLE, "too_many_users");
                }
            },
        };
        if store.banned.contains(&user_id) {
            drop(store);
            tracing::debug!(user_id, "login refused: banned");
            return error(StatusCode::FORBIDDEN, "banned");
        }
        let key = sha256(&session_id);
        store.open_session(key, user_id, sid, opener, (now, now + SESSION_TTL));
        (user_id, store.name(user_id))
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

/// The budgets of device-id logins: per client address and per device id.
pub(super) struct DeviceLogins {
    /// Per client address (an IPv6 /64).
    pub(super) per_address: Budget<IpAddr>,
    /// Per SHA-256 of the device id.
    pub(super) per_device: Budget<Digest32>,
}

impl DeviceLogins {
    /// The budgets `limits` sets.
    pub(super) fn new(limits: &SessionLimits) -> Self {
        let window = limits.device_login_window;
        DeviceLogins {
            per_address: Budget::new(limits.device_logins_per_address, window),
            per_device: Budget::new(limits.device_logins_per_device, window),
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

/// A device id is 1 to 128 printable ASCII characters.
fn valid_device_id(device_id: &str) -> bool {
    (1..=128).contains(&device_id.len())
        && device_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}
