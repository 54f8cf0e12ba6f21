//! The TCP transport: one JSON message per `\n`-terminated line. The accept loop admits a
//! connection under the connection cap (or answers `server_busy` and closes it) and starts its
//! session; [`TcpTransport`] frames the session's messages as lines.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument;

use super::handler::Caller;
use super::protocol::{busy_message, refusal};
use super::session::{self, Close, Incoming, Transport};
use super::state::Shared;
use super::telemetry::CONNECTIONS_REFUSED_TOTAL;
use token_resolver_listener::Stopped;
use token_resolver_player::protocol::{read_line, Line};

/// Most unread input discarded before closing after `line_too_long`.
const LINGER_BYTES: usize = 64 * 1024;
/// Longest wait for the client to stop sending before closing after `line_too_long`.
const LINGER_TIME: Duration = Duration::from_millis(500);

/// Accepts connections until `stopped` fires; each admitted one runs its session on the
/// server's task tracker, so draining and cutting reach it wherever it was accepted.
pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stopped: Stopped) {
    shared.set_accepting(true);
    loop {
        tokio::select! {
            () = stopped.wait() => break,
            (stream, peer) = token_resolver_listener::accept(&listener) => {
                admit(stream, peer, &shared);
            }
        }
    }
    shared.set_accepting(false);
}

/// Starts the session of a new connection, or refuses it with `server_busy` when the server
/// is full or `too_many_connections` when its address holds its share.
fn admit(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let place = match shared.take_place(Some(peer.ip())) {
        Ok(place) => place,
        Err(code) => {
            tracing::warn!(%peer, code, "connection refused");
            metrics::counter!(CONNECTIONS_REFUSED_TOTAL, "reason" => code).increment(1);
            // A fresh socket's send buffer takes one short line without blocking; if not,
            // the client loses only the explanation.
            let mut line = refusal(code, busy_message(code), true);
            line.push(b'\n');
            let _ = stream.try_write(&line);
            return;
        }
    };
    let connection = shared.next_connection();
    let caller = Caller {
        connection,
        peer: Some(peer.ip()),
    };
    let span = tracing::info_span!("connection", connection, %peer, transport = "tcp");
    let transport = TcpTransport::new(stream, shared.config.max_line_bytes);
    shared
        .sessions
        .spawn(session::serve(transport, shared.clone(), caller, place).instrument(span));
}

/// A TCP connection carrying one message per line.
pub(super) struct TcpTransport {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// The line being read.
    line: Vec<u8>,
    /// `max_line_bytes`.
    max_line: usize,
}

impl TcpTransport {
    fn new(stream: TcpStream, max_line: usize) -> TcpTransport {
        let (read, writer) = stream.into_split();
        TcpTransport {
            reader: BufReader::new(read),
            writer,
            line: Vec::new(),
            max_line,
        }
    }

    /// Closes our side and discards what the client is still sending, briefly: closing a
    /// socket with unread input makes the kernel send a reset, which can destroy the error
    /// answer before the client reads it.
    async fn linger(&mut self) {
        let _ = self.writer.shutdown().await;
        let drain = async {
            let mut discarded = 0;
            while discarded < LINGER_BYTES {
                match self.reader.fill_buf().await {
                    Ok(buf) if !buf.is_empty() => {
                        let n = buf.len();
                        self.reader.consume(n);
                        discarded += n;
                    }
                    _ => break,
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    }
}

impl Transport for TcpTransport {
    const NAME: &'static str = "tcp";

    async fn recv(&mut self) -> io::Result<Incoming> {
        Ok(
            match read_line(&mut self.reader, &mut self.line, self.max_line).await? {
                Line::Complete => Incoming::Message(Bytes::from(std::mem::take(&mut self.line))),
                Line::Eof => Incoming::Closed,
                Line::TooLong => Incoming::TooLong,
            },
        )
    }

    async fn send(&mut self, mut message: Vec<u8>) -> io::Result<()> {
        message.push(b'\n');
        self.writer.write_all(&message).await
    }

    async fn close(mut self, how: Close) {
        if how == Close::TooBig {
            self.linger().await;
        }
    }
}
