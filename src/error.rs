//! What can go wrong: [`ResolveError`] for a resolution, [`ErrorCode`] for its stable string, and
//! [`ConfigError`] for a [`ResolverBuilder`](crate::ResolverBuilder) that cannot be built.
//!
//! No error here ever holds the access token: messages name the auth API's host and, where there
//! was one, the HTTP status, and nothing the client sent except a sanitised authUrl.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::auth_url::Endpoint;

/// The stable code of a [`ResolveError`]: what a game client shows or maps.
///
/// The strings of [`as_str`](Self::as_str) are a contract and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// No token, or an empty one, where auth is required.
    TokenMissing,
    /// The token fails the syntax or size rule.
    TokenMalformed,
    /// The auth API answered 401 or 403.
    TokenRejected,
    /// The authUrl is not parsable, not allowed, or insecure.
    AuthUrlNotAllowed,
    /// Connect, DNS or TLS failure, reset, or 408/429/5xx after retries.
    AuthUnavailable,
    /// `request_timeout` passed before the auth API answered.
    AuthTimeout,
    /// The auth API broke the protocol: redirect, unexpected status, bad body.
    AuthBadResponse,
    /// No upstream slot became free within `queue_timeout`.
    Overloaded,
}

impl ErrorCode {
    /// Every code, in the order of the table in the README.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::TokenMissing,
        ErrorCode::TokenMalformed,
        ErrorCode::TokenRejected,
        ErrorCode::AuthUrlNotAllowed,
        ErrorCode::AuthUnavailable,
        ErrorCode::AuthTimeout,
        ErrorCode::AuthBadResponse,
        ErrorCode::Overloaded,
    ];

    /// The stable string, e.g. `"token_rejected"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::TokenMissing => "token_missing",
            ErrorCode::TokenMalformed => "token_malformed",
            ErrorCode::TokenRejected => "token_rejected",
            ErrorCode::AuthUrlNotAllowed => "auth_url_not_allowed",
            ErrorCode::AuthUnavailable => "auth_unavailable",
            ErrorCode::AuthTimeout => "auth_timeout",
            ErrorCode::AuthBadResponse => "auth_bad_response",
            ErrorCode::Overloaded => "overloaded",
        }
    }

    /// Whether trying the same resolution again later can succeed.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::AuthUnavailable | ErrorCode::AuthTimeout | ErrorCode::Overloaded
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a token could not be resolved to a user.
///
/// Cheap to clone: when many tasks wait on one upstream call, each gets the same error.
/// [`code`](Self::code) gives the stable code, [`is_retryable`](Self::is_retryable) whether a
/// later try can succeed. The message names the auth API's host and the HTTP status where there
/// was one, never the token.
///
/// Small, so that `Result<Arc<User>, ResolveError>` is too: every cache hit returns one and
/// pays for its size. Hence the one-pointer [`ApiHost`] and [`Cause`], and details as
/// `Box<str>`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The client sent no token, or an empty one. Ask the player to log in.
    #[error("no access token was sent; the client must log in and send one")]
    TokenMissing,

    /// The token is not an RFC 6750 `b64token` of at most 4096 bytes; no call was made.
    /// Do not retry: the client holds something that is not an access token.
    #[error("the access token is malformed: {reason}")]
    TokenMalformed {
        /// What is wrong with it (never the token itself).
        reason: &'static str,
    },

    /// The auth API answered 401 or 403: the token is unknown, expired or revoked.
    /// Ask the player to log in again.
    #[error("{}", rejected(host, *status))]
    TokenRejected {
        /// Host of the auth API.
        host: ApiHost,
        /// The status the API answered: 401 or 403, or 200 when it answered with an `exp`
        /// (or the token is a JWT whose `exp`) that had passed. A rejection served from the
        /// negative cache carries the status of the answer that was cached.
        status: u16,
    },

    /// The authUrl is unparsable, insecure, or not on the allowlist; no call was made.
    /// Check the room's authUrl against `allow_auth_url`.
    #[error("authUrl not allowed: {reason}")]
    AuthUrlNotAllowed {
        /// Why it was refused.
        reason: String,
    },

    /// The auth API could not be reached, or kept answering 408, 429 or 5xx, after the retries.
    /// Retry later.
    #[error("the auth API at {host} is unavailable: {detail}")]
    AuthUnavailable {
        /// Host of the auth API.
        host: ApiHost,
        /// What happened, e.g. `HTTP 503` or `connection refused`.
        detail: Box<str>,
        /// The underlying transport error, if any.
        #[source]
        source: Option<Cause>,
    },

    /// The auth API did not finish answering within `request_timeout`. Retry later.
    #[error("the auth API at {host} did not answer within {timeout:?}")]
    AuthTimeout {
        /// Host of the auth API.
        host: ApiHost,
        /// The deadline that passed.
        timeout: Duration,
    },

    /// The auth API broke the protocol (redirect, unexpected status, malformed or oversized
    /// answer). Retrying will not help; the integrator must fix the API.
    #[error("the auth API at {host} broke the protocol: {detail}")]
    AuthBadResponse {
        /// Host of the auth API.
        host: ApiHost,
        /// What was wrong, e.g. `field "id" is a string, expected an integer`.
        detail: Box<str>,
    },

    /// The token, its user or its session was revoked (here or on another node) while the
    /// token was being resolved, and again when the resolution started over. Ask the player to
    /// log in again. Its code is `token_rejected`.
    #[error("the token was revoked while the auth API at {host} was being asked; the player must log in again")]
    TokenRevoked {
        /// Host of the auth API.
        host: ApiHost,
    },

    /// Every upstream slot stayed busy for `queue_timeout`. Retry shortly.
    #[error("too many auth calls in flight: no slot within {waited:?}")]
    Overloaded {
        /// How long the resolution waited for a slot.
        waited: Duration,
    },
}

/// The message of [`ResolveError::TokenRejected`].
fn rejected(host: &ApiHost, status: u16) -> String {
    match status {
        200 => format!("the token has expired (the auth API at {host} says when); the player must log in again"),
        status => format!("the auth API at {host} rejected the token (HTTP {status}); the player must log in again"),
    }
}

impl ResolveError {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ResolveError::TokenMissing => ErrorCode::TokenMissing,
            ResolveError::TokenMalformed { .. } => ErrorCode::TokenMalformed,
            ResolveError::TokenRejected { .. } | ResolveError::TokenRevoked { .. } => {
                ErrorCode::TokenRejected
            }
            ResolveError::AuthUrlNotAllowed { .. } => ErrorCode::AuthUrlNotAllowed,
            ResolveError::AuthUnavailable { .. } => ErrorCode::AuthUnavailable,
            ResolveError::AuthTimeout { .. } => ErrorCode::AuthTimeout,
            ResolveError::AuthBadResponse { .. } => ErrorCode::AuthBadResponse,
            ResolveError::Overloaded { .. } => ErrorCode::Overloaded,
        }
    }

    /// Whether trying again later can succeed (`auth_unavailable`, `auth_timeout`, `overloaded`).
    pub fn is_retryable(&self) -> bool {
        self.code().is_retryable()
    }

    /// Whether the auth API itself said no to the token (`token_rejected`).
    pub fn is_rejected(&self) -> bool {
        self.code() == ErrorCode::TokenRejected
    }
}

/// The auth API a [`ResolveError`] concerns, shown as its host (`auth.example.com`) and never
/// its path, which a client's authUrl may choose.
///
/// One pointer, shared with the resolver's [`Endpoint`]: an error for a failed call copies no
/// string, however many waiters it reaches.
#[derive(Clone)]
pub struct ApiHost(Arc<Endpoint>);

impl ApiHost {
    pub(crate) fn of(endpoint: &Arc<Endpoint>) -> ApiHost {
        ApiHost(Arc::clone(endpoint))
    }

    /// The host, e.g. `auth.example.com`.
    pub fn as_str(&self) -> &str {
        self.0.host()
    }
}

impl From<Arc<Endpoint>> for ApiHost {
    fn from(endpoint: Arc<Endpoint>) -> Self {
        ApiHost(endpoint)
    }
}

impl From<Endpoint> for ApiHost {
    fn from(endpoint: Endpoint) -> Self {
        ApiHost(Arc::new(endpoint))
    }
}

/// Equal when the hosts are: what the value shows is all it compares.
impl PartialEq for ApiHost {
    fn eq(&self, other: &ApiHost) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ApiHost {}

impl PartialEq<str> for ApiHost {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ApiHost {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for ApiHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ApiHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// The transport failure under a [`ResolveError::AuthUnavailable`]: the HTTP client's error
/// (refused, reset, TLS), without its URL. Its [`source`](StdError::source) goes on down the
/// chain (to the I/O error, say).
///
/// One pointer, shared: a failed call's error reaches every coalesced waiter without a copy.
#[derive(Clone)]
pub struct Cause(Arc<reqwest::Error>);

impl Cause {
    pub(crate) fn new(error: reqwest::Error) -> Cause {
        Cause(Arc::new(error.without_url()))
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl StdError for Cause {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// A [`ResolverBuilder`](crate::ResolverBuilder) setting that cannot work; returned by `build()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The setter at fault, e.g. `"default_auth_url"`.
    setting: &'static str,
    /// What is wrong with it and what to do.
    message: String,
}

impl ConfigError {
    pub(crate) fn new(setting: &'static str, message: impl Into<String>) -> Self {
        ConfigError {
            setting,
            message: message.into(),
        }
    }

    /// The name of the builder setter whose value is wrong.
    pub fn setting(&self) -> &'static str {
        self.setting
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.setting, self.message)
    }
}

impl StdError for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlainHttp;

    #[test]
    fn codes_are_the_stable_strings_of_the_spec() {
        let strings: Vec<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            strings,
            [
                "token_missing",
                "token_malformed",
                "token_rejected",
                "auth_url_not_allowed",
                "auth_unavailable",
                "auth_timeout",
                "auth_bad_response",
                "overloaded"
            ]
        );
    }

    #[test]
    fn only_transient_codes_are_retryable() {
        let retryable: Vec<_> = ErrorCode::ALL
            .iter()
            .filter(|c| c.is_retryable())
            .map(|c| c.as_str())
            .collect();
        assert_eq!(
            retryable,
            ["auth_unavailable", "auth_timeout", "overloaded"]
        );
    }

    #[test]
    fn a_resolution_result_is_at_most_five_words() {
        // What every cache hit returns (docs/performance.md has what eight words cost). A new
        // field that pushes a variant past four words fails here.
        let words = std::mem::size_of::<Result<Arc<crate::User>, ResolveError>>() / 8;
        assert!(words <= 5, "{words} words");
    }

    #[test]
    fn an_api_host_shows_the_host_alone() {
        let host = ApiHost::from(
            Endpoint::parse("https://auth.example/game/x", PlainHttp::LoopbackOnly).unwrap(),
        );
        assert_eq!(host.to_string(), "auth.example");
        assert_eq!(format!("{host:?}"), "\"auth.example\"");
        assert_eq!(host, "auth.example");
        let elsewhere =
            Endpoint::parse("https://auth.example/other", PlainHttp::LoopbackOnly).unwrap();
        assert_eq!(host, ApiHost::from(elsewhere), "compared by host alone");
    }

    #[test]
    fn error_code_matches_variant() {
        let e = ResolveError::Overloaded {
            waited: Duration::from_secs(1),
        };
        assert_eq!(e.code(), ErrorCode::Overloaded);
        assert!(e.is_retryable());
        assert!(!ResolveError::TokenMissing.is_retryable());
    }
}
