//! The client's side of hostile-client tests against our own listeners: reading a raw answer
//! to its end, and telling whether the server closed a socket within a bound.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Reads `stream` to its end, which must come within `within`; the bytes as text.
pub async fn read_all(stream: &mut TcpStream, within: Duration) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no end of the answer within {within:?}");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Whether the server closed `stream` within `within` (end of stream or reset); what it sent
/// meanwhile is read and dropped.
pub async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// A TCP connection to `addr` leaving from `from` (any 127.0.0.0/8 address is loopback on
/// Linux): how a test plays several client addresses.
pub async fn connect_from(addr: std::net::SocketAddr, from: std::net::IpAddr) -> TcpStream {
    let socket = match from {
        std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .unwrap();
    socket.bind(std::net::SocketAddr::new(from, 0)).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Sends `GET path` on a new connection that asks to be closed, and reads the whole answer
/// (status line, headers and body) within five seconds.
pub async fn get_and_close(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    read_all(&mut stream, Duration::from_secs(5)).await
}
