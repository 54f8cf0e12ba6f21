//! A WebSocket client of the game server for the tests: open `/ws`, send one message and read
//! the answer, read the close code.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// A client's WebSocket.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `ws://addr/ws{suffix}`, with an `Origin` header when given.
pub async fn open(addr: SocketAddr, suffix: &str, origin: Option<&str>) -> Result<Ws, WsError> {
    let mut request = format!("ws://{addr}/ws{suffix}")
        .into_client_request()
        .unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", origin.parse().unwrap());
    }
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(ws, _)| ws)
}

/// Opens `ws://addr/ws` from the local address `from` (a 127.0.0.0/8 address: another client
/// address on loopback).
pub async fn open_from(addr: SocketAddr, from: std::net::IpAddr) -> Result<Ws, WsError> {
    let request = format!("ws://{addr}/ws").into_client_request().unwrap();
    let stream = crate::connect_from(addr, from).await;
    let plain = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    tokio_tungstenite::client_async(request, plain)
        .await
        .map(|(ws, _)| ws)
}

/// Sends one message as a text frame and reads the next text frame as JSON.
pub async fn ask(ws: &mut Ws, message: Value) -> Value {
    ws.send(Message::text(message.to_string())).await.unwrap();
    next_json(ws).await
}

/// The next text frame, as JSON (pings and pongs skipped).
pub async fn next_json(ws: &mut Ws) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an answer within 10 s")
            .expect("the connection is open")
            .expect("a frame");
        match frame {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

/// The close code the server ends with (reading past any text frame).
pub async fn close_code(ws: &mut Ws) -> Option<CloseCode> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("the server closes within 10 s")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}
