//! [`RedisTier`]: where and how to reach the shared tier, as the embedding server configures it.

use std::fmt;
use std::time::Duration;

/// Where and how to reach the shared Redis tier; give it to
/// [`ResolverBuilder::shared_cache`](crate::ResolverBuilder::shared_cache).
///
/// ```no_run
/// # fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use token_resolver::{RedisTier, Resolver};
///
/// let resolver = Resolver::builder()
///     .default_auth_url("https://auth.example.com")
///     .shared_cache(
///         RedisTier::new("redis://10.0.0.7:6379", std::env::var("TOKEN_CACHE_SECRET")?)
///             .key_prefix("mytitle:")
///             .op_timeout(Duration::from_millis(50)),
///     )
///     .build()?;
/// # let _ = resolver; Ok(()) }
/// ```
///
/// `Debug` never shows the secret.
#[derive(Clone)]
#[must_use]
pub struct RedisTier {
    /// `redis://host:port/db`.
    pub(super) url: String,
    /// Prepended to every key and to the channel name, so several titles can share a Redis.
    pub(super) key_prefix: String,
    /// The HMAC key that turns (endpoint, token) into a Redis key.
    pub(super) secret: Vec<u8>,
    /// Deadline for each Redis operation.
    pub(super) op_timeout: Duration,
}

impl RedisTier {
    /// The Redis at `url` (e.g. `redis://127.0.0.1:6379`), with `secret` (at least 16 bytes,
    /// the same on every node) for key derivation. Key prefix `token-resolver:`, operation
    /// timeout 50 ms.
    pub fn new(url: impl Into<String>, secret: impl AsRef<[u8]>) -> Self {
        RedisTier {
            url: url.into(),
            key_prefix: "token-resolver:".to_owned(),
            secret: secret.as_ref().to_vec(),
            op_timeout: Duration::from_millis(50),
        }
    }

    /// Prefix of every key and of the invalidation channel. Default: `token-resolver:`.
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        RedisTier {
            key_prefix: prefix.into(),
            ..self
        }
    }

    /// Deadline for each Redis operation; past it the node goes on without Redis.
    /// Default: 50 ms.
    pub fn op_timeout(self, timeout: Duration) -> Self {
        RedisTier {
            op_timeout: timeout,
            ..self
        }
    }
}

impl fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTier")
            .field("url", &self.url)
            .field("key_prefix", &self.key_prefix)
            .field("secret", &"[redacted]")
            .field("op_timeout", &self.op_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_secret() {
        let shown = format!("{:?}", RedisTier::new("redis://h", "SECRET-SECRET-SECRET"));
        assert!(!shown.contains("SECRET"), "{shown}");
    }
}
