//! The upstream call: `POST {endpoint}` with the bearer token, admitted once by the API's
//! circuit breaker and the resolver-wide slot limit, under the resolution's deadline, with
//! retries of transient failures, a capped body read, and the answer classified.
//!
//! This module knows HTTP and when an API may be called; it does not know about caching or
//! coalescing, which the resolver puts around it.
//!
//! - [`breaker`]: the per-API circuit breaker.

pub(crate) mod breaker;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use reqwest::header::{
    HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, RETRY_AFTER,
};
use reqwest::{Method, Request, Response, StatusCode};

use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};
use tracing::field::Empty;
use tracing::Instrument;

use self::breaker::{Admission, Breakers, Outcome};
use crate::answer::{parse_cache_control, parse_user, Freshness};
use crate::auth_url::Endpoint;
use crate::clock;
use crate::error::ResolveError;
use crate::telemetry;
use crate::user::User;

/// Times a call whose slot others may be waiting for yields before releasing it, so that the
/// HTTP client's tasks can put its connection back in the pool first (see `call_admitted`).
const YIELDS_BEFORE_RELEASE: usize = 2;

/// First backoff before a retry; it doubles each try and is fully jittered.
const BACKOFF_BASE: Duration = Duration::from_millis(50);

/// What the auth API said about a token.
#[derive(Debug)]
pub(crate) enum Reply {
    /// 200 with a valid body.
    User { user: User, freshness: Freshness },
    /// 401 or 403.
    Rejected { status: u16 },
}

/// The call and what admits it, fixed when the resolver is built.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// The HTTP client: pooled keep-alive connections, no redirects, no proxy.
    pub(crate) http: reqwest::Client,
    /// Deadline for one resolution's tries, backoff and body.
    pub(crate) request_timeout: Duration,
    /// Extra tries on transient failures.
    pub(crate) retries: u32,
    /// Largest answer body read.
    pub(crate) max_response_bytes: usize,
    /// Per-origin circuit breakers.
    pub(crate) breakers: Breakers,
    /// Upstream slots: at most `max_concurrent_requests` calls in flight.
    pub(crate) slots: Semaphore,
    /// Longest wait for a slot before `overloaded`.
    pub(crate) queue_timeout: Duration,
    /// With HTTP/2 on: each API's first call goes alone (see [`FirstContacts`]).
    pub(crate) first_contacts: Option<FirstContacts>,
}

/// Makes the first call to each API go alone, the calls that arrive meanwhile waiting for it.
///
/// With HTTP/2 offered through ALPN, the HTTP client cannot know before a connection is up that
/// it will carry every call, so a cold start (an empty cache, hundreds of calls at once) would
/// open a connection, and make a TLS handshake, per call in flight, each then an HTTP/2
/// connection of its own. Once the first call has an answer the connection exists (as HTTP/2,
/// or HTTP/1.1 if the API did not take HTTP/2) and the waiting calls share it. A first call
/// that could not connect lets the next one try; waiters hold no slot, and wait at most
/// `queue_timeout` before making their calls anyway, so that an API that hangs cannot line
/// the calls up one behind another.
#[derive(Debug, Default)]
pub(crate) struct FirstContacts {
    /// Per origin: set once a call to it has got an answer.
    origins: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
}

impl FirstContacts {
    fn cell(&self, origin: &str) -> Arc<OnceCell<()>> {
        let mut origins = self.origins.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cell) = origins.get(origin) {
            return cell.clone();
        }
        origins.entry(origin.to_owned()).or_default().clone()
    }
}

/// How one try went wrong.
enum TryError {
    /// Worth another try (connect error, reset, 408/429/5xx), perhaps not before `retry_after`.
    Transient {
        error: ResolveError,
        retry_after: Option<Duration>,
    },
    /// Final: another try would get the same.
    Fatal(ResolveError),
}

impl Upstream {
    /// Asks the API at `endpoint` who holds `token`: its circuit breaker admits the call (or
    /// it fails at once), it waits for a slot (at most `queue_timeout`), then tries within
    /// `request_timeout`, retrying transient failures.
    ///
    /// `on_request` is called once per HTTP request sent; its argument says whether it got a
    /// usable answer (200, 401 or 403).
    ///
    /// # Errors
    ///
    /// `auth_unavailable` when the breaker is open or the tries ran out, `overloaded` when no
    /// slot came free, `auth_timeout`, or the answer's own error (`auth_bad_response`).
    pub(crate) async fn call(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        on_request: &(dyn Fn(bool) + Sync),
    ) -> Result<Reply, ResolveError> {
        let Some(first_contacts) = &self.first_contacts else {
            return self.call_admitted(endpoint, token, on_request).await;
        };
        let cell = first_contacts.cell(endpoint.origin());
        if cell.initialized() {
            return self.call_admitted(endpoint, token, on_request).await;
        }
        // The first caller's own call is the cell's initialiser; callers meanwhile wait for it,
        // and the next one tries if it did not connect. A waiter waits at most `queue_timeout`
        // (an API that does not answer must not make the calls queue behind one another), then
        // makes its call anyway; the initialiser's own call is never cut short.
        let started = AtomicBool::new(false);
        let mut first = None;
        {
            let init = cell.get_or_try_init(|| async {
                started.store(true, Ordering::Relaxed);
                let result = self.call_admitted(endpoint, token, on_request).await;
                let connected = !matches!(
                    &result,
                    Err(ResolveError::AuthUnavailable(_) | ResolveError::AuthTimeout(_))
                );
                first = Some(result);
                if connected {
                    Ok(())
                } else {
                    Err(())
                }
            });
            tokio::pin!(init);
            let patience = tokio::time::sleep(self.queue_timeout);
            tokio::pin!(patience);
            // The initialiser is polled first each time, so once it has started this call's
            // own request, the patience no longer counts.
            std::future::poll_fn(|cx| {
                if init.as_mut().poll(cx).is_ready()
                    || (!started.load(Ordering::Relaxed) && patience.as_mut().poll(cx).is_ready())
                {
                    return Poll::Ready(());
                }
                Poll::Pending
            })
            .await;
        }
        if let Some(result) = first {
            return result;
        }
        self.call_admitted(endpoint, token, on_request).await
    }

    /// [`call`](Self::call), once past the first-contact gate.
    async fn call_admitted(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        on_request: &(dyn Fn(bool) + Sync),
    ) -> Result<Reply, ResolveError> {
        let admission = self
            .breakers
            .admit(endpoint.origin())
            .map_err(|wait| circuit_open(endpoint, wait))?;
        let slot = self.slot().await?;
        let result = self.tries(endpoint, token, on_request, admission).await;
        if self.slots.available_permits() == 0 {
            // Calls may be waiting for this slot. The HTTP client puts this call's connection
            // back in its pool from a task of its own, a moment after the body was read; a call
            // that took the slot before that would open a connection (and make a TLS
            // handshake) of its own. Letting those tasks run first keeps the connections
            // within the slots, as `load --storm` checks.
            for _ in 0..YIELDS_BEFORE_RELEASE {
                tokio::task::yield_now().await;
            }
        }
        drop(slot);
        result
    }

    /// The tries of one admitted call, within `request_timeout`.
    async fn tries(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        on_request: &(dyn Fn(bool) + Sync),
        admission: Admission<'_>,
    ) -> Result<Reply, ResolveError> {
        let deadline = clock::now() + self.request_timeout;
        let mut attempt = 0;
        loop {
            let once = self.once(endpoint, token, on_request);
            let Ok(result) = tokio::time::timeout_at(deadline, once).await else {
                admission.record(Outcome::Down);
                return Err(ResolveError::timeout(
                    endpoint.shared_host(),
                    self.request_timeout,
                ));
            };
            admission.record(match &result {
                Ok(_) => Outcome::Up,
                Err(TryError::Transient { .. }) => Outcome::Down,
                Err(TryError::Fatal(_)) => Outcome::Neutral,
            });
            let (error, retry_after) = match result {
                Ok(reply) => return Ok(reply),
                Err(TryError::Fatal(error)) => return Err(error),
                Err(TryError::Transient { error, retry_after }) => (error, retry_after),
            };
            // A probe is one call; an open breaker means no more tries.
            if attempt >= self.retries
                || admission.is_probe()
                || self.breakers.is_open(endpoint.origin())
            {
                return Err(error);
            }
            let backoff = jittered_backoff(attempt);
            let wait = retry_after.map_or(backoff, |r| r.max(backoff));
            // A wait that would outlast the deadline ends the tries now, with the error that
            // caused them, rather than as a timeout later.
            // Compared as what is left, not as `now + wait`: the API chooses `Retry-After`, and
            // a huge one would overflow an `Instant`.
            let left = deadline.saturating_duration_since(clock::now());
            if wait >= left {
                return Err(error);
            }
            tracing::debug!(
                attempt,
                wait_ms = wait.as_millis() as u64,
                "retrying the auth call"
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// An upstream slot: a free one at once, without a timer; otherwise the first to come
    /// free within `queue_timeout`.
    async fn slot(&self) -> Result<SemaphorePermit<'_>, ResolveError> {
        if let Ok(slot) = self.slots.try_acquire() {
            return Ok(slot);
        }
        match tokio::time::timeout(self.queue_timeout, self.slots.acquire()).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(ResolveError::overloaded(self.queue_timeout)),
        }
    }

    async fn once(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
        on_request: &(dyn Fn(bool) + Sync),
    ) -> Result<Reply, TryError> {
        let started = clock::now();
        let in_flight = metrics::gauge!(telemetry::UPSTREAM_IN_FLIGHT);
        in_flight.increment(1.0);
        // The HTTP request's own span, a client span in OpenTelemetry's terms: the parent that
        // the request's `traceparent` names (feature `opentelemetry`).
        let span = tracing::debug_span!(
            "auth_call",
            otel.kind = "client",
            otel.name = "POST /api/user",
            server.address = Empty,
            http.response.status_code = Empty,
        );
        let result = if span.is_disabled() {
            self.exchange(endpoint, token).await
        } else {
            span.record("server.address", endpoint.host());
            let result = self
                .exchange(endpoint, token)
                .instrument(span.clone())
                .await;
            if let Ok((status, _)) = &result {
                span.record("http.response.status_code", status.as_u16());
            }
            result
        };
        in_flight.decrement(1.0);
        metrics::histogram!(telemetry::UPSTREAM_DURATION_SECONDS).record(started.elapsed());
        count_request(result.as_ref().ok().map(|(status, _)| *status));
        let reply = result.and_then(|(_, reply)| reply);
        on_request(reply.is_ok());
        reply
    }

    /// One request and its answer: the status (when one came) and what it means.
    async fn exchange(
        &self,
        endpoint: &Arc<Endpoint>,
        token: &str,
    ) -> Result<(StatusCode, Result<Reply, TryError>), TryError> {
        // Built by hand rather than with `RequestBuilder`: `bearer_auth` formats the value
        // (two allocations) and `header(.., &str)` copies each static value into a new buffer;
        // reqwest then clones the header map twice per request, which costs less the fewer
        // owned values it holds.
        let mut request = Request::new(Method::POST, endpoint.url().clone());
        let headers = request.headers_mut();
        headers.reserve(6);
        headers.insert(AUTHORIZATION, bearer(token).map_err(TryError::Fatal)?);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        // An empty body, said explicitly: some servers refuse a POST without a length.
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        #[cfg(feature = "opentelemetry")]
        crate::trace::inject(headers);
        let response = self
            .http
            .execute(request)
            .await
            .map_err(|e| transport_error(endpoint, e))?;
        let status = response.status();
        let reply = match status.as_u16() {
            200 => self.read_user(endpoint, response).await,
            401 | 403 => Ok(Reply::Rejected {
                status: status.as_u16(),
            }),
            408 | 429 | 500 | 502 | 503 | 504 => Err(TryError::Transient {
                retry_after: retry_after(response.headers()),
                error: ResolveError::unavailable_status(endpoint.shared_host(), status.as_u16()),
            }),
            300..=399 => Err(TryError::Fatal(ResolveError::bad_response(
                endpoint.shared_host(),
                format!(
                    "HTTP {} redirect; redirects are not followed",
                    status.as_u16()
                ),
            ))),
            other => Err(TryError::Fatal(ResolveError::bad_response(
                endpoint.shared_host(),
                format!("unexpected HTTP {other}; expected 200, 401 or 403"),
            ))),
        };
        Ok((status, reply))
    }

    /// Reads a 200 answer under the size cap and parses it.
    async fn read_user(
        &self,
        endpoint: &Arc<Endpoint>,
        mut response: Response,
    ) -> Result<Reply, TryError> {
        let bad = |detail: String| {
            TryError::Fatal(ResolveError::bad_response(endpoint.shared_host(), detail))
        };
        let max = self.max_response_bytes;
        let too_big = || {
            bad(format!(
                "the answer is larger than max_response_bytes ({max} bytes)"
            ))
        };
        if response
            .content_length()
            .is_some_and(|len| len > max as u64)
        {
            return Err(too_big());
        }
        let freshness = cache_control(response.headers());
        let mut body = Vec::with_capacity(response.content_length().map_or(256, |l| l as usize));
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| transport_error(endpoint, e))?
        {
            if body.len() + chunk.len() > max {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        let user = parse_user(&body).map_err(|e| bad(e.to_string()))?;
        Ok(Reply::User { user, freshness })
    }
}

/// `Bearer {token}` as a sensitive header value, built in one exact-size allocation (a
/// `String` whose length is its capacity becomes the value's buffer without a copy).
fn bearer(token: &str) -> Result<HeaderValue, ResolveError> {
    let mut value = String::with_capacity("Bearer ".len() + token.len());
    value.push_str("Bearer ");
    value.push_str(token);
    let mut value = HeaderValue::try_from(value)
        .map_err(|_| ResolveError::token_malformed("not usable in an Authorization header"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// Counts one upstream request under its status, or `error` when none came. The usual
/// statuses are spelled out as literals so that their metric keys are static and a request
/// allocates nothing for its metric; any other status is formatted.
fn count_request(status: Option<StatusCode>) {
    macro_rules! count {
        ($($code:literal => $label:literal),*) => {
            match status.map(|s| s.as_u16()) {
                None => metrics::counter!(telemetry::UPSTREAM_REQUESTS_TOTAL, "status" => "error").increment(1),
                $(Some($code) => metrics::counter!(telemetry::UPSTREAM_REQUESTS_TOTAL, "status" => $label).increment(1),)*
                Some(other) => metrics::counter!(telemetry::UPSTREAM_REQUESTS_TOTAL, "status" => other.to_string()).increment(1),
            }
        };
    }
    count!(
        200 => "200",
        401 => "401",
        403 => "403",
        408 => "408",
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504"
    );
}

/// The error of a call refused by an open circuit breaker.
fn circuit_open(endpoint: &Arc<Endpoint>, wait: Duration) -> ResolveError {
    ResolveError::unavailable(
        endpoint.shared_host(),
        format!(
            "its circuit breaker is open after repeated failures; the next try is in {} ms",
            wait.as_millis()
        ),
    )
}

/// A failure to get an answer at all: connect, DNS, TLS, reset, or the body cut short.
fn transport_error(endpoint: &Arc<Endpoint>, e: reqwest::Error) -> TryError {
    let detail = if e.is_connect() {
        "could not connect (refused, DNS, TLS or connect timeout)"
    } else if e.is_body() || e.is_decode() {
        "the connection failed while reading the answer"
    } else {
        "the connection failed"
    };
    TryError::Transient {
        retry_after: None,
        error: ResolveError::transport(endpoint.shared_host(), detail, e),
    }
}

/// Every `Cache-Control` line, joined as one value.
fn cache_control(headers: &HeaderMap) -> Freshness {
    let mut lines = headers.get_all(CACHE_CONTROL).iter();
    let Some(first) = lines.next() else {
        return Freshness::Unspecified;
    };
    // Borrowed when there is one line of valid UTF-8, as there nearly always is.
    let mut joined = String::from_utf8_lossy(first.as_bytes());
    for line in lines {
        let joined = joined.to_mut();
        joined.push(',');
        joined.push_str(&String::from_utf8_lossy(line.as_bytes()));
    }
    parse_cache_control(Some(&joined))
}

/// `Retry-After` as delay-seconds or an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Full jitter: a random wait in `[0, BACKOFF_BASE * 2^attempt]`.
fn jittered_backoff(attempt: u32) -> Duration {
    let cap = BACKOFF_BASE.saturating_mul(1 << attempt.min(16));
    cap.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::DebuggingRecorder;

    #[test]
    fn upstream_requests_are_counted_under_their_status_or_error() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            for status in [Some(200), Some(200), Some(503), Some(418), None] {
                count_request(status.map(|s| StatusCode::from_u16(s).unwrap()));
            }
        });
        let mut counts: Vec<(String, u64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let label = key.key().labels().map(|l| l.value().to_owned()).collect();
                match value {
                    metrics_util::debugging::DebugValue::Counter(n) => (label, n),
                    other => panic!("a counter, not {other:?}"),
                }
            })
            .collect();
        counts.sort();
        let expected = [("200", 2), ("418", 1), ("503", 1), ("error", 1)];
        let expected: Vec<(String, u64)> =
            expected.iter().map(|(l, n)| (l.to_string(), *n)).collect();
        assert_eq!(counts, expected);
    }

    #[test]
    fn the_bearer_header_is_marked_sensitive() {
        let value = bearer("mF_9.B5f-4.1JqM").unwrap();
        assert_eq!(value, "Bearer mF_9.B5f-4.1JqM");
        assert!(
            value.is_sensitive(),
            "kept out of HTTP/2 header tables and debug output"
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let got = retry_after(&h).unwrap();
        assert!(
            got > Duration::from_secs(100) && got <= Duration::from_secs(120),
            "{got:?}"
        );
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn backoff_stays_within_its_doubling_cap() {
        for attempt in 0..5 {
            let cap = BACKOFF_BASE * (1 << attempt);
            assert!(jittered_backoff(attempt) <= cap);
        }
    }

    #[test]
    fn several_cache_control_lines_combine() {
        let mut h = HeaderMap::new();
        h.append(CACHE_CONTROL, HeaderValue::from_static("private"));
        h.append(CACHE_CONTROL, HeaderValue::from_static("max-age=5"));
        assert_eq!(cache_control(&h), Freshness::MaxAge(Duration::from_secs(5)));
        h.append(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        assert_eq!(cache_control(&h), Freshness::NoStore);
    }
}
