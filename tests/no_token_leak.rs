//! The token never appears in logs, spans, metric labels or errors: the main paths run under a
//! TRACE subscriber that captures everything (the crate's spans and reqwest's and hyper's own
//! logs) and a recording metrics recorder, then both are searched for the token.

use token_resolver_support as support;

use support::{login_and_take_token, reference_api, respond, Scripted};
use token_resolver::{telemetry, ConnectRequest, JoinRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_appears_in_no_log_span_metric_or_error() {
    let (logs, snapshotter) = support::capture_everything();

    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let resolver = support::resolver_for(&base).build().unwrap();
    let mut errors = Vec::new();

    // Miss, hit, connect, join, invalidate, rejection, negative hit.
    resolver.resolve(&base, &token).await.unwrap();
    resolver.resolve(&base, &token).await.unwrap();
    resolver
        .resolve_connect(&ConnectRequest {
            access_token: Some(token.clone()),
        })
        .await
        .unwrap();
    let join = JoinRequest {
        room_id: "r".into(),
        auth_url: format!("{base}/"),
        access_token: Some(token.clone()),
    };
    resolver.resolve_join(&join).await.unwrap();
    resolver.invalidate(&base, &token);
    let rejected = format!("{token}x");
    errors.push(resolver.resolve(&base, &rejected).await.unwrap_err());
    errors.push(resolver.resolve(&base, &rejected).await.unwrap_err());
    // A disallowed URL carrying the token in its path, a malformed token containing it.
    errors.push(
        resolver
            .resolve(&format!("https://evil.example/{token}"), &token)
            .await
            .unwrap_err(),
    );
    errors.push(
        resolver
            .resolve(&base, &format!("{token} "))
            .await
            .unwrap_err(),
    );
    // An upstream that fails, and one that echoes the Authorization header in its body.
    let failing = Scripted::always(503, &[], b"").await;
    let r2 = support::resolver_for(&failing.url()).build().unwrap();
    errors.push(r2.resolve(&failing.url(), &token).await.unwrap_err());
    let echo = Scripted::start(|_, seen| async move {
        let auth = seen.header("authorization").unwrap_or_default().to_owned();
        let body: &'static [u8] = Box::leak(
            format!(r#"{{"id":"{auth}","name":1}}"#)
                .into_bytes()
                .into_boxed_slice(),
        );
        respond(200, &[], body)
    })
    .await;
    let r3 = support::resolver_for(&echo.url()).build().unwrap();
    errors.push(r3.resolve(&echo.url(), &token).await.unwrap_err());

    let logs = logs.text();
    assert!(
        logs.contains("resolve") && logs.contains("auth_host"),
        "the capture works: {logs:.500}"
    );
    assert!(
        logs.contains("cache=\"hit\"") || logs.contains("cache=hit"),
        "spans record the cache outcome"
    );
    assert!(!logs.contains(&token), "token found in the logs");

    for e in &errors {
        for shown in [
            e.to_string(),
            format!("{e:?}"),
            format!("{:?}", std::error::Error::source(e)),
        ] {
            assert!(!shown.contains(&token), "token in an error: {shown}");
        }
    }
    assert!(!format!("{join:?}").contains(&token));
    assert!(!format!("{resolver:?}").contains(&token));

    let metrics = snapshotter.snapshot().into_vec();
    let names: Vec<String> = metrics
        .iter()
        .map(|(k, ..)| k.key().name().to_owned())
        .collect();
    for name in [
        telemetry::RESOLUTIONS_TOTAL,
        telemetry::UPSTREAM_REQUESTS_TOTAL,
        telemetry::UPSTREAM_DURATION_SECONDS,
        telemetry::UPSTREAM_IN_FLIGHT,
        telemetry::CACHE_ENTRIES,
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "metric {name} recorded: {names:?}"
        );
    }
    for (key, ..) in &metrics {
        for label in key.key().labels() {
            assert!(!label.value().contains(&token), "token in a metric label");
            assert_ne!(label.value(), "Alice", "user name in a metric label");
        }
    }
    let outcomes: Vec<&str> = metrics
        .iter()
        .filter(|(k, ..)| k.key().name() == telemetry::RESOLUTIONS_TOTAL)
        .flat_map(|(k, ..)| k.key().labels().map(|l| l.value()).collect::<Vec<_>>())
        .collect();
    for outcome in [
        "hit",
        "miss",
        "token_rejected",
        "auth_url_not_allowed",
        "auth_unavailable",
    ] {
        assert!(
            outcomes.contains(&outcome),
            "outcome {outcome} counted: {outcomes:?}"
        );
    }
}
