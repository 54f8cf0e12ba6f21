//! Traces across the call to `/api/user`, end to end: a `token-resolver sidecar` process with
//! `--otlp-endpoint` exports its spans to a real OTLP/HTTP receiver on loopback (decoding the
//! protobuf the exporter sends), and a recording integrator shows the `traceparent` each call
//! carried. The caller's trace id is the same from its request to the integrator; a request
//! without one starts a trace of its own; JSON log lines carry the trace id; no token anywhere.

use token_resolver_support as support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::{respond, user_answer, OtlpReceiver, ReceivedSpan, Scripted};

use crate::sidecar::SidecarProcess;

/// The caller's trace and span, as its `traceparent` brings them.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const TOKEN: &str = "otlp-test-token-4f2a9c";

/// The (trace id, parent span id) of a recorded call's `traceparent`.
fn traceparent(api: &Scripted, call: usize) -> (String, String) {
    let seen = api.seen();
    let value = seen[call].header("traceparent").expect("a traceparent");
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(
        (parts.len(), parts[0], parts[3]),
        (4, "00", "01"),
        "{value}"
    );
    (parts[1].to_owned(), parts[2].to_owned())
}

/// A `token-resolver sidecar` exporting to `receiver`, resolving at `api`, logging JSON at
/// DEBUG for the library on a piped stderr; `env` adds to its environment.
fn sidecar(api: &Scripted, receiver: &OtlpReceiver, env: &[(&str, &str)]) -> SidecarProcess {
    let mut command = SidecarProcess::command(&["--auth-url", &api.url()]);
    command
        .args([
            "--otlp-endpoint",
            &receiver.endpoint(),
            "--log-format",
            "json",
        ])
        .env("RUST_LOG", "token_resolver=debug,warn")
        .env_remove("OTEL_SERVICE_NAME")
        .envs(env.iter().copied())
        .stderr(Stdio::piped());
    SidecarProcess::spawn(command)
}

/// `POST /v1/resolve` of `token` at `sidecar`, with `traceparent` if given; its status.
async fn resolve(sidecar: &SidecarProcess, token: &str, traceparent: Option<&str>) -> u16 {
    let url = format!("http://{}/v1/resolve", sidecar.addr("sidecar listening"));
    let mut request = reqwest::Client::new()
        .post(url)
        .json(&json!({ "access_token": token }));
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    request.send().await.unwrap().status().as_u16()
}

/// SIGTERM, the exit awaited ([`SidecarProcess::terminate`]), and what the process wrote on
/// stderr.
async fn stop(sidecar: &mut SidecarProcess) -> String {
    let mut stderr = sidecar.child.stderr.take().unwrap();
    // Read beside the wait, so that a process that does not exit fails the wait, not a read.
    let reader = std::thread::spawn(move || {
        let mut logs = String::new();
        let _ = stderr.read_to_string(&mut logs);
        logs
    });
    sidecar.terminate().await;
    reader.join().unwrap()
}

fn named<'a>(spans: &'a [ReceivedSpan], trace: &str, name: &str) -> Vec<&'a ReceivedSpan> {
    (spans.iter())
        .filter(|s| s.trace_id == trace && s.name == name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_trace_reaches_the_integrator_and_the_collector_with_no_token() {
    let receiver = OtlpReceiver::start().await;
    // The first call fails (503) and is retried: a DEBUG log line inside the trace.
    let api = Scripted::start(|n, _| async move {
        match n {
            0 => respond(503, &[], b""),
            _ => user_answer(7, "alice"),
        }
    })
    .await;
    // Batches go out every 100 ms rather than every 5 s.
    let mut sidecar = sidecar(&api, &receiver, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]);
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    assert_eq!(resolve(&sidecar, TOKEN, Some(&caller)).await, 200);
    assert_eq!(api.requests(), 2, "one call, retried once");
    let (first_trace, first_parent) = traceparent(&api, 0);
    let (second_trace, second_parent) = traceparent(&api, 1);
    assert_eq!(
        first_trace, CALLER_TRACE,
        "the integrator sees the caller's trace"
    );
    assert_eq!(second_trace, CALLER_TRACE);
    assert_ne!(first_parent, second_parent, "each try is a span of its own");

    // A request that brings no trace starts one.
    assert_eq!(resolve(&sidecar, "another-token-77", None).await, 200);
    let (new_trace, _) = traceparent(&api, 2);
    assert_ne!(new_trace, CALLER_TRACE);

    support::eventually_within(
        "both requests' resolutions exported",
        Duration::from_secs(15),
        || {
            let spans = receiver.spans();
            let done = !named(&spans, CALLER_TRACE, "resolve").is_empty()
                && !named(&spans, &new_trace, "resolve").is_empty();
            async move { done }
        },
    )
    .await;
    let spans = receiver.spans();
    let request = named(&spans, CALLER_TRACE, "POST /v1/resolve");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request.parent_span_id, CALLER_SPAN);
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(request.service, "token-resolver-sidecar");
    assert_eq!(request.attribute("http.route"), Some("/v1/resolve"));

    let resolve = named(&spans, CALLER_TRACE, "resolve");
    assert_eq!(resolve.len(), 1);
    assert_eq!(resolve[0].parent_span_id, request.span_id);
    assert_eq!(resolve[0].attribute("outcome"), Some("miss"));
    assert_eq!(resolve[0].attribute("auth_host"), Some("127.0.0.1"));
    let calls = named(&spans, CALLER_TRACE, "POST /api/user");
    let mut call_ids: Vec<&str> = calls.iter().map(|c| c.span_id.as_str()).collect();
    call_ids.sort_unstable();
    let mut parents = vec![first_parent.as_str(), second_parent.as_str()];
    parents.sort_unstable();
    assert_eq!(
        call_ids, parents,
        "the integrator's parents are the exported client spans"
    );
    assert!(calls
        .iter()
        .all(|c| c.kind == 3 && c.parent_span_id == resolve[0].span_id));

    let fresh = named(&spans, &new_trace, "POST /v1/resolve");
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0].parent_span_id, "", "a root span");

    let logs = stop(&mut sidecar).await;
    let retry = logs
        .lines()
        .find(|line| line.contains("retrying the auth call"))
        .unwrap_or_else(|| panic!("no retry logged in {logs}"));
    let retry: serde_json::Value = serde_json::from_str(retry).unwrap();
    assert_eq!(retry["trace_id"], CALLER_TRACE, "{retry}");
    // Logged between the tries, in the resolution's span.
    assert_eq!(retry["span_id"], resolve[0].span_id.as_str(), "{retry}");

    let raw = String::from_utf8_lossy(&receiver.raw()).into_owned();
    for text in [&raw, &logs] {
        assert!(!text.contains(TOKEN) && !text.contains("another-token-77"));
    }
}

#[test]
fn an_otlp_endpoint_that_is_no_http_url_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_token-resolver"))
        .args(["--otlp-endpoint", "ftp://127.0.0.1:4318", "sidecar"])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--auth-url",
            "http://127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--otlp-endpoint") && stderr.contains("http://"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_still_batched_at_exit_are_sent_before_the_process_ends() {
    let receiver = OtlpReceiver::start().await;
    let api = Scripted::start(|_, _| async { user_answer(7, "alice") }).await;
    // No batch is due for a minute: only the exit's flush can send the span.
    let mut sidecar = sidecar(&api, &receiver, &[("OTEL_BSP_SCHEDULE_DELAY", "60000")]);
    assert_eq!(resolve(&sidecar, TOKEN, None).await, 200);
    assert_eq!(receiver.requests(), 0, "nothing exported before the exit");
    stop(&mut sidecar).await;
    let spans = receiver.spans();
    assert!(
        spans
            .iter()
            .any(|s| s.name == "resolve" && s.attribute("outcome") == Some("miss")),
        "{spans:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_costs_one_export_not_every_later_one() {
    // The first export is taken and never answered; the SDK's batch thread would wait on it for
    // ever without the exporter's own deadline.
    let receiver = OtlpReceiver::hanging_first(1).await;
    let api = Scripted::start(|_, _| async { user_answer(7, "alice") }).await;
    let env = [
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "300"),
    ];
    let mut sidecar = sidecar(&api, &receiver, &env);
    assert_eq!(resolve(&sidecar, TOKEN, None).await, 200);
    support::eventually_within("the first export taken", Duration::from_secs(10), || {
        let taken = receiver.requests() >= 1;
        async move { taken }
    })
    .await;
    assert_eq!(resolve(&sidecar, "another-token-77", None).await, 200);
    support::eventually_within("a later export answered", Duration::from_secs(10), || {
        let exported = receiver.spans().iter().any(|s| s.name == "resolve");
        async move { exported }
    })
    .await;
    stop(&mut sidecar).await;
}
