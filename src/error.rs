//! What can go wrong: [`ResolveError`] for a resolution (with the [`ErrorContext`] its variants
//! carry), [`ErrorCode`] for its stable string, and [`ConfigError`] for a [`ResolverBuilder`](crate::ResolverBuilder) that cannot be built.
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

/// Why a token could not be resolved to a user.
///
/// One variant per [`ErrorCode`]: match on the variant or on [`code`](Self::code), whichever
/// reads better. What else there is to know is asked of the error, not read from its fields:
/// [`host`](Self::host) (the auth API's host, never its path), [`status`](Self::status) (the
/// HTTP status, where the API answered one), [`was_revoked`](Self::was_revoked), and the
/// transport failure under an `auth_unavailable` as its [`source`](StdError::source). The
/// message says what happened and what to do, and never holds the token.
///
/// Cheap to clone: when many tasks wait on one upstream call, each gets the same error. Five
/// words, so that `Result<Arc<User>, ResolveError>` is too: every cache hit returns one.
///
/// ```
/// use token_resolver::{ErrorCode, ResolveError};
///
/// let e = ResolveError::token_malformed("contains a space");
/// assert_eq!(e.code(), ErrorCode::TokenMalformed);
/// assert!(matches!(e, ResolveError::TokenMalformed(_)));
/// assert_eq!(e.to_string(), "the access token is malformed: contains a space");
/// assert!(!e.is_retryable());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ResolveError {
    /// The client sent no token, or an empty one. Ask the player to log in.
    TokenMissing,
    /// The token is not an RFC 6750 `b64token` of at most 4096 bytes; no call was made.
    /// Do not retry: the client holds something that is not an access token.
    TokenMalformed(ErrorContext),
    /// The auth API answered 401 or 403 (the token is unknown, expired or revoked), or 200
    /// with an `exp` that had passed; or the token, its user or its session was revoked here
    /// or on another node while it was being resolved ([`was_revoked`](Self::was_revoked)).
    /// Ask the player to log in again.
    TokenRejected(ErrorContext),
    /// The authUrl is unparsable, insecure, or not on the allowlist; no call was made.
    /// Check the room's authUrl against `allow_auth_url`.
    AuthUrlNotAllowed(ErrorContext),
    /// The auth API could not be reached, or kept answering 408, 429 or 5xx, after the retries.
    /// Retry later.
    AuthUnavailable(ErrorContext),
    /// The auth API did not finish answering within `request_timeout`. Retry later.
    AuthTimeout(ErrorContext),
    /// The auth API broke the protocol (redirect, unexpected status, malformed or oversized
    /// answer). Retrying will not help; the integrator must fix the API.
    AuthBadResponse(ErrorContext),
    /// Every upstream slot stayed busy for `queue_timeout`. Retry shortly.
    Overloaded(ErrorContext),
}

/// What a [`ResolveError`] knows beyond its code: read through the error's own methods
/// ([`host`](ResolveError::host), [`status`](ResolveError::status), ...). Opaque, so that what
/// an error carries can grow without breaking a caller; shown, it is the detail of the error's
/// message.
#[derive(Clone)]
pub struct ErrorContext {
    /// The host of the auth API concerned, for errors that concern one (never its path, which
    /// a client's authUrl may choose): shared with the endpoint, so that an error for a failed
    /// call copies no string, however many waiters it reaches.
    host: Option<Arc<String>>,
    what: What,
}

/// The detail of an [`ErrorContext`]. At most two words beside its tag, and the host one (a
/// shared `String`, not a `str`), so that the error stays five.
#[derive(Clone)]
enum What {
    /// A rule's fixed wording.
    Reason(&'static str),
    /// A detail worded at the time.
    Text(Box<str>),
    /// The HTTP status the API answered.
    Status(u16),
    /// A deadline that passed: `request_timeout`, or the wait for a slot.
    Deadline(Duration),
    /// Revoked while the resolution was under way.
    Revoked,
    /// No answer at all, with the HTTP client's error under it.
    Transport(Arc<Transport>),
}

/// A transport failure: how it is worded, and the HTTP client's error (without its URL).
struct Transport {
    detail: &'static str,
    source: reqwest::Error,
}

impl ErrorContext {
    fn new(host: Option<&Arc<String>>, what: What) -> ErrorContext {
        ErrorContext {
            host: host.cloned(),
            what,
        }
    }

    /// `host`, or a placeholder for the errors that name none.
    fn host_or_none(&self) -> &str {
        self.host.as_deref().map_or("(none)", String::as_str)
    }
}

impl fmt::Display for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.what {
            What::Reason(reason) => f.write_str(reason),
            What::Text(text) => f.write_str(text),
            What::Status(status) => write!(f, "HTTP {status}"),
            What::Deadline(waited) => write!(f, "{waited:?}"),
            What::Revoked => f.write_str("revoked while the auth API was being asked"),
            What::Transport(transport) => f.write_str(transport.detail),
        }
    }
}

impl fmt::Debug for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("ErrorContext");
        if let Some(host) = &self.host {
            debug.field("host", host);
        }
        match &self.what {
            What::Transport(transport) => debug
                .field("detail", &transport.detail)
                .field("source", &transport.source),
            _ => debug.field("detail", &format_args!("{self}")),
        };
        debug.finish()
    }
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::TokenMissing => {
                f.write_str("no access token was sent; the client must log in and send one")
            }
            ResolveError::TokenMalformed(c) => write!(f, "the access token is malformed: {c}"),
            ResolveError::TokenRejected(c) => match c.what {
                What::Revoked => write!(
                    f,
                    "the token was revoked while the auth API at {} was being asked; the player must log in again",
                    c.host_or_none()
                ),
                What::Status(200) => write!(
                    f,
                    "the token has expired (the auth API at {} says when); the player must log in again",
                    c.host_or_none()
                ),
                _ => write!(
                    f,
                    "the auth API at {} rejected the token ({c}); the player must log in again",
                    c.host_or_none()
                ),
            },
            ResolveError::AuthUrlNotAllowed(c) => write!(f, "authUrl not allowed: {c}"),
            ResolveError::AuthUnavailable(c) => write!(
                f,
                "the auth API at {} is unavailable: {c}",
                c.host_or_none()
            ),
            ResolveError::AuthTimeout(c) => write!(
                f,
                "the auth API at {} did not answer within {c}",
                c.host_or_none()
            ),
            ResolveError::AuthBadResponse(c) => write!(
                f,
                "the auth API at {} broke the protocol: {c}",
                c.host_or_none()
            ),
            ResolveError::Overloaded(c) => {
                write!(f, "too many auth calls in flight: no slot within {c}")
            }
        }
    }
}

impl StdError for ResolveError {
    /// The HTTP client's error under an `auth_unavailable` that got no answer at all (refused,
    /// reset, TLS); its own source goes on down the chain, to the I/O error say.
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.context()?.what {
            What::Transport(transport) => Some(&transport.source),
            _ => None,
        }
    }
}

impl ResolveError {
    /// `token_malformed`, for a layer that takes tokens from its own input (a header, a
    /// message) and finds one unusable before asking the resolver. `reason` says which rule
    /// failed, and must never quote the token.
    pub fn token_malformed(reason: &'static str) -> ResolveError {
        ResolveError::TokenMalformed(ErrorContext::new(None, What::Reason(reason)))
    }

    /// `auth_url_not_allowed`, for a layer that picks the authUrl itself (a sidecar without a
    /// default, say) and finds none it may use. `reason` must not quote a URL's path or query,
    /// which a client may choose.
    pub fn auth_url_not_allowed(reason: impl fmt::Display) -> ResolveError {
        ResolveError::AuthUrlNotAllowed(ErrorContext::new(
            None,
            What::Text(reason.to_string().into()),
        ))
    }

    /// The API answered `status` (401 or 403, or 200 with an `exp` that had passed).
    pub(crate) fn rejected(host: &Arc<String>, status: u16) -> ResolveError {
        ResolveError::TokenRejected(ErrorContext::new(Some(host), What::Status(status)))
    }

    /// Revoked while it was being resolved.
    pub(crate) fn revoked(host: &Arc<String>) -> ResolveError {
        ResolveError::TokenRejected(ErrorContext::new(Some(host), What::Revoked))
    }

    /// The API kept answering `status` (408, 429, 5xx).
    pub(crate) fn unavailable_status(host: &Arc<String>, status: u16) -> ResolveError {
        ResolveError::AuthUnavailable(ErrorContext::new(Some(host), What::Status(status)))
    }

    /// Unavailable for a reason worded at the time (an open circuit breaker).
    pub(crate) fn unavailable(host: &Arc<String>, detail: String) -> ResolveError {
        ResolveError::AuthUnavailable(ErrorContext::new(Some(host), What::Text(detail.into())))
    }

    /// No answer at all: `error` is the HTTP client's, kept (without its URL) as the source.
    pub(crate) fn transport(
        host: &Arc<String>,
        detail: &'static str,
        error: reqwest::Error,
    ) -> ResolveError {
        let transport = Transport {
            detail,
            source: error.without_url(),
        };
        ResolveError::AuthUnavailable(ErrorContext::new(
            Some(host),
            What::Transport(Arc::new(transport)),
        ))
    }

    /// No answer within `timeout`.
    pub(crate) fn timeout(host: &Arc<String>, timeout: Duration) -> ResolveError {
        ResolveError::AuthTimeout(ErrorContext::new(Some(host), What::Deadline(timeout)))
    }

    /// The API broke the protocol as `detail` says.
    pub(crate) fn bad_response(host: &Arc<String>, detail: String) -> ResolveError {
        ResolveError::AuthBadResponse(ErrorContext::new(Some(host), What::Text(detail.into())))
    }

    /// No slot within `waited`.
    pub(crate) fn overloaded(waited: Duration) -> ResolveError {
        ResolveError::Overloaded(ErrorContext::new(None, What::Deadline(waited)))
    }

    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ResolveError::TokenMissing => ErrorCode::TokenMissing,
            ResolveError::TokenMalformed(_) => ErrorCode::TokenMalformed,
            ResolveError::TokenRejected(_) => ErrorCode::TokenRejected,
            ResolveError::AuthUrlNotAllowed(_) => ErrorCode::AuthUrlNotAllowed,
            ResolveError::AuthUnavailable(_) => ErrorCode::AuthUnavailable,
            ResolveError::AuthTimeout(_) => ErrorCode::AuthTimeout,
            ResolveError::AuthBadResponse(_) => ErrorCode::AuthBadResponse,
            ResolveError::Overloaded(_) => ErrorCode::Overloaded,
        }
    }

    /// Whether trying again later can succeed (`auth_unavailable`, `auth_timeout`, `overloaded`).
    pub fn is_retryable(&self) -> bool {
        self.code().is_retryable()
    }

    /// Whether the token was refused as unknown, expired or revoked (`token_rejected`).
    pub fn is_rejected(&self) -> bool {
        self.code() == ErrorCode::TokenRejected
    }

    /// The host of the auth API this error concerns (`auth.example.com`, never the URL's
    /// path, which a client's authUrl may choose); `None` for an error that concerns no API
    /// (no token, a malformed one, a refused authUrl, no slot).
    pub fn host(&self) -> Option<&str> {
        self.context()?.host.as_deref().map(String::as_str)
    }

    /// The HTTP status the auth API answered: 401 or 403 for a rejection (200 when the answer
    /// said the token had expired; a rejection served from the negative cache carries the
    /// status of the answer that was cached), 408, 429 or 5xx for an `auth_unavailable` after
    /// the retries. `None` where no status came.
    pub fn status(&self) -> Option<u16> {
        match self.context()?.what {
            What::Status(status) => Some(status),
            _ => None,
        }
    }

    /// Whether this `token_rejected` came from a revocation (of the token, its user, its
    /// session, or everything; here or on another node) that landed while the token was
    /// being resolved, rather than from the auth API's answer.
    pub fn was_revoked(&self) -> bool {
        matches!(
            self,
            ResolveError::TokenRejected(ErrorContext {
                what: What::Revoked,
                ..
            })
        )
    }

    fn context(&self) -> Option<&ErrorContext> {
        match self {
            ResolveError::TokenMissing => None,
            ResolveError::TokenMalformed(c)
            | ResolveError::TokenRejected(c)
            | ResolveError::AuthUrlNotAllowed(c)
            | ResolveError::AuthUnavailable(c)
            | ResolveError::AuthTimeout(c)
            | ResolveError::AuthBadResponse(c)
            | ResolveError::Overloaded(c) => Some(c),
        }
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
    fn codes_are_the_stable_strings() {
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
    fn a_revocation_in_flight_is_a_rejection_that_says_so() {
        let host = Arc::new("auth.example".to_owned());
        let e = ResolveError::revoked(&host);
        assert_eq!(e.code(), ErrorCode::TokenRejected);
        assert!(e.was_revoked());
        assert_eq!(e.status(), None);
        assert!(!ResolveError::rejected(&host, 403).was_revoked());
        assert!(e.to_string().contains("revoked"), "{e}");
    }

    #[test]
    fn error_code_matches_variant() {
        let e = ResolveError::overloaded(Duration::from_secs(1));
        assert_eq!(e.code(), ErrorCode::Overloaded);
        assert!(e.is_retryable());
        assert_eq!(e.host(), None);
        assert!(!ResolveError::TokenMissing.is_retryable());
    }
}
