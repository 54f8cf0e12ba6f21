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
use std::ops::Deref;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

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

/// A [`Revocation`] with the time it was made, as
/// [`Resolver::dated_revocations`](crate::Resolver::dated_revocations) tells it: a revocation
/// applied late (its node's link to the shared tier was down, the integrator's notifier
/// retried) closes what it named when it was made, not a session a fresh token opened since.
///
/// It dereferences to its [`Revocation`], so code written for one reads the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatedRevocation {
    revocation: Revocation,
    /// When it was made (`None`: unknown, as for a re-check).
    made_at: Option<SystemTime>,
    /// After this, a session's answer cannot be older than the revocation: `made_at` plus the
    /// longest an answer is cached and the clock skew allowed.
    spares_after: Option<SystemTime>,
}

impl DatedRevocation {
    /// `revocation`, made at `made_at`; `margin` is how much older than the moment it was
    /// resolved a session's answer may be (the longest an answer is cached, plus the skew
    /// allowed between clocks).
    pub(crate) fn new(
        revocation: Revocation,
        made_at: Option<SystemTime>,
        margin: Duration,
    ) -> DatedRevocation {
        DatedRevocation {
            revocation,
            made_at,
            spares_after: made_at.and_then(|at| at.checked_add(margin)),
        }
    }

    /// A revocation of unknown time: it spares nothing.
    pub fn undated(revocation: Revocation) -> DatedRevocation {
        DatedRevocation {
            revocation,
            made_at: None,
            spares_after: None,
        }
    }

    /// The revocation.
    pub fn revocation(&self) -> &Revocation {
        &self.revocation
    }

    /// When it was made, by the clock of whoever made it; `None` when unknown.
    pub fn made_at(&self) -> Option<SystemTime> {
        self.made_at
    }

    /// Whether a session that resolved its token at `resolved_at` (by this node's clock)
    /// cannot hold an answer from before this revocation, and so is not closed by it: it was
    /// resolved after the revocation was made plus the longest an answer is cached
    /// ([`ResolverBuilder::cache_ttl`](crate::ResolverBuilder::cache_ttl)), plus how long
    /// past that one is served stale
    /// ([`ResolverBuilder::serve_stale_for`](crate::ResolverBuilder::serve_stale_for)), plus
    /// the clock skew allowed ([`ResolverBuilder::clock_skew`](crate::ResolverBuilder::clock_skew)).
    /// Always `false` for a revocation of unknown time.
    pub fn spares(&self, resolved_at: SystemTime) -> bool {
        self.spares_after.is_some_and(|after| resolved_at > after)
    }
}

impl Deref for DatedRevocation {
    type Target = Revocation;

    fn deref(&self) -> &Revocation {
        &self.revocation
    }
}

impl From<Revocation> for DatedRevocation {
    fn from(revocation: Revocation) -> DatedRevocation {
        DatedRevocation::undated(revocation)
    }
}

/// Where the tiers publish their revocations: as [`Revocation`]s, and with their time.
pub(crate) struct Revocations {
    sender: broadcast::Sender<Revocation>,
    dated: broadcast::Sender<DatedRevocation>,
    /// How much older than its resolution a session's answer may be: `cache_ttl` plus the
    /// clock skew.
    margin: Duration,
}

impl Revocations {
    pub(crate) fn new(margin: Duration) -> Revocations {
        Revocations {
            sender: broadcast::channel(CAPACITY).0,
            dated: broadcast::channel(CAPACITY).0,
            margin,
        }
    }

    /// Tells every subscriber; nobody listening is fine.
    pub(crate) fn publish(&self, revocation: Revocation, made_at: Option<SystemTime>) {
        if self.dated.receiver_count() > 0 {
            let dated = DatedRevocation::new(revocation.clone(), made_at, self.margin);
            let _ = self.dated.send(dated);
        }
        let _ = self.sender.send(revocation);
    }

    /// A new subscriber, which sees every revocation from now on.
    pub(crate) fn subscribe(&self) -> RevocationFeed<Revocation> {
        RevocationFeed::new(self.sender.subscribe())
    }

    /// A new subscriber to the revocations with their time, from now on.
    pub(crate) fn subscribe_dated(&self) -> RevocationFeed<DatedRevocation> {
        RevocationFeed::new(self.dated.subscribe())
    }
}

/// Every revocation a resolver makes or hears from the moment of subscribing, in order: what
/// [`Resolver::revocations`](crate::Resolver::revocations) (`T` = [`Revocation`]) and
/// [`Resolver::dated_revocations`](crate::Resolver::dated_revocations) (`T` =
/// [`DatedRevocation`]) return.
///
/// A subscriber that falls more than 1,024 revocations behind cannot know which it missed: it
/// is handed one [`Revocation::Recheck`] in their place, so that it checks again everything it
/// holds, and [`missed`](Self::missed) counts them. Nothing it is told is ever silently lost.
///
/// ```
/// # async fn example(resolver: token_resolver::Resolver) {
/// use token_resolver::Revocation;
///
/// let mut revocations = resolver.revocations();
/// while let Some(revocation) = revocations.recv().await {
///     match revocation {
///         Revocation::Token { .. } | Revocation::User { .. } | Revocation::Session { .. } => {
///             // close the sessions it names
///         }
///         _ => {} // Recheck, All: check every session's token again
///     }
/// }
/// // The resolver (every clone of it) is gone.
/// # }
/// ```
pub struct RevocationFeed<T> {
    receiver: broadcast::Receiver<T>,
    missed: u64,
}

impl<T: Clone + From<Revocation>> RevocationFeed<T> {
    fn new(receiver: broadcast::Receiver<T>) -> RevocationFeed<T> {
        RevocationFeed {
            receiver,
            missed: 0,
        }
    }

    /// The next revocation, once there is one; `None` once the resolver and every clone of it
    /// are dropped.
    pub async fn recv(&mut self) -> Option<T> {
        match self.receiver.recv().await {
            Ok(revocation) => Some(revocation),
            Err(RecvError::Lagged(missed)) => Some(self.lagged(missed)),
            Err(RecvError::Closed) => None,
        }
    }

    /// The next revocation already told, without waiting: `None` when there is none yet (or the
    /// resolver is gone).
    pub fn try_recv(&mut self) -> Option<T> {
        match self.receiver.try_recv() {
            Ok(revocation) => Some(revocation),
            Err(TryRecvError::Lagged(missed)) => Some(self.lagged(missed)),
            Err(TryRecvError::Empty | TryRecvError::Closed) => None,
        }
    }

    /// How many revocations this subscriber has missed by falling behind, in all; each time it
    /// did, it was handed one [`Revocation::Recheck`] in their place.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    fn lagged(&mut self, missed: u64) -> T {
        self.missed = self.missed.saturating_add(missed);
        tracing::warn!(
            missed,
            "revocations missed: told as a re-check of everything"
        );
        T::from(Revocation::Recheck)
    }
}

impl<T> fmt::Debug for RevocationFeed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RevocationFeed")
            .field("waiting", &self.receiver.len())
            .field("missed", &self.missed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dated_revocation_spares_only_what_was_resolved_past_its_margin() {
        let made = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let margin = Duration::from_secs(90);
        let dated = DatedRevocation::new(Revocation::All, Some(made), margin);
        assert!(!dated.spares(made - Duration::from_secs(1)));
        assert!(!dated.spares(made + Duration::from_secs(90)));
        assert!(dated.spares(made + Duration::from_secs(91)));
        assert_eq!(*dated, Revocation::All);
        let undated = DatedRevocation::from(Revocation::All);
        assert!(!undated.spares(made + Duration::from_secs(1_000_000)));
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_is_told_to_recheck_and_loses_nothing_after() {
        let revocations = Revocations::new(Duration::ZERO);
        let mut feed = revocations.subscribe();
        let mut dated = revocations.subscribe_dated();
        let user = |id| Revocation::User {
            endpoint: "https://a.example/api/user".into(),
            user_id: id,
        };
        let told = CAPACITY as i64 + 6;
        for id in 0..told {
            revocations.publish(user(id), None);
        }
        // The six oldest were overwritten: one Recheck stands for them, then the rest in order.
        assert_eq!(feed.recv().await, Some(Revocation::Recheck));
        assert_eq!(feed.missed(), 6);
        assert_eq!(feed.recv().await, Some(user(6)));
        assert_eq!(*dated.try_recv().unwrap(), Revocation::Recheck);
        assert_eq!(dated.missed(), 6);
        assert_eq!(*dated.try_recv().unwrap(), user(6));
        let rest = std::iter::from_fn(|| feed.try_recv()).count();
        assert_eq!(rest as i64, told - 7);
        assert_eq!(feed.try_recv(), None, "nothing more was told");
        drop(revocations);
        assert_eq!(feed.recv().await, None, "the publisher is gone");
    }

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
