//! How a resolution ended, for its span and its metric: the user and how the cache answered,
//! or the error.

use crate::error::ResolveError;
use crate::user::Resolution;

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
pub(super) type Ended = Result<(Resolution, CacheOutcome), (ResolveError, Option<CacheOutcome>)>;
