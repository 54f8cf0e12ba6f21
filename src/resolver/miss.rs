//! A resolution the cache could not answer: the token's full syntax check, then one call per
//! key for all concurrent callers (the shared tier's answer, or the API's), what is stored, and
//! the stale answer served when the API cannot be reached.

use std::sync::Arc;

use super::outcome::{rejected, CacheOutcome, Resolution};
use super::stats::Counter;
use super::Resolver;
use crate::auth_url::Endpoint;
use crate::cache::{CacheKey, Cached, KeyRef, Mark, Verdict};
use crate::error::{ApiHost, ErrorCode, ResolveError};
use crate::telemetry;
use crate::token;
use crate::upstream::Reply;
use crate::user::User;

impl Resolver {
    /// A resolution the cache could not answer: the syntax check, then the coalesced call,
    /// falling back to `stale` when the API is unreachable.
    pub(super) async fn resolve_miss(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
        stale: Option<Arc<User>>,
    ) -> Resolution {
        let inner = &*self.inner;
        token::check_syntax(key.token).map_err(|e| (e, None))?;
        // A revocation that lands while the call is under way wins: the answer is cached
        // nowhere and handed to no one, and the resolution starts over with a call that began
        // after it. Twice in a row and the token is refused.
        let mut result = Err(ResolveError::TokenRevoked {
            host: ApiHost::of(endpoint),
        });
        let mut ran = false;
        for _ in 0..2 {
            let ((answer, since), led) = inner
                .flights
                .run(
                    key,
                    || CacheKey::new(Arc::clone(endpoint), key.token),
                    || self.fetch(endpoint, key),
                )
                .await;
            ran |= led;
            match answer {
                Ok(Verdict::User(user))
                    if inner.cache.revoked_since(since, endpoint, key.token, &user) =>
                {
                    continue
                }
                answer => {
                    result = answer;
                    break;
                }
            }
        }
        let outcome = if ran {
            inner.counters.bump(Counter::Misses);
            CacheOutcome::Miss
        } else {
            inner.counters.bump(Counter::Coalesced);
            CacheOutcome::Coalesced
        };
        match result {
            Ok(Verdict::User(user)) => Ok((user, outcome)),
            Ok(Verdict::Rejected(status)) => Err((rejected(endpoint, status), Some(outcome))),
            // Only an unreachable API falls back; a rejection or a broken answer never does,
            // nor does an answer whose token has expired since.
            Err(error) => match stale {
                Some(user) if is_outage(&error) && !self.has_expired(&user) => {
                    Ok((self.serve_stale(&user, &error), CacheOutcome::Stale))
                }
                _ => Err((error, Some(outcome))),
            },
        }
    }

    /// `user`, flagged stale, counted and logged: the answer while the API is unreachable.
    fn serve_stale(&self, user: &User, error: &ResolveError) -> Arc<User> {
        self.inner.counters.bump(Counter::StaleServed);
        metrics::counter!(telemetry::STALE_SERVED_TOTAL).increment(1);
        tracing::warn!(
            user_id = user.id,
            error = error.code().as_str(),
            "serving a stale answer"
        );
        Arc::new(User {
            stale: true,
            ..user.clone()
        })
    }

    /// The upstream call for one key, run once per flight, and where the revocations stood
    /// when it began: another flight's answer if one just landed, else the shared tier's, else
    /// the API's; whatever the API answers is stored.
    async fn fetch(&self, endpoint: &Arc<Endpoint>, key: &KeyRef<'_>) -> (Fetched, Mark) {
        let since = self.inner.cache.mark();
        (self.fetch_since(endpoint, key, since).await, since)
    }

    /// [`fetch`](Self::fetch) once it has taken its mark.
    async fn fetch_since(
        &self,
        endpoint: &Arc<Endpoint>,
        key: &KeyRef<'_>,
        since: Mark,
    ) -> Fetched {
        let inner = &*self.inner;
        if let Some(verdict) = inner.cache.recheck(key) {
            return Ok(verdict);
        }
        if let Some(cached) = inner
            .cache
            .read_through(endpoint, key.token, since, |cached| {
                inner.with_token_expiry(cached, key.token)
            })
            .await
        {
            return Ok(cached.verdict());
        }
        let on_request = |usable: bool| {
            inner.counters.bump(Counter::UpstreamCalls);
            if !usable {
                inner.counters.bump(Counter::UpstreamErrors);
            }
        };
        let cached = match inner
            .upstream
            .call(endpoint, key.token, &on_request)
            .await?
        {
            Reply::User { user, freshness } => {
                inner.until_expiry(user, key.token, freshness.ttl(inner.cache_ttl))
            }
            Reply::Rejected { status } => Cached::rejected(status, inner.negative_cache_ttl),
        };
        inner.cache.store(endpoint, key.token, &cached, since);
        Ok(cached.verdict())
    }
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
