//! W3C trace context across the call to `/api/user` (feature `opentelemetry`), against a
//! recording upstream on loopback: what each call's `traceparent` names, the spans the
//! resolution leaves (exported by the real SDK into memory), and a request's trace continued.
//!
//! Each test installs its subscriber for its own thread only (`set_default`), on tokio's
//! current-thread runtime, so the tests of this binary do not see one another's spans.
#![cfg(feature = "opentelemetry")]

use token_resolver_support as support;

use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use reqwest::header::HeaderMap;
use support::{api_answering, resolver_for, user_answer, Scripted, GOOD_TOKEN};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// A caller's trace, as a `traceparent` header would bring it.
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Spans exported into memory by the SDK, through tracing's bridge, for this thread.
struct Traced {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Traced {
    fn on() -> Traced {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        Traced {
            exporter,
            _provider: provider,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    fn spans(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().unwrap()
    }

    fn span(&self, name: &str) -> SpanData {
        let spans = self.spans();
        let found = spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
        assert_eq!(
            found.len(),
            1,
            "one span {name:?} among {:?}",
            names(&spans)
        );
        found[0].clone()
    }
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}

/// An upstream that knows `GOOD_TOKEN` as user 7, recording each request's headers.
async fn api() -> Scripted {
    api_answering(|_| user_answer(7, "alice")).await
}

/// The trace id and parent span id a recorded call's `traceparent` names.
fn traceparent_of(api: &Scripted, call: usize) -> (TraceId, SpanId) {
    let seen = api.seen();
    let value = seen[call].header("traceparent").expect("a traceparent");
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "00");
    (
        TraceId::from_hex(parts[1]).unwrap(),
        SpanId::from_hex(parts[2]).unwrap(),
    )
}

#[tokio::test]
async fn the_call_carries_the_trace_of_the_span_the_embedder_resolved_in() {
    let traced = Traced::on();
    let api = api().await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    let embedder = tracing::info_span!("on_join");
    let trace_id = embedder.context().span().span_context().trace_id();
    assert_ne!(trace_id, TraceId::INVALID);

    let user = resolver
        .resolve(&api.url(), GOOD_TOKEN)
        .instrument(embedder.clone())
        .await
        .unwrap();
    assert_eq!(user.id, 7);
    drop(embedder);

    let (called_trace, parent) = traceparent_of(&api, 0);
    assert_eq!(
        called_trace, trace_id,
        "the integrator sees the embedder's trace"
    );
    // The parent the integrator sees is the HTTP call's own client span, in the resolution's.
    let call = traced.span("POST /api/user");
    assert_eq!(call.span_context.span_id(), parent);
    assert_eq!(call.span_kind, opentelemetry::trace::SpanKind::Client);
    assert_eq!(
        attribute(&call, "server.address").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        attribute(&call, "http.response.status_code").as_deref(),
        Some("200")
    );
    let resolve = traced.span("resolve");
    assert_eq!(call.parent_span_id, resolve.span_context.span_id());
    assert_eq!(resolve.span_context.trace_id(), trace_id);
    assert_eq!(attribute(&resolve, "outcome").as_deref(), Some("miss"));
    assert_eq!(
        attribute(&resolve, "auth_host").as_deref(),
        Some("127.0.0.1")
    );
}

#[tokio::test]
async fn each_resolution_has_one_span_with_its_outcome_and_never_the_token() {
    let traced = Traced::on();
    let api = api().await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    resolver.resolve(&api.url(), GOOD_TOKEN).await.unwrap();
    resolver.resolve(&api.url(), GOOD_TOKEN).await.unwrap();
    let refused = resolver
        .resolve(&api.url(), "some-other-token")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), token_resolver::ErrorCode::TokenRejected);

    let spans = traced.spans();
    let outcomes: Vec<Option<String>> = spans
        .iter()
        .filter(|s| s.name == "resolve")
        .map(|s| attribute(s, "outcome"))
        .collect();
    assert_eq!(
        outcomes,
        [
            Some("miss".into()),
            Some("hit".into()),
            Some("rejected".into())
        ]
    );
    // A hit makes no call; each resolution is a trace of its own (no caller's to join).
    assert_eq!(
        spans.iter().filter(|s| s.name == "POST /api/user").count(),
        2
    );
    let traces: std::collections::HashSet<_> = spans
        .iter()
        .filter(|s| s.name == "resolve")
        .map(|s| s.span_context.trace_id())
        .collect();
    assert_eq!(traces.len(), 3);
    let everything = format!("{spans:?}");
    for token in [GOOD_TOKEN, "some-other-token"] {
        assert!(
            !everything.contains(token),
            "a span holds the token {token:?}"
        );
    }
}

#[tokio::test]
async fn a_request_that_brings_a_trace_is_continued_to_the_integrator() {
    let traced = Traced::on();
    let api = api().await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", CALLER.parse().unwrap());
    headers.insert("tracestate", "game=eu-1".parse().unwrap());
    let request =
        token_resolver::trace::continue_trace(&headers, || tracing::info_span!("sidecar_request"));
    resolver
        .resolve(&api.url(), GOOD_TOKEN)
        .instrument(request)
        .await
        .unwrap();

    let (trace, _) = traceparent_of(&api, 0);
    assert_eq!(
        trace,
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
    );
    assert_eq!(api.seen()[0].header("tracestate"), Some("game=eu-1"));
    let request = traced.span("sidecar_request");
    assert_eq!(
        request.parent_span_id,
        SpanId::from_hex("00f067aa0ba902b7").unwrap()
    );
    assert!(request.parent_span_is_remote);
}

#[tokio::test]
async fn a_malformed_traceparent_starts_a_new_trace() {
    let _traced = Traced::on();
    let api = api().await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    let mut headers = HeaderMap::new();
    // Uppercase hex: not a traceparent the W3C allows.
    headers.insert("traceparent", CALLER.to_uppercase().parse().unwrap());
    let request =
        token_resolver::trace::continue_trace(&headers, || tracing::info_span!("sidecar_request"));
    resolver
        .resolve(&api.url(), GOOD_TOKEN)
        .instrument(request)
        .await
        .unwrap();
    let (trace, _) = traceparent_of(&api, 0);
    assert_ne!(
        trace,
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
    );
    assert_ne!(trace, TraceId::INVALID);
}

#[tokio::test]
async fn without_tracing_no_traceparent_is_made_up() {
    let api = api().await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    resolver.resolve(&api.url(), GOOD_TOKEN).await.unwrap();
    assert_eq!(api.requests(), 1);
    assert_eq!(api.seen()[0].header("traceparent"), None);
}

#[cfg(feature = "axum")]
#[tokio::test]
async fn the_axum_layer_continues_the_trace_a_request_brings() {
    use axum::routing::get;
    use token_resolver::axum::AuthLayer;

    let traced = Traced::on();
    let api = api().await;
    let resolver = resolver_for(&api.url()).build().unwrap();
    let app = axum::Router::new()
        .route("/me", get(|| async { "ok" }))
        .layer(AuthLayer::new(resolver));
    let served = support::serve_app(app).await;
    let answer = reqwest::Client::new()
        .get(served.url("/me"))
        .bearer_auth(GOOD_TOKEN)
        .header("traceparent", CALLER)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let (trace, _) = traceparent_of(&api, 0);
    assert_eq!(
        trace,
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
    );
    let request = traced.span("authenticate");
    assert_eq!(request.span_kind, opentelemetry::trace::SpanKind::Server);
    assert!(request.parent_span_is_remote);
}
