//! The TCP transport: the accept loop with its connection cap, and one task per connection
//! that reads bounded lines, hands each to the handler and writes its answer in time.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::config::GameServerConfig;
use super::handler::{handle, Shared};
use crate::server_task::Stopped;

use super::protocol::{error_line, read_line, Line, IDLE_TIMEOUT, LINE_TOO_LONG, SERVER_BUSY};

/// Longest wait for open connections on [`RunningGameServer::shutdown`](super::RunningGameServer::shutdown) before they are cut.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: Stopped) {
    let slots = Arc::new(Semaphore::new(shared.config.max_connections));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    match slots.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let connection = shared.next_connection.fetch_add(1, Ordering::Relaxed);
                            let span = tracing::info_span!("connection", %peer, connection);
                            connections.spawn(
                                serve_connection(stream, peer, connection, shared.clone(), stop.clone(), permit)
                                    .instrument(span),
                            );
                        }
                        Err(_) => {
                            tracing::warn!(%peer, "game server full: connection refused");
                            // A fresh socket's send buffer takes one short line without
                            // blocking; if not, the client loses only the explanation.
                            let line = error_line(SERVER_BUSY, "too many connections; retry shortly", true);
                            let _ = stream.try_write(&line);
                        }
                    }
                }
                Err(error) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    connection: u64,
    shared: Arc<Shared>,
    mut stop: Stopped,
    _permit: OwnedSemaphorePermit,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    let config = &shared.config;
    loop {
        let read = tokio::select! {
            _ = stop.wait() => break,
            read = tokio::time::timeout(config.idle_timeout, read_line(&mut reader, &mut line, config.max_line_bytes)) => read,
        };
        let answer = match read {
            Err(_) => {
                let msg = format!("no message within {:?}; closing", config.idle_timeout);
                let _ = send(&mut write, &error_line(IDLE_TIMEOUT, &msg, false), config).await;
                break;
            }
            Ok(Err(_)) | Ok(Ok(Line::Eof)) => break,
            Ok(Ok(Line::TooLong)) => {
                let msg = format!(
                    "a message is longer than {} bytes; closing",
                    config.max_line_bytes
                );
                tracing::debug!(connection, "line too long");
                if send(&mut write, &error_line(LINE_TOO_LONG, &msg, false), config)
                    .await
                    .is_ok()
                {
                    linger(&mut reader, &mut write).await;
                }
                break;
            }
            Ok(Ok(Line::Complete)) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Ok(Line::Complete)) => handle(&shared, connection, &line).await,
        };
        if send(&mut write, &answer, config).await.is_err() {
            break;
        }
    }
    shared.leave(connection);
    tracing::debug!(connection, %peer, "connection closed");
}

/// Most unread input discarded before closing after `line_too_long`.
const LINGER_BYTES: usize = 64 * 1024;
/// Longest wait for the client to stop sending before closing after `line_too_long`.
const LINGER_TIME: Duration = Duration::from_millis(500);

/// Closes our side and discards what the client is still sending, briefly: closing a socket
/// with unread input makes the kernel send a reset, which can destroy the error answer
/// before the client reads it.
async fn linger(reader: &mut BufReader<OwnedReadHalf>, write: &mut OwnedWriteHalf) {
    let _ = write.shutdown().await;
    let drain = async {
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            match reader.fill_buf().await {
                Ok(buf) if !buf.is_empty() => {
                    let n = buf.len();
                    reader.consume(n);
                    discarded += n;
                }
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

/// Writes one answer line within `write_timeout`.
async fn send(
    write: &mut OwnedWriteHalf,
    line: &[u8],
    config: &GameServerConfig,
) -> io::Result<()> {
    match tokio::time::timeout(config.write_timeout, write.write_all(line)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client does not read its answers",
        )),
    }
}
