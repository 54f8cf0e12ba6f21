//! The loopback crate's parts against real sockets and a real redis-server: the relay forwards,
//! refuses, delays and goes half-open on its word; a restarted server comes back on its port,
//! empty.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use token_resolver_loopback::{RedisServer, Relay};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server on `127.0.0.1:0`: every connection gets back what it sends.
async fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

/// Sends `bytes` on `stream` and reads as many back, or `None` if they do not come within
/// `limit` (a bound on an absence: nothing to poll for).
async fn round_trip(stream: &mut TcpStream, bytes: &[u8], limit: Duration) -> Option<Vec<u8>> {
    stream.write_all(bytes).await.unwrap();
    let mut back = vec![0u8; bytes.len()];
    match tokio::time::timeout(limit, stream.read_exact(&mut back)).await {
        Ok(Ok(_)) => Some(back),
        _ => None,
    }
}

#[tokio::test]
async fn the_relay_forwards_both_ways() {
    let relay = Relay::start(echo().await).await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let back = round_trip(&mut client, b"ping", Duration::from_secs(5)).await;
    assert_eq!(back.as_deref(), Some(&b"ping"[..]));
}

#[tokio::test]
async fn a_refusing_relay_closes_new_connections_and_keeps_open_ones() {
    let relay = Relay::start(echo().await).await;
    let mut open = TcpStream::connect(relay.addr()).await.unwrap();
    assert!(round_trip(&mut open, b"a", Duration::from_secs(5))
        .await
        .is_some());
    relay.refuse(true);
    let mut refused = TcpStream::connect(relay.addr()).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), refused.read(&mut byte))
        .await
        .expect("a refused connection is closed, not left hanging");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "a refused connection carried {read:?}"
    );
    assert!(
        round_trip(&mut open, b"b", Duration::from_secs(5))
            .await
            .is_some(),
        "a connection opened before the partition still works"
    );
    relay.refuse(false);
    let mut healed = TcpStream::connect(relay.addr()).await.unwrap();
    assert!(round_trip(&mut healed, b"c", Duration::from_secs(5))
        .await
        .is_some());
}

#[tokio::test]
async fn a_silenced_connection_carries_nothing_and_is_not_closed() {
    let relay = Relay::start(echo().await).await;
    let mut open = TcpStream::connect(relay.addr()).await.unwrap();
    assert!(round_trip(&mut open, b"a", Duration::from_secs(5))
        .await
        .is_some());
    relay.silence_open_connections();
    // Neither the echo nor an end (a read of 0) comes back: the link is half-open.
    assert_eq!(
        round_trip(&mut open, b"b", Duration::from_millis(300)).await,
        None
    );
    let mut fresh = TcpStream::connect(relay.addr()).await.unwrap();
    assert!(
        round_trip(&mut fresh, b"c", Duration::from_secs(5))
            .await
            .is_some(),
        "a new connection after the silence works"
    );
}

#[tokio::test]
async fn a_delaying_relay_holds_each_chunk() {
    let relay = Relay::start(echo().await).await;
    relay.delay(Duration::from_millis(150));
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let started = Instant::now();
    assert!(round_trip(&mut client, b"x", Duration::from_secs(5))
        .await
        .is_some());
    // Once there and once back.
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the round trip took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_restarted_redis_server_is_back_on_its_port_and_empty() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let port = server.port();
    assert_eq!(server.addr(), SocketAddr::from(([127, 0, 0, 1], port)));
    server.command(&["SET", "k", "v"]).unwrap();
    assert_eq!(server.key_count(), 1);
    server.stop();
    assert!(server.connection().is_err(), "a stopped server answers");
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(server.key_count(), 0, "a restarted server starts empty");
    server.command(&["SET", "k", "v"]).unwrap();
    assert_eq!(server.key_count(), 1);
}
