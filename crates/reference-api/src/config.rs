//! What a reference API serves: its users ([`ApiUser`], [`demo_users`], a users file), the
//! token lifetime, the game servers it tells of revocations with its admin secret
//! ([`AdminSecret`]), how it resists password guessing ([`LoginLimits`]) and anonymous floods
//! ([`SessionLimits`], [`TrustedProxies`]) ([`ApiConfig`]), all checked before anything is
//! hashed ([`ApiConfigError`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
pub use token_resolver_listener::{AdminSecret, AdminSecretError, TrustedProxies};

use super::serve::ServeLimits;
#[cfg(doc)]
use super::ReferenceApi;

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
    /// How long an access token lives after `/api/access_token` issued it, and the most a
    /// client may ask for with `expires_in`. Default: 3600 s. Zero makes every token expire at
    /// once (useful in tests).
    pub token_ttl: Duration,
    /// Game servers' admin base URLs (`http://10.0.0.5:9350`), each told of revocations at
    /// `{URL}/admin/revoke`: a session on logout, a user on a ban. Default: none. Needs
    /// [`admin_secret`](Self::admin_secret).
    pub notify: Vec<String>,
    /// How long a notification a game server has not taken is retried before it is given up
    /// on (and logged). Default: 15 minutes.
    pub notify_retry_for: Duration,
    /// How long after the last of a session's tokens expired its logout is still told to the
    /// game servers: they honour a token until its `exp` plus their clock skew (`game-server
    /// --clock-skew`, default 30 s), so a session holding one plays on until then unless told.
    /// Keep it at least the largest clock skew of the game servers and sidecars told. Default:
    /// 60 s.
    pub notify_expired_for: Duration,
    /// This API's base URL as game servers know it (their players' authUrl), named as
    /// `auth_url` in every notification so that rooms on this integrator are revoked whatever
    /// a game server's default authUrl is. Default: `None`, the base URL it listens on
    /// ([`RunningApi::base_url`](super::RunningApi::base_url)).
    pub public_url: Option<String>,
    /// The game servers' WebSocket URLs (`ws://` or `wss://`) the browser page at `GET /play`
    /// may open, the first the default: a `game=` not listed shows `error
    /// game_url_not_allowed` and logs nobody in, and the page's Content-Security-Policy
    /// `connect-src` names only these and the API itself. Default: none, and the page opens no
    /// game server (a page that opened any would hand the player's fresh token to whoever a
    /// link names).
    pub play_game_urls: Vec<String>,
    /// The bearer secret of `POST /api/admin/ban` and `/api/admin/unban`, and the one sent to
    /// the [`notify`](Self::notify) targets. Default: `None`, and the admin endpoints answer
    /// 404.
    pub admin_secret: Option<AdminSecret>,
    /// The listener's bounds: connections in all and per client address, the deadline for a
    /// request's head, HTTP/2's idle timeout and pings. Default: [`ServeLimits::default`].
    pub serve: ServeLimits,
    /// How failed logins are throttled and password checks bounded. Default:
    /// [`LoginLimits::default`].
    pub login_limits: LoginLimits,
    /// What anonymous (device-id) callers can take, and how many sessions anyone holds.
    /// Default: [`SessionLimits::default`].
    pub session_limits: SessionLimits,
    /// The reverse proxies whose `X-Forwarded-For` or `Forwarded` names the client address
    /// that logins are throttled and capped by. Default: none, and those headers are ignored
    /// (a client writes them): the client is the TCP peer.
    pub trusted_proxies: TrustedProxies,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            users: demo_users(),
            token_ttl: Duration::from_secs(3600),
            notify: Vec::new(),
            notify_retry_for: Duration::from_secs(15 * 60),
            notify_expired_for: Duration::from_secs(60),
            public_url: None,
            play_game_urls: Vec::new(),
            admin_secret: None,
            serve: ServeLimits::default(),
            login_limits: LoginLimits::default(),
            session_limits: SessionLimits::default(),
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// How the reference API resists password guessing: failed logins are counted per username
/// and per client address, and past a limit the next attempts answer `429` with
/// `Retry-After`, without checking the password; and password checks (argon2) are bounded so
/// that a flood of logins leaves the other endpoints their CPU.
///
/// A failure is forgotten once [`window`](Self::window) passes without another one (counted
/// from the end of any lockout). A success clears its username's count, not its address's.
#[derive(Debug, Clone)]
pub struct LoginLimits {
    /// Failures of one username before it is locked out. Default: 5.
    pub failures_per_username: u32,
    /// Failures from one client address (an IPv6 /64) before it is locked out, across
    /// usernames. Higher than the username's, since players behind one NAT share an address.
    /// Default: 20.
    pub failures_per_address: u32,
    /// How long failures are remembered without a new one. Default: 60 s.
    pub window: Duration,
    /// The lockout at the limit; it doubles with each further failure. Default: 5 s.
    pub first_lockout: Duration,
    /// The longest lockout. Default: 15 min.
    pub max_lockout: Duration,
    /// Usernames, and addresses, tracked at most (each map apart); at the cap the key quiet
    /// the longest makes room (a locked-out one is passed over a few times first), at a cost
    /// that does not grow with the cap. Default: 100,000.
    pub max_tracked: usize,
    /// Password checks (argon2, ~19 MiB and a core each) running at once. Default: one per
    /// core beyond the first, at least 1.
    pub concurrent_verifications: usize,
    /// Password checks waiting for a slot; one more answers `503` with `Retry-After`.
    /// Default: 32.
    pub queued_verifications: usize,
}

impl Default for LoginLimits {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            failures_per_username: 5,
            failures_per_address: 20,
            window: Duration::from_secs(60),
            first_lockout: Duration::from_secs(5),
            max_lockout: Duration::from_secs(15 * 60),
            max_tracked: 100_000,
            concurrent_verifications: cores.saturating_sub(1).max(1),
            queued_verifications: 32,
        }
    }
}

impl LoginLimits {
    /// Checks that every count is at least 1 and that the first lockout is not longer than
    /// the longest.
    fn validate(&self) -> Result<(), ApiConfigError> {
        let counts = [
            ("failures_per_username", self.failures_per_username as usize),
            ("failures_per_address", self.failures_per_address as usize),
            ("max_tracked", self.max_tracked),
            ("concurrent_verifications", self.concurrent_verifications),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(ApiConfigError::LoginLimit {
                name,
                reason: "must be at least 1",
            });
        }
        if self.first_lockout > self.max_lockout {
            return Err(ApiConfigError::LoginLimit {
                name: "first_lockout",
                reason: "must not be longer than max_lockout",
            });
        }
        Ok(())
    }
}

/// What anonymous callers can take, so that device-id logins (free, no password) cannot fill
/// the API's memory or lock anyone out; and how many sessions anyone holds.
///
/// Device-id logins are throttled per client address (an IPv6 /64) and per device id: past
/// the budget of a window they answer `429 too_many_attempts` with `Retry-After`. Every cap
/// below makes room by ending the oldest (a session, with its tokens) or the one that would
/// expire first (a guest token, a guest), never by refusing a login: a flood of guests ends
/// older guests' sessions, never a password user's, whose sessions are bounded by the users
/// file and [`sessions_per_user`](Self::sessions_per_user). An ended session's tokens stop
/// working as an expired one's do: game servers are not told.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Sessions one password user holds; a new login ends the oldest. Default: 64.
    pub sessions_per_user: usize,
    /// Sessions one device (its guest) holds; a new login ends the oldest. Default: 8.
    pub sessions_per_device: usize,
    /// Guest sessions opened from one client address; a new one ends the address's oldest.
    /// Default: 256 (a household or a school behind one NAT).
    pub guest_sessions_per_address: usize,
    /// Guest sessions in all; a new one ends the oldest. Default: 100,000.
    pub guest_sessions: usize,
    /// Live guest tokens in all; a new one ends the guest token that would expire first.
    /// Default: 1,000,000.
    pub guest_tokens: usize,
    /// Guests in all; a new device ends the guest that would be forgotten first. Default:
    /// 100,000.
    pub guests: usize,
    /// A guest whose device has not logged in for this long is forgotten with its sessions;
    /// the device comes back as a new guest. Default: 7 days.
    pub guest_ttl: Duration,
    /// Device-id logins from one client address per window. Default: 60.
    pub device_logins_per_address: u32,
    /// Logins of one device id per window. Default: 10.
    pub device_logins_per_device: u32,
    /// The window the device-id login budgets count in. Default: 60 s.
    pub device_login_window: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            sessions_per_user: 64,
            sessions_per_device: 8,
            guest_sessions_per_address: 256,
            guest_sessions: 100_000,
            guest_tokens: 1_000_000,
            guests: 100_000,
            guest_ttl: Duration::from_secs(7 * 24 * 60 * 60),
            device_logins_per_address: 60,
            device_logins_per_device: 10,
            device_login_window: Duration::from_secs(60),
        }
    }
}

impl SessionLimits {
    /// Checks that every count and the guests' lifetime are at least 1.
    fn validate(&self) -> Result<(), ApiConfigError> {
        let counts = [
            ("sessions_per_user", self.sessions_per_user),
            ("sessions_per_device", self.sessions_per_device),
            (
                "guest_sessions_per_address",
                self.guest_sessions_per_address,
            ),
            ("guest_sessions", self.guest_sessions),
            ("guest_tokens", self.guest_tokens),
            ("guests", self.guests),
            (
                "device_logins_per_address",
                self.device_logins_per_address as usize,
            ),
            (
                "device_logins_per_device",
                self.device_logins_per_device as usize,
            ),
            ("guest_ttl", usize::from(!self.guest_ttl.is_zero())),
        ];
        match counts.iter().find(|(_, n)| *n == 0) {
            Some(&(name, _)) => Err(ApiConfigError::SessionLimit {
                name,
                reason: "must be at least 1",
            }),
            None => Ok(()),
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
        let config = Self {
            users,
            token_ttl,
            ..Self::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks that ids and usernames are unique and that no username or password is empty;
    /// that every notify target is an `http` or `https` URL and that they come with an admin
    /// secret; and the login and session limits.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::DuplicateId`], [`ApiConfigError::DuplicateUsername`],
    /// [`ApiConfigError::EmptyUsername`] or [`ApiConfigError::EmptyPassword`], for the first
    /// user at fault; [`ApiConfigError::NotifyUrl`] or [`ApiConfigError::NotifyWithoutSecret`];
    /// [`ApiConfigError::LoginLimit`] or [`ApiConfigError::SessionLimit`].
    pub fn validate(&self) -> Result<(), ApiConfigError> {
        self.validate_users()?;
        for target in &self.notify {
            notify_url(target)?;
        }
        if !self.notify.is_empty() && self.admin_secret.is_none() {
            return Err(ApiConfigError::NotifyWithoutSecret);
        }
        if let Some(public_url) = &self.public_url {
            public_base_url(public_url)?;
        }
        for game in &self.play_game_urls {
            play_game_url(game)?;
        }
        self.login_limits.validate()?;
        self.session_limits.validate()
    }

    /// The users part of [`ApiConfig::validate`].
    fn validate_users(&self) -> Result<(), ApiConfigError> {
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

/// `target` as an error may show it: user info (a password, perhaps) before an `@` becomes
/// `redacted`.
fn shown(target: &str) -> String {
    match (target.find("://"), target.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://redacted@{}", &target[..scheme], &target[at + 1..])
        }
        _ => target.to_owned(),
    }
}

/// `text` parsed, if it is a URL of one of `schemes` with a host and nothing but a path after
/// it (no query, fragment or user info); otherwise what is wrong with it, `not_scheme` when the
/// scheme or the host is.
fn bare_url(
    text: &str,
    schemes: [&str; 2],
    not_scheme: &'static str,
) -> Result<url::Url, &'static str> {
    let url = url::Url::parse(text).map_err(|_| "is not a URL")?;
    if !schemes.contains(&url.scheme()) || url.host().is_none() {
        return Err(not_scheme);
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err("has a query, a fragment or user info");
    }
    Ok(url)
}

/// `public_url` if it is an `http` or `https` URL with a host and nothing after its path.
fn public_base_url(public_url: &str) -> Result<(), ApiConfigError> {
    let not_scheme = "is not an http:// or https:// URL with a host";
    bare_url(public_url, ["http", "https"], not_scheme).map_err(|reason| {
        ApiConfigError::PublicUrl {
            url: shown(public_url),
            reason,
        }
    })?;
    Ok(())
}

/// `game` as the browser page may name it: a `ws://` or `wss://` URL with a host and nothing
/// but a path after it, in the form the page and its policy compare (`Url`'s).
pub(super) fn play_game_url(game: &str) -> Result<String, ApiConfigError> {
    let bad = |reason: &'static str| ApiConfigError::PlayGameUrl {
        url: shown(game),
        reason,
    };
    let url = bare_url(
        game,
        ["ws", "wss"],
        "is not a ws:// or wss:// URL with a host",
    )
    .map_err(bad)?;
    // A policy source list is split on spaces and semicolons; `Url` encodes spaces, not `;`.
    if url.as_str().contains([';', ',', '\'', '"']) {
        return Err(bad(
            "has a character a Content-Security-Policy cannot carry",
        ));
    }
    Ok(url.as_str().to_owned())
}

/// `{target}/admin/revoke`, for a notify target that is an `http` or `https` URL with a host
/// and no query, fragment or user info.
pub(super) fn notify_url(target: &str) -> Result<url::Url, ApiConfigError> {
    let bad = |reason: &'static str| ApiConfigError::NotifyUrl {
        url: shown(target),
        reason,
    };
    let base = url::Url::parse(target).map_err(|_| bad("not a URL"))?;
    if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
        return Err(bad("not an http:// or https:// URL with a host"));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(bad("has a query or a fragment"));
    }
    if !base.username().is_empty() || base.password().is_some() {
        return Err(bad(
            "has user info (the secret comes from the admin secret)",
        ));
    }
    let path = format!("{}/admin/revoke", base.path().trim_end_matches('/'));
    let mut url = base;
    url.set_path(&path);
    Ok(url)
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
    /// The admin secret cannot be one: too short, or not visible ASCII.
    #[error(transparent)]
    AdminSecret(#[from] AdminSecretError),
    /// The public URL is not this API's base URL such as `https://auth.example.com`.
    #[error("the public URL {url:?} {reason}")]
    PublicUrl {
        /// The URL, with any user info redacted.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `/play` game URL is not a game server's WebSocket URL such as `wss://game.example/ws`.
    #[error("the play game URL {url:?} {reason}")]
    PlayGameUrl {
        /// The URL, with any user info redacted.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Notify targets were given without an admin secret to send them.
    #[error("notify targets need an admin secret (TOKEN_RESOLVER_ADMIN_TOKEN)")]
    NotifyWithoutSecret,
    /// A notify target is not a game server's admin base URL such as `http://10.0.0.5:9350`.
    #[error("the notify target {url:?} {reason}")]
    NotifyUrl {
        /// The target as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A [`LoginLimits`] setting is out of range.
    #[error("login limit {name} {reason}")]
    LoginLimit {
        /// The field at fault.
        name: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// A [`SessionLimits`] setting is out of range.
    #[error("session limit {name} {reason}")]
    SessionLimit {
        /// The field at fault.
        name: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// The HTTP client for the notify targets could not be built (its TLS backend failed to
    /// start).
    #[error("cannot build the HTTP client for the notify targets: {0}")]
    NotifyClient(#[source] reqwest::Error),
    /// argon2 refused to hash a password (for instance one of several GiB).
    #[error("cannot hash the password of user {id}: {message}")]
    Hash {
        /// The user's id.
        id: i64,
        /// What argon2 said.
        message: String,
    },
}
