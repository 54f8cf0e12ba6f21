//! The reference integrator web API (SPEC section 7): the integrator's side of the seed, served
//! by a real axum server, in memory.
//!
//! It owns the three APIs an integrator must provide — login (`POST /api/login`), token
//! acquisition (`POST /api/access_token`) and user information acquisition (`POST /api/user`) —
//! plus `POST /api/logout`, the users they serve, their sessions and their access tokens. It is
//! what `token-resolver serve-api` and `token-resolver demo` run, what the tests resolve against,
//! and a model for integrators.
//!
//! It does not own the resolving: the game server's side lives in [`crate::resolver`]. It does
//! not persist anything, speak TLS or send the cookie's `Secure` attribute (it serves plain HTTP,
//! meant for loopback); put it behind a TLS proxy before exposing it.
//!
//! Secrets are handled as an integrator should: passwords are kept only as argon2 hashes, and
//! session ids, access tokens and device ids only as SHA-256 hashes, looked up by hash. None of
//! them is ever logged.
//!
//! ```no_run
//! use token_resolver::reference_api::{ApiConfig, ReferenceApi};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let api = ReferenceApi::new(ApiConfig::default())?;
//! let running = api.spawn("127.0.0.1:0".parse()?).await?;
//! println!("resolve against {}", running.base_url());
//! running.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::rngs::OsRng;
use rand::RngCore;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;

/// How long a session (the login cookie) stays valid.
const SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Upper bound on the `max-age` of a `/api/user` answer, in seconds.
const MAX_AGE_CAP_SECS: u64 = 60;
/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 4 * 1024;
/// Most guest users that device-id logins may create.
const MAX_GUESTS: usize = 10_000;
/// Most live sessions at once: device-id logins are cheap, so they must not grow memory freely.
const MAX_SESSIONS: usize = 100_000;
/// Most live access tokens at once.
const MAX_TOKENS: usize = 1_000_000;
/// Expired sessions and tokens are swept on every this-many-th issuance.
const SWEEP_EVERY: u64 = 256;
/// Password verifications running at once: each argon2 run holds about 19 MiB for a while.
const MAX_CONCURRENT_VERIFICATIONS: usize = 4;
/// Longest wait for open connections on [`RunningApi::shutdown`] before they are cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A SHA-256 digest: how sessions, tokens and device ids are keyed.
type Digest32 = [u8; 32];

/// One user of the reference API, as given in a users file or by [`demo_users`].
///
/// `Debug` prints the password as `[redacted]`.
#[derive(Clone, Deserialize)]
pub struct ApiUser {
    /// The `id` that `/api/user` answers.
    pub id: i64,
    /// The `name` that `/api/user` answers.
    pub name: String,
    /// The login name for `POST /api/login`.
    pub username: String,
    /// The clear password; [`ReferenceApi::new`] keeps only its argon2 hash.
    pub password: String,
}

impl fmt::Debug for ApiUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiUser")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("username", &self.username)
            .field("password", &"[redacted]")
            .finish()
    }
}

/// The seeded demo users: `alice` / `wonderland` (id 1, "Alice"), `bob` / `builder` (id 2,
/// "Bob") and `carol` / `carolina` (id 3, "Carol").
pub fn demo_users() -> Vec<ApiUser> {
    [
        (1, "Alice", "alice", "wonderland"),
        (2, "Bob", "bob", "builder"),
        (3, "Carol", "carol", "carolina"),
    ]
    .into_iter()
    .map(|(id, name, username, password)| ApiUser {
        id,
        name: name.to_owned(),
        username: username.to_owned(),
        password: password.to_owned(),
    })
    .collect()
}

/// What a [`ReferenceApi`] serves.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The users who can log in with a password. Default: [`demo_users`].
    pub users: Vec<ApiUser>,
    /// How long an access token lives after `/api/access_token` issued it. Default: 3600 s.
    /// Zero makes every token expire at once (useful in tests).
    pub token_ttl: Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            users: demo_users(),
            token_ttl: Duration::from_secs(3600),
        }
    }
}

impl ApiConfig {
    /// Reads the users from a JSON file holding a list of `{id, name, username, password}`.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::Read`] if the file cannot be read, [`ApiConfigError::Parse`] if it is
    /// not such a list, and the errors of [`ApiConfig::validate`].
    pub fn from_users_file(path: &Path, token_ttl: Duration) -> Result<Self, ApiConfigError> {
        let text = std::fs::read(path).map_err(|source| ApiConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let users = serde_json::from_slice(&text).map_err(|source| ApiConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let config = Self { users, token_ttl };
        config.validate()?;
        Ok(config)
    }

    /// Checks that ids and usernames are unique and that no username or password is empty.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::DuplicateId`], [`ApiConfigError::DuplicateUsername`],
    /// [`ApiConfigError::EmptyUsername`] or [`ApiConfigError::EmptyPassword`], for the first
    /// user at fault.
    pub fn validate(&self) -> Result<(), ApiConfigError> {
        let mut ids = std::collections::HashSet::new();
        let mut usernames = std::collections::HashSet::new();
        for user in &self.users {
            if user.username.is_empty() {
                return Err(ApiConfigError::EmptyUsername { id: user.id });
            }
            if user.password.is_empty() {
                return Err(ApiConfigError::EmptyPassword { id: user.id });
            }
            if !ids.insert(user.id) {
                return Err(ApiConfigError::DuplicateId { id: user.id });
            }
            if !usernames.insert(user.username.as_str()) {
                return Err(ApiConfigError::DuplicateUsername {
                    username: user.username.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Why an [`ApiConfig`] cannot be loaded or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiConfigError {
    /// The users file could not be read: check the path and its permissions.
    #[error("cannot read the users file {}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The users file is not a JSON list of `{id, name, username, password}`: fix the file.
    #[error(
        "the users file {} is not a JSON list of {{id, name, username, password}}: {source}",
        path.display()
    )]
    Parse {
        /// The file named.
        path: PathBuf,
        /// Where and how parsing failed.
        source: serde_json::Error,
    },
    /// Two users share an id: ids must be unique.
    #[error("two users have the id {id}; ids must be unique")]
    DuplicateId {
        /// The id given twice.
        id: i64,
    },
    /// Two users share a username: usernames must be unique.
    #[error("two users have the username {username:?}; usernames must be unique")]
    DuplicateUsername {
        /// The username given twice.
        username: String,
    },
    /// A user has an empty username: give every user one.
    #[error("user {id} has an empty username")]
    EmptyUsername {
        /// The user's id.
        id: i64,
    },
    /// A user has an empty password: give every user one.
    #[error("user {id} has an empty password")]
    EmptyPassword {
        /// The user's id.
        id: i64,
    },
    /// argon2 refused to hash a password (for instance one of several GiB).
    #[error("cannot hash the password of user {id}: {message}")]
    Hash {
        /// The user's id.
        id: i64,
        /// What argon2 said.
        message: String,
    },
}

/// The reference integrator web API: users, sessions and tokens in memory, served by
/// [`ReferenceApi::router`] or [`ReferenceApi::spawn`].
///
/// Cheap to clone: the state is shared behind an `Arc`, so every clone serves the same users,
/// sessions and tokens.
#[derive(Clone)]
pub struct ReferenceApi {
    /// The shared state; handlers get a clone of `self` as axum state.
    inner: Arc<Inner>,
}

/// What every clone of a [`ReferenceApi`] shares.
struct Inner {
    /// Lifetime of an access token.
    token_ttl: Duration,
    /// Password users by username: fixed at construction, so read without a lock.
    accounts: HashMap<String, Account>,
    /// A hash verified for unknown usernames, so their answer takes as long as a wrong password.
    dummy_hash: String,
    /// Bounds concurrent argon2 verifications (CPU and memory).
    verify_slots: Semaphore,
    /// Requests `POST /api/user` received, whatever the outcome.
    user_requests: AtomicU64,
    /// Everything that changes while serving. Never held across an `.await`.
    state: Mutex<Store>,
}

/// A password user's credentials.
struct Account {
    /// The user's id.
    id: i64,
    /// The PHC string of the argon2 hash of the password.
    password_hash: String,
}

/// The mutable part of the API.
struct Store {
    /// Every user's name by id, password users and guests alike.
    names: HashMap<i64, String>,
    /// Guest user id by SHA-256 of the device id.
    guests: HashMap<Digest32, i64>,
    /// The id the next guest gets: above every existing id.
    next_guest_id: i64,
    /// Live sessions by SHA-256 of the session id.
    sessions: HashMap<Digest32, Session>,
    /// Live access tokens by SHA-256 of the token.
    tokens: HashMap<Digest32, IssuedToken>,
    /// Sessions and tokens issued so far, to sweep expired ones every [`SWEEP_EVERY`].
    issued: u64,
}

/// A logged-in session (the `session` cookie).
struct Session {
    /// Whose session it is.
    user_id: i64,
    /// When it stops working.
    expires: Instant,
}

/// An access token issued by `/api/access_token`.
struct IssuedToken {
    /// Whom it identifies.
    user_id: i64,
    /// SHA-256 of the session that issued it, so logout can revoke it.
    session: Digest32,
    /// When it stops working.
    expires: Instant,
}

impl fmt::Debug for ReferenceApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReferenceApi")
            .field("password_users", &self.inner.accounts.len())
            .field("token_ttl", &self.inner.token_ttl)
            .field("user_requests", &self.user_requests())
            .finish_non_exhaustive()
    }
}

impl ReferenceApi {
    /// Builds the API for `config`, hashing every password with argon2 (default parameters,
    /// random salt). This takes a few tens of milliseconds per user.
    ///
    /// # Errors
    ///
    /// The errors of [`ApiConfig::validate`] (duplicate ids or usernames, empty usernames or
    /// passwords), or [`ApiConfigError::Hash`] if argon2 fails.
    pub fn new(config: ApiConfig) -> Result<Self, ApiConfigError> {
        config.validate()?;
        let mut accounts = HashMap::new();
        let mut names = HashMap::new();
        for user in config.users {
            let password_hash =
                hash_password(&user.password).map_err(|message| ApiConfigError::Hash {
                    id: user.id,
                    message,
                })?;
            names.insert(user.id, user.name);
            accounts.insert(
                user.username,
                Account {
                    id: user.id,
                    password_hash,
                },
            );
        }
        let dummy_hash = hash_password(&random_secret())
            .map_err(|message| ApiConfigError::Hash { id: 0, message })?;
        let next_guest_id = names.keys().max().map_or(1, |max| max.saturating_add(1));
        Ok(Self {
            inner: Arc::new(Inner {
                token_ttl: config.token_ttl,
                accounts,
                dummy_hash,
                verify_slots: Semaphore::new(MAX_CONCURRENT_VERIFICATIONS),
                user_requests: AtomicU64::new(0),
                state: Mutex::new(Store {
                    names,
                    guests: HashMap::new(),
                    next_guest_id,
                    sessions: HashMap::new(),
                    tokens: HashMap::new(),
                    issued: 0,
                }),
            }),
        })
    }

    /// The axum router serving the four `/api/*` endpoints (other methods on them answer 405
    /// with `Allow: POST`), with request bodies limited to 4 KiB.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/api/login", post(login))
            .route("/api/access_token", post(access_token))
            .route("/api/user", post(user))
            .route("/api/logout", post(logout))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(self.clone())
    }

    /// How many requests `POST /api/user` has received, whatever their outcome. Tests use it to
    /// count the resolver's upstream calls.
    pub fn user_requests(&self) -> u64 {
        self.inner.user_requests.load(Ordering::Relaxed)
    }

    /// Binds `addr` (port 0 picks a free port) and serves [`ReferenceApi::router`] in a tokio
    /// task until [`RunningApi::shutdown`] or until the [`RunningApi`] is dropped.
    ///
    /// # Errors
    ///
    /// The I/O error of binding `addr` or of reading the bound address.
    pub async fn spawn(self, addr: SocketAddr) -> std::io::Result<RunningApi> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let router = self.router();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async {
                // A dropped sender stops the server too.
                let _ = stopped.await;
            });
            if let Err(error) = serve.await {
                tracing::error!(%error, "reference API server failed");
            }
        });
        tracing::debug!(%local_addr, "reference API listening");
        Ok(RunningApi {
            local_addr,
            api: self,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Locks the store. A handler that panicked while holding the lock leaves only complete
    /// map operations behind, so a poisoned lock is still usable.
    fn store(&self) -> MutexGuard<'_, Store> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A [`ReferenceApi`] serving in a tokio task, from [`ReferenceApi::spawn`].
///
/// Dropping it aborts the task; [`RunningApi::shutdown`] stops it gracefully.
#[derive(Debug)]
pub struct RunningApi {
    /// The bound address (with the real port when 0 was asked for).
    local_addr: SocketAddr,
    /// The API being served, to read its counters.
    api: ReferenceApi,
    /// Tells the server to stop accepting and finish; `None` once used.
    stop: Option<oneshot::Sender<()>>,
    /// The serving task; `None` once shut down.
    task: Option<JoinHandle<()>>,
}

impl RunningApi {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The base URL to give as authUrl, such as `http://127.0.0.1:8080`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// The API being served.
    pub fn api(&self) -> &ReferenceApi {
        &self.api
    }

    /// Stops accepting connections and waits for the open ones to finish, for at most 5 s,
    /// after which they are cut.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for RunningApi {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The body of `POST /api/login`: a username and password, or a device id.
#[derive(Deserialize)]
struct LoginBody {
    /// With `password`: a password login.
    username: Option<String>,
    /// With `username`: a password login.
    password: Option<String>,
    /// Alone: a guest login.
    device_id: Option<String>,
}

/// `POST /api/login`.
async fn login(
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
async fn access_token(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
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
async fn user(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
    api.inner.user_requests.fetch_add(1, Ordering::Relaxed);
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
async fn logout(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
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

/// Which map [`Store::make_room`] is about to insert into.
#[derive(Clone, Copy)]
enum Kind {
    /// `sessions`, capped at [`MAX_SESSIONS`].
    Session,
    /// `tokens`, capped at [`MAX_TOKENS`].
    Token,
}

impl Store {
    /// Counts one issuance and sweeps expired sessions and tokens every [`SWEEP_EVERY`] of them
    /// or when the map is full. `false`: the map is full of live entries.
    fn make_room(&mut self, now: Instant, kind: Kind) -> bool {
        self.issued += 1;
        let full = match kind {
            Kind::Session => self.sessions.len() >= MAX_SESSIONS,
            Kind::Token => self.tokens.len() >= MAX_TOKENS,
        };
        if full || self.issued % SWEEP_EVERY == 0 {
            self.sessions.retain(|_, s| s.expires > now);
            self.tokens.retain(|_, t| t.expires > now);
        }
        match kind {
            Kind::Session => self.sessions.len() < MAX_SESSIONS,
            Kind::Token => self.tokens.len() < MAX_TOKENS,
        }
    }
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

/// 32 random bytes from the OS, base64url without padding (43 characters).
fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The SHA-256 digest of a secret: the only form in which secrets are stored.
fn sha256(secret: impl AsRef<[u8]>) -> Digest32 {
    Sha256::digest(secret.as_ref()).into()
}

/// The argon2 PHC string of `password`, with a random salt.
fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| e.to_string())
}
