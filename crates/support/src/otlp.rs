//! An OTLP/HTTP trace receiver on `127.0.0.1:0`, as a collector would be: it takes
//! `POST /v1/traces` bodies (protobuf `ExportTraceServiceRequest`), decodes them with the
//! OpenTelemetry protos, and keeps every span and every raw body for the test to read.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

/// One span as received: its ids in lowercase hex, its name, kind and attributes (values as
/// text), and the `service.name` of the resource that sent it.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// 2 for a server span, 3 for a client span (the protos' `SpanKind`).
    pub kind: i32,
    pub attributes: Vec<(String, String)>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        (self.attributes.iter())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    bodies: Vec<Bytes>,
    /// Requests taken so far, answered or not.
    requests: usize,
    /// How many first requests are never answered (a collector that accepts and hangs).
    hang_first: usize,
}

/// The receiver; it stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        OtlpReceiver::hanging_first(0).await
    }

    /// A receiver that takes its first `requests` requests and never answers them (nor closes
    /// their connections); it answers the later ones as [`start`](Self::start)'s does.
    pub async fn hanging_first(requests: usize) -> OtlpReceiver {
        let received = Arc::new(Mutex::new(Received {
            hang_first: requests,
            ..Received::default()
        }));
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        OtlpReceiver {
            addr,
            received,
            task,
        }
    }

    /// The base URL an exporter is given (`--otlp-endpoint`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests taken so far, the hanging ones included.
    pub fn requests(&self) -> usize {
        self.received.lock().unwrap().requests
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().unwrap().spans.clone()
    }

    /// Every body received, concatenated: what a leak test searches.
    pub fn raw(&self) -> Vec<u8> {
        let received = self.received.lock().unwrap();
        received
            .bodies
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State(received): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    let hang = {
        let mut received = received.lock().unwrap();
        received.requests += 1;
        received.requests <= received.hang_first
    };
    if hang {
        std::future::pending::<()>().await;
    }
    let protobuf = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/x-protobuf");
    if !protobuf {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body.clone()) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut received = received.lock().unwrap();
    received.bodies.push(body);
    for resource_spans in request.resource_spans {
        let service = (resource_spans.resource.iter())
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(ReceivedSpan {
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: (span.attributes.iter())
                        .map(|kv| {
                            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                            (kv.key.clone(), text(value))
                        })
                        .collect(),
                });
            }
        }
    }
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
