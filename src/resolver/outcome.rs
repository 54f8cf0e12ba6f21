//! How a resolution ended, for its span and its metric: the user and how the cache answered,
//! or the error; and the error a rejected token gets.

use std::sync::Arc;

use crate::auth_url::Endpoint;
use crate::error::ResolveError;
use crate::user::User;

/// How a resolution was answered, for its span and its metric.
#[derive(Clone, Copy)]
pub(super) enum CacheOutcome {
    Hit,
    NegativeHit,
    Miss,
    Coalesced,
    Stale,
}

impl CacheOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::NegativeHit => "negative_hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Coalesced => "coalesced",
            CacheOutcome::Stale => "stale",
        }
    }
}

/// What a resolution ends with: the user and how it came, or the error and, when the cache was
/// reached, how.
pub(super) type Resolution =
    Result<(Arc<User>, CacheOutcome), (ResolveError, Option<CacheOutcome>)>;

/// The error for a token the API at `endpoint` rejected with `status`.
pub(super) fn rejected(endpoint: &Arc<Endpoint>, status: u16) -> ResolveError {
    ResolveError::rejected(endpoint, status)
}
