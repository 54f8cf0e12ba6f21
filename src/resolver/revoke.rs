//! Invalidation, as a game server and an integrator see it: dropping cached answers (one
//! token, one user, one of the integrator's sessions, everything), the stream of [`Revocation`]s that reports every such drop made
//! here or on another node, and the [`TokenFingerprint`] that lets a session recognise its token
//! in one without keeping the token.

use super::Resolver;
use crate::auth_url::Endpoint;
use crate::cache::{KeyRef, Revocation, TokenFingerprint};

impl Resolver {
    /// Every revocation from now on: each invalidation made here ([`invalidate`](Self::invalidate),
    /// [`invalidate_user`](Self::invalidate_user), [`invalidate_all`](Self::invalidate_all))
    /// or received from another node through the shared tier, and a
    /// [`Revocation::Recheck`] when some may have been missed. A game server closes the
    /// sessions that hold a revoked token or user.
    ///
    /// A subscriber that falls more than 1,024 revocations behind is told so by
    /// [`RecvError::Lagged`](tokio::sync::broadcast::error::RecvError::Lagged): it should then
    /// re-check everything it holds.
    pub fn revocations(&self) -> tokio::sync::broadcast::Receiver<Revocation> {
        self.inner.cache.revocations()
    }

    /// The name [`Revocation::Token`] gives `access_token` at `auth_url`: keep it beside a
    /// session to recognise its token in a revocation without keeping the token for that.
    /// `None` when `auth_url` is not a usable authUrl.
    pub fn fingerprint(&self, auth_url: &str, access_token: &str) -> Option<TokenFingerprint> {
        let endpoint = Endpoint::parse(auth_url, true).ok()?;
        Some(
            self.inner
                .cache
                .fingerprint(endpoint.as_str(), access_token),
        )
    }

    /// Drops the cached answer (user or rejection) for one token at one authUrl, here and, with
    /// a shared tier, in Redis and on every node.
    ///
    /// Call it when the integrator tells you a token was revoked. A look-up of that token
    /// already in flight is not joined by later callers, and its answer is neither cached nor
    /// handed to anyone: it starts again.
    pub fn invalidate(&self, auth_url: &str, access_token: &str) {
        if let Ok(endpoint) = Endpoint::parse(auth_url, true) {
            self.inner.flights.forget(&KeyRef {
                endpoint: &endpoint,
                token: access_token,
            });
            self.inner.cache.invalidate_token(&endpoint, access_token);
        }
    }

    /// Drops every cached token of user `user_id` at `auth_url`, e.g. when the user is banned or
    /// logs out everywhere; with a shared tier, in Redis and on every node too. It costs what
    /// the user has cached, not what the cache holds. A look-up in flight that turns out to be
    /// this user's is not cached nor handed to anyone: it starts again.
    pub fn invalidate_user(&self, auth_url: &str, user_id: i64) {
        if let Ok(endpoint) = Endpoint::parse(auth_url, true) {
            self.inner.cache.invalidate_user(&endpoint, user_id);
        }
    }

    /// Drops every cached token of one of the integrator's sessions of user `user_id` at
    /// `auth_url` (the tokens whose answer's `sid` is `session`, see [`User::session`]): a
    /// logout, as one revocation rather than one per token; with a shared tier, in Redis and on
    /// every node too. Look-ups in flight are treated as for
    /// [`invalidate_user`](Self::invalidate_user).
    ///
    /// [`User::session`]: crate::User::session
    pub fn invalidate_session(&self, auth_url: &str, user_id: i64, session: &str) {
        if let Ok(endpoint) = Endpoint::parse(auth_url, true) {
            self.inner
                .cache
                .invalidate_session(&endpoint, user_id, session);
        }
    }

    /// Empties the cache; with a shared tier, Redis's entries and every node's cache too.
    pub fn invalidate_all(&self) {
        self.inner.cache.invalidate_all();
    }
}
