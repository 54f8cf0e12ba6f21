//! The token never appears in logs, spans, metric labels or errors: the main paths run under a
//! TRACE subscriber that captures everything (the crate's spans and reqwest's and hyper's own
//! logs) and a recording metrics recorder, then both are searched for the token.

use token_resolver_support as support;

use support::{
    error_texts, login_and_take_token, recorded_metrics, reference_api, respond, Scripted,
};
use token_resolver::{telemetry, ConnectRequest, JoinRequest, ResolveError, Resolver};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_appears_in_no_log_span_metric_or_error() {
    // Pins down that the main paths, and the common failures, record what an operator needs
    // (spans, outcomes, metrics) and never the token or the user's name.
    let (logs, snapshotter) = support::capture_everything();
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let resolver = support::resolver_for(&base).build().unwrap();

    let mut errors = main_paths(&resolver, &base, &token).await;
    errors.extend(failing_upstreams(&token).await);
    for e in &errors {
        for shown in error_texts(e) {
            assert!(!shown.contains(&token), "token in an error: {shown}");
        }
    }
    assert!(!format!("{resolver:?}").contains(&token));

    let logs = logs.text();
    assert!(
        logs.contains("resolve") && logs.contains("auth_host"),
        "the capture works: {logs:.500}"
    );
    assert!(
        logs.contains("cache=\"hit\"") || logs.contains("cache=hit"),
        "spans record the cache outcome"
    );
    assert!(
        logs.contains("room=\"lobby-7f3\"") || logs.contains("room=lobby-7f3"),
        "a join's span names its room"
    );
    assert!(!logs.contains(&token), "token found in the logs");
    metrics_name_outcomes_and_never_the_token(&recorded_metrics(&snapshotter), &token);
}

/// Miss, hit, connect, join, invalidate, rejection, negative hit, a disallowed URL carrying the
/// token in its path, a malformed token containing it: the errors among them.
async fn main_paths(resolver: &Resolver, base: &str, token: &str) -> Vec<ResolveError> {
    resolver.resolve(base, token).await.unwrap();
    resolver.resolve(base, token).await.unwrap();
    resolver
        .resolve_connect(&ConnectRequest {
            access_token: Some(token.to_owned()),
        })
        .await
        .unwrap();
    let join = JoinRequest {
        room_id: "lobby-7f3".into(),
        auth_url: format!("{base}/"),
        access_token: Some(token.to_owned()),
    };
    resolver.resolve_join(&join).await.unwrap();
    assert!(!format!("{join:?}").contains(token));
    resolver.invalidate(base, token);
    let rejected = format!("{token}x");
    vec![
        resolver.resolve(base, &rejected).await.unwrap_err(),
        resolver.resolve(base, &rejected).await.unwrap_err(),
        resolver
            .resolve(&format!("https://evil.example/{token}"), token)
            .await
            .unwrap_err(),
        resolver
            .resolve(base, &format!("{token} "))
            .await
            .unwrap_err(),
    ]
}

/// An upstream that fails, and one that echoes the `Authorization` header in its body.
async fn failing_upstreams(token: &str) -> Vec<ResolveError> {
    let failing = Scripted::always(503, &[], b"").await;
    let r2 = support::resolver_for(&failing.url()).build().unwrap();
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
    vec![
        r2.resolve(&failing.url(), token).await.unwrap_err(),
        r3.resolve(&echo.url(), token).await.unwrap_err(),
    ]
}

/// The library's metrics were recorded, the outcomes of the paths above among their labels, and
/// no label carries the token or the user's name.
fn metrics_name_outcomes_and_never_the_token(
    metrics: &[(String, Vec<(String, String)>)],
    token: &str,
) {
    let names: Vec<&str> = metrics.iter().map(|(name, _)| name.as_str()).collect();
    for name in [
        telemetry::RESOLUTIONS_TOTAL,
        telemetry::UPSTREAM_REQUESTS_TOTAL,
        telemetry::UPSTREAM_DURATION_SECONDS,
        telemetry::UPSTREAM_IN_FLIGHT,
        telemetry::CACHE_ENTRIES,
    ] {
        assert!(names.contains(&name), "metric {name} recorded: {names:?}");
    }
    for (_, labels) in metrics {
        for (_, value) in labels {
            assert!(!value.contains(token), "token in a metric label");
            assert_ne!(value, "Alice", "user name in a metric label");
        }
    }
    let outcomes: Vec<&str> = metrics
        .iter()
        .filter(|(name, _)| name == telemetry::RESOLUTIONS_TOTAL)
        .flat_map(|(_, labels)| labels.iter().map(|(_, value)| value.as_str()))
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
