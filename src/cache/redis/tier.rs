//! [`RedisTier`]: where and how to reach the shared tier, as the embedding server configures it:
//! one server (`redis://`, `rediss://`), a master found through Sentinel, or a Redis Cluster,
//! with credentials and a private CA. Turning it into connections is `connect`'s job.

use std::fmt;
use std::time::Duration;

/// Where and how to reach the shared Redis tier; give it to
/// [`ResolverBuilder::shared_cache`](crate::ResolverBuilder::shared_cache).
///
/// Four forms, each through the `redis` crate's own support:
///
/// | form | constructor |
/// |---|---|
/// | one server, plain | [`RedisTier::new`] with `redis://[user:password@]host:port[/db]` |
/// | one server, TLS | [`RedisTier::new`] with `rediss://…`, plus [`root_certificate`](Self::root_certificate) for a private CA |
/// | Sentinel | [`RedisTier::sentinel`] with the sentinels' URLs and the master's name |
/// | Redis Cluster | [`RedisTier::cluster`] with some of the nodes' URLs |
///
/// ```no_run
/// # fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use token_resolver::{RedisTier, Resolver};
///
/// let resolver = Resolver::builder()
///     .default_auth_url("https://auth.example.com")
///     .shared_cache(
///         RedisTier::new("rediss://game:s3cret@10.0.0.7:6380", std::env::var("TOKEN_CACHE_SECRET")?)
///             .root_certificate(std::fs::read("/etc/redis/ca.pem")?)
///             .key_prefix("mytitle:")
///             .op_timeout(Duration::from_millis(50)),
///     )
///     .build()?;
/// # let _ = resolver; Ok(()) }
/// ```
///
/// Nothing is checked or connected here: [`ResolverBuilder::build`](crate::ResolverBuilder::build)
/// refuses a configuration that cannot work, the first resolution connects, and
/// [`check`](Self::check) connects once on demand (a server calls it at start).
///
/// `Debug` never shows the secret, a password (in a URL or set with
/// [`password`](Self::password)) or the CA.
#[derive(Clone)]
#[must_use]
pub struct RedisTier {
    /// Which servers, in which form.
    pub(super) target: Target,
    /// Prepended to every key and to the channel name, so several titles can share a Redis.
    pub(super) key_prefix: String,
    /// The HMAC key that turns (endpoint, token) into a Redis key.
    pub(super) secret: Vec<u8>,
    /// Deadline for each Redis operation.
    pub(super) op_timeout: Duration,
    /// Revocations the stream keeps for nodes that were cut off to catch up on.
    pub(super) stream_len: u64,
    /// PEM of the CA that signed the servers' certificates, for `rediss://` with a private CA.
    pub(super) root_certificate: Option<Vec<u8>>,
    /// ACL user for the data nodes where their URL names none.
    pub(super) username: Option<String>,
    /// Password for the data nodes where their URL has none.
    pub(super) password: Option<String>,
    /// How far this node's wall clock is taken to be ahead of the real one, in ms (negative:
    /// behind); tests only, to play a node whose clock is off.
    pub(super) clock_offset_ms: i64,
}

/// The servers of a [`RedisTier`].
#[derive(Clone)]
pub(super) enum Target {
    /// One server.
    Server(String),
    /// The master named `master`, as the sentinels at `sentinels` know it.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
    /// A cluster reached first through `nodes` (any of its nodes; the rest are discovered).
    Cluster(Vec<String>),
}

impl RedisTier {
    fn with_target(target: Target, secret: &[u8]) -> Self {
        RedisTier {
            target,
            key_prefix: "token-resolver:".to_owned(),
            secret: secret.to_vec(),
            op_timeout: Duration::from_millis(50),
            stream_len: 100_000,
            root_certificate: None,
            username: None,
            password: None,
            clock_offset_ms: 0,
        }
    }

    /// The Redis at `url`, with `secret` (at least 16 bytes, the same on every node) for key
    /// derivation. Key prefix `token-resolver:`, operation timeout 50 ms.
    ///
    /// `url` is `redis://` or `rediss://` (TLS), with an ACL user and password as
    /// `user:password@` (percent-encode reserved characters such as `@`, `:`, `/`, `%`), a port
    /// (default 6379) and a database (`/2`, default 0): e.g.
    /// `rediss://game:s3cret@redis.internal:6380/0`.
    pub fn new(url: impl Into<String>, secret: impl AsRef<[u8]>) -> Self {
        Self::with_target(Target::Server(url.into()), secret.as_ref())
    }

    /// The master named `master_name` as the sentinels at `sentinel_urls` know it: the tier
    /// asks them where the master is, and asks again when it fails over.
    ///
    /// The sentinels' URLs carry the sentinels' own credentials if they need any; the master's
    /// come from [`username`](Self::username) and [`password`](Self::password). With
    /// `rediss://` sentinels the master is reached over TLS too, trusting the same
    /// [`root_certificate`](Self::root_certificate).
    pub fn sentinel<I, U>(
        sentinel_urls: I,
        master_name: impl Into<String>,
        secret: impl AsRef<[u8]>,
    ) -> Self
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        let target = Target::Sentinel {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master: master_name.into(),
        };
        Self::with_target(target, secret.as_ref())
    }

    /// The Redis Cluster reached through `node_urls`: any of its nodes (every URL with the same
    /// scheme and credentials); the others are discovered, and a node that is down at start is
    /// skipped. Keys spread over the cluster's slots; see `docs/redis.md` for the layout.
    pub fn cluster<I, U>(node_urls: I, secret: impl AsRef<[u8]>) -> Self
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        let nodes = node_urls.into_iter().map(Into::into).collect();
        Self::with_target(Target::Cluster(nodes), secret.as_ref())
    }

    /// Trust the CA in `pem` (one or more PEM certificates) for `rediss://` servers, instead of
    /// the system's roots. Default: the system's roots.
    pub fn root_certificate(self, pem: impl AsRef<[u8]>) -> Self {
        RedisTier {
            root_certificate: Some(pem.as_ref().to_vec()),
            ..self
        }
    }

    /// ACL user for the data nodes whose URL names none (the master in Sentinel form).
    /// Default: none (Redis's `default` user).
    pub fn username(self, username: impl Into<String>) -> Self {
        RedisTier {
            username: Some(username.into()),
            ..self
        }
    }

    /// Password for the data nodes whose URL has none (the master in Sentinel form). Keeps the
    /// password out of URLs, which tend to end up in logs and `ps`. Default: none.
    pub fn password(self, password: impl Into<String>) -> Self {
        RedisTier {
            password: Some(password.into()),
            ..self
        }
    }

    /// Prefix of every key and of the invalidation channel. Default: `token-resolver:`.
    ///
    /// On a cluster, a prefix with a `{hash tag}` would put every key in one slot, on one
    /// master: leave braces out unless that is what you want.
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

    /// How many revocations the tier's stream keeps (approximately: Redis trims it in whole
    /// blocks): a node cut off from Redis catches up on exactly what it missed when it comes
    /// back within that many, and empties its cache and re-checks its sessions when it comes
    /// back later. Default: 100 000, a few MB of Redis memory.
    pub fn stream_len(self, revocations: u64) -> Self {
        RedisTier {
            stream_len: revocations.max(1),
            ..self
        }
    }
}

impl RedisTier {
    /// Tests only: this node's wall clock taken to be `ms` milliseconds ahead of the real one
    /// (behind when negative), wherever the tier reads it (sealed expiries, the time a
    /// revocation is made). Not a setting for production.
    #[doc(hidden)]
    pub fn node_clock_offset_ms(self, ms: i64) -> Self {
        RedisTier {
            clock_offset_ms: ms,
            ..self
        }
    }
}

/// `url` with its password, if any, replaced by `redacted`; an unparsable URL is not shown.
pub(super) fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("redacted"));
            }
            parsed.to_string()
        }
        Err(_) => "[unparsable URL]".to_owned(),
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |urls: &[String]| urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>();
        match self {
            Target::Server(url) => f.debug_tuple("Server").field(&redact_url(url)).finish(),
            Target::Sentinel { sentinels, master } => f
                .debug_struct("Sentinel")
                .field("sentinels", &redact(sentinels))
                .field("master", master)
                .finish(),
            Target::Cluster(nodes) => f.debug_tuple("Cluster").field(&redact(nodes)).finish(),
        }
    }
}

impl fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |set: bool| if set { "[redacted]" } else { "none" };
        f.debug_struct("RedisTier")
            .field("target", &self.target)
            .field("key_prefix", &self.key_prefix)
            .field("secret", &"[redacted]")
            .field("op_timeout", &self.op_timeout)
            .field("root_certificate", &self.root_certificate.is_some())
            .field("username", &self.username)
            .field("password", &shown(self.password.is_some()))
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

    #[test]
    fn debug_hides_passwords_in_urls_and_set_apart() {
        let tiers = [
            RedisTier::new("rediss://game:PA55%40word@h:6380", "0123456789abcdef"),
            RedisTier::new("redis://h", "0123456789abcdef").password("PA55@word"),
            RedisTier::sentinel(["redis://:PA55word@s1:26379"], "m", "0123456789abcdef"),
            RedisTier::cluster(
                ["redis://u:PA55word@n1", "redis://u:PA55word@n2"],
                "0123456789abcdef",
            ),
            RedisTier::new("redis://u:PA55word@[::1", "0123456789abcdef"),
        ];
        for tier in tiers {
            let shown = format!("{tier:?}");
            assert!(!shown.contains("PA55"), "{shown}");
        }
        let shown = format!(
            "{:?}",
            RedisTier::new("rediss://game:PA55@h:6380", "0123456789abcdef")
        );
        assert!(shown.contains("rediss://game:redacted@h:6380"), "{shown}");
    }
}
