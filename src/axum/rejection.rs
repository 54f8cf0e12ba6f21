//! [`AuthRejection`]: a refused request's answer, from its error code to the status, headers
//! and JSON body a client can act on.
//!
//! The answer is written for the client, who may be anyone: it says which rule the request
//! broke and whether to retry, and never the token, the auth API's host or what the auth API
//! answered. Those stay in the [`ResolveError`] the rejection holds, for the server's logs.

use std::fmt;

use ::axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use ::axum::http::{HeaderValue, StatusCode};
use ::axum::response::{IntoResponse, Response};

use crate::error::{ErrorCode, ResolveError};

/// Why a request was refused: the [`ResolveError`] of its token, answered as HTTP.
///
/// The rejection of the [`Authenticated`](super::Authenticated) and
/// [`AuthIdentity`](super::AuthIdentity) extractors and the answer of
/// [`AuthLayer`](super::AuthLayer). Each error code has its answer:
///
/// | error code | status | headers |
/// |---|---|---|
/// | `token_missing` | 401 | `WWW-Authenticate: Bearer` |
/// | `token_malformed` | 401 | `WWW-Authenticate: Bearer error="invalid_request"` |
/// | `token_rejected` | 401 | `WWW-Authenticate: Bearer error="invalid_token"` |
/// | `auth_url_not_allowed` | 403 | |
/// | `auth_bad_response` | 502 | |
/// | `auth_unavailable`, `auth_timeout`, `overloaded` | 503 | `Retry-After: 1` |
///
/// with the body `{"error": "<code>", "message": "…", "retryable": bool}` as
/// `application/json` and `Cache-Control: no-store`. The message says what to do; it names
/// neither the token nor the auth API's host, nor what the auth API answered.
#[derive(Debug, Clone)]
pub struct AuthRejection {
    /// What went wrong, with the details the client is not shown.
    error: ResolveError,
}

impl AuthRejection {
    /// The stable error code, the body's `error`.
    pub fn code(&self) -> ErrorCode {
        self.error.code()
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        status_of(self.code())
    }

    /// The error behind the rejection, with what the client is not told (the auth API's host,
    /// what it answered): for the server's logs.
    pub fn error(&self) -> &ResolveError {
        &self.error
    }

    /// The error behind the rejection.
    pub fn into_error(self) -> ResolveError {
        self.error
    }

    /// What the answer's body says: what happened, and what the client can do.
    fn message(&self) -> String {
        match self.code() {
            // The reason names the rule the token broke, never the token.
            ErrorCode::TokenMissing | ErrorCode::TokenMalformed => self.error.to_string(),
            ErrorCode::TokenRejected => {
                "the access token was rejected (unknown, expired or revoked); log in again"
                    .to_owned()
            }
            ErrorCode::AuthUrlNotAllowed => {
                "this server is not allowed to call the auth API of this route".to_owned()
            }
            ErrorCode::AuthUnavailable => "the auth API is unavailable; retry later".to_owned(),
            ErrorCode::AuthTimeout => "the auth API did not answer in time; retry later".to_owned(),
            ErrorCode::AuthBadResponse => {
                "the auth API gave an answer this server cannot use".to_owned()
            }
            ErrorCode::Overloaded => {
                "too many sign-ins are being checked at once; retry shortly".to_owned()
            }
        }
    }
}

/// The status of each code, as the table of [`AuthRejection`] says. Exhaustive, so that a new
/// code does not compile until it has a status.
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::TokenMissing | ErrorCode::TokenMalformed | ErrorCode::TokenRejected => {
            StatusCode::UNAUTHORIZED
        }
        ErrorCode::AuthUrlNotAllowed => StatusCode::FORBIDDEN,
        ErrorCode::AuthBadResponse => StatusCode::BAD_GATEWAY,
        ErrorCode::AuthUnavailable | ErrorCode::AuthTimeout | ErrorCode::Overloaded => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// The `WWW-Authenticate` challenge of a 401 (RFC 6750 section 3).
fn challenge(code: ErrorCode) -> Option<&'static str> {
    match code {
        ErrorCode::TokenMissing => Some("Bearer"),
        ErrorCode::TokenMalformed => Some(r#"Bearer error="invalid_request""#),
        ErrorCode::TokenRejected => Some(r#"Bearer error="invalid_token""#),
        _ => None,
    }
}

impl From<ResolveError> for AuthRejection {
    fn from(error: ResolveError) -> Self {
        AuthRejection { error }
    }
}

impl IntoResponse for AuthRejection {
    fn into_response(self) -> Response {
        let code = self.code();
        tracing::debug!(error = %self.error, code = code.as_str(), "request refused");
        let body = serde_json::json!({
            "error": code.as_str(),
            "message": self.message(),
            "retryable": code.is_retryable(),
        })
        .to_string();
        let mut response = (status_of(code), body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(challenge) = challenge(code) {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        }
        if code.is_retryable() {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The client's message, as the answer's body says it.
impl fmt::Display for AuthRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for AuthRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_code_has_a_status_and_only_401s_have_a_challenge() {
        for &code in ErrorCode::ALL {
            let status = status_of(code);
            assert_eq!(challenge(code).is_some(), status == 401, "{code}");
            assert_eq!(code.is_retryable(), status == 503, "{code}");
        }
    }

    #[test]
    fn the_message_names_neither_the_host_nor_the_detail() {
        let host = Arc::new("auth.internal.example".to_owned());
        let error = ResolveError::bad_response(&host, "field \"id\" is a string".into());
        let rejection = AuthRejection::from(error);
        let shown = rejection.to_string();
        assert!(
            !shown.contains("internal") && !shown.contains("field"),
            "{shown}"
        );
        assert_eq!(rejection.status(), StatusCode::BAD_GATEWAY);
        let waited = ResolveError::overloaded(Duration::from_secs(1));
        assert_eq!(AuthRejection::from(waited).status(), 503);
    }
}
