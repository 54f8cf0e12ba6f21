//! A stand-in for a game server's admin listener, as the reference API's `--notify` calls it:
//! a real axum server on `127.0.0.1:0` that records every request to `/admin/revoke` (method,
//! `Authorization`, body) and answers as the test scripts it, possibly after a delay and with a
//! `Retry-After`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::routing::any;
use axum::Router;
use serde_json::Value;

/// One request the recorder received.
#[derive(Debug, Clone)]
pub struct RevokeCall {
    pub method: String,
    /// The `Authorization` header as sent.
    pub authorization: Option<String>,
    /// The body, parsed as JSON (`Value::Null` when it is not JSON).
    pub body: Value,
    /// When it arrived.
    pub at: Instant,
}

/// How the recorder answers its `n`-th call (from 0): a status, after a delay.
pub type Script = Arc<dyn Fn(usize) -> (u16, Duration) + Send + Sync>;

/// How the recorder answers its `n`-th call (from 0): a status, after a delay, with a
/// `Retry-After` of that many seconds if any.
type FullScript = Arc<dyn Fn(usize) -> (u16, Duration, Option<u64>) + Send + Sync>;

/// The recording game-server admin listener.
pub struct RevokeRecorder {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<RevokeCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RevokeRecorder {
    /// Answers every call `200 {"sessions_closed": 0}` at once.
    pub async fn start() -> Self {
        Self::scripted(|_| (200, Duration::ZERO)).await
    }

    /// Answers the `n`-th call as `script(n)` says.
    pub async fn scripted(
        script: impl Fn(usize) -> (u16, Duration) + Send + Sync + 'static,
    ) -> Self {
        Self::scripted_retry_after(move |n| {
            let (status, delay) = script(n);
            (status, delay, None)
        })
        .await
    }

    /// Answers the `n`-th call as `script(n)` says, with a `Retry-After` when it gives one.
    pub async fn scripted_retry_after(
        script: impl Fn(usize) -> (u16, Duration, Option<u64>) + Send + Sync + 'static,
    ) -> Self {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let state = Recorder {
            calls: calls.clone(),
            script: Arc::new(script),
        };
        let router = Router::new()
            .route("/admin/revoke", any(record))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        RevokeRecorder { addr, calls, task }
    }

    /// The base URL to give as a notify target, such as `http://127.0.0.1:40123`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every call so far, in order of arrival.
    pub fn calls(&self) -> Vec<RevokeCall> {
        self.calls.lock().unwrap().clone()
    }
}

/// The handler's state.
#[derive(Clone)]
struct Recorder {
    calls: Arc<Mutex<Vec<RevokeCall>>>,
    script: FullScript,
}

async fn record(
    State(recorder): State<Recorder>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let call = RevokeCall {
        method: method.to_string(),
        authorization: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap_or("<not UTF-8>").to_owned()),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: Instant::now(),
    };
    let n = {
        let mut calls = recorder.calls.lock().unwrap();
        calls.push(call);
        calls.len() - 1
    };
    let (status, delay, retry_after) = (recorder.script)(n);
    tokio::time::sleep(delay).await;
    let mut response = axum::response::IntoResponse::into_response((
        StatusCode::from_u16(status).unwrap(),
        r#"{"sessions_closed":0}"#.to_owned(),
    ));
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", seconds.to_string().parse().unwrap());
    }
    response
}

impl Drop for RevokeRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
