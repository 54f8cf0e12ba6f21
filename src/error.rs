//! What can go wrong: [`ResolveError`] for a resolution, [`ErrorCode`] for its stable string, and
//! [`ConfigError`] for a [`ResolverBuilder`](crate::ResolverBuilder) that cannot be built.
//!
//! No error here ever holds the access token: messages name the auth API's host and, where there
//! was one, the HTTP status, and nothing the client sent except a sanitised authUrl.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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

/// A shared, clonable cause: one failed upstream call answers every coalesced waiter.
pub(crate) type Cause = Arc<dyn StdError + Send + Sync + 'static>;

/// Why a token could not be resolved to a user.
///
/// Cheap to clone: when many tasks wait on one upstream call, each gets the same error.
/// [`code`](Self::code) gives the stable code, [`is_retryable`](Self::is_retryable) whether a
/// later try can succeed. The message names the auth API's host and the HTTP status where there
/// was one, never the token.
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
        host: String,
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
        host: String,
        /// What happened, e.g. `HTTP 503` or `connection refused`.
        detail: String,
        /// The underlying transport error, if any.
        #[source]
        source: Option<Cause>,
    },

    /// The auth API did not finish answering within `request_timeout`. Retry later.
    #[error("the auth API at {host} did not answer within {timeout:?}")]
    AuthTimeout {
        /// Host of the auth API.
        host: String,
        /// The deadline that passed.
        timeout: Duration,
    },

    /// The auth API broke the protocol (redirect, unexpected status, malformed or oversized
    /// answer). Retrying will not help; the integrator must fix the API.
    #[error("the auth API at {host} broke the protocol: {detail}")]
    AuthBadResponse {
        /// Host of the auth API.
        host: String,
        /// What was wrong, e.g. `field "id" is a string, expected an integer`.
        detail: String,
    },

    /// Every upstream slot stayed busy for `queue_timeout`. Retry shortly.
    #[error("too many auth calls in flight: no slot within {waited:?}")]
    Overloaded {
        /// How long the resolution waited for a slot.
        waited: Duration,
    },
}

/// The message of [`ResolveError::TokenRejected`].
fn rejected(host: &str, status: u16) -> String {
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
            ResolveError::TokenRejected { .. } => ErrorCode::TokenRejected,
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
    fn error_code_matches_variant() {
        let e = ResolveError::Overloaded {
            waited: Duration::from_secs(1),
        };
        assert_eq!(e.code(), ErrorCode::Overloaded);
        assert!(e.is_retryable());
        assert!(!ResolveError::TokenMissing.is_retryable());
    }
}
