//! Invalidation, as a game server and an integrator see it: dropping cached answers (one
//! token, one user, one of the integrator's sessions, everything), at once or acknowledged
//! once the whole cluster can hear it ([`Resolver::revoke`], [`Revoke`], [`Delivery`]), the
//! stream of [`Revocation`]s that reports every such drop made here or on another node (with
//! the time each was made: [`DatedRevocation`]), and the [`TokenFingerprint`] that lets a
//! session recognise its token in one without keeping the token.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Resolver;
use crate::auth_url::{Endpoint, PlainHttp};
use crate::cache::{Ack, DatedRevocation, KeyRef, Revocation, RevocationFeed, TokenFingerprint};
use crate::error::ResolveError;
use crate::token::AccessToken;

/// What [`Resolver::revoke`] revokes. An empty `auth_url` means the default authUrl.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoke {
    /// One token (as [`Resolver::invalidate`]).
    Token {
        /// The authUrl it was resolved at.
        auth_url: String,
        /// The token; its `Debug` shows nothing of it.
        access_token: AccessToken,
    },
    /// Every token of one user (as [`Resolver::invalidate_user`]): a ban.
    User {
        /// The authUrl.
        auth_url: String,
        /// The user.
        user_id: i64,
    },
    /// Every token of one of the integrator's sessions of one user (as
    /// [`Resolver::invalidate_session`]): a logout.
    Session {
        /// The authUrl.
        auth_url: String,
        /// The session's user.
        user_id: i64,
        /// The integrator's session id.
        session: String,
    },
    /// Everything (as [`Resolver::invalidate_all`]).
    All,
}

/// How far a revocation made by [`Resolver::revoke`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// In the shared tier: its tombstones are written and its message is on the stream, so
    /// every node applies it (a node cut off from Redis does on its return, and admits nobody
    /// from its cache meanwhile).
    Shared,
    /// There is no shared tier: applied here, which is everywhere it needed to go.
    Local,
    /// Applied here, but not known to be in the shared tier: other nodes may not know of it.
    /// Returned when either
    /// - the time given passed before Redis ran the revocation's script and took its message
    ///   (Redis out of reach or slow): this node keeps trying in the background (its outbox)
    ///   and delivers it when Redis answers again, for as long as a tombstone lives; or
    /// - the outbox will not deliver it: its tries outlived the tombstone's lifetime (it gave
    ///   up), or it could not start at all (called outside a tokio runtime before this node
    ///   has one of its own, so nothing runs the write). This is returned as soon as it is
    ///   known, possibly before the time given.
    ///
    /// A revocation that came past the outbox's bound waits on the one revocation of
    /// everything it was folded into, and is `Pending` on the same terms. A caller that needs
    /// the whole cluster to know now should ask another node.
    Pending,
}

impl Delivery {
    /// Whether every node applies it (or there are no others): [`Shared`](Self::Shared) or
    /// [`Local`](Self::Local).
    pub fn is_delivered(self) -> bool {
        matches!(self, Delivery::Shared | Delivery::Local)
    }
}

impl Resolver {
    /// Every revocation from now on: each invalidation made here ([`invalidate`](Self::invalidate),
    /// [`invalidate_user`](Self::invalidate_user), [`invalidate_all`](Self::invalidate_all))
    /// or received from another node through the shared tier, and a
    /// [`Revocation::Recheck`] when some may have been missed. A game server closes the
    /// sessions that hold a revoked token or user.
    ///
    /// A subscriber that falls more than 1,024 revocations behind is handed one
    /// [`Revocation::Recheck`] in place of what it missed ([`RevocationFeed`]): it should then
    /// re-check everything it holds.
    pub fn revocations(&self) -> RevocationFeed<Revocation> {
        self.inner.cache.revocations()
    }

    /// [`revocations`](Self::revocations), each with the time it was made
    /// ([`DatedRevocation`], which dereferences to the [`Revocation`]): a revocation that
    /// arrives late closes only the sessions that may hold an answer from before it
    /// ([`DatedRevocation::spares`]).
    pub fn dated_revocations(&self) -> RevocationFeed<DatedRevocation> {
        self.inner.cache.dated_revocations()
    }

    /// Revokes `what`, made at `made_at` (when the integrator decided it; `SystemTime::now()`
    /// if it is now), here at once and, with a shared tier, in Redis and on every node; waits
    /// up to `within` for the shared tier to hold it, and says how far it got.
    ///
    /// The local cache drops what it names before this returns, and look-ups in flight are
    /// treated as for [`invalidate`](Self::invalidate). With a shared tier, [`Delivery::Shared`]
    /// once Redis ran the revocation's script and added its message to the stream (every node
    /// applies it from there), or [`Delivery::Pending`] when `within` passed first: the
    /// revocation stays in this node's outbox, tried again with back-off until Redis answers
    /// (for at least a minute, and at least `cache_ttl`), and a pile of them while Redis is away is
    /// bounded (past a thousand, the next ones go as one revocation of everything). Without a
    /// shared tier it is [`Delivery::Local`] at once.
    ///
    /// Other nodes hear `made_at` with it: a revocation that reaches them late closes only
    /// sessions whose answer may be older than it ([`DatedRevocation::spares`]).
    ///
    /// # Errors
    ///
    /// [`ResolveError::AuthUrlNotAllowed`] when the revocation names an authUrl this resolver
    /// does not serve (neither the default nor an allowed one): it could have cached nothing
    /// there, and the caller has likely sent it to the wrong server. Nothing is revoked then.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(resolver: token_resolver::Resolver) -> Result<(), token_resolver::ResolveError> {
    /// use std::time::{Duration, SystemTime};
    /// use token_resolver::{Delivery, Revoke};
    ///
    /// let ban = Revoke::User { auth_url: String::new(), user_id: 42 };
    /// match resolver.revoke(ban, SystemTime::now(), Duration::from_secs(1)).await? {
    ///     Delivery::Pending => eprintln!("not on every node yet: ask another one too"),
    ///     _ => println!("every node applies it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn revoke(
        &self,
        what: Revoke,
        made_at: SystemTime,
        within: Duration,
    ) -> Result<Delivery, ResolveError> {
        let cache = &self.inner.cache;
        let ack = match &what {
            Revoke::Token {
                auth_url,
                access_token,
            } => {
                let endpoint = self.served(auth_url)?;
                let token = access_token.secret();
                self.inner.flights.forget(&KeyRef {
                    endpoint: &endpoint,
                    token,
                });
                cache.invalidate_token(&endpoint, token, made_at)
            }
            Revoke::User { auth_url, user_id } => {
                cache.invalidate_user(&**self.served(auth_url)?, *user_id, made_at)
            }
            Revoke::Session {
                auth_url,
                user_id,
                session,
            } => cache.invalidate_session(&**self.served(auth_url)?, *user_id, session, made_at),
            Revoke::All => cache.invalidate_all(made_at),
        };
        Ok(match ack {
            None => Delivery::Local,
            Some(ack) => delivered(ack, within).await,
        })
    }

    /// Whether this resolver serves `auth_url`: it is the default authUrl or an allowed one
    /// (an empty one means the default): what [`revoke`](Self::revoke) refuses otherwise.
    pub fn serves(&self, auth_url: &str) -> bool {
        self.served(auth_url).is_ok()
    }

    /// `revocation` made at `made_at`, as [`dated_revocations`](Self::dated_revocations) would
    /// tell it: for a server that applies a revocation of its own to its sessions at once.
    pub fn dated(&self, revocation: Revocation, made_at: SystemTime) -> DatedRevocation {
        DatedRevocation::new(revocation, Some(made_at), self.inner.late_margin)
    }

    /// The endpoint of `auth_url` if this resolver serves it (the default for an empty one).
    fn served(&self, auth_url: &str) -> Result<Cow<'_, Arc<Endpoint>>, ResolveError> {
        if auth_url.is_empty() {
            return match &self.inner.default_endpoint {
                Some(endpoint) => Ok(Cow::Borrowed(endpoint)),
                None => Err(super::no_default_auth_url()),
            };
        }
        (self.inner.allow.check(auth_url)).map_err(ResolveError::auth_url_not_allowed)
    }

    /// The name [`Revocation::Token`] gives `access_token` at `auth_url`: keep it beside a
    /// session to recognise its token in a revocation without keeping the token for that.
    /// `None` when `auth_url` is not a usable authUrl.
    pub fn fingerprint(&self, auth_url: &str, access_token: &str) -> Option<TokenFingerprint> {
        let endpoint = Endpoint::parse(auth_url, PlainHttp::Anywhere).ok()?;
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
        if let Ok(endpoint) = Endpoint::parse(auth_url, PlainHttp::Anywhere) {
            self.inner.flights.forget(&KeyRef {
                endpoint: &endpoint,
                token: access_token,
            });
            let _ = (self.inner.cache).invalidate_token(&endpoint, access_token, SystemTime::now());
        }
    }

    /// Drops every cached token of user `user_id` at `auth_url`, e.g. when the user is banned or
    /// logs out everywhere; with a shared tier, in Redis and on every node too. It costs what
    /// the user has cached, not what the cache holds. A look-up in flight that turns out to be
    /// this user's is not cached nor handed to anyone: it starts again.
    pub fn invalidate_user(&self, auth_url: &str, user_id: i64) {
        if let Ok(endpoint) = Endpoint::parse(auth_url, PlainHttp::Anywhere) {
            let _ = (self.inner.cache).invalidate_user(&endpoint, user_id, SystemTime::now());
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
        if let Ok(endpoint) = Endpoint::parse(auth_url, PlainHttp::Anywhere) {
            let _ = (self.inner.cache).invalidate_session(
                &endpoint,
                user_id,
                session,
                SystemTime::now(),
            );
        }
    }

    /// Empties the cache; with a shared tier, Redis's entries and every node's cache too.
    pub fn invalidate_all(&self) {
        let _ = self.inner.cache.invalidate_all(SystemTime::now());
    }
}

/// [`Delivery::Shared`] once `ack` says so within `within`, else [`Delivery::Pending`].
async fn delivered(mut ack: Ack, within: Duration) -> Delivery {
    match tokio::time::timeout(within, ack.wait_for(|&delivered| delivered)).await {
        Ok(Ok(_)) => Delivery::Shared,
        // Not yet, or given up (its tries outlived the tombstone's life): not delivered.
        Ok(Err(_)) | Err(_) => Delivery::Pending,
    }
}
