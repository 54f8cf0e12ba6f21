//! The axum integration over real HTTP: an axum app on loopback using the extractors and the
//! layer, called with reqwest, resolving against a scripted upstream on loopback. Bad input,
//! every error code's answer, the layer, and auth switched off.
#![cfg(feature = "axum")]

use token_resolver_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Json, Router};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use serde_json::{json, Value};
use support::{
    api_answering, conforming_answer, eventually, resolver_for, respond, serve_app, user_answer,
    Scripted, ServedApp, GOOD_TOKEN,
};
use token_resolver::axum::{AuthIdentity, AuthLayer, Authenticated};
use token_resolver::{Identity, Resolver, ResolverBuilder};

/// The app under test: one route per extractor, the resolver as the state.
fn app(resolver: Resolver) -> Router {
    Router::new()
        .route("/me", get(me))
        .route("/identity", get(identity))
        .route("/both", get(both))
        .route("/optional", get(optional))
        .with_state(resolver)
}

async fn me(Authenticated(user): Authenticated) -> Json<Value> {
    Json(json!({ "id": user.id, "name": user.name }))
}

async fn identity(AuthIdentity(identity): AuthIdentity) -> Json<Value> {
    Json(describe(&identity))
}

/// Both extractors in one handler: the second takes what the first resolved.
async fn both(Authenticated(user): Authenticated, AuthIdentity(identity): AuthIdentity) -> String {
    format!("{} {}", user.id, describe(&identity))
}

async fn optional(user: Option<Authenticated>) -> Json<Value> {
    Json(json!(user.map(|Authenticated(user)| user.id)))
}

/// What the extension the layer leaves holds.
async fn from_extension(Extension(identity): Extension<Identity>) -> Json<Value> {
    Json(describe(&identity))
}

fn describe(identity: &Identity) -> Value {
    match identity {
        Identity::Authenticated(user) => json!({ "id": user.id }),
        Identity::Anonymous => json!("anonymous"),
    }
}

/// A scripted upstream that knows `good-token` as user 7 "grace", and the app on a resolver
/// for it, configured by `configure`.
async fn fixture(
    configure: impl FnOnce(ResolverBuilder) -> ResolverBuilder,
) -> (Scripted, ServedApp) {
    let upstream = api_answering(|_| conforming_answer()).await;
    let resolver = configure(resolver_for(&upstream.url())).build().unwrap();
    let served = serve_app(app(resolver)).await;
    (upstream, served)
}

/// An app on a resolver for an upstream that answers every request with `answer(n)`.
async fn app_over<F>(
    answer: F,
    configure: impl FnOnce(ResolverBuilder) -> ResolverBuilder,
) -> (Scripted, ServedApp)
where
    F: Fn(usize) -> axum::response::Response + Clone + Send + Sync + 'static,
{
    let upstream = Scripted::start(move |n, _| {
        let answer = answer.clone();
        async move { answer(n) }
    })
    .await;
    let resolver = configure(resolver_for(&upstream.url())).build().unwrap();
    let served = serve_app(app(resolver)).await;
    (upstream, served)
}

/// What came back.
struct Answer {
    status: u16,
    headers: HeaderMap,
    text: String,
    body: Value,
}

/// `GET url` with one `Authorization` header per value, sent as raw bytes.
async fn call(url: &str, authorization: &[&[u8]]) -> Answer {
    let mut request = reqwest::Client::new().get(url);
    for value in authorization {
        request = request.header(AUTHORIZATION, HeaderValue::from_bytes(value).unwrap());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        text,
        body,
    }
}

/// `GET url` with `Authorization: Bearer <token>`.
async fn call_bearer(url: &str, token: &str) -> Answer {
    call(url, &[format!("Bearer {token}").as_bytes()]).await
}

/// Asserts the answer of a refusal: status, `WWW-Authenticate`, `Retry-After`, and a JSON body
/// of exactly `error`, `message` and `retryable`.
fn assert_refused(
    answer: &Answer,
    status: u16,
    code: &str,
    challenge: Option<&str>,
    retry_after: Option<&str>,
) {
    let header = |name: &str| {
        let values: Vec<_> = answer.headers.get_all(name).iter().collect();
        assert!(values.len() <= 1, "{name} sent twice: {values:?}");
        values.first().map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(answer.status, status, "{}", answer.text);
    assert_eq!(answer.body["error"], code, "{}", answer.text);
    assert_eq!(header("www-authenticate").as_deref(), challenge);
    assert_eq!(header("retry-after").as_deref(), retry_after);
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    assert_eq!(
        answer.body["retryable"],
        json!(status == 503),
        "{}",
        answer.text
    );
    let message = answer.body["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "{}", answer.text);
    assert_eq!(
        answer.body.as_object().map(|o| o.len()),
        Some(3),
        "{}",
        answer.text
    );
}

const BEARER: Option<&str> = Some("Bearer");
const INVALID_REQUEST: Option<&str> = Some(r#"Bearer error="invalid_request""#);
const INVALID_TOKEN: Option<&str> = Some(r#"Bearer error="invalid_token""#);

#[tokio::test]
async fn a_bearer_token_resolves_to_the_user() {
    // The extractor sends the header's token upstream as a bearer token and hands the user over.
    let (upstream, app) = fixture(|b| b).await;
    let answer = call_bearer(&app.url("/me"), GOOD_TOKEN).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.body, json!({ "id": 7, "name": "grace" }));
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    let sent = seen[0].header("authorization").map(str::to_owned);
    assert_eq!(sent, Some(format!("Bearer {GOOD_TOKEN}")));
}

#[tokio::test]
async fn the_scheme_is_matched_in_any_case() {
    // RFC 7235: the auth scheme is case-insensitive.
    let (_upstream, app) = fixture(|b| b).await;
    for scheme in ["bearer", "BEARER", "bEaReR"] {
        let answer = call(
            &app.url("/me"),
            &[format!("{scheme} {GOOD_TOKEN}").as_bytes()],
        )
        .await;
        assert_eq!(answer.status, 200, "{scheme}: {}", answer.text);
    }
}

#[tokio::test]
async fn no_authorization_header_is_401_token_missing() {
    // No header: token_missing with the bare Bearer challenge, and no upstream call.
    let (upstream, app) = fixture(|b| b).await;
    let answer = call(&app.url("/me"), &[]).await;
    assert_refused(&answer, 401, "token_missing", BEARER, None);
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn an_empty_authorization_header_is_401_token_missing() {
    // An empty header holds no credentials at all: token_missing, not malformed.
    let (upstream, app) = fixture(|b| b).await;
    let answer = call(&app.url("/me"), &[b""]).await;
    assert_refused(&answer, 401, "token_missing", BEARER, None);
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn bearer_with_no_token_is_401_token_missing() {
    // `Bearer` and nothing after it is a missing token.
    let (upstream, app) = fixture(|b| b).await;
    for value in [&b"Bearer"[..], b"Bearer "] {
        let answer = call(&app.url("/me"), &[value]).await;
        assert_refused(&answer, 401, "token_missing", BEARER, None);
    }
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn another_scheme_is_401_token_missing_with_the_bearer_challenge() {
    // RFC 6750 section 3.1: a request with other credentials gets the Bearer challenge, no error.
    let (upstream, app) = fixture(|b| b).await;
    for value in [&b"Basic YWxpY2U6d29uZGVybGFuZA=="[..], b"Token good-token"] {
        let answer = call(&app.url("/me"), &[value]).await;
        assert_refused(&answer, 401, "token_missing", BEARER, None);
    }
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn two_authorization_headers_are_401_token_malformed() {
    // Which of two headers the client meant is not guessed, even when both are good.
    let (upstream, app) = fixture(|b| b).await;
    let good = format!("Bearer {GOOD_TOKEN}");
    let answer = call(&app.url("/me"), &[good.as_bytes(), good.as_bytes()]).await;
    assert_refused(&answer, 401, "token_malformed", INVALID_REQUEST, None);
    let answer = call(&app.url("/me"), &[good.as_bytes(), b"Basic YWxpY2U6eA=="]).await;
    assert_refused(&answer, 401, "token_malformed", INVALID_REQUEST, None);
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn a_malformed_header_or_token_is_401_token_malformed() {
    // A scheme that is no token, or a bearer token that is no b64token, is refused unsent.
    let (upstream, app) = fixture(|b| b).await;
    for value in [
        &b"Bearer good token"[..],
        b"Bearer good-token, Bearer other",
        b"Bearer =abc",
        b"Bearer \"good-token\"",
        b"{\"access_token\":\"good-token\"}",
    ] {
        let answer = call(&app.url("/me"), &[value]).await;
        assert_refused(&answer, 401, "token_malformed", INVALID_REQUEST, None);
    }
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn a_token_over_4096_bytes_is_401_token_malformed_without_a_call() {
    // The size rule holds at the HTTP edge: 4096 bytes go upstream, 4097 do not.
    let (upstream, app) = fixture(|b| b).await;
    let answer = call_bearer(&app.url("/me"), &"a".repeat(4097)).await;
    assert_refused(&answer, 401, "token_malformed", INVALID_REQUEST, None);
    assert_eq!(upstream.requests(), 0);
    let answer = call_bearer(&app.url("/me"), &"a".repeat(4096)).await;
    assert_refused(&answer, 401, "token_rejected", INVALID_TOKEN, None);
    assert_eq!(upstream.requests(), 1);
}

#[tokio::test]
async fn non_ascii_header_bytes_are_401_token_malformed() {
    // Bytes outside visible ASCII (obs-text on the wire) are refused, not decoded or skipped.
    let (upstream, app) = fixture(|b| b).await;
    for value in [
        &b"Bearer \xc3\xa9t\xc3\xa9"[..],
        b"Bearer good-token\xff",
        b"\xe2\x80\x8bBearer good-token",
    ] {
        let answer = call(&app.url("/me"), &[value]).await;
        assert_refused(&answer, 401, "token_malformed", INVALID_REQUEST, None);
    }
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn a_token_in_the_query_is_never_read() {
    // RFC 6750's URI query parameter leaks into logs: a token there counts as no token.
    let (upstream, app) = fixture(|b| b).await;
    let url = app.url(&format!("/me?access_token={GOOD_TOKEN}"));
    let answer = call(&url, &[]).await;
    assert_refused(&answer, 401, "token_missing", BEARER, None);
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn a_rejected_token_is_401_token_rejected() {
    // The auth API's 401 becomes token_rejected with the invalid_token challenge.
    let (upstream, app) = fixture(|b| b).await;
    let answer = call_bearer(&app.url("/me"), "revoked-token").await;
    assert_refused(&answer, 401, "token_rejected", INVALID_TOKEN, None);
    assert_eq!(upstream.requests(), 1);
}

#[tokio::test]
async fn an_auth_url_not_allowed_is_403_with_no_traffic() {
    // A layer pointed at an authUrl the resolver does not allow refuses, and never calls it.
    let allowed = api_answering(|_| conforming_answer()).await;
    let other = api_answering(|_| conforming_answer()).await;
    let resolver = resolver_for(&allowed.url()).build().unwrap();
    let router = app(resolver.clone()).route_layer(AuthLayer::new(resolver).auth_url(other.url()));
    let served = serve_app(router).await;
    let answer = call_bearer(&served.url("/me"), GOOD_TOKEN).await;
    assert_refused(&answer, 403, "auth_url_not_allowed", None, None);
    assert_eq!((allowed.requests(), other.requests()), (0, 0));
}

#[tokio::test]
async fn a_broken_answer_is_502_auth_bad_response_naming_no_host() {
    // A protocol break is the gateway's fault: 502, and the client is not told the API's host.
    let (_upstream, app) = app_over(|_| user_answer_with_string_id(), |b| b).await;
    let answer = call_bearer(&app.url("/me"), GOOD_TOKEN).await;
    assert_refused(&answer, 502, "auth_bad_response", None, None);
    assert!(!answer.text.contains("127.0.0.1"), "{}", answer.text);
}

fn user_answer_with_string_id() -> axum::response::Response {
    respond(
        200,
        &[("content-type", "application/json")],
        br#"{"id":"7","name":"grace"}"#,
    )
}

#[tokio::test]
async fn an_unavailable_auth_api_is_503_auth_unavailable_with_retry_after() {
    // The auth API answering 503 after the retries: 503 with Retry-After: 1, retryable.
    let (_upstream, app) = app_over(
        |_| StatusCode::SERVICE_UNAVAILABLE.into_response(),
        |b| b.retries(0),
    )
    .await;
    let answer = call_bearer(&app.url("/me"), GOOD_TOKEN).await;
    assert_refused(&answer, 503, "auth_unavailable", None, Some("1"));
}

#[tokio::test]
async fn a_slow_auth_api_is_503_auth_timeout_with_retry_after() {
    // request_timeout passing is retryable: 503 with Retry-After: 1.
    let upstream = Scripted::start(|_, _| std::future::pending()).await;
    let resolver = resolver_for(&upstream.url())
        .request_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let app = serve_app(app(resolver)).await;
    let answer = call_bearer(&app.url("/me"), GOOD_TOKEN).await;
    assert_refused(&answer, 503, "auth_timeout", None, Some("1"));
}

#[tokio::test]
async fn no_free_upstream_slot_is_503_overloaded_with_retry_after() {
    // With the only slot held by another token's call, a miss waits queue_timeout, then 503.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
    let upstream = Scripted::start(move |_, _| {
        let held = held.clone();
        async move {
            if let Ok(permit) = held.acquire().await {
                permit.forget();
            }
            user_answer(7, "grace")
        }
    })
    .await;
    let resolver = resolver_for(&upstream.url())
        .max_concurrent_requests(1)
        .queue_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let app = serve_app(app(resolver)).await;
    let first = tokio::spawn(call_bearer_owned(app.url("/me"), "first-token"));
    eventually("the first call holds the slot", || upstream.requests() == 1).await;
    let answer = call_bearer(&app.url("/me"), "second-token").await;
    assert_refused(&answer, 503, "overloaded", None, Some("1"));
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, 200);
}

async fn call_bearer_owned(url: String, token: &'static str) -> Answer {
    call_bearer(&url, token).await
}

#[tokio::test]
async fn no_refusal_holds_the_token() {
    // Whatever the refusal, neither its headers nor its body repeat the token sent.
    let (_upstream, app) = app_over(
        |n| match n % 2 {
            0 => respond(401, &[("www-authenticate", "Bearer")], b""),
            _ => user_answer_with_string_id(),
        },
        |b| b.negative_cache_ttl(Duration::ZERO),
    )
    .await;
    let secret = "SECRETtoken";
    for value in [
        format!("Bearer {secret}"),
        format!("Bearer {secret}2"),
        format!("Bearer {secret} x"),
        format!("Basic {secret}"),
        format!("Bearer {}", secret.repeat(400)),
    ] {
        let answer = call(&app.url("/me"), &[value.as_bytes()]).await;
        assert!(answer.status >= 400, "{value}: {}", answer.status);
        let headers = format!("{:?}", answer.headers);
        assert!(
            !answer.text.contains("SECRET") && !headers.contains("SECRET"),
            "{headers} {}",
            answer.text
        );
    }
}

#[tokio::test]
async fn two_extractors_in_one_handler_resolve_once() {
    // The first extractor leaves the identity in the request; the second takes it from there.
    let (upstream, app) = fixture(|b| b.cache_ttl(Duration::ZERO)).await;
    for round in 1..=3 {
        let answer = call_bearer(&app.url("/both"), GOOD_TOKEN).await;
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert_eq!(answer.text, r#"7 {"id":7}"#);
        assert_eq!(upstream.requests(), round, "one upstream call per request");
    }
}

#[tokio::test]
async fn optional_authenticated_is_none_without_a_token_and_refuses_a_bad_one() {
    // Option<Authenticated>: no token is None, a good one is the user, a rejected one refuses.
    let (_upstream, app) = fixture(|b| b).await;
    assert_eq!(call(&app.url("/optional"), &[]).await.body, json!(null));
    assert_eq!(
        call_bearer(&app.url("/optional"), GOOD_TOKEN).await.body,
        json!(7)
    );
    let answer = call_bearer(&app.url("/optional"), "revoked-token").await;
    assert_refused(&answer, 401, "token_rejected", INVALID_TOKEN, None);
}

/// A router whose routes are behind `layer`, the resolver `state` in the state; its handlers
/// count their runs in `ran`.
fn layered(state: Resolver, layer: AuthLayer, ran: Arc<AtomicUsize>) -> Router {
    Router::new()
        .route("/extension", get(from_extension))
        .route("/me", get(me))
        .route("/both", get(both))
        .route(
            "/counted",
            get(move || async move {
                ran.fetch_add(1, Ordering::SeqCst);
                "ran"
            }),
        )
        .route_layer(layer)
        .with_state(state)
}

#[tokio::test]
async fn the_layer_puts_the_identity_in_the_extensions() {
    // Behind the layer, a handler finds the Identity as an axum Extension.
    let upstream = api_answering(|_| conforming_answer()).await;
    let resolver = resolver_for(&upstream.url()).build().unwrap();
    let layer = AuthLayer::new(resolver.clone());
    let app = serve_app(layered(resolver, layer, Arc::default())).await;
    let answer = call_bearer(&app.url("/extension"), GOOD_TOKEN).await;
    assert_eq!(answer.body, json!({ "id": 7 }), "{}", answer.text);
}

#[tokio::test]
async fn the_layer_refuses_before_the_handler_runs() {
    // A request the layer refuses never reaches the inner service.
    let upstream = api_answering(|_| conforming_answer()).await;
    let resolver = resolver_for(&upstream.url()).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let layer = AuthLayer::new(resolver.clone());
    let app = serve_app(layered(resolver, layer, ran.clone())).await;
    assert_refused(
        &call(&app.url("/counted"), &[]).await,
        401,
        "token_missing",
        BEARER,
        None,
    );
    let answer = call_bearer(&app.url("/counted"), "revoked-token").await;
    assert_refused(&answer, 401, "token_rejected", INVALID_TOKEN, None);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(
        call_bearer(&app.url("/counted"), GOOD_TOKEN).await.text,
        "ran"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn layer_then_extractors_make_one_upstream_call_per_request() {
    // With positive caching off, each request costs exactly one call: the extractors behind the
    // layer take its identity instead of resolving again.
    let upstream = api_answering(|_| conforming_answer()).await;
    let resolver = resolver_for(&upstream.url())
        .cache_ttl(Duration::ZERO)
        .build()
        .unwrap();
    let layer = AuthLayer::new(resolver.clone());
    let app = serve_app(layered(resolver, layer, Arc::default())).await;
    for round in 1..=3 {
        assert_eq!(call_bearer(&app.url("/both"), GOOD_TOKEN).await.status, 200);
        assert_eq!(upstream.requests(), round);
    }
}

#[tokio::test]
async fn the_layer_resolves_at_its_own_allowed_auth_url() {
    // `.auth_url(url)` sends the routes' tokens to that allowed API, not the default one, and
    // the extractors behind it do not go back to the default.
    let default = api_answering(|_| conforming_answer()).await;
    let other = api_answering(|_| user_answer(99, "other-title")).await;
    let resolver = resolver_for(&default.url())
        .allow_auth_url(other.url())
        .build()
        .unwrap();
    let layer = AuthLayer::new(resolver.clone()).auth_url(other.url());
    let app = serve_app(layered(resolver, layer, Arc::default())).await;
    let answer = call_bearer(&app.url("/me"), GOOD_TOKEN).await;
    assert_eq!(
        answer.body,
        json!({ "id": 99, "name": "other-title" }),
        "{}",
        answer.text
    );
    assert_eq!((default.requests(), other.requests()), (0, 1));
}

/// A resolver with auth switched off, and no authUrl at all.
fn auth_off() -> Resolver {
    Resolver::builder().auth_required(false).build().unwrap()
}

#[tokio::test]
async fn with_auth_off_auth_identity_is_anonymous_whatever_the_header() {
    // auth_required(false): AuthIdentity is Anonymous, with a token, with none, with garbage.
    let app = serve_app(app(auth_off())).await;
    for values in [
        &[][..],
        &[&b"Bearer good-token"[..]],
        &[b"Bearer a", b"Bearer b"],
        &[b"\xff"],
    ] {
        let answer = call(&app.url("/identity"), values).await;
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert_eq!(answer.body, json!("anonymous"));
    }
}

#[tokio::test]
async fn with_auth_off_authenticated_is_401_token_missing() {
    // A route that demands a verified user cannot have one when auth is off.
    let app = serve_app(app(auth_off())).await;
    let answer = call_bearer(&app.url("/me"), GOOD_TOKEN).await;
    assert_refused(&answer, 401, "token_missing", BEARER, None);
    assert_eq!(call(&app.url("/optional"), &[]).await.body, json!(null));
}

#[tokio::test]
async fn with_auth_off_the_layer_passes_every_request_as_anonymous() {
    // The layer lets every request through with Identity::Anonymous in its extensions.
    let ran = Arc::new(AtomicUsize::new(0));
    let app = serve_app(layered(auth_off(), AuthLayer::new(auth_off()), ran.clone())).await;
    assert_eq!(
        call(&app.url("/extension"), &[]).await.body,
        json!("anonymous")
    );
    assert_eq!(
        call(&app.url("/counted"), &[b"Basic eA=="]).await.text,
        "ran"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}
