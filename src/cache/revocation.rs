//! Revocations as events: every invalidation the tiers apply, made on this node or received
//! from another through the shared tier, told to whoever subscribed with
//! [`Resolver::revocations`](crate::Resolver::revocations), so that a game server can close the
//! sessions that hold a revoked token or user.
//!
//! A token is named by its [`TokenFingerprint`], never carried: with a shared tier the
//! fingerprint is the HMAC every node computes with the shared secret (so a revocation made on
//! another node names the same token); without one, a hash keyed with this process's own
//! random key.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::LazyLock;

use tokio::sync::broadcast;

/// How many revocations a subscriber may fall behind before it is told it lagged.
const CAPACITY: usize = 1024;

/// An invalidation, as [`Resolver::revocations`](crate::Resolver::revocations) tells it.
///
/// Endpoints are normalised (`https://auth.example.com/api/user`): compare them with
/// [`Endpoint::as_str`](crate::Endpoint::as_str) of what a session resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// One token at one endpoint: close what holds it.
    Token {
        /// The endpoint it was resolved at.
        endpoint: String,
        /// The token, named without being carried; compare with
        /// [`Resolver::fingerprint`](crate::Resolver::fingerprint).
        token: TokenFingerprint,
    },
    /// Every token of one user at one endpoint (a ban, a logout everywhere).
    User {
        /// The endpoint.
        endpoint: String,
        /// The user.
        user_id: i64,
    },
    /// Every token of one of the integrator's sessions at one endpoint (a logout): the tokens
    /// whose answer's `sid` is `session` ([`User::session`](crate::User::session)).
    Session {
        /// The endpoint.
        endpoint: String,
        /// The session's user.
        user_id: i64,
        /// The integrator's session id.
        session: String,
    },
    /// Everything: every session that holds a resolved token.
    All,
    /// Revocations may have been missed (the shared tier's channel was lost and is back, and
    /// the local cache was emptied): re-check every token you hold.
    Recheck,
}

/// A token's name in revocations: equal for equal (endpoint, token), and never the token.
/// Its `Debug` and `Display` show the name, which reveals nothing of the token.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TokenFingerprint(Box<str>);

impl TokenFingerprint {
    /// From a digest already computed (the shared tier's HMAC, in hex).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn from_digest(digest: impl Into<Box<str>>) -> TokenFingerprint {
        TokenFingerprint(digest.into())
    }

    /// With this process's own random key: 128 bits of two keyed SipHashes, in hex.
    pub(crate) fn local(endpoint: &str, token: &str) -> TokenFingerprint {
        static KEYS: LazyLock<[std::collections::hash_map::RandomState; 2]> =
            LazyLock::new(Default::default);
        let [a, b] = &*KEYS;
        let (a, b) = (a.hash_one((endpoint, token)), b.hash_one((endpoint, token)));
        TokenFingerprint(format!("{a:016x}{b:016x}").into())
    }
}

impl fmt::Debug for TokenFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenFingerprint({})", self.0)
    }
}

impl fmt::Display for TokenFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the tiers publish their revocations.
pub(crate) struct Revocations {
    sender: broadcast::Sender<Revocation>,
}

impl Revocations {
    pub(crate) fn new() -> Revocations {
        Revocations {
            sender: broadcast::channel(CAPACITY).0,
        }
    }

    /// Tells every subscriber; nobody listening is fine.
    pub(crate) fn publish(&self, revocation: Revocation) {
        let _ = self.sender.send(revocation);
    }

    /// A new subscriber, which sees every revocation from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Revocation> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_fingerprints_name_the_pair_and_never_show_the_token() {
        let a = TokenFingerprint::local("https://a.example/api/user", "SECRET-TOKEN");
        assert_eq!(
            a,
            TokenFingerprint::local("https://a.example/api/user", "SECRET-TOKEN")
        );
        assert_ne!(
            a,
            TokenFingerprint::local("https://b.example/api/user", "SECRET-TOKEN")
        );
        assert_ne!(
            a,
            TokenFingerprint::local("https://a.example/api/user", "SECRET-TOKEM")
        );
        assert!(!format!("{a:?} {a}").contains("SECRET"));
        assert_eq!(a.to_string().len(), 32);
    }
}
