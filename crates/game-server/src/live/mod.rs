//! Live sessions, for any server that keeps players connected after their token was resolved
//! (this game server, and the sidecar that does it for game servers in other languages):
//!
//! - this file: what a session holds ([`Holdings`]: the tokens it resolved, for which endpoint,
//!   user and integrator session, until when), and [`listen`], the task that applies the
//!   resolver's revocations to the registry;
//! - [`registry`]: the [`Registry`] that finds, through indexes, the sessions a revocation
//!   names;
//! - [`recheck`]: asking the resolver again whether what a session holds still stands, paced
//!   across sessions, and what an outage of the integrator means meanwhile;
//! - [`timers`]: a session's own clock (expiry, the grace to refresh, revalidation).
//!
//! A session keeps its tokens in memory only, as [`AccessToken`]s whose `Debug` shows nothing;
//! the registry keeps their fingerprints, never the tokens.

pub mod recheck;
pub mod registry;
pub mod timers;

use std::sync::Weak;
use std::time::SystemTime;

use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

pub use self::recheck::{standing, Pacer, Standing};
pub use self::registry::{Levers, Mark, Meanwhile, Registry};
pub use self::timers::{Due, Timers};
use token_resolver::{AccessToken, DatedRevocation, Expiry, Revocation, TokenFingerprint, User};

/// Which request a credential came from: a session holds at most one of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The connect (the master server, in the seed's words).
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
    /// The integrator's session it belongs to, when the answer said ([`User::session`]).
    pub session: Option<String>,
    /// When the token stops being valid, when it says (before the clock skew).
    pub expires_at: Option<Expiry>,
    /// When it was resolved, by this node's clock: a revocation made long enough before it
    /// ([`DatedRevocation::spares`]) does not close the session. `None` for a stale answer,
    /// which may be older than any revocation.
    pub resolved_at: Option<SystemTime>,
}

impl Credential {
    /// The credential of `token`, resolved at `endpoint` to `user` for `purpose`.
    pub fn new(
        purpose: Purpose,
        endpoint: &str,
        token: AccessToken,
        fingerprint: TokenFingerprint,
        user: &User,
    ) -> Credential {
        Credential {
            purpose,
            endpoint: endpoint.to_owned(),
            token,
            fingerprint,
            user_id: user.id,
            session: user.session().map(str::to_owned),
            expires_at: user.expires_at,
            resolved_at: (!user.stale).then(SystemTime::now),
        }
    }
}

/// What one session holds: the credentials of its connect and of its join.
#[derive(Debug, Default, Clone)]
pub struct Holdings {
    /// At most one credential per [`Purpose`].
    pub credentials: Vec<Credential>,
}

impl Holdings {
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

/// Applies `revocations` to the sessions in `registry` until the server is `cut` or gone; a lag
/// (revocations missed) makes every session check its tokens again. Given
/// [`Resolver::dated_revocations`](token_resolver::Resolver::dated_revocations), a revocation
/// that arrives late spares the sessions resolved well after it was made.
pub async fn listen<R>(
    revocations: broadcast::Receiver<R>,
    cut: CancellationToken,
    registry: Weak<Registry>,
) where
    R: Clone + From<Revocation> + Into<DatedRevocation>,
{
    follow(revocations, cut, registry, |registry, revocation: &R| {
        let kicked = registry.revoke_dated(&revocation.clone().into());
        if kicked > 0 {
            tracing::info!(kicked, "sessions revoked");
        }
    })
    .await;
}

/// Hands each of `revocations` ([`Revocation`]s, or [`DatedRevocation`]s) to `apply` with
/// `target` until `cut`, the end of the feed or `target`'s; a lag (revocations missed) is
/// handed on as [`Revocation::Recheck`], which assumes nothing of what was missed.
pub async fn follow<T: ?Sized, R: Clone + From<Revocation>>(
    mut revocations: broadcast::Receiver<R>,
    cut: CancellationToken,
    target: Weak<T>,
    apply: impl Fn(&T, &R),
) {
    loop {
        let received = tokio::select! {
            () = cut.cancelled() => return,
            received = revocations.recv() => received,
        };
        let Some(target) = target.upgrade() else {
            return;
        };
        match received {
            Ok(revocation) => apply(&target, &revocation),
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "revocations missed: treated as a re-check of all");
                apply(&target, &R::from(Revocation::Recheck));
            }
            Err(RecvError::Closed) => return,
        }
    }
}
