//! [`AdminSecret`]: the bearer secret of the admin endpoints, shared by the reference API (which
//! sends it with its revocation notices and checks it on ban and unban) and the game servers
//! (which check it on `POST /admin/revoke`).

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The admin secret shared by the reference API and the game servers
/// (`TOKEN_RESOLVER_ADMIN_TOKEN`): at least [`AdminSecret::MIN_BYTES`] bytes of visible ASCII.
///
/// `Debug` prints `[redacted]`; there is no `Display`. Cheap to clone.
#[derive(Clone)]
pub struct AdminSecret(Arc<str>);

/// Why a string cannot be the admin secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminSecretError {
    /// The secret is too short: give at least [`AdminSecret::MIN_BYTES`] bytes.
    #[error(
        "the admin secret has {len} bytes; it needs at least {} (TOKEN_RESOLVER_ADMIN_TOKEN)",
        AdminSecret::MIN_BYTES
    )]
    Short {
        /// How many bytes it has.
        len: usize,
    },
    /// The secret has a space, a control character or a non-ASCII byte: use visible ASCII
    /// only, such as the output of `openssl rand -hex 32`.
    #[error("the admin secret must be visible ASCII only (no spaces or control characters)")]
    NotPrintable,
}

impl AdminSecret {
    /// The shortest secret accepted, in bytes.
    pub const MIN_BYTES: usize = 16;

    /// Takes `secret` as the admin secret.
    ///
    /// # Errors
    ///
    /// [`AdminSecretError::Short`] when it has fewer than [`Self::MIN_BYTES`] bytes,
    /// [`AdminSecretError::NotPrintable`] when it has a byte that is not visible ASCII (it
    /// travels in an `Authorization` header).
    pub fn new(secret: impl Into<String>) -> Result<Self, AdminSecretError> {
        let secret = secret.into();
        if secret.len() < Self::MIN_BYTES {
            return Err(AdminSecretError::Short { len: secret.len() });
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AdminSecretError::NotPrintable);
        }
        Ok(Self(secret.into()))
    }

    /// The secret itself. Handle with care: never log it, nor put it in an error.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` (a request's bearer) is this secret: SHA-256 digests of both,
    /// compared in constant time, so that neither the secret's bytes nor its length show in
    /// the timing.
    pub fn is(&self, presented: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        let digest = |bytes: &[u8]| Sha256::digest(bytes);
        digest(presented)
            .ct_eq(&digest(self.expose().as_bytes()))
            .into()
    }
}

impl fmt::Debug for AdminSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminSecret([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_long_visible_ascii_and_never_shown() {
        assert_eq!(
            AdminSecret::new("short").unwrap_err(),
            AdminSecretError::Short { len: 5 }
        );
        assert_eq!(
            AdminSecret::new("0123456789abcdef\n").unwrap_err(),
            AdminSecretError::NotPrintable
        );
        let secret = AdminSecret::new("0123456789abcdef").unwrap();
        assert!(secret.is(b"0123456789abcdef"));
        assert!(!secret.is(b"0123456789abcdeF"));
        assert!(!format!("{secret:?}").contains("0123"));
    }
}
