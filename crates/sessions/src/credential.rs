//! What a live session holds: the [`Credential`] of each token it resolved (for which
//! endpoint, user and integrator session, until when), gathered in [`SessionCredentials`].
//!
//! A session keeps its tokens in memory only, as [`AccessToken`]s whose `Debug` shows nothing;
//! the [`Registry`](crate::Registry) keeps their fingerprints, never the tokens.

use std::time::SystemTime;

use token_resolver::{AccessToken, Expiry, Resolution, TokenFingerprint};

/// Which request a credential came from: a session holds at most one of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The connect (to the master server).
    Connect,
    /// A room's join.
    Join,
}

/// A token a session resolved, and what it resolved to.
#[derive(Debug, Clone)]
pub struct Credential {
    /// Which request it came from.
    pub purpose: Purpose,
    /// The normalised endpoint it was resolved at.
    pub endpoint: String,
    /// The token, to resolve it again; never shown.
    pub token: AccessToken,
    /// The token's name in revocations ([`Resolver::fingerprint`](token_resolver::Resolver::fingerprint)).
    pub fingerprint: TokenFingerprint,
    /// The user it resolved to.
    pub user_id: i64,
    /// The integrator's session it belongs to, when the answer said ([`User::session`](token_resolver::User::session)).
    pub session: Option<String>,
    /// When the token stops being valid, when it says (before the clock skew).
    pub expires_at: Option<Expiry>,
    /// When it was resolved, by this node's clock: a revocation made long enough before it
    /// ([`DatedRevocation::spares`](token_resolver::DatedRevocation::spares)) does not close
    /// the session. `None` for a stale answer, which may be older than any revocation.
    pub resolved_at: Option<SystemTime>,
}

impl Credential {
    /// The credential of `token`, resolved at `endpoint` to `user` for `purpose`.
    pub fn new(
        purpose: Purpose,
        endpoint: &str,
        token: AccessToken,
        fingerprint: TokenFingerprint,
        user: &Resolution,
    ) -> Credential {
        Credential {
            purpose,
            endpoint: endpoint.to_owned(),
            token,
            fingerprint,
            user_id: user.id,
            session: user.session().map(str::to_owned),
            expires_at: user.expires_at(),
            resolved_at: (!user.is_stale()).then(SystemTime::now),
        }
    }
}

/// The credentials one session holds now: those of its connect and of its join, at most one of
/// each; what its re-checks resolve again, its timers read the expiry from, and the registry
/// indexes it by.
#[derive(Debug, Default, Clone)]
pub struct SessionCredentials {
    /// At most one credential per [`Purpose`].
    pub credentials: Vec<Credential>,
}

impl SessionCredentials {
    /// Keeps `credential`, in place of any earlier one of the same purpose.
    pub fn hold(&mut self, credential: Credential) {
        self.credentials.retain(|c| c.purpose != credential.purpose);
        self.credentials.push(credential);
    }

    /// The earliest expiry among the credentials, if any says when.
    pub fn earliest_expiry(&self) -> Option<Expiry> {
        self.credentials.iter().filter_map(|c| c.expires_at).min()
    }
}
