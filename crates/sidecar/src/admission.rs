//! Who the gRPC listener serves: the bounds every listener of the project keeps, for a
//! listener tonic serves. At most `max_connections` connections at once (one more is closed at
//! once), and each must open with the HTTP/2 client preface within the head deadline, counted
//! from accept, or it is closed: hyper's HTTP/2 server waits for the preface with no timer, so a
//! socket that sends nothing would hold its connection for ever.
//!
//! The preface is read here and handed back to hyper in front of the rest of the stream
//! ([`Admitted`]); the connection's slot goes with it.
//!
//! A connection with no call in flight for the idle timeout is closed: the stream reads as
//! ended, and hyper closes it (tonic has no idle timeout, nor a way to send one connection
//! `GOAWAY`; HTTP/2 pings keep a connection busy in bytes but not in calls). Its calls
//! ([`Call`], begun by the service through the connection's [`Connection`] in the request's
//! extensions) hold it open, and it is not closed within [`SETTLE`] of reading bytes, so that
//! a request read as the timeout ends has begun its call first.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// What every HTTP/2 connection opens with (RFC 9113, section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Connections admitted and not yet taken by the server.
const WAITING: usize = 64;
/// How long after it last read bytes the reader waits before it may close a connection as
/// idle (half the idle timeout if that is shorter): a request read just before the timeout
/// has begun its call by then. A ping's answer is read too, and delays the close by no more
/// than this; a client that sends bytes more often than this, and no call, is bounded by the
/// connection's maximum age instead.
const SETTLE: Duration = Duration::from_millis(250);

/// A connection that opened with the preface, holding its slot until it closes.
pub(crate) struct Admitted {
    stream: TcpStream,
    /// Bytes of [`PREFACE`] already handed back to the reader.
    replayed: usize,
    _slot: OwnedSemaphorePermit,
    /// Its calls in flight and when the last ended, shared with the requests it carries.
    activity: Arc<Activity>,
    /// Longest it may stay with no call in flight.
    idle_timeout: Duration,
    /// Fires at the end of the current idle period.
    idle: Pin<Box<Sleep>>,
    /// When bytes were last read.
    last_read: Instant,
}

/// What the calls of one connection tell its reader.
#[derive(Debug)]
struct Activity {
    /// Calls begun and not yet answered.
    in_flight: AtomicUsize,
    /// When the connection last had no call in flight (its start, or its last call's end).
    idle_since: Mutex<Instant>,
    /// The reader waiting on the socket, woken when the last call ends to start its timer.
    reader: AtomicWaker,
}

/// A connection as the requests it carries see it (in their extensions): a handle to begin a
/// [`Call`] on it.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    activity: Arc<Activity>,
}

/// A call in flight on a connection, which the idle timeout waits for; ended on drop.
#[derive(Debug)]
pub(crate) struct Call(Arc<Activity>);

impl Connection {
    /// A call in flight until the returned [`Call`] is dropped.
    pub(crate) fn begin(&self) -> Call {
        self.activity.in_flight.fetch_add(1, Ordering::SeqCst);
        Call(self.activity.clone())
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let mut since = (self.0.idle_since.lock()).unwrap_or_else(PoisonError::into_inner);
        *since = Instant::now();
        drop(since);
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.reader.wake();
        }
    }
}

/// Accepts on `listener` and yields the connections it admits, until the stream is dropped:
/// at most `max_connections` open at once, each with its preface within `head_deadline`, each
/// ended after `idle_timeout` with no call in flight.
pub(crate) fn admit(
    listener: TcpListener,
    max_connections: usize,
    head_deadline: Duration,
    idle_timeout: Duration,
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
                        let now = Instant::now();
                        let connection = Admitted {
                            stream,
                            replayed: 0,
                            _slot: slot,
                            activity: Arc::new(Activity {
                                in_flight: AtomicUsize::new(0),
                                idle_since: Mutex::new(now),
                                reader: AtomicWaker::new(),
                            }),
                            idle_timeout,
                            idle: Box::pin(tokio::time::sleep_until(now + idle_timeout)),
                            last_read: now,
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
        let before = buf.filled().len();
        if let Poll::Ready(read) = Pin::new(&mut self.stream).poll_read(cx, buf) {
            if buf.filled().len() > before {
                self.last_read = Instant::now();
            }
            return Poll::Ready(read);
        }
        if self.idle_for_too_long(cx) {
            tracing::debug!("gRPC connection closed: idle for its timeout");
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl Admitted {
    /// Whether the connection, its socket waiting, has had no call in flight for its idle
    /// timeout; otherwise `cx` is woken when that may change (the timer, or the last call's
    /// end).
    fn idle_for_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        self.activity.reader.register(cx.waker());
        if self.activity.in_flight.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let since = *(self.activity.idle_since.lock()).unwrap_or_else(PoisonError::into_inner);
        let settled = self.last_read + SETTLE.min(self.idle_timeout / 2);
        let deadline = (since + self.idle_timeout).max(settled);
        if self.idle.deadline() != deadline {
            self.idle.as_mut().reset(deadline);
        }
        self.idle.as_mut().poll(cx).is_ready()
            && self.activity.in_flight.load(Ordering::SeqCst) == 0
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
    type ConnectInfo = Connection;

    fn connect_info(&self) -> Connection {
        Connection {
            activity: self.activity.clone(),
        }
    }
}
