//! The access token: its syntax rule (RFC 6750 `b64token`, at most [`MAX_TOKEN_BYTES`]) and
//! [`AccessToken`], a holder whose `Debug` never shows it.
//!
//! This module only judges the token's shape; whether the auth API accepts it is the
//! resolver's business.

use std::fmt;

use crate::error::ResolveError;
use crate::user::Expiry;

/// The longest token accepted, in bytes. Longer ones are `token_malformed` with no call.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// `true` for the bytes of a `b64token` body: `A-Z a-z 0-9 - . _ ~ + /`.
const fn is_token_byte(b: u8) -> bool {
    matches!(b, b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
}

/// Checks that `token` is an RFC 6750 `b64token` (one or more of `A-Z a-z 0-9 - . _ ~ + /`,
/// then any number of `=`) of at most [`MAX_TOKEN_BYTES`] bytes.
///
/// # Errors
///
/// [`ResolveError::TokenMissing`] for an empty token, [`ResolveError::TokenMalformed`] for any
/// other violation. The error says which rule failed, never what the token was.
///
/// # Example
///
/// ```
/// use token_resolver::check_syntax;
/// use token_resolver::ErrorCode;
///
/// assert!(check_syntax("mF_9.B5f-4.1JqM").is_ok());
/// assert_eq!(check_syntax("a b").unwrap_err().code(), ErrorCode::TokenMalformed);
/// assert_eq!(check_syntax("").unwrap_err().code(), ErrorCode::TokenMissing);
/// ```
pub fn check_syntax(token: &str) -> Result<(), ResolveError> {
    check_size(token)?;
    let bytes = token.as_bytes();
    let body_len = bytes.iter().take_while(|&&b| is_token_byte(b)).count();
    if body_len == 0 {
        return Err(ResolveError::token_malformed(
            "does not start with a b64token character (A-Z a-z 0-9 - . _ ~ + /)",
        ));
    }
    if !bytes[body_len..].iter().all(|&b| b == b'=') {
        return Err(ResolveError::token_malformed(
            "contains a character outside A-Z a-z 0-9 - . _ ~ + / and trailing =",
        ));
    }
    Ok(())
}

/// The cheap part of [`check_syntax`]: present, and not over [`MAX_TOKEN_BYTES`].
#[inline]
pub(crate) fn check_size(token: &str) -> Result<(), ResolveError> {
    match token.len() {
        0 => Err(ResolveError::TokenMissing),
        n if n > MAX_TOKEN_BYTES => Err(ResolveError::token_malformed("longer than 4096 bytes")),
        _ => Ok(()),
    }
}

/// The `exp` of a token that is a JWT: three base64url segments whose middle one is a JSON
/// object with a numeric `exp` (Unix seconds). Read only to shorten how long an answer is
/// trusted, never to accept anything: no signature is checked. `None` for any other token.
pub(crate) fn jwt_expiry(token: &str) -> Option<Expiry> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;

    let mut segments = token.split('.');
    let (Some(_header), Some(payload), Some(_signature), None) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return None;
    };
    // A payload is small; a large one is not worth decoding to shorten a cache lifetime.
    if payload.len() > 2048 {
        return None;
    }
    let payload = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&payload).ok()?;
    let exp = claims.get("exp")?.as_f64()?;
    Some(Expiry::from_unix_seconds(if exp > 0.0 {
        exp.floor() as u64
    } else {
        0
    }))
}

/// An access token whose syntax was checked. Its `Debug` prints `[redacted]`; it has no
/// `Display`, so it cannot slip into a log line by a format string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AccessToken(Box<str>);

impl AccessToken {
    /// Checks `token` with [`check_syntax`] and keeps it.
    ///
    /// # Errors
    ///
    /// As [`check_syntax`].
    pub fn new(token: impl Into<String>) -> Result<Self, ResolveError> {
        let token = token.into();
        check_syntax(&token)?;
        Ok(AccessToken(token.into_boxed_str()))
    }

    /// The token itself. Handle with care: do not log it, put it in a metric or an error, or
    /// send it anywhere but an allowed auth API.
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn code(token: &str) -> Option<ErrorCode> {
        check_syntax(token).err().map(|e| e.code())
    }

    #[test]
    fn accepts_every_b64token_character_and_trailing_padding() {
        assert_eq!(code("AZaz09-._~+/"), None);
        assert_eq!(code("abc=="), None);
        assert_eq!(code(&"a".repeat(MAX_TOKEN_BYTES)), None);
    }

    #[test]
    fn empty_token_is_missing() {
        assert_eq!(code(""), Some(ErrorCode::TokenMissing));
    }

    #[test]
    fn refuses_padding_only_inner_padding_and_foreign_bytes() {
        for bad in [
            "=", "==", "a=b", "a b", "a\nb", "é", "a\0", "Bearer x", "a,b", "\"a\"",
        ] {
            assert_eq!(code(bad), Some(ErrorCode::TokenMalformed), "{bad:?}");
        }
    }

    #[test]
    fn refuses_one_byte_over_the_size_limit() {
        assert_eq!(
            code(&"a".repeat(MAX_TOKEN_BYTES + 1)),
            Some(ErrorCode::TokenMalformed)
        );
    }

    #[test]
    fn a_jwt_tells_its_expiry_and_other_tokens_none() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine as _;
        let jwt = |claims: &str| {
            format!(
                "{}.{}.sig",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
                URL_SAFE_NO_PAD.encode(claims)
            )
        };
        assert_eq!(
            jwt_expiry(&jwt(r#"{"sub":"1","exp":1700000000}"#)).map(Expiry::unix_seconds),
            Some(1_700_000_000)
        );
        assert_eq!(
            jwt_expiry(&jwt(r#"{"exp":1700000000.9}"#)).map(Expiry::unix_seconds),
            Some(1_700_000_000)
        );
        for not_one in [
            jwt(r#"{"sub":"1"}"#),
            jwt(r#"{"exp":"soon"}"#),
            jwt("[1]"),
            "opaque-token".to_owned(),
            "a.b".to_owned(),
            "a.b.c.d".to_owned(),
            "a.!!!.c".to_owned(),
        ] {
            assert_eq!(jwt_expiry(&not_one), None, "{not_one}");
        }
    }

    #[test]
    fn debug_of_a_token_is_redacted() {
        let token = AccessToken::new("s3cr3t-value").unwrap();
        assert_eq!(format!("{token:?}"), "AccessToken([redacted])");
        assert_eq!(token.secret(), "s3cr3t-value");
    }
}
