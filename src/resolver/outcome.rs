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
    /// A miss the shared tier answered: no call to the API.
    Shared,
    Coalesced,
    Stale,
}

impl CacheOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::NegativeHit => "negative_hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Shared => "shared",
            CacheOutcome::Coalesced => "coalesced",
            CacheOutcome::Stale => "stale",
        }
    }
}

impl CacheOutcome {
    /// The `outcome` label of the resolutions metric, whose values stay as documented: a miss
    /// the shared tier answered is counted as a miss there (the shared tier's own metrics
    /// count its hits); only the span tells the two apart.
    pub(super) fn metric_label(self) -> &'static str {
        match self {
            CacheOutcome::Shared => CacheOutcome::Miss.as_str(),
            outcome => outcome.as_str(),
        }
    }
}

/// What a resolution ends with: the user and how it came, or the error and, when the cache was
/// reached, how.
pub(super) type Ended = Result<(Resolution, CacheOutcome), (ResolveError, Option<CacheOutcome>)>;
