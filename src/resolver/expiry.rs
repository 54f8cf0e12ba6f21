//! Expiry: how long an answer may be served, from the cache's time to live, the answer's `exp`
//! (RFC 7662) and the token's own (a JWT's `exp`), with the clock skew as leeway; and the rule
//! that an expired answer is never served again, stale or not.

use std::sync::Arc;
use std::time::Duration;

use super::{Inner, Resolver};
use crate::answer::answer_expiry;
use crate::cache::Cached;
use crate::token;
use crate::user::{Expiry, Resolution, User};

impl Resolver {
    /// Whether `user`'s expiry (its answer's `exp` or its token's) has passed, beyond the
    /// clock skew: such an answer is never served again, stale or not.
    pub(super) fn has_expired(&self, user: &Resolution) -> bool {
        user.expires_at()
            .is_some_and(|exp| exp.has_passed(self.inner.clock_skew))
    }
}

impl Inner {
    /// The entry for an answer: `user`, fresh for `fresh` but no longer than its expiry (the
    /// answer's `exp` or the token's own, whichever is earlier) plus the clock skew; a
    /// rejection when that has passed already.
    pub(super) fn until_expiry(&self, user: User, token: &str, fresh: Duration) -> Cached {
        let expires_at = earliest(answer_expiry(&user), token::jwt_expiry(token));
        let user = Resolution::new(Arc::new(user), expires_at);
        match expires_at {
            Some(exp) if exp.has_passed(self.clock_skew) => {
                Cached::rejected(EXPIRED, self.negative_cache_ttl)
            }
            Some(exp) => Cached::user(user, fresh.min(exp.remaining(self.clock_skew))),
            None => Cached::user(user, fresh),
        }
    }

    /// An answer from the shared tier, whose entries do not keep what the token itself says:
    /// a JWT's expiry is read again (the lifetime left there already took it into account).
    pub(super) fn with_token_expiry(&self, cached: Cached, token: &str) -> Cached {
        match (cached, token::jwt_expiry(token)) {
            (Cached::User { user, fresh_until }, Some(jwt)) => {
                let expires_at = earliest(user.expires_at(), Some(jwt));
                Cached::User {
                    user: Resolution::new(user.into_user(), expires_at),
                    fresh_until,
                }
            }
            (cached, _) => cached,
        }
    }
}

/// The earlier of two expiries, when either is known.
fn earliest(a: Option<Expiry>, b: Option<Expiry>) -> Option<Expiry> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The status a rejection carries when the API answered 200 with an `exp` already passed.
const EXPIRED: u16 = 200;
