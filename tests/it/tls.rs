//! The resolver against the reference API over HTTPS with a private CA: trust through
//! `add_root_certificate`, `tls_built_in_roots(false)`, HTTP/2 through ALPN, and the API's
//! injected service time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use token_resolver::{ErrorCode, Resolver, ResolverBuilder};
use token_resolver_support::TlsApi;

fn builder(api: &TlsApi) -> ResolverBuilder {
    Resolver::builder()
        .default_auth_url(api.tls.base_url())
        .retries(0)
}

#[tokio::test]
async fn a_private_ca_is_trusted_once_added_and_refused_without_it() {
    // Pins down add_root_certificate: the same server, refused as unknown, then trusted.
    let api = TlsApi::start(Duration::ZERO).await;
    let token = api.tokens(1).await.remove(0);
    let base = api.tls.base_url();
    assert!(base.starts_with("https://"), "{base}");

    let untrusting = builder(&api).build().unwrap();
    let err = untrusting.resolve(&base, &token).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthUnavailable, "{err}");
    assert_eq!(api.tls.api().user_requests(), 0, "no request got through");

    let trusting = builder(&api)
        .add_root_certificate(api.ca.ca_pem.as_bytes())
        .build()
        .unwrap();
    let user = trusting.resolve(&base, &token).await.unwrap();
    assert_eq!((user.id, user.name.as_str()), (1, "Alice"));
    assert_eq!(api.tls.api().user_requests(), 1);
}

#[tokio::test]
async fn without_the_built_in_roots_an_added_root_still_works() {
    // Pins down tls_built_in_roots(false): only the added CA is trusted, and that is enough.
    let api = TlsApi::start(Duration::ZERO).await;
    let token = api.tokens(1).await.remove(0);
    let resolver = builder(&api)
        .tls_built_in_roots(false)
        .add_root_certificate(api.ca.ca_pem.as_bytes())
        .build()
        .unwrap();
    let user = resolver.resolve(&api.tls.base_url(), &token).await.unwrap();
    assert_eq!(user.id, 1);
}

/// Resolves `tokens` all at once through `resolver`, each successfully.
async fn resolve_all(resolver: &Resolver, base: &str, tokens: &[String]) {
    let base: Arc<str> = Arc::from(base);
    let mut tasks = tokio::task::JoinSet::new();
    for token in tokens {
        let (resolver, base, token) = (resolver.clone(), base.clone(), token.clone());
        tasks.spawn(async move { resolver.resolve(&base, &token).await.map(|u| u.id) });
    }
    while let Some(done) = tasks.join_next().await {
        assert_eq!(done.unwrap().unwrap(), 1);
    }
}

#[tokio::test]
async fn http2_resolves_concurrent_calls_over_one_handshake_where_http1_needs_many() {
    // Pins down http2(true) against the TLS reference API: concurrent calls from a cold start
    // share one connection (ALPN h2), where HTTP/1.1 opens one per call in flight.
    let api = TlsApi::start(Duration::from_millis(50)).await;
    let tokens = api.tokens(17).await;
    let base = api.tls.base_url();
    let with_ca = |b: ResolverBuilder| b.add_root_certificate(api.ca.ca_pem.as_bytes());

    let h2 = with_ca(builder(&api).http2(true)).build().unwrap();
    resolve_all(&h2, &base, &tokens[..9]).await;
    assert_eq!(
        api.tls.tls_handshakes(),
        1,
        "HTTP/2: one connection for all"
    );

    let h1 = with_ca(builder(&api)).build().unwrap();
    resolve_all(&h1, &base, &tokens[9..]).await;
    let h1_handshakes = api.tls.tls_handshakes() - 1;
    assert!(
        h1_handshakes >= 4,
        "HTTP/1.1: {h1_handshakes} handshakes for 8 calls at once"
    );
    assert_eq!(api.tls.connections_accepted(), api.tls.tls_handshakes());
}

#[tokio::test]
async fn the_injected_latency_delays_every_user_answer() {
    // Pins down set_user_latency (serve-api --latency-ms): /api/user answers no sooner.
    let api = TlsApi::start(Duration::from_millis(150)).await;
    let token = api.tokens(1).await.remove(0);
    let resolver = builder(&api)
        .add_root_certificate(api.ca.ca_pem.as_bytes())
        .build()
        .unwrap();
    let started = Instant::now();
    resolver.resolve(&api.tls.base_url(), &token).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    // A cache hit does not wait: it makes no call. Counted, not timed, so that a loaded
    // machine cannot fail it.
    let calls = api.tls.api().user_requests();
    resolver.resolve(&api.tls.base_url(), &token).await.unwrap();
    assert_eq!(
        api.tls.api().user_requests(),
        calls,
        "the hit called the API"
    );
}

#[tokio::test]
async fn with_http2_calls_waiting_for_a_first_contact_that_hangs_go_after_queue_timeout() {
    // Pins down the first-contact gate's bound: an API that never completes a handshake must
    // not make the waiting calls try one after another (4 x 1 s), only side by side.
    let silent = token_resolver_support::SilentTcp::start().await;
    let base = format!("https://{}", silent.addr);
    let resolver = Resolver::builder()
        .default_auth_url(&base)
        .http2(true)
        .retries(0)
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(Duration::from_millis(1500))
        .queue_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..4 {
        let (resolver, base) = (resolver.clone(), base.clone());
        tasks.spawn(async move { resolver.resolve(&base, &format!("token{i}")).await });
    }
    while let Some(done) = tasks.join_next().await {
        let code = done.unwrap().unwrap_err().code();
        assert!(
            matches!(code, ErrorCode::AuthUnavailable | ErrorCode::AuthTimeout),
            "{code:?}"
        );
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_millis(2800), "{elapsed:?}");
}
