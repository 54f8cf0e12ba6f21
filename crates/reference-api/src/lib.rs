//! The reference integrator web API: the integrator's side of the login-token-join flow, served
//! by a real axum server, in memory.
//!
//! It owns the three APIs an integrator must provide — login (`POST /api/login`), token
//! acquisition (`POST /api/access_token`) and user information acquisition (`POST /api/user`) —
//! plus `POST /api/logout`, the users they serve, their sessions and their access tokens; the
//! integrator's side of live revocation (telling game servers of logouts and bans, and
//! `POST /api/admin/ban` / `unban`); and `GET /play`, a browser client of the whole flow. It is
//! what `token-resolver serve-api` and `token-resolver demo` run, what the tests resolve against,
//! and a model for integrators.
//!
//! # Layout
//!
//! - `config`: [`ApiConfig`], [`ApiUser`], [`AdminSecret`], [`LoginLimits`], [`SessionLimits`],
//!   [`TrustedProxies`], [`ApiConfigError`].
//! - `store`: users, sessions, tokens and bans in memory, capped and expired through an index;
//!   how tokens are derived and secrets kept.
//! - `login`: `POST /api/login`, the budgets of device-id logins, and the bounded pool of
//!   password checks.
//! - `throttle`: failed logins per username and per client address.
//! - `handlers`: `POST /api/access_token`, `/api/user`, `/api/logout`; the shared answers.
//! - `admin`: `POST /api/admin/ban` and `/api/admin/unban`, `GET /api/admin/notifications`.
//! - `notify`: calling the game servers' `/admin/revoke` in the background, from a bounded,
//!   coalescing outbox per game server ([`PendingNotifications`]).
//! - `play`: the browser page.
//!
//! It does not own the resolving, which is the game server's side (the `token-resolver`
//! library); it does not depend on it at all. It does not persist anything or send the
//! cookie's `Secure` attribute. It serves plain HTTP
//! ([`ReferenceApi::spawn`], meant for loopback) or HTTPS with a certificate you give it
//! ([`ReferenceApi::spawn_tls`]), HTTP/1.1 and HTTP/2 both, and counts the connections and TLS
//! handshakes it saw, for load runs; [`ReferenceApi::set_user_latency`] adds service time to
//! `/api/user` for the same purpose.
//!
//! Secrets are handled as an integrator should: passwords are kept only as argon2 hashes, and
//! session ids, access tokens and device ids only as SHA-256 hashes, looked up by hash. None of
//! them, nor the admin secret, is ever logged. Password guessing is throttled per username and
//! per client address, and password checks are bounded so a flood of logins cannot starve
//! `/api/user` ([`LoginLimits`]).
//!
//! ```no_run
//! use token_resolver_reference_api::{ApiConfig, ReferenceApi};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let api = ReferenceApi::new(ApiConfig::default())?;
//! let running = api.spawn("127.0.0.1:0".parse()?).await?;
//! println!("resolve against {}", running.base_url());
//! running.shutdown().await;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod admin;
mod config;
// The reader of login bodies, for the fuzzers: reachable, hidden from the docs, outside
// semver.
#[doc(hidden)]
pub mod fuzzing;
mod handlers;
mod login;
mod notify;
mod play;
mod serve;
mod store;
mod throttle;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

pub use self::config::{
    demo_users, AdminSecret, AdminSecretError, ApiConfig, ApiConfigError, ApiUser, LoginLimits,
    SessionLimits, TrustedProxies,
};
use self::handlers::{access_token, logout, user};
use self::login::{login, DeviceLogins, Verifier};
use self::notify::Notifier;
pub use self::notify::PendingNotifications;
use self::serve::ConnectionCounts;
pub use self::serve::ServeLimits;
use self::store::{hash_password, random_secret, Account, Store, TokenKey};
pub use self::store::{Held, MAX_TOKENS_PER_SESSION};
use self::throttle::Throttle;
use token_resolver_listener::ServerTask;

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 4 * 1024;
/// Longest wait for open connections on [`RunningApi::shutdown`] before they are cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

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
    /// The listener's bounds.
    serve_limits: ServeLimits,
    /// Password users by username: fixed at construction, so read without a lock.
    accounts: HashMap<String, Account>,
    /// A hash verified for unknown usernames, so their answer takes as long as a wrong password.
    dummy_hash: String,
    /// Runs argon2 verifications, a bounded number at once (CPU and memory).
    verifier: Verifier,
    /// Failed logins per username and client address.
    throttle: Throttle,
    /// Device-id logins per client address and device id.
    device_logins: DeviceLogins,
    /// The proxies whose forwarding headers name the client address.
    trusted_proxies: TrustedProxies,
    /// The key access tokens are derived under.
    token_key: TokenKey,
    /// The bearer of the admin endpoints; `None`: they answer 404.
    admin_secret: Option<AdminSecret>,
    /// The game servers told of revocations, if any.
    notifier: Option<Notifier>,
    /// Requests `POST /api/user` received, whatever the outcome.
    user_requests: AtomicU64,
    /// Service time added to every `POST /api/user`, in nanoseconds (0: none).
    user_latency_nanos: AtomicU64,
    /// Everything that changes while serving. Never held across an `.await`.
    state: Mutex<Store>,
    /// The browser page, with the game servers it may open.
    page: play::Page,
}

impl fmt::Debug for ReferenceApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReferenceApi")
            .field("password_users", &self.inner.accounts.len())
            .field("token_ttl", &self.inner.token_ttl)
            .field("user_requests", &self.user_requests())
            .field("admin_secret", &self.inner.admin_secret)
            .field("notifier", &self.inner.notifier)
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
    /// passwords, bad notify targets or limits), [`ApiConfigError::NotifyClient`] if the
    /// notify targets' HTTP client cannot be built, or [`ApiConfigError::Hash`] if argon2
    /// fails.
    pub fn new(config: ApiConfig) -> Result<Self, ApiConfigError> {
        config.validate()?;
        let notifier = match (&config.admin_secret, config.notify.is_empty()) {
            (Some(secret), false) => Some(Notifier::new(
                &config.notify,
                secret.clone(),
                config.notify_retry_for,
                config.notify_expired_for,
                config.public_url.as_deref(),
            )?),
            _ => None,
        };
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
        let games: Vec<String> = (config.play_game_urls.iter())
            .map(|game| config::play_game_url(game))
            .collect::<Result<_, _>>()?;
        let page = play::Page::new(&games);
        Ok(Self {
            inner: Arc::new(Inner {
                token_ttl: config.token_ttl,
                serve_limits: config.serve,
                accounts,
                dummy_hash,
                verifier: Verifier::new(
                    config.login_limits.concurrent_verifications,
                    config.login_limits.queued_verifications,
                ),
                throttle: Throttle::new(config.login_limits),
                token_key: TokenKey::random(),
                admin_secret: config.admin_secret,
                notifier,
                user_requests: AtomicU64::new(0),
                user_latency_nanos: AtomicU64::new(0),
                device_logins: DeviceLogins::new(&config.session_limits),
                trusted_proxies: config.trusted_proxies,
                state: Mutex::new(Store::new(names, config.session_limits)),
                page,
            }),
        })
    }

    /// The axum router serving the four `/api/*` endpoints and the three `/api/admin/*` ones
    /// (other methods on them answer 405 with `Allow`), with request bodies limited to
    /// 4 KiB, and the browser client at `GET /play`.
    ///
    /// Serve it with [`into_make_service_with_connect_info::<SocketAddr>`](Router::into_make_service_with_connect_info),
    /// as [`spawn`](Self::spawn) does: without the connection's address, failed logins are
    /// throttled per username only.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/api/login", post(login))
            .route("/api/access_token", post(access_token))
            .route("/api/user", post(user))
            .route("/api/logout", post(logout))
            .route("/api/admin/ban", post(admin::ban))
            .route("/api/admin/unban", post(admin::unban))
            .route("/api/admin/notifications", get(admin::notifications))
            .route("/play", get(play::page))
            .route("/play.js", get(play::script))
            .route("/play.css", get(play::style))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(self.clone())
    }

    /// The sessions, access tokens and guests held now: what the [`SessionLimits`] bound.
    pub fn held(&self) -> Held {
        self.store().held()
    }

    /// How many requests `POST /api/user` has received, whatever their outcome. Tests use it to
    /// count the resolver's upstream calls.
    pub fn user_requests(&self) -> u64 {
        self.inner.user_requests.load(Ordering::Relaxed)
    }

    /// Notifications to game servers not delivered yet, across the notify targets (0 without
    /// any). Each target's detail is at `GET /api/admin/notifications`.
    pub fn pending_notifications(&self) -> usize {
        self.inner
            .notifier
            .as_ref()
            .map_or(0, Notifier::pending_count)
    }

    /// How many password checks (argon2 runs) have started, unknown usernames included. A
    /// login refused by the throttle or as busy runs none. Tests use it to see that.
    pub fn password_verifications(&self) -> u64 {
        self.inner.verifier.started()
    }

    /// Makes every `POST /api/user` take `latency` longer before it answers, as a real
    /// integrator's database would; zero (the default) removes it. For load runs
    /// (`serve-api --latency-ms`); it applies to every clone and to a server already running.
    pub fn set_user_latency(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .user_latency_nanos
            .store(nanos, Ordering::Relaxed);
    }

    /// The service time added to `POST /api/user`.
    pub fn user_latency(&self) -> Duration {
        Duration::from_nanos(self.inner.user_latency_nanos.load(Ordering::Relaxed))
    }

    /// Binds `addr` (port 0 picks a free port) and serves [`ReferenceApi::router`] over plain
    /// HTTP (HTTP/1.1, or HTTP/2 with prior knowledge) in a tokio task until
    /// [`RunningApi::shutdown`] or until the [`RunningApi`] is dropped.
    ///
    /// # Errors
    ///
    /// The I/O error of binding `addr` or of reading the bound address.
    pub async fn spawn(self, addr: SocketAddr) -> std::io::Result<RunningApi> {
        self.spawn_on(tokio::net::TcpListener::bind(addr).await?)
    }

    /// As [`spawn`](Self::spawn), on a listener bound beforehand: its address can then be
    /// given to the game servers this API will [`notify`](ApiConfig::notify) before the API
    /// is built, or the socket can come from the service manager.
    ///
    /// # Errors
    ///
    /// The I/O error of reading the listener's address.
    pub fn spawn_on(self, listener: tokio::net::TcpListener) -> std::io::Result<RunningApi> {
        self.serve_on(listener, None)
    }

    /// As [`spawn`](Self::spawn), over TLS with the certificate chain in `cert_pem` and its
    /// private key in `key_pem` (both PEM), offering HTTP/2 and HTTP/1.1 through ALPN. The
    /// base URL is then `https://`.
    ///
    /// # Errors
    ///
    /// An `InvalidInput` error when the PEMs hold no certificate or no usable key, or the I/O
    /// error of binding `addr`.
    pub async fn spawn_tls(
        self,
        addr: SocketAddr,
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> std::io::Result<RunningApi> {
        let acceptor = serve::tls_acceptor(cert_pem, key_pem)?;
        self.serve_on(tokio::net::TcpListener::bind(addr).await?, Some(acceptor))
    }

    fn serve_on(
        self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> std::io::Result<RunningApi> {
        let local_addr = listener.local_addr()?;
        let counts = Arc::new(ConnectionCounts::default());
        let base_url = serve::base_url(local_addr, tls.is_some());
        if let Some(notifier) = &self.inner.notifier {
            notifier.default_auth_url(&base_url);
        }
        let router = self.router();
        let (served, limits) = (counts.clone(), self.inner.serve_limits);
        let task = ServerTask::spawn(move |stopped| {
            serve::serve(
                listener,
                router,
                tls,
                served,
                limits,
                stopped,
                SHUTDOWN_GRACE,
            )
        });
        tracing::debug!(%local_addr, "reference API listening");
        Ok(RunningApi {
            local_addr,
            base_url,
            api: self,
            counts,
            task,
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
    /// `http://ADDR` or `https://ADDR`.
    base_url: String,
    /// The API being served, to read its counters.
    api: ReferenceApi,
    /// Connections and TLS handshakes the server saw.
    counts: Arc<ConnectionCounts>,
    /// The serving task.
    task: ServerTask,
}

impl RunningApi {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The base URL to give as authUrl, such as `http://127.0.0.1:8080` (`https://` when
    /// served with [`ReferenceApi::spawn_tls`]).
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// TCP connections the server has accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.counts.accepted.load(Ordering::Relaxed)
    }

    /// TLS handshakes the server has completed so far (0 over plain HTTP).
    pub fn tls_handshakes(&self) -> u64 {
        self.counts.handshakes.load(Ordering::Relaxed)
    }

    /// The API being served.
    pub fn api(&self) -> &ReferenceApi {
        &self.api
    }

    /// Stops accepting connections and waits for the open ones to finish, for at most 5 s,
    /// after which they are cut.
    pub async fn shutdown(self) {
        self.task.shutdown(SHUTDOWN_GRACE).await;
    }
}
