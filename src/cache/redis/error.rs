//! [`RedisTierError`]: what [`RedisTier::check`](super::RedisTier::check) found wrong, and
//! the same words for the tier's log lines when Redis fails at run time.
//!
//! No message holds a password, a token or the key-derivation secret: Redis's own errors name
//! addresses and server replies, and the URLs shown here are redacted.

use std::error::Error as StdError;

use redis::{ErrorKind, RedisError};

use crate::error::ConfigError;

/// What is wrong with the shared Redis tier, from [`RedisTier::check`](super::RedisTier::check).
///
/// Only [`Unreachable`](Self::Unreachable) may be a passing state; every other variant is a
/// configuration to fix ([`is_config`](Self::is_config)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisTierError {
    /// The settings cannot work (a bad URL, a CA that is not PEM, a short secret): fix them.
    #[error("{0}")]
    Config(#[source] ConfigError),
    /// A TLS handshake failed: most often the server's certificate is not signed by a trusted
    /// CA (give the private CA with `root_certificate` / `--redis-ca`) or names another host.
    #[error("TLS with Redis failed ({detail}): is the server's certificate signed by the CA given with root_certificate (--redis-ca) and issued for this host?")]
    Tls {
        /// The TLS library's reason.
        detail: String,
    },
    /// Redis refused the ACL user or password: fix the credentials.
    #[error("Redis refused the credentials ({detail}): check the user and password (URL or TOKEN_RESOLVER_REDIS_PASSWORD)")]
    Auth {
        /// Redis's reply.
        detail: String,
    },
    /// No sentinel knows a master of that name (or none is healthy): fix the name.
    #[error("no sentinel knows a healthy master named {name:?}")]
    UnknownMaster {
        /// The master name that was asked for.
        name: String,
    },
    /// No Redis answered in time: it may be down for now. The tier keeps trying by itself,
    /// and resolutions go on through the API meanwhile.
    #[error("Redis is unreachable: {detail}")]
    Unreachable {
        /// What the connection attempt met.
        detail: String,
    },
    /// Redis answered with an error not covered above.
    #[error("Redis answered with an error: {detail}")]
    Redis {
        /// Redis's reply.
        detail: String,
    },
}

impl RedisTierError {
    /// Whether the configuration is at fault (anything but a Redis that is unreachable now).
    pub fn is_config(&self) -> bool {
        !matches!(self, RedisTierError::Unreachable { .. })
    }

    /// The variant for a `redis` crate error met while reaching the tier; `master` is the
    /// master's name in Sentinel form.
    pub(super) fn from_redis(error: &RedisError, master: Option<&str>) -> Self {
        let detail = describe(error);
        if is_tls(error) {
            return RedisTierError::Tls { detail };
        }
        match error.kind() {
            ErrorKind::AuthenticationFailed => RedisTierError::Auth { detail },
            ErrorKind::MasterNameNotFoundBySentinel | ErrorKind::NoValidReplicasFoundBySentinel => {
                let name = master.unwrap_or_default().to_owned();
                RedisTierError::UnknownMaster { name }
            }
            ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => {
                RedisTierError::Unreachable { detail }
            }
            ErrorKind::Server(_) if detail.contains("WRONGPASS") || detail.contains("NOAUTH") => {
                RedisTierError::Auth { detail }
            }
            _ if error.is_timeout() || error.is_connection_refusal() => {
                RedisTierError::Unreachable { detail }
            }
            _ => RedisTierError::Redis { detail },
        }
    }
}

/// A `redis` crate error as one line for a log: its message and the causes beneath it (where
/// rustls says what was wrong with a certificate).
pub(super) fn describe(error: &RedisError) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let line = inner.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        cause = inner.source();
    }
    if is_tls(error) && !text.contains("TLS") {
        text.insert_str(0, "TLS: ");
    }
    text
}

/// Whether `error` came from the TLS layer (a rustls error somewhere beneath it).
fn is_tls(error: &RedisError) -> bool {
    let mut cause: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(inner) = cause {
        if inner.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        cause = inner.source();
    }
    let text = error.to_string();
    text.contains("certificate") || text.contains("InvalidCertificate")
}
