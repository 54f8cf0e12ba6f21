//! Who the gRPC listener serves: the bounds every listener of the project keeps, for a
//! listener tonic serves. At most `max_connections` connections at once (one more is closed at
//! once), and each must open with the HTTP/2 client preface within the head deadline, counted
//! from accept, or it is closed: hyper's HTTP/2 server waits for the preface with no timer, so a
//! socket that sends nothing would hold its connection for ever.
//!
//! The preface is read here and handed back to hyper in front of the rest of the stream
//! ([`Admitted`]); the connection's slot goes with it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// What every HTTP/2 connection opens with (RFC 9113, section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Connections admitted and not yet taken by the server.
const WAITING: usize = 64;

/// A connection that opened with the preface, holding its slot until it closes.
pub(crate) struct Admitted {
    stream: TcpStream,
    /// Bytes of [`PREFACE`] already handed back to the reader.
    replayed: usize,
    _slot: OwnedSemaphorePermit,
}

/// Accepts on `listener` and yields the connections it admits, until the stream is dropped:
/// at most `max_connections` open at once, each with its preface within `head_deadline`.
pub(crate) fn admit(
    listener: TcpListener,
    max_connections: usize,
    head_deadline: Duration,
) -> impl Stream<Item = io::Result<Admitted>> {
    let (admitted, mut incoming) = mpsc::channel(WAITING);
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                () = admitted.closed() => return,
                accepted = token_resolver_listener::accept(&listener) => accepted,
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::debug!(%peer, "gRPC listener full: connection closed");
                continue;
            };
            let admitted = admitted.clone();
            tokio::spawn(async move {
                match preface(stream, head_deadline).await {
                    Ok(stream) => {
                        let _ = stream.set_nodelay(true);
                        let connection = Admitted {
                            stream,
                            replayed: 0,
                            _slot: slot,
                        };
                        let _ = admitted.send(Ok(connection)).await;
                    }
                    Err(why) => tracing::debug!(%peer, why, "gRPC connection closed"),
                }
            });
        }
    });
    futures_util::stream::poll_fn(move |cx| incoming.poll_recv(cx))
}

/// `stream` once it has sent the preface, within `deadline`.
async fn preface(mut stream: TcpStream, deadline: Duration) -> Result<TcpStream, &'static str> {
    let mut first = [0u8; PREFACE.len()];
    match tokio::time::timeout(deadline, stream.read_exact(&mut first)).await {
        Err(_) => Err("no HTTP/2 preface within the head deadline"),
        Ok(Err(_)) => Err("closed before its HTTP/2 preface"),
        Ok(Ok(_)) if &first != PREFACE => Err("not HTTP/2 (no client preface)"),
        Ok(Ok(_)) => Ok(stream),
    }
}

impl AsyncRead for Admitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.replayed < PREFACE.len() {
            let rest = &PREFACE[self.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.replayed += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Connected for Admitted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}
