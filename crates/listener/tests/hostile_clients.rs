//! The bounded HTTP listener against clients that do not do their part, over real TCP on
//! loopback: sockets that send nothing, connections past the cap, idle kept-alive
//! connections, and HTTP/2 where only HTTP/1.1 is meant.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use token_resolver_listener::http::{serve, HttpLimits};
use token_resolver_listener::ServerTask;
use token_resolver_support::{closed_within, eventually_async, get_and_close, read_all};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Long enough that a loaded machine cannot let the holders go before the next connection is
/// accepted (the over-the-cap test would then be served, not answered 503), short enough for
/// the tests that wait for it.
const HEAD_DEADLINE: Duration = Duration::from_millis(1500);

/// A listener with `max_connections` slots serving `GET /healthz` → `ok`.
async fn listener(max_connections: usize) -> (SocketAddr, ServerTask) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = HttpLimits {
        max_connections,
        max_connections_per_address: max_connections,
        header_timeout: HEAD_DEADLINE,
        request_timeout: Duration::from_secs(5),
    };
    let router = Router::new().route("/healthz", get(|| async { "ok" }));
    let task = ServerTask::spawn(move |stopped| serve(listener, router, limits, stopped));
    (addr, task)
}

#[tokio::test]
async fn sockets_that_send_nothing_are_closed_at_the_head_deadline_and_free_their_slots() {
    // Every slot taken by a socket that never sends a byte: each is closed at the head
    // deadline counted from accept, after which a real client is served.
    let (addr, _task) = listener(4).await;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let started = Instant::now();
    for stream in &mut silent {
        assert!(
            closed_within(stream, HEAD_DEADLINE * 5).await,
            "a silent socket kept its slot"
        );
    }
    let took = started.elapsed();
    assert!(
        took >= HEAD_DEADLINE / 2,
        "closed before the deadline: {took:?}"
    );
    assert!(get_and_close(addr, "/healthz").await.ends_with("ok"));
}

#[tokio::test]
async fn a_connection_past_the_cap_is_answered_503_with_retry_after() {
    // Both slots held by clients mid-head: the third connection gets a quick, readable 503
    // rather than a reset, and once the holders are let go a client is served again.
    let (addr, _task) = listener(2).await;
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .unwrap();
        holders.push(stream);
    }
    // No wait for the holders to be accepted: the kernel queued their connections before this
    // one's, and the accept loop takes them in that order, admitting each before the next.
    let started = Instant::now();
    let answer = get_and_close(addr, "/healthz").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(
        started.elapsed() < HEAD_DEADLINE,
        "the 503 waited for a slot"
    );
    for stream in &mut holders {
        assert!(closed_within(stream, HEAD_DEADLINE * 5).await);
    }
    assert!(get_and_close(addr, "/healthz").await.ends_with("ok"));
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_at_the_head_deadline() {
    // One request answered on a kept-alive connection, then nothing: the connection is closed
    // at the head deadline rather than holding its slot for ever.
    let (addr, _task) = listener(1).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(closed_within(&mut stream, HEAD_DEADLINE * 5).await);
    assert!(get_and_close(addr, "/healthz").await.ends_with("ok"));
}

#[tokio::test]
async fn http2_prior_knowledge_is_not_served() {
    // The listener means HTTP/1.1 only: an HTTP/2 connection preface gets no HTTP/2 SETTINGS
    // frame back, and the connection is closed.
    let (addr, _task) = listener(2).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let answer = read_all(&mut stream, HEAD_DEADLINE * 5).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 "),
        "an HTTP/2 answer: {answer:?}"
    );
}

#[tokio::test]
async fn a_stop_lets_the_request_in_progress_finish() {
    // A graceful stop with a client mid-request: its request is still answered (the handler
    // is let finish only once the listener has stopped accepting), then the listener is gone.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = HttpLimits {
        max_connections: 4,
        max_connections_per_address: 4,
        header_timeout: HEAD_DEADLINE,
        request_timeout: Duration::from_secs(5),
    };
    let (begun, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (handler_begun, handler_release) = (begun.clone(), release.clone());
    let router = Router::new().route(
        "/slow",
        get(move || async move {
            handler_begun.notify_one();
            handler_release.notified().await;
            "done"
        }),
    );
    let task = ServerTask::spawn(move |stopped| serve(listener, router, limits, stopped));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    begun.notified().await;
    let stopping = tokio::spawn(task.shutdown(Duration::from_secs(5)));
    eventually_async("the listener to stop accepting", || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    release.notify_one();
    stopping.await.unwrap();
    let answer = read_all(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.ends_with("done"), "{answer:?}");
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
}
