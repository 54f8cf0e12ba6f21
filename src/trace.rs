//! W3C trace context across the call to `/api/user` (feature `opentelemetry`).
//!
//! This module owns the two ends of propagation, and nothing of export:
//!
//! - **Out**: each HTTP request to the integrator carries the `traceparent` (and `tracestate`) of
//!   the OpenTelemetry context current when it is sent: the resolution's span, itself a child of
//!   the span the embedder resolved in. With no OpenTelemetry layer in the program, or a span
//!   nobody samples into a context, no header is sent: nothing is made up.
//! - **In**: [`continue_trace`] makes a span the child of the trace a request brings, so that a
//!   sidecar's or an HTTP API's resolution joins its caller's trace. A request that brings none,
//!   or a malformed one, starts a new trace (when tracing is on).
//!
//! The context is read with the OpenTelemetry API only: the program installs the SDK, an
//! exporter and tracing's bridge (`tracing-opentelemetry`, whose context activation, on by
//! default, makes the entered span's context the current one). The library never takes them.
//!
//! The headers are outside bytes, parsed strictly by the W3C rules (lowercase hex, no all-zero
//! ids, version `ff` refused, a `tracestate` over 512 bytes dropped) and never echoed into an
//! error or a log.

use std::str::FromStr;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// The header that names the trace and the caller's span (W3C Trace Context, level 1).
pub const TRACEPARENT: &str = "traceparent";
/// The header that carries vendors' state along a trace (W3C Trace Context).
pub const TRACESTATE: &str = "tracestate";

/// The most of `tracestate` kept: the size the W3C recommends every vendor to pass on. A larger
/// one is dropped whole (the `traceparent` is still followed), so that a client cannot make
/// each upstream call carry an unbounded header.
const MAX_TRACESTATE_BYTES: usize = 512;

/// Makes the span `make_span` creates the child of the trace `headers` carry (a valid
/// `traceparent`, and its `tracestate` if any), or a root span when they carry none.
///
/// Call it where a request enters, before anything else is traced: the span it returns is
/// entered (or `.instrument`s the request's future) as any span is, and every resolution made
/// under it, and its call to `/api/user`, is in the caller's trace.
///
/// # Example
///
/// ```
/// use reqwest::header::HeaderMap;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(
///     "traceparent",
///     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap(),
/// );
/// let span = token_resolver::trace::continue_trace(&headers, || {
///     tracing::info_span!("authorize")
/// });
/// # drop(span);
/// ```
pub fn continue_trace(
    headers: &HeaderMap,
    make_span: impl FnOnce() -> tracing::Span,
) -> tracing::Span {
    match remote_context(headers) {
        Some(remote) => {
            let _current = Context::new().with_remote_span_context(remote).attach();
            make_span()
        }
        None => make_span(),
    }
}

/// A span for a request that comes through the axum integration bringing a trace while no span
/// is current (the embedder's own server span, if any, has already continued it), when tracing
/// is on at DEBUG for this crate.
#[cfg(feature = "axum")]
pub(crate) fn request_span(headers: &HeaderMap) -> Option<tracing::Span> {
    if !headers.contains_key(TRACEPARENT) || Context::current().has_active_span() {
        return None;
    }
    let span = continue_trace(headers, || {
        tracing::debug_span!("authenticate", otel.kind = "server")
    });
    (!span.is_disabled()).then_some(span)
}

/// The span context a request's `traceparent` and `tracestate` name, if its `traceparent` is
/// one valid header.
fn remote_context(headers: &HeaderMap) -> Option<SpanContext> {
    let mut parents = headers.get_all(TRACEPARENT).iter();
    let parent = parents.next()?;
    if parents.next().is_some() {
        // Two traceparents: which is the caller's is not ours to guess.
        return None;
    }
    let (trace_id, span_id, flags) = parse_traceparent(parent.as_bytes())?;
    let state = trace_state(headers).unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// `version-traceid-parentid-flags`, as the W3C says: version 00 is exactly 55 bytes; a later
/// version may append fields after a `-`; `ff` is no version; ids are lowercase hex, not all
/// zeros.
pub(crate) fn parse_traceparent(value: &[u8]) -> Option<(TraceId, SpanId, TraceFlags)> {
    if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let version = hex_u8(&value[0..2])?;
    match version {
        0xff => return None,
        0 if value.len() != 55 => return None,
        _ if value.len() > 55 && value[55] != b'-' => return None,
        _ => {}
    }
    let trace_id = u128::from_str_radix(lower_hex(&value[3..35])?, 16).ok()?;
    let span_id = u64::from_str_radix(lower_hex(&value[36..52])?, 16).ok()?;
    let flags = hex_u8(&value[53..55])?;
    if trace_id == 0 || span_id == 0 {
        return None;
    }
    // Only the sampled bit is defined; the others are not passed on as if they meant something.
    let flags = TraceFlags::new(flags) & TraceFlags::SAMPLED;
    Some((TraceId::from(trace_id), SpanId::from(span_id), flags))
}

/// The request's `tracestate` (its headers joined by commas, as the W3C says), when it is
/// small enough and well formed.
fn trace_state(headers: &HeaderMap) -> Option<TraceState> {
    let mut joined = String::new();
    for value in headers.get_all(TRACESTATE) {
        let value = value.to_str().ok()?;
        let comma = usize::from(!joined.is_empty());
        if joined.len() + comma + value.len() > MAX_TRACESTATE_BYTES {
            return None;
        }
        if !joined.is_empty() {
            joined.push(',');
        }
        joined.push_str(value);
    }
    if joined.is_empty() {
        return None;
    }
    TraceState::from_str(&joined).ok()
}

/// `bytes` as a `&str` if they are lowercase hex digits only.
fn lower_hex(bytes: &[u8]) -> Option<&str> {
    let hex = bytes
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    if hex {
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// Two lowercase hex digits.
fn hex_u8(bytes: &[u8]) -> Option<u8> {
    u8::from_str_radix(lower_hex(bytes)?, 16).ok()
}

/// Adds the current OpenTelemetry context's `traceparent` and `tracestate` to a request for
/// `/api/user`; nothing when there is no valid current span context.
pub(crate) fn inject(headers: &mut HeaderMap) {
    let current = Context::current();
    let span = current.span();
    let context = span.span_context();
    if !context.is_valid() {
        return;
    }
    let parent = format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    );
    if let Ok(value) = HeaderValue::from_str(&parent) {
        headers.insert(HeaderName::from_static(TRACEPARENT), value);
    }
    let state = context.trace_state().header();
    if !state.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&state) {
            headers.insert(HeaderName::from_static(TRACESTATE), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_valid_traceparent_is_read_as_its_ids_and_sampled_flag() {
        let (trace, span, flags) = parse_traceparent(VALID.as_bytes()).unwrap();
        assert_eq!(format!("{trace}"), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(format!("{span}"), "00f067aa0ba902b7");
        assert!(flags.is_sampled());
        let unsampled = VALID.replace("-01", "-00");
        let (_, _, flags) = parse_traceparent(unsampled.as_bytes()).unwrap();
        assert!(!flags.is_sampled());
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let zero_span = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        let upper = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
        let version_ff = "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let long_00 = format!("{VALID}-extra");
        let short = &VALID[..54];
        let bad_sep = VALID.replace('-', "_");
        let plus = "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for bad in [
            zero_trace, zero_span, upper, version_ff, &long_00, short, &bad_sep, plus, "",
        ] {
            assert!(parse_traceparent(bad.as_bytes()).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_may_append_fields() {
        let future = VALID.replacen("00", "01", 1) + "-whatever";
        assert!(parse_traceparent(future.as_bytes()).is_some());
        let glued = VALID.replacen("00", "01", 1) + "x";
        assert!(parse_traceparent(glued.as_bytes()).is_none());
    }

    #[test]
    fn two_traceparents_are_followed_by_neither() {
        let two = headers(&[(TRACEPARENT, VALID), (TRACEPARENT, VALID)]);
        assert!(remote_context(&two).is_none());
        assert!(remote_context(&headers(&[(TRACEPARENT, VALID)])).is_some());
    }

    #[test]
    fn tracestate_is_joined_and_dropped_when_oversized_or_malformed() {
        let joined = headers(&[
            (TRACEPARENT, VALID),
            (TRACESTATE, "a=1"),
            (TRACESTATE, "b=2"),
        ]);
        let context = remote_context(&joined).unwrap();
        assert_eq!(context.trace_state().get("a"), Some("1"));
        assert_eq!(context.trace_state().get("b"), Some("2"));

        // One header of exactly the most kept (two entries: a value is at most 256 bytes).
        let most = format!("a={},b={}", "x".repeat(253), "y".repeat(254));
        assert_eq!(most.len(), MAX_TRACESTATE_BYTES);
        let at_most = headers(&[(TRACEPARENT, VALID), (TRACESTATE, &most)]);
        let kept = remote_context(&at_most).unwrap().trace_state().header();
        assert_eq!(kept.len(), MAX_TRACESTATE_BYTES);

        let huge = format!("a={}", "x".repeat(MAX_TRACESTATE_BYTES - 1));
        let oversized = headers(&[(TRACEPARENT, VALID), (TRACESTATE, &huge)]);
        let context = remote_context(&oversized).unwrap();
        assert_eq!(context.trace_state().header(), "");

        let malformed = headers(&[(TRACEPARENT, VALID), (TRACESTATE, "no equals sign")]);
        assert_eq!(
            remote_context(&malformed).unwrap().trace_state().header(),
            ""
        );
    }

    #[test]
    fn injecting_with_no_current_context_adds_nothing() {
        let mut out = HeaderMap::new();
        inject(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn an_injected_traceparent_names_the_current_context() {
        let remote = remote_context(&headers(&[(TRACEPARENT, VALID), (TRACESTATE, "k=v")]));
        let _current = Context::new()
            .with_remote_span_context(remote.unwrap())
            .attach();
        let mut out = HeaderMap::new();
        inject(&mut out);
        assert_eq!(out[TRACEPARENT], VALID);
        assert_eq!(out[TRACESTATE], "k=v");
    }
}
