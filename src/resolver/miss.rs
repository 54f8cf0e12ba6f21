//! A resolution the cache could not answer: the token's full syntax check, then one call per
//! key for all concurrent callers (the shared tier's answer, or the API's), what is stored, and
//! the stale answer served when the API cannot be reached, unless a revocation of what it stands
//! for landed meanwhile.

use std::sync::Arc;

use super::outcome::{CacheOutcome, Ended};
use super::stats::Counter;
use super::Resolver;
use crate::auth_url::Endpoint;
use crate::cache::{CacheKey, Cached, KeyRef, Lookup, Mark, Verdict};
use crate::error::{ErrorCode, ResolveError};
use crate::telemetry;
use crate::token;
use crate::upstream::Reply;
use crate::user::Resolution;

impl Resolver {
    /// A resolution the cache could not answer: the syntax check, then the coalesced call,
    /// falling back to `stale` when the API is unreachable.
    pub(super) async fn resolve_miss(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
        stale: Option<Resolution>,
    ) -> Ended {
        let inner = &*self.inner;
        token::check_syntax(key.token).map_err(|e| (e, None))?;
        // A revocation that lands while the call is under way wins: the answer is cached
        // nowhere and handed to no one, and the resolution starts over with a call that began
        // after it. Twice in a row and the token is refused.
        // `None` once both calls' answers were revoked; the error is made only then, since it
        // takes a reference to the endpoint's host that every miss would bounce between cores.
        let mut result = None;
        let mut ran = false;
        let mut from_shared = false;
        // Where the revocations stood when the first call began: a stale answer is checked
        // against it (and the caller's own look-up happened before).
        let mut first: Option<Mark> = None;
        for _ in 0..2 {
            let ((answer, since, tier), led) = inner
                .flights
                .run(
                    key,
                    || CacheKey::new(Arc::clone(endpoint), key.token),
                    |owned| self.fetch(endpoint, key, owned),
                )
                .await;
            ran |= led;
            from_shared = led && tier == Tier::Shared;
            first.get_or_insert(since);
            match answer {
                Ok(Verdict::User(user))
                    if inner.cache.revoked_since(since, endpoint, key.token, &user) =>
                {
                    continue
                }
                answer => {
                    result = Some(answer);
                    break;
                }
            }
        }
        let outcome = if ran {
            inner.counters.bump(Counter::Misses);
            if from_shared {
                CacheOutcome::Shared
            } else {
                CacheOutcome::Miss
            }
        } else {
            inner.counters.bump(Counter::Coalesced);
            CacheOutcome::Coalesced
        };
        let result = result.unwrap_or_else(|| Err(ResolveError::revoked(endpoint.shared_host())));
        match result {
            Ok(Verdict::User(user)) => {
                #[cfg(feature = "chaos-holes")]
                chaos_hole::remember(key.token, &user);
                Ok((user, outcome))
            }
            Ok(Verdict::Rejected(status)) => Err((
                ResolveError::rejected(endpoint.shared_host(), status),
                Some(outcome),
            )),
            // Only an unreachable API falls back; a rejection or a broken answer never does,
            // nor does an answer whose token has expired since, nor one revoked meanwhile.
            #[cfg(feature = "chaos-holes")]
            Err(error) if is_outage(&error) && chaos_hole::recall(key.token).is_some() => {
                let user = chaos_hole::recall(key.token).expect("recalled just now");
                Ok((self.serve_stale(user, &error), CacheOutcome::Stale))
            }
            Err(error) => match stale {
                Some(captured) if is_outage(&error) => {
                    match self.still_stale(endpoint, key, &captured, first) {
                        Ok(Some(user)) => Ok((self.serve_stale(user, &error), CacheOutcome::Stale)),
                        Ok(None) => Err((error, Some(outcome))),
                        Err(revoked) => Err((revoked, Some(outcome))),
                    }
                }
                _ => Err((error, Some(outcome))),
            },
        }
    }

    /// The stale answer that may still be served for `key` once the call has failed.
    ///
    /// `Err` with a [`ResolveError::TokenRejected`] that
    /// [`was_revoked`](ResolveError::was_revoked) when something the answer stands for (its token, its user, its session, or everything) was revoked since
    /// `since`, the mark taken when the call began: a ban that lands during the call refuses
    /// every caller of the flight as the ban says, not as the outage does. Otherwise the answer
    /// the cache holds now, not the one `captured` before the call (a revocation that landed
    /// between the caller's look-up and the call's mark dropped it: nothing to fall back on,
    /// the outage's error), unless its token has expired.
    fn still_stale(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
        captured: &Resolution,
        since: Option<Mark>,
    ) -> Result<Option<Resolution>, ResolveError> {
        let cache = &self.inner.cache;
        let revoked = |user: &Resolution| {
            since.is_none_or(|since| cache.revoked_since(since, endpoint, key.token, user))
        };
        if revoked(captured) {
            return Err(ResolveError::revoked(endpoint.shared_host()));
        }
        match cache.lookup(key) {
            Lookup::Stale(user) if revoked(&user) => {
                Err(ResolveError::revoked(endpoint.shared_host()))
            }
            Lookup::Stale(user) => Ok((!self.has_expired(&user)).then_some(user)),
            // Dropped (by a revocation, or at the end of its window), or replaced by another
            // flight's answer after this one failed: nothing stale to fall back on.
            Lookup::Absent | Lookup::Fresh(_) => Ok(None),
        }
    }

    /// `user`, flagged stale, counted and logged: the answer while the API is unreachable.
    fn serve_stale(&self, user: Resolution, error: &ResolveError) -> Resolution {
        self.inner.counters.bump(Counter::StaleServed);
        metrics::counter!(telemetry::STALE_SERVED_TOTAL).increment(1);
        tracing::warn!(
            user_id = user.id,
            error = error.code().as_str(),
            "serving a stale answer"
        );
        user.into_stale()
    }

    /// The upstream call for one key, run once per flight, and where the revocations stood
    /// when it began: another flight's answer if one just landed, else the shared tier's, else
    /// the API's; whatever the API answers is stored, under `owned`, the flight's own key.
    async fn fetch(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
        owned: CacheKey,
    ) -> (Fetched, Mark, Tier) {
        let since = self.inner.cache.mark();
        let (fetched, tier) = self.fetch_since(endpoint, key, owned, since).await;
        (fetched, since, tier)
    }

    /// [`fetch`](Self::fetch) once it has taken its mark.
    async fn fetch_since(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
        owned: CacheKey,
        since: Mark,
    ) -> (Fetched, Tier) {
        let inner = &*self.inner;
        if let Some(verdict) = inner.cache.recheck(key) {
            return (Ok(verdict), Tier::Local);
        }
        if let Some(cached) = inner
            .cache
            .read_through(endpoint, key.token, since, |cached| {
                inner.with_token_expiry(cached, key.token)
            })
            .await
        {
            return (Ok(cached.verdict()), Tier::Shared);
        }
        let on_request = |usable: bool| {
            inner.counters.bump(Counter::UpstreamCalls);
            if !usable {
                inner.counters.bump(Counter::UpstreamErrors);
            }
        };
        let reply = match inner.upstream.call(endpoint, key.token, &on_request).await {
            Ok(reply) => reply,
            Err(error) => return (Err(error), Tier::Api),
        };
        let cached = match reply {
            Reply::User { user, freshness } => {
                inner.until_expiry(user, key.token, freshness.ttl(inner.cache_ttl))
            }
            Reply::Rejected { status } => Cached::rejected(status, inner.negative_cache_ttl),
        };
        inner.cache.store(&owned, key.token, &cached, since);
        (Ok(cached.verdict()), Tier::Api)
    }
}

/// Where a flight's answer came from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Tier {
    /// The local cache, filled by another flight since the caller looked.
    Local,
    /// The shared tier (feature `redis`).
    Shared,
    /// The integrator's API.
    Api,
}

/// What one flight's call found: the answer, or why there is none.
pub(super) type Fetched = Result<Verdict, ResolveError>;

/// Whether `error` says the API could not be reached, as opposed to what it answered.
fn is_outage(error: &ResolveError) -> bool {
    matches!(
        error.code(),
        ErrorCode::AuthUnavailable | ErrorCode::AuthTimeout
    )
}

/// A known fault made worse on purpose, for the chaos run's own test (issue 34): with feature
/// `chaos-holes` **and** `TOKEN_RESOLVER_CHAOS_HOLE=stale` in the environment, the stale path is
/// re-opened as it was before "a revocation that lands during the call wins": every answer the
/// API gave is remembered, and served again when the API is unreachable, whatever revoked it
/// since. The feature alone changes nothing (`cargo test --all-features` compiles it in); never
/// in a shipped build.
#[cfg(feature = "chaos-holes")]
mod chaos_hole {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    use crate::user::Resolution;

    /// Most answers remembered; past it the memory starts again.
    const MOST: usize = 100_000;

    fn open() -> bool {
        static OPEN: OnceLock<bool> = OnceLock::new();
        *OPEN.get_or_init(|| {
            std::env::var("TOKEN_RESOLVER_CHAOS_HOLE").is_ok_and(|hole| hole == "stale")
        })
    }

    fn memory() -> &'static Mutex<HashMap<String, Resolution>> {
        static MEMORY: OnceLock<Mutex<HashMap<String, Resolution>>> = OnceLock::new();
        MEMORY.get_or_init(|| Mutex::new(HashMap::new()))
    }

    pub(super) fn remember(token: &str, user: &Resolution) {
        if !open() {
            return;
        }
        let mut memory = memory()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if memory.len() >= MOST {
            memory.clear();
        }
        memory.insert(token.to_owned(), user.clone());
    }

    pub(super) fn recall(token: &str) -> Option<Resolution> {
        if !open() {
            return None;
        }
        let memory = memory()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        memory.get(token).cloned()
    }
}
