//! One bounded accept loop for every HTTP listener of the products, [`serve_with`], and
//! [`serve`], an axum router on it with a deadline for each whole request. The bounds a
//! public port needs:
//!
//! - a cap on open connections, in all and per client address: one more is answered a quick
//!   503 with `Retry-After` and closed ([`TurnAway`]), or only closed where no answer can come
//!   before a handshake (TLS);
//! - a deadline for the first request's head counted from accept, whatever the client sends or
//!   does not send (a silent socket, an HTTP/2 preface cut short, a TLS handshake left
//!   hanging), and for every later head on a kept-alive HTTP/1.1 connection, so an idle one
//!   is closed at the same deadline;
//! - over HTTP/2, keep-alive pings (a dead peer is dropped) and an idle timeout (a live one
//!   with nothing in flight is sent `GOAWAY` and closed once it has answered what it had
//!   already read: a request that crossed the timeout is answered or refused as retryable,
//!   never lost with the socket);
//! - the client's address on every request, as `ConnectInfo` (as `axum::serve` with connect
//!   info gives it);
//! - a graceful stop: no more accepts, connections asked to finish, waited for a bounded time.
//!
//! [`Protocols::Http1`] serves with hyper's HTTP/1 connection directly, with upgrades (the
//! WebSocket transport): hyper-util's auto builder ignores `http1_only` on connections served
//! with upgrades. [`Protocols::Both`] serves with hyper-util's auto builder, which tells the
//! protocols apart by the client's preface in the clear (and by the [`Transport`]'s ALPN over
//! TLS); it reads that preface with no timer of its own, which the head deadline bounds.
//! [`Protocols::Http2`] serves HTTP/2 only (the sidecar's gRPC): the head deadline bounds the
//! client's preface, which hyper's HTTP/2 server too waits for with no timer; a connection
//! with no request in flight at its idle timeout, and one at its maximum age, is sent
//! `GOAWAY`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tower_service::Service;

use crate::caps::{Cap, PerAddress, TurnAway};
use crate::task::Stopped;

/// Longest wait for requests in progress when a listener served by [`serve`] stops.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What every HTTP/2 connection opens with (RFC 9113, section 3.4): its length.
const PREFACE_LEN: usize = 24;
/// How long after it last read bytes an HTTP/2 connection may be closed as idle (half the idle
/// timeout if that is shorter): a request read just before the timeout has begun by then. A
/// client that sends bytes more often than this, and no request, is bounded by a maximum age.
const SETTLE: Duration = Duration::from_millis(250);

/// Why a connection ended early.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The bounds of one listener served by [`serve`].
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections open at once; one more is answered 503 with `Retry-After: 1` and closed.
    pub max_connections: usize,
    /// Connections one client address holds open at once; one more is answered the same
    /// way. `max_connections` for a private listener.
    pub max_connections_per_address: usize,
    /// Longest wait for a request's head, from accept or from the end of the last answer;
    /// then the connection closes.
    pub header_timeout: Duration,
    /// Longest a request may take, body included, before it is answered 408.
    pub request_timeout: Duration,
}

/// The HTTP versions a listener speaks.
#[derive(Debug, Clone, Copy)]
pub enum Protocols {
    /// HTTP/1.1 only, with upgrades (WebSocket); an HTTP/2 preface is not served.
    Http1,
    /// HTTP/1.1 and HTTP/2, by the client's preface in the clear and by ALPN over TLS.
    Both {
        /// How often an HTTP/2 connection is pinged; one not answered within as long is
        /// dropped.
        keep_alive: Duration,
        /// Longest an HTTP/2 connection may stay open with no request in flight.
        idle_timeout: Duration,
    },
    /// HTTP/2 only (gRPC): the head deadline bounds the client's preface; a connection is sent
    /// `GOAWAY` once idle, and at its maximum age.
    Http2 {
        /// How often a connection is pinged.
        keep_alive_interval: Duration,
        /// How long a ping's answer may take before the connection is dropped.
        keep_alive_timeout: Duration,
        /// Streams one connection may have open at once.
        max_concurrent_streams: u32,
        /// Longest a connection may stay open with no request in flight (and nothing read
        /// lately, so that a request read as it ends has begun).
        idle_timeout: Duration,
        /// Age at which a connection is sent `GOAWAY`, idle or not; its requests in flight
        /// finish.
        max_age: Duration,
    },
}

/// The bounds of one listener served by [`serve_with`].
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Connections open at once; one more is turned away.
    pub max_connections: usize,
    /// Connections one client address holds open at once; one more is turned away.
    pub max_connections_per_address: usize,
    /// Longest from accept to the first request's head (a handshake included), and from one
    /// answer to the next head on a kept-alive HTTP/1.1 connection; then the connection
    /// closes.
    pub head_timeout: Duration,
    /// The HTTP versions served.
    pub protocols: Protocols,
    /// Longest wait for connections to finish once the listener stops.
    pub grace: Duration,
}

/// The protocol a handshake chose (TLS's ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2.
    Http2,
}

/// What carries HTTP on an accepted TCP connection: the clear ([`Clear`]) or a handshake of
/// the implementer's (TLS).
pub trait Transport: Send + Sync + 'static {
    /// The stream HTTP is read from and written to.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Whether a connection past a cap can be answered (503) before any handshake: true in
    /// the clear; a connection is closed otherwise.
    fn answers_before_handshake(&self) -> bool;

    /// Called for every TCP connection accepted, admitted or not (a count for a load run).
    fn accepted(&self) {}

    /// The stream to serve over `stream`, and the protocol the handshake chose, if any; run
    /// within the head deadline.
    fn handshake(
        &self,
        stream: TcpStream,
    ) -> impl Future<Output = io::Result<(Self::Io, Option<Protocol>)>> + Send;
}

/// HTTP in the clear, on the TCP stream itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clear;

impl Transport for Clear {
    type Io = TcpStream;

    fn answers_before_handshake(&self) -> bool {
        true
    }

    async fn handshake(&self, stream: TcpStream) -> io::Result<(TcpStream, Option<Protocol>)> {
        Ok((stream, None))
    }
}

/// Serves `router` on `listener` within `limits`, HTTP/1.1 only, until `stopped` fires; then
/// stops accepting, lets requests in progress finish for a few seconds and closes idle
/// connections.
pub async fn serve(listener: TcpListener, router: Router, limits: HttpLimits, stopped: Stopped) {
    let router = router.layer(middleware::from_fn_with_state(
        limits.request_timeout,
        request_deadline,
    ));
    let bounds = Bounds {
        max_connections: limits.max_connections,
        max_connections_per_address: limits.max_connections_per_address,
        head_timeout: limits.header_timeout,
        protocols: Protocols::Http1,
        grace: STOP_GRACE,
    };
    serve_with(listener, router, bounds, Clear, stopped).await;
}

/// Accepts connections on `listener` within `bounds`, carried by `transport`, and serves
/// `service` on each (every request carrying the client's address as `ConnectInfo`) until
/// `stopped` fires; then stops accepting, asks open connections to finish and waits for them
/// at most `bounds.grace`.
pub async fn serve_with<S, B, T>(
    listener: TcpListener,
    service: S,
    bounds: Bounds,
    transport: T,
    mut stopped: Stopped,
) where
    S: Service<hyper::Request<Incoming>, Response = hyper::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    T: Transport,
{
    let max_connections = bounds.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max_connections));
    let per_address = PerAddress::new(bounds.max_connections_per_address);
    let turn_away = TurnAway::default();
    let (stopping, stop_seen) = watch::channel(false);
    let builders = Arc::new(Builders::new(&bounds));
    let transport = Arc::new(transport);
    loop {
        let (stream, peer) = tokio::select! {
            () = stopped.wait() => break,
            accepted = crate::task::accept(&listener) => accepted,
        };
        let head_by = Instant::now() + bounds.head_timeout;
        transport.accepted();
        // An HTTP/1.1 answer means nothing to a client that speaks HTTP/2 only.
        let answers = transport.answers_before_handshake()
            && !matches!(bounds.protocols, Protocols::Http2 { .. });
        // The total cap first: a full listener is counted as full, whoever asks.
        let admitted = match slots.clone().try_acquire_owned() {
            Err(_) => Err(Cap::Total),
            Ok(slot) => match per_address.admit(peer.ip()) {
                Some(address_slot) => Ok((slot, address_slot)),
                None => Err(Cap::PerAddress),
            },
        };
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(cap) => {
                let cap_label = cap.label();
                tracing::debug!(%peer, cap = cap_label, "HTTP listener at a cap: turned away");
                if answers {
                    turn_away.answer(stream, cap);
                } else {
                    crate::caps::count_turned_away("shed", cap);
                }
                continue;
            }
        };
        // Small answers, sent at once: a WebSocket frame must not wait for the last ACK.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            peer,
            head_by,
            activity: Activity::new(),
            stop: stop_seen.clone(),
        };
        let (service, builders, transport) = (service.clone(), builders.clone(), transport.clone());
        tokio::spawn(async move {
            let _admitted = admitted;
            if let Err(error) = connection
                .run(stream, &*transport, service, &builders)
                .await
            {
                tracing::debug!(%peer, %error, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(bounds.grace, slots.acquire_many(all)).await;
}

/// The connection builders of one listener.
#[allow(clippy::large_enum_variant)] // One per listener, built once and shared.
enum Builders {
    Http1(http1::Builder),
    Both {
        /// By the client's preface.
        auto: auto::Builder<TokioExecutor>,
        /// As a handshake chose.
        http1: auto::Builder<TokioExecutor>,
        http2: auto::Builder<TokioExecutor>,
        idle_timeout: Duration,
    },
    Http2 {
        builder: auto::Builder<TokioExecutor>,
        idle_timeout: Duration,
        max_age: Duration,
    },
}

impl Builders {
    fn new(bounds: &Bounds) -> Builders {
        match bounds.protocols {
            Protocols::Http1 => {
                let mut builder = http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(bounds.head_timeout);
                Builders::Http1(builder)
            }
            Protocols::Both {
                keep_alive,
                idle_timeout,
            } => {
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(bounds.head_timeout);
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .keep_alive_interval(keep_alive)
                    .keep_alive_timeout(keep_alive);
                Builders::Both {
                    http1: builder.clone().http1_only(),
                    http2: builder.clone().http2_only(),
                    auto: builder,
                    idle_timeout,
                }
            }
            Protocols::Http2 {
                keep_alive_interval,
                keep_alive_timeout,
                max_concurrent_streams,
                idle_timeout,
                max_age,
            } => {
                // As tonic's server configures hyper, with its defaults otherwise.
                let mut builder = auto::Builder::new(TokioExecutor::new()).http2_only();
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .initial_connection_window_size(None)
                    .initial_stream_window_size(None)
                    .max_concurrent_streams(max_concurrent_streams)
                    .keep_alive_interval(keep_alive_interval)
                    .keep_alive_timeout(keep_alive_timeout)
                    .adaptive_window(false)
                    .max_pending_accept_reset_streams(None)
                    .max_local_error_reset_streams(None)
                    .max_frame_size(None);
                Builders::Http2 {
                    builder,
                    idle_timeout,
                    max_age,
                }
            }
        }
    }
}

/// One admitted connection, before its transport's handshake.
struct Connection {
    peer: SocketAddr,
    /// When the first request's head must have come.
    head_by: Instant,
    activity: Arc<Activity>,
    /// Turns true when the listener stops.
    stop: watch::Receiver<bool>,
}

impl Connection {
    /// Runs the handshake and serves the connection until it ends, closing it if no request
    /// head has come by the deadline.
    async fn run<S, B, T>(
        self,
        stream: TcpStream,
        transport: &T,
        service: S,
        builders: &Builders,
    ) -> Result<(), BoxError>
    where
        S: Service<hyper::Request<Incoming>, Response = hyper::Response<B>>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
        T: Transport,
    {
        let Connection {
            peer,
            head_by,
            activity,
            mut stop,
        } = self;
        let served = async {
            let (io, chosen) = tokio::select! {
                handshaken = transport.handshake(stream) => handshaken?,
                () = stopping(&mut stop) => return Ok(()),
            };
            activity.served();
            let seen = activity.clone();
            let service =
                hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    let busy = seen.begin(request.version() == hyper::Version::HTTP_2);
                    let answer = service.clone().call(request);
                    async move {
                        let answer = answer.await;
                        drop(busy);
                        answer
                    }
                });
            let io = TokioIo::new(Watched {
                io,
                activity: activity.clone(),
            });
            match builders {
                Builders::Http1(builder) => {
                    let connection = builder.serve_connection(io, service).with_upgrades();
                    // Only the listener's stop asks an HTTP/1.1 connection to finish early.
                    let never = std::future::pending::<Told>();
                    until_told(
                        connection,
                        |c| c.graceful_shutdown(),
                        never,
                        &activity,
                        stop,
                    )
                    .await
                }
                Builders::Both {
                    auto,
                    http1,
                    http2,
                    idle_timeout,
                } => {
                    let builder = match chosen {
                        None => auto,
                        Some(Protocol::Http1) => http1,
                        Some(Protocol::Http2) => {
                            activity.h2.store(true, Ordering::Release);
                            http2
                        }
                    };
                    let connection = builder.serve_connection(io, service);
                    let idle = async {
                        activity.h2_idle_for(*idle_timeout).await;
                        Told::Idle
                    };
                    until_told(connection, |c| c.graceful_shutdown(), idle, &activity, stop).await
                }
                Builders::Http2 {
                    builder,
                    idle_timeout,
                    max_age,
                } => {
                    activity.h2.store(true, Ordering::Release);
                    let connection = builder.serve_connection(io, service);
                    let idle = activity.h2_idle_for(*idle_timeout);
                    let aged = tokio::time::sleep(*max_age);
                    let told = async {
                        tokio::select! {
                            () = aged => Told::Aged,
                            () = idle => {
                                tracing::debug!(%peer, "HTTP/2 connection idle for its timeout: GOAWAY");
                                Told::Idle
                            }
                        }
                    };
                    until_told(connection, |c| c.graceful_shutdown(), told, &activity, stop).await
                }
            }
        };
        let preface_only = matches!(builders, Builders::Http2 { .. });
        tokio::select! {
            served = served => served,
            () = activity.no_head_by(head_by, preface_only) => Err("no request head before the deadline".into()),
        }
    }
}

/// Why a connection is asked to finish before its client is done with it.
enum Told {
    /// It reached its maximum age.
    Aged,
    /// Nothing was in flight on it for its idle timeout.
    Idle,
}

/// How long an HTTP/2 connection sent `GOAWAY` for idleness may take to close with nothing in
/// flight: a client that never answers the `GOAWAY`'s ping would keep it open otherwise.
const IDLE_GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// Drives `connection` to its end; asks it to finish (`GOAWAY` over HTTP/2) once `told` fires
/// (its maximum age, or idle for its timeout) or the listener stops, and drives it on until it
/// has: a request already sent but not yet read is answered, or refused in a way the client
/// knows it may retry, never lost with the socket. Told it is idle, it is dropped once nothing
/// has been in flight for [`IDLE_GOAWAY_GRACE`] after that.
async fn until_told<C, E>(
    connection: C,
    mut finish: impl FnMut(Pin<&mut C>),
    told: impl Future<Output = Told>,
    activity: &Activity,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BoxError>
where
    C: Future<Output = Result<(), E>>,
    E: Into<BoxError>,
{
    let mut connection = pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        told = told => {
            finish(connection.as_mut());
            match told {
                Told::Aged => connection.await,
                Told::Idle => loop {
                    tokio::select! {
                        ended = connection.as_mut() => break ended,
                        () = tokio::time::sleep(IDLE_GOAWAY_GRACE) => {
                            if activity.in_flight.load(Ordering::Acquire) == 0 {
                                break Ok(());
                            }
                        }
                    }
                },
            }
        }
        () = stopping(&mut stop) => {
            finish(connection.as_mut());
            connection.await
        }
    };
    ended.map_err(Into::into)
}

/// Returns once the listener stops.
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

/// What a connection is doing: requests in flight, whether one has begun, whether it speaks
/// HTTP/2, and when it was last busy.
struct Activity {
    in_flight: AtomicUsize,
    begun: AtomicBool,
    h2: AtomicBool,
    /// When the connection was served or last finished a request.
    last_busy: Mutex<Instant>,
    /// Bytes read so far, counted up to the HTTP/2 preface's length.
    read: AtomicUsize,
    /// When bytes were last read.
    last_read: Mutex<Instant>,
}

/// A request in flight, counted until it is dropped.
struct Busy(Arc<Activity>);

impl Activity {
    /// A connection accepted now, with nothing in flight.
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            begun: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            last_busy: Mutex::new(Instant::now()),
            read: AtomicUsize::new(0),
            last_read: Mutex::new(Instant::now()),
        })
    }

    fn last_busy(&self) -> MutexGuard<'_, Instant> {
        lock(&self.last_busy)
    }

    /// The connection is served from now (its handshake done).
    fn served(&self) {
        *self.last_busy() = Instant::now();
    }

    /// A request began (its head came), over HTTP/2 or not.
    fn begin(self: &Arc<Self>, h2: bool) -> Busy {
        if h2 {
            self.h2.store(true, Ordering::Release);
        }
        self.begun.store(true, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Returns at `deadline` if no request has begun by then (or, `preface_only`, if the
    /// client has not sent HTTP/2's preface); never otherwise.
    async fn no_head_by(&self, deadline: Instant, preface_only: bool) {
        tokio::time::sleep_until(deadline).await;
        let came = if preface_only {
            self.read.load(Ordering::Acquire) >= PREFACE_LEN
        } else {
            self.begun.load(Ordering::Acquire)
        };
        if came {
            std::future::pending::<()>().await;
        }
    }

    /// `n` bytes were read.
    fn read(&self, n: usize) {
        if self.read.load(Ordering::Relaxed) < PREFACE_LEN {
            self.read.fetch_add(n, Ordering::AcqRel);
        }
        if self.h2.load(Ordering::Relaxed) {
            *lock(&self.last_read) = Instant::now();
        }
    }

    /// Returns once the connection speaks HTTP/2, nothing has been in flight for `idle` and
    /// nothing has been read for [`SETTLE`] (half of `idle` if that is shorter): a request
    /// read just before has begun by then.
    async fn h2_idle_for(&self, idle: Duration) {
        let settle = SETTLE.min(idle / 2);
        loop {
            let quiet = self.last_busy().elapsed();
            let unread = lock(&self.last_read).elapsed();
            let h2 = self.h2.load(Ordering::Acquire);
            if h2
                && self.in_flight.load(Ordering::Acquire) == 0
                && quiet >= idle
                && unread >= settle
            {
                return;
            }
            let left = idle
                .saturating_sub(quiet)
                .max(settle.saturating_sub(unread))
                .max(idle / 4);
            tokio::time::sleep(left.max(Duration::from_millis(10))).await;
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // Only HTTP/2's idle timeout reads it: HTTP/1.1 requests skip the lock and the clock.
        if self.0.h2.load(Ordering::Acquire) {
            *self.0.last_busy() = Instant::now();
        }
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's stream, telling its [`Activity`] what is read.
struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.activity.read(n);
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

fn lock(instant: &Mutex<Instant>) -> MutexGuard<'_, Instant> {
    instant.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Answers 408 when a request (its body included) takes longer than the deadline.
async fn request_deadline(
    State(deadline): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            axum::Json(json!({"error": "request_timeout"})),
        )
            .into_response(),
    }
}
