//! Fault injection: real loopback upstreams that misbehave on purpose, one test per fault. Each
//! asserts the exact error code, how many requests reached the server, and a bound on the time
//! the resolution took: a fault that hangs costs a game server its deadline and no more, never a
//! hung handler; a fault that answers (a refused handshake, a status, a bad body) ends long
//! before the deadline.
//!
//! The two kinds run under different deadlines. A hanging fault gets a short one, so that the
//! test reaches it quickly. A fault that answers gets a long one: under a short one, a loaded
//! machine could turn the exact code checked into `auth_timeout`, or leave no time for the retry
//! the request count checks (a CI run failed so, on a 400 ms deadline).
//!
//! `tests/upstream_answers.rs` pins the status and body rules at the HTTP level; this suite adds
//! the transport faults (stalls, trickles, endless and cut bodies, resets, untrusted TLS) and
//! the time bound on every case.

use token_resolver_support as support;

use std::error::Error as _;
use std::time::Duration;

use support::{
    close_at_once, endless_chunked, fails_within, never_answer, reset_mid_body, resolver_for,
    respond, short_body_then_close, trickle_body, RawServer, Scripted, UntrustedTls,
};
use token_resolver::{ErrorCode, ResolveError, Resolver};

const TOKEN: &str = "fault-token-4f9c.Zx_~+/=";

/// The deadline of the faults that hang: the resolution must end there.
const TIMEOUT: Duration = Duration::from_secs(1);

/// What a resolution may take beyond its deadline: scheduling on a busy 2-core machine.
const MARGIN: Duration = Duration::from_secs(2);

/// The deadline of the faults that answer, which they must end well within: half of it.
const ANSWERING: Duration = Duration::from_secs(10);

fn resolver(url: &str, deadline: Duration) -> Resolver {
    resolver_for(url).request_timeout(deadline).build().unwrap()
}

/// Resolves at `url`, whose fault answers, and asserts `code` well within the deadline.
async fn fails(url: &str, code: ErrorCode) -> (ResolveError, Duration) {
    let resolver = resolver(url, ANSWERING);
    fails_within(&resolver, url, TOKEN, code, ANSWERING / 2).await
}

/// Resolves at `url`, whose fault hangs, and asserts `auth_timeout` at the deadline, not before
/// it and not much after.
async fn times_out(url: &str) {
    let resolver = resolver(url, TIMEOUT);
    let (_, elapsed) = fails_within(
        &resolver,
        url,
        TOKEN,
        ErrorCode::AuthTimeout,
        TIMEOUT + MARGIN,
    )
    .await;
    assert!(elapsed >= TIMEOUT, "gave up early: {elapsed:?}");
}

// --- transport faults ------------------------------------------------------------------------

#[tokio::test]
async fn headers_that_never_come_time_out_at_the_deadline() {
    // Pins down that a server that reads the request and never answers costs request_timeout.
    let server = RawServer::start(never_answer).await;
    times_out(&server.url()).await;
    assert_eq!(server.requests(), 1, "a timeout is not retried");
}

#[tokio::test]
async fn a_body_trickling_one_byte_a_second_times_out() {
    // Pins down that the deadline covers reading the body, not just the head.
    let server = RawServer::start(trickle_body).await;
    times_out(&server.url()).await;
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn an_endless_chunked_body_is_cut_at_the_size_cap_fast() {
    // Pins down that max_response_bytes is enforced while streaming: the resolution fails as
    // soon as the cap is passed, long before the deadline.
    let server = RawServer::start(endless_chunked).await;
    let resolver = resolver_for(&server.url())
        .request_timeout(ANSWERING)
        .max_response_bytes(16 * 1024)
        .build()
        .unwrap();
    let (error, elapsed) = fails_within(
        &resolver,
        &server.url(),
        TOKEN,
        ErrorCode::AuthBadResponse,
        ANSWERING / 2,
    )
    .await;
    assert!(error.to_string().contains("max_response_bytes"), "{error}");
    assert_eq!(server.requests(), 1, "{elapsed:?}");
}

#[tokio::test]
async fn a_content_length_longer_than_the_body_then_close_is_unavailable() {
    // Pins down that a body cut short by a clean close is a transport failure, retried, then
    // auth_unavailable; the partial body is never parsed as an answer.
    let server = RawServer::start(short_body_then_close).await;
    fails(&server.url(), ErrorCode::AuthUnavailable).await;
    assert_eq!(server.requests(), 2, "one try and one retry");
}

#[tokio::test]
async fn a_reset_mid_body_is_unavailable() {
    // Pins down the error codes: a reset -> auth_unavailable, after the retry.
    let server = RawServer::start(reset_mid_body).await;
    let (error, _) = fails(&server.url(), ErrorCode::AuthUnavailable).await;
    assert_eq!(server.requests(), 2, "one try and one retry");
    // The HTTP client's error is kept as the source, and the chain goes on down to the reset.
    let cause = error.source().expect("a transport failure has a source");
    assert!(cause.is::<reqwest::Error>(), "{cause:?}");
    let reset = std::iter::successors(cause.source(), |inner| (*inner).source()).any(|inner| {
        inner
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
    });
    assert!(reset, "no ConnectionReset under {cause:?}");
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_is_unavailable() {
    // Pins down that an empty reply is a transport failure, not a timeout or a bad answer.
    let server = RawServer::start(close_at_once).await;
    fails(&server.url(), ErrorCode::AuthUnavailable).await;
    assert_eq!(server.requests(), 2, "one try and one retry");
}

#[tokio::test]
async fn an_untrusted_tls_certificate_is_unavailable_and_no_request_is_sent() {
    // Pins down that a certificate the client does not trust fails the connect (by IP and by
    // name, both in the certificate) and the token never crosses the unverified channel.
    let server = UntrustedTls::start().await;
    for url in [server.url(), server.localhost_url()] {
        let (error, _) = fails(&url, ErrorCode::AuthUnavailable).await;
        assert!(error.is_retryable(), "{error}");
    }
    assert!(server.failed_handshakes() >= 2, "the handshakes failed");
    assert_eq!(server.requests(), 0, "nothing was sent over untrusted TLS");
}

#[tokio::test]
async fn a_redirect_to_another_host_is_refused_and_the_token_stays() {
    // Pins down that no redirect is followed: the other host (another loopback address) sees
    // not even a TCP connection, so the token cannot reach it.
    let other = RawServer::start_on("127.0.0.2", close_at_once).await;
    for status in [301, 302, 303, 307, 308] {
        let location = format!("{}/api/user", other.url());
        let server = Scripted::start(move |_, _| {
            let location = location.clone();
            async move {
                let mut response = respond(status, &[], b"");
                response
                    .headers_mut()
                    .insert("location", location.parse().unwrap());
                response
            }
        })
        .await;
        let (error, _) = fails(&server.url(), ErrorCode::AuthBadResponse).await;
        assert!(error.to_string().contains("redirect"), "{error}");
        assert_eq!(server.requests(), 1, "{status}");
    }
    assert_eq!(other.connections(), 0, "the redirect target was contacted");
}

// --- statuses ---------------------------------------------------------------------------------

/// One test per status: the upstream answers it to every request, with these headers.
macro_rules! status_case {
    ($(#[$doc:meta])* $name:ident: $status:expr, $headers:expr => $code:ident, $requests:expr) => {
        $(#[$doc])*
        #[tokio::test]
        async fn $name() {
            let server = Scripted::always($status, $headers, b"{}").await;
            let (error, elapsed) = fails(&server.url(), ErrorCode::$code).await;
            assert_eq!(server.requests(), $requests, "{error} after {elapsed:?}");
        }
    };
}

status_case!(
    /// 401 is a rejection, final at once.
    status_401_is_token_rejected: 401, &[("www-authenticate", "Bearer")] => TokenRejected, 1
);
status_case!(
    /// 403 is a rejection, final at once.
    status_403_is_token_rejected: 403, &[] => TokenRejected, 1
);
status_case!(
    /// 404 (a wrong authUrl path) breaks the protocol.
    status_404_is_bad_response: 404, &[] => AuthBadResponse, 1
);
status_case!(
    /// 405 (an API that wants GET) breaks the protocol.
    status_405_is_bad_response: 405, &[("allow", "GET")] => AuthBadResponse, 1
);
status_case!(
    /// 429 without Retry-After is retried once with backoff, then unavailable.
    status_429_without_retry_after_is_retried_then_unavailable: 429, &[] => AuthUnavailable, 2
);
status_case!(
    /// 429 whose Retry-After (30 s) outlasts the deadline ends the tries at once.
    status_429_with_a_long_retry_after_ends_the_tries_at_once:
        429, &[("retry-after", "30")] => AuthUnavailable, 1
);
status_case!(
    /// 429 whose Retry-After is an HTTP date in the far future ends the tries at once.
    status_429_with_a_far_retry_after_date_ends_the_tries_at_once:
        429, &[("retry-after", "Fri, 31 Dec 2100 23:59:59 GMT")] => AuthUnavailable, 1
);
status_case!(
    /// 503 whose Retry-After is the largest number of seconds there is ends the tries at once,
    /// rather than overflowing the clock.
    status_503_with_a_retry_after_past_any_clock_ends_the_tries_at_once:
        503, &[("retry-after", "18446744073709551615")] => AuthUnavailable, 1
);
status_case!(
    /// 429 with `Retry-After: 0` is retried at once, then unavailable.
    status_429_with_retry_after_zero_is_retried_then_unavailable:
        429, &[("retry-after", "0")] => AuthUnavailable, 2
);
status_case!(
    /// 500 is transient: retried, then unavailable.
    status_500_is_retried_then_unavailable: 500, &[] => AuthUnavailable, 2
);
status_case!(
    /// 502 is transient: retried, then unavailable.
    status_502_is_retried_then_unavailable: 502, &[] => AuthUnavailable, 2
);
status_case!(
    /// 503 is transient: retried, then unavailable.
    status_503_is_retried_then_unavailable: 503, &[("retry-after", "garbage")] => AuthUnavailable, 2
);

#[tokio::test]
async fn a_long_retry_after_fails_fast_not_at_the_deadline() {
    // Pins down the retry rule: a Retry-After that does not fit ends the tries now, not at the
    // deadline.
    let server = Scripted::always(429, &[("retry-after", "30")], b"").await;
    let (_, elapsed) = fails(&server.url(), ErrorCode::AuthUnavailable).await;
    assert!(
        elapsed < ANSWERING / 2,
        "waited for the deadline: {elapsed:?}"
    );
}

// --- bodies -----------------------------------------------------------------------------------

/// One test per bad 200 body: `auth_bad_response`, no retry, and a message naming the fault.
macro_rules! body_case {
    ($(#[$doc:meta])* $name:ident: $body:expr => $names:expr) => {
        $(#[$doc])*
        #[tokio::test]
        async fn $name() {
            let body: Vec<u8> = $body.into();
            let body: &'static [u8] = Box::leak(body.into_boxed_slice());
            let server =
                Scripted::always(200, &[("content-type", "application/json")], body).await;
            let (error, _) = fails(&server.url(), ErrorCode::AuthBadResponse).await;
            assert_eq!(server.requests(), 1, "a bad answer is not retried");
            assert!(error.to_string().contains($names), "{error}");
        }
    };
}

body_case!(
    /// Invalid UTF-8 inside a string.
    invalid_utf8_is_a_bad_response: b"{\"id\":1,\"name\":\"\xff\xfe\"}".to_vec() => "not a valid answer"
);
body_case!(
    /// Two `id` keys: which one would a cache trust?
    duplicate_id_keys_are_a_bad_response: br#"{"id":1,"name":"a","id":2}"#.to_vec() => "duplicate key \"id\""
);
body_case!(
    /// 20,000 nested arrays in an extra field: refused at the recursion limit, no stack
    /// overflow.
    deeply_nested_json_is_a_bad_response:
        format!(r#"{{"id":1,"name":"a","x":{}{}}}"#, "[".repeat(20_000), "]".repeat(20_000))
            => "recursion limit"
);
body_case!(
    /// `id` as a string.
    id_as_a_string_is_a_bad_response: br#"{"id":"42","name":"a"}"#.to_vec() => "\"id\" is a string"
);
body_case!(
    /// `id` as a float.
    id_as_a_float_is_a_bad_response: br#"{"id":42.5,"name":"a"}"#.to_vec() => "not an integer"
);
body_case!(
    /// `id` as a boolean.
    id_as_a_bool_is_a_bad_response: br#"{"id":true,"name":"a"}"#.to_vec() => "\"id\" is a boolean"
);
body_case!(
    /// `id` as null.
    id_as_null_is_a_bad_response: br#"{"id":null,"name":"a"}"#.to_vec() => "\"id\" is null"
);
body_case!(
    /// `id` 2^63, one past i64::MAX.
    id_of_two_to_the_63_is_a_bad_response:
        br#"{"id":9223372036854775808,"name":"a"}"#.to_vec() => "does not fit"
);
body_case!(
    /// `name` as a number.
    name_as_a_number_is_a_bad_response: br#"{"id":1,"name":7}"#.to_vec() => "\"name\" is a number"
);
body_case!(
    /// `name` as null.
    name_as_null_is_a_bad_response: br#"{"id":1,"name":null}"#.to_vec() => "\"name\" is null"
);
body_case!(
    /// A JSON array around a valid answer.
    a_json_array_is_a_bad_response: br#"[{"id":1,"name":"a"}]"#.to_vec() => "array"
);
body_case!(
    /// An empty 200.
    an_empty_body_is_a_bad_response: Vec::new() => "empty"
);
