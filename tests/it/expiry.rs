//! Expiry and revocation events in the resolver, against a scripted upstream on loopback: an
//! answer's `exp` and a JWT's `exp` cap how long an answer is trusted (with the clock skew as
//! leeway), and every invalidation is told to subscribers, naming tokens without carrying them.

use token_resolver_support as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::json;
use support::{resolver_for, respond, user_answer, Scripted};
use token_resolver::{ErrorCode, Revocation};

/// An `exp` one to two seconds ahead. `exp` is in whole seconds: one second ahead could be a
/// millisecond ahead, and pass before the test's first resolve.
fn exp_soon() -> i64 {
    unix_now() as i64 + 2
}

/// Sleeps until 100 ms past `exp`.
async fn sleep_past(exp: i64) {
    let expiry = UNIX_EPOCH + Duration::from_secs(exp as u64);
    let left = expiry.duration_since(SystemTime::now()).unwrap_or_default();
    // Real time: `exp` is a wall-clock date, which the resolver compares with `SystemTime`, and
    // no tokio clock moves that (a paused one would shorten the cached life, not pass `exp`).
    tokio::time::sleep(left + Duration::from_millis(100)).await;
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A server answering every token with user 7 and the given `exp` (none when `None`), with a
/// `max-age` of an hour, so that only the expiry bounds caching.
async fn answering(exp: Option<i64>) -> Scripted {
    let mut body = json!({"id": 7, "name": "grace"});
    if let Some(exp) = exp {
        body["exp"] = json!(exp);
    }
    let body: &'static [u8] = Box::leak(body.to_string().into_bytes().into_boxed_slice());
    Scripted::always(
        200,
        &[
            ("content-type", "application/json"),
            ("cache-control", "private, max-age=3600"),
        ],
        body,
    )
    .await
}

/// A JWT-shaped token (unsigned: only its `exp` is read) expiring at `exp`.
fn jwt(exp: i64) -> String {
    format!(
        "{}.{}.c2ln",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256"}"#),
        URL_SAFE_NO_PAD.encode(json!({"sub": "7", "exp": exp}).to_string())
    )
}

#[tokio::test]
async fn an_answers_exp_caps_how_long_it_is_cached() {
    // Pins down the RFC 7662 exp: an answer valid for a second or two more is cached no
    // longer, despite max-age=3600, and the user carries its expiry.
    let exp = exp_soon();
    let api = answering(Some(exp)).await;
    let resolver = resolver_for(&api.url())
        .clock_skew(Duration::ZERO)
        .build()
        .unwrap();
    let user = resolver.resolve_in_full(&api.url(), "tok").await.unwrap();
    assert_eq!(
        user.expires_at().map(|e| e.unix_seconds()),
        Some(exp as u64)
    );
    resolver.resolve(&api.url(), "tok").await.unwrap();
    assert_eq!(api.requests(), 1, "cached while valid");
    sleep_past(exp).await;
    let error = resolver.resolve(&api.url(), "tok").await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::TokenRejected);
    assert_eq!(api.requests(), 2, "asked again once it expired");
}

#[tokio::test]
async fn an_answer_whose_exp_has_passed_is_rejected_unless_within_the_clock_skew() {
    // Pins down the passed exp and the skew as leeway: 10 s ago is rejected with no skew,
    // accepted with a 30 s skew (and then cached only until exp + skew).
    let exp = unix_now() as i64 - 10;
    let api = answering(Some(exp)).await;
    let strict = resolver_for(&api.url())
        .clock_skew(Duration::ZERO)
        .build()
        .unwrap();
    let error = strict.resolve(&api.url(), "tok").await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::TokenRejected);
    assert!(error.to_string().contains("expired"), "{error}");
    strict.resolve(&api.url(), "tok").await.unwrap_err();
    assert_eq!(api.requests(), 1, "the rejection is cached like a 401");
    let lenient = resolver_for(&api.url()).build().unwrap();
    assert_eq!(lenient.resolve(&api.url(), "tok").await.unwrap().id, 7);
}

#[tokio::test]
async fn a_jwts_exp_caps_caching_and_a_passed_one_is_rejected_never_cached_as_a_user() {
    // Pins down the JWT rule: a token's payload exp shortens caching (no signature is
    // checked: it is only read to shorten), and once passed the answer is refused and no user
    // is cached past it.
    let api = answering(None).await;
    let resolver = resolver_for(&api.url())
        .clock_skew(Duration::ZERO)
        .build()
        .unwrap();
    let exp = exp_soon();
    let soon = jwt(exp);
    let user = resolver.resolve_in_full(&api.url(), &soon).await.unwrap();
    assert!(user.expires_at().is_some(), "the JWT's exp is the user's");
    sleep_past(exp).await;
    assert_eq!(
        resolver
            .resolve(&api.url(), &soon)
            .await
            .unwrap_err()
            .code(),
        ErrorCode::TokenRejected
    );
    let expired = jwt(unix_now() as i64 - 60);
    assert_eq!(
        resolver
            .resolve(&api.url(), &expired)
            .await
            .unwrap_err()
            .code(),
        ErrorCode::TokenRejected
    );
    assert_eq!(
        resolver.stats().hits,
        0,
        "no user was served from the cache"
    );
}

#[tokio::test]
async fn every_invalidation_is_told_to_subscribers_naming_tokens_without_them() {
    // Pins down Resolver::revocations: invalidate, invalidate_user and invalidate_all each
    // come out as an event, the token one named by the same fingerprint the resolver gives,
    // and no event shows the token.
    let api = answering(None).await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    let mut events = resolver.revocations();
    let token = "SECRET-TOKEN-VALUE";
    resolver.invalidate(&api.url(), token);
    resolver.invalidate_user(&api.url(), 7);
    resolver.invalidate_all();
    let endpoint = format!("{}/api/user", api.url());
    let first = events.recv().await.unwrap();
    assert_eq!(
        first,
        Revocation::Token {
            endpoint: endpoint.clone(),
            token: resolver.fingerprint(&api.url(), token).unwrap(),
        }
    );
    assert!(!format!("{first:?}").contains(token));
    assert_eq!(
        events.recv().await.unwrap(),
        Revocation::User {
            endpoint,
            user_id: 7
        }
    );
    assert_eq!(events.recv().await.unwrap(), Revocation::All);
}

#[tokio::test]
async fn an_expired_token_is_never_served_stale_through_an_outage() {
    // Pins down that serve_stale_for does not outlive the token: once its exp has passed, an
    // outage is an outage, not a stale answer.
    let down = Arc::new(AtomicBool::new(false));
    let d = down.clone();
    let api = Scripted::start(move |_, _| {
        let down = d.load(Ordering::SeqCst);
        async move {
            if down {
                respond(503, &[], b"")
            } else {
                user_answer(7, "grace")
            }
        }
    })
    .await;
    let resolver = resolver_for(&api.url())
        .clock_skew(Duration::ZERO)
        .cache_ttl(Duration::from_secs(1))
        .serve_stale_for(Duration::from_secs(60))
        .build()
        .unwrap();
    let exp = exp_soon();
    let token = jwt(exp);
    resolver.resolve(&api.url(), &token).await.unwrap();
    let other = jwt(unix_now() as i64 + 3600);
    resolver.resolve(&api.url(), &other).await.unwrap();
    sleep_past(exp).await;
    down.store(true, Ordering::SeqCst);
    let error = resolver.resolve(&api.url(), &token).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::AuthUnavailable);
    assert_eq!(resolver.stats().stale_served, 0);
    let still_valid = resolver.resolve_in_full(&api.url(), &other).await.unwrap();
    assert!(
        still_valid.is_stale(),
        "a token still valid is served stale as before"
    );
}
