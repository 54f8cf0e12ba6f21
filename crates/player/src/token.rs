//! [`AccessToken`]: the access token as the player holds it, checked against the token rule
//! (RFC 6750 `b64token`, at most [`MAX_TOKEN_BYTES`]) and never shown by `Debug`.
//!
//! The rule is the resolver's (`token_resolver::check_syntax`), written again here so that
//! the player's side does not build the resolver to hold a token; a test checks the two agree.

use std::fmt;

/// The longest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// Why a string is not an access token; it never says what the string was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The string is empty.
    #[error("no access token was sent; the client must log in and send one")]
    Missing,
    /// The string is not a `b64token` of at most [`MAX_TOKEN_BYTES`] bytes.
    #[error("the access token is malformed: {reason}")]
    Malformed {
        /// Which rule it breaks.
        reason: &'static str,
    },
}

/// `true` for the bytes of a `b64token` body: `A-Z a-z 0-9 - . _ ~ + /`.
const fn is_token_byte(b: u8) -> bool {
    matches!(b, b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
}

/// Checks that `token` is an RFC 6750 `b64token` (one or more of `A-Z a-z 0-9 - . _ ~ + /`,
/// then any number of `=`) of at most [`MAX_TOKEN_BYTES`] bytes.
fn check_syntax(token: &str) -> Result<(), TokenError> {
    match token.len() {
        0 => return Err(TokenError::Missing),
        n if n > MAX_TOKEN_BYTES => {
            return Err(TokenError::Malformed {
                reason: "longer than 4096 bytes",
            })
        }
        _ => {}
    }
    let bytes = token.as_bytes();
    let body_len = bytes.iter().take_while(|&&b| is_token_byte(b)).count();
    if body_len == 0 {
        return Err(TokenError::Malformed {
            reason: "does not start with a b64token character (A-Z a-z 0-9 - . _ ~ + /)",
        });
    }
    if !bytes[body_len..].iter().all(|&b| b == b'=') {
        return Err(TokenError::Malformed {
            reason: "contains a character outside A-Z a-z 0-9 - . _ ~ + / and trailing =",
        });
    }
    Ok(())
}

/// An access token whose syntax was checked. Its `Debug` prints `[redacted]`; it has no
/// `Display`, so it cannot slip into a log line by a format string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AccessToken(Box<str>);

impl AccessToken {
    /// Checks `token` against the token rule and keeps it.
    ///
    /// # Errors
    ///
    /// [`TokenError::Missing`] for an empty token, [`TokenError::Malformed`] for any other
    /// violation.
    ///
    /// # Example
    ///
    /// ```
    /// use token_resolver_player::AccessToken;
    ///
    /// assert_eq!(AccessToken::new("mF_9.B5f-4.1JqM").unwrap().secret(), "mF_9.B5f-4.1JqM");
    /// assert!(AccessToken::new("a b").is_err());
    /// ```
    pub fn new(token: impl Into<String>) -> Result<Self, TokenError> {
        let token = token.into();
        check_syntax(&token)?;
        Ok(AccessToken(token.into_boxed_str()))
    }

    /// The token itself. Handle with care: do not log it, put it in a metric or an error, or
    /// send it anywhere but the game server and the integrator it came from.
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

    #[test]
    fn the_rule_is_the_resolvers() {
        let long = "a".repeat(MAX_TOKEN_BYTES);
        let too_long = "a".repeat(MAX_TOKEN_BYTES + 1);
        for token in [
            "mF_9.B5f-4.1JqM",
            "AZaz09-._~+/",
            "abc==",
            "abc=",
            "",
            "=",
            "==",
            "a=b",
            "a b",
            " a",
            "a\n",
            "é",
            "a\0",
            "tok,en",
            long.as_str(),
            too_long.as_str(),
        ] {
            let ours = AccessToken::new(token).map_err(|e| e.to_string());
            let theirs = token_resolver::AccessToken::new(token).map_err(|e| e.to_string());
            assert_eq!(
                ours.is_ok(),
                theirs.is_ok(),
                "{token:?}: {ours:?} / {theirs:?}"
            );
            assert_eq!(ours.err(), theirs.err(), "{token:?}");
        }
        assert_eq!(MAX_TOKEN_BYTES, token_resolver::MAX_TOKEN_BYTES);
    }

    #[test]
    fn debug_of_a_token_is_redacted() {
        let token = AccessToken::new("s3cr3t-value").unwrap();
        assert_eq!(format!("{token:?}"), "AccessToken([redacted])");
    }
}
