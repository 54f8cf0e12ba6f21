//! Serving the reference API on a socket: our own accept loop, in the clear or over TLS
//! (tokio-rustls), each connection served by hyper's HTTP/1.1 or HTTP/2 connection, chosen by
//! ALPN over TLS and by the client's preface in the clear, within [`ServeLimits`]:
//!
//! - a connection cap in all and one per client address; a connection past either is answered
//!   a quick 503 with `Retry-After` in the clear (closed over TLS, which has no answer before a
//!   handshake);
//! - a deadline for the first request's head counted from accept, whatever the client sends
//!   or does not send (a silent socket, a preface cut short, a TLS handshake left hanging), and
//!   for every later head on a kept-alive HTTP/1.1 connection, so an idle one is closed too;
//! - over HTTP/2, keep-alive pings (a dead peer is dropped) and an idle timeout (a live one
//!   with nothing in flight is closed).
//!
//! The loop is ours rather than `axum::serve` for those bounds, and so that it can count what a
//! load run needs to know from the server's side: the TCP connections accepted and the TLS
//! handshakes completed ([`ConnectionCounts`]). It owns no routing; that is the router's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tower_service::Service as _;

use token_resolver_listener::{PerAddress, Stopped, TurnAway};

/// What an HTTP/2 client sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The bounds of the reference API's listener.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections open at once; one more is answered 503 (closed over TLS). Default: 10,000,
    /// far above what a load run opens, far below the file descriptors a flood would take.
    pub max_connections: usize,
    /// Connections one client address may hold open at once; one more is answered as past
    /// [`max_connections`](Self::max_connections). Default: 64, enough for a household or an
    /// office behind one NAT, and a 150th of the whole.
    pub max_connections_per_address: usize,
    /// Longest from accept to a first request's head (the TLS handshake included), and from
    /// one answer to the next head on a kept-alive HTTP/1.1 connection; then the connection is
    /// closed. Default: 10 s.
    pub head_timeout: Duration,
    /// Longest an HTTP/2 connection may stay open with no request in flight. Default: 60 s.
    pub h2_idle_timeout: Duration,
    /// How often an HTTP/2 connection is pinged; one not answered within as long is dropped.
    /// Default: 20 s.
    pub h2_keep_alive: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: 10_000,
            max_connections_per_address: 64,
            head_timeout: Duration::from_secs(10),
            h2_idle_timeout: Duration::from_secs(60),
            h2_keep_alive: Duration::from_secs(20),
        }
    }
}

/// What the server saw, counted as it happens: read it from
/// [`RunningApi`](super::RunningApi)'s accessors.
#[derive(Debug, Default)]
pub(super) struct ConnectionCounts {
    /// TCP connections accepted.
    pub(super) accepted: AtomicU64,
    /// TLS handshakes completed (always 0 in the clear).
    pub(super) handshakes: AtomicU64,
}

/// A TLS acceptor for the certificate chain and private key in `cert_pem` and `key_pem`,
/// offering HTTP/2 and HTTP/1.1 through ALPN.
///
/// # Errors
///
/// An `InvalidInput` I/O error when the PEM holds no certificate or no usable key.
pub(super) fn tls_acceptor(cert_pem: &[u8], key_pem: &[u8]) -> std::io::Result<TlsAcceptor> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("the certificate PEM: {e}")))?;
    if chain.is_empty() {
        return Err(invalid("the certificate PEM holds no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| invalid(format!("the key PEM: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid(format!("the certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections on `listener` within `limits` and serves `router` on each until `stop`
/// fires; then stops accepting, asks open connections to finish and waits for them at most
/// `grace`.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    counts: Arc<ConnectionCounts>,
    limits: ServeLimits,
    mut stop: Stopped,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    let places = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let per_address = PerAddress::new(limits.max_connections_per_address);
    let turn_away = TurnAway::default();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.wait() => break,
            accepted = token_resolver_listener::accept(&listener) => accepted,
        };
        let head_by = Instant::now() + limits.head_timeout;
        counts.accepted.fetch_add(1, Ordering::Relaxed);
        let admitted = places.clone().try_acquire_owned().ok().and_then(|place| {
            let slot = per_address.admit(peer.ip())?;
            Some((place, slot))
        });
        let Some(admitted) = admitted else {
            tracing::debug!(%peer, "reference API: too many connections; answered 503");
            // Over TLS no answer can come before a handshake: the connection is closed.
            if tls.is_none() {
                turn_away.answer(stream);
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            router: router.clone(),
            peer,
            head_by,
            limits,
        };
        let watcher = graceful.watcher();
        let (tls, counts) = (tls.clone(), counts.clone());
        tokio::spawn(async move {
            let _admitted = admitted;
            let served = match tls {
                None => connection.serve_clear(stream, watcher).await,
                Some(acceptor) => {
                    connection
                        .serve_tls(stream, acceptor, &counts, watcher)
                        .await
                }
            };
            if let Err(error) = served {
                tracing::debug!(%error, %peer, "reference API: connection ended");
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
}

/// One accepted connection, before its protocol is known.
struct Connection {
    router: Router,
    peer: SocketAddr,
    /// When the first request's head must have come.
    head_by: Instant,
    limits: ServeLimits,
}

/// Why a connection ended early.
type Ended = Box<dyn std::error::Error + Send + Sync>;

impl Connection {
    /// In the clear: HTTP/2 when the client opens with its preface, HTTP/1.1 otherwise.
    async fn serve_clear(
        self,
        stream: TcpStream,
        watcher: hyper_util::server::graceful::Watcher,
    ) -> Result<(), Ended> {
        let h2 = tokio::time::timeout_at(self.head_by, opens_with_h2_preface(&stream))
            .await
            .map_err(|_| "no request head before the deadline")??;
        self.serve(stream, h2, watcher).await
    }

    /// Over TLS: the handshake within the head deadline, then HTTP/2 when ALPN chose it.
    async fn serve_tls(
        self,
        stream: TcpStream,
        acceptor: TlsAcceptor,
        counts: &ConnectionCounts,
        watcher: hyper_util::server::graceful::Watcher,
    ) -> Result<(), Ended> {
        let stream = tokio::time::timeout_at(self.head_by, acceptor.accept(stream))
            .await
            .map_err(|_| "the TLS handshake did not end before the deadline")??;
        counts.handshakes.fetch_add(1, Ordering::Relaxed);
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        self.serve(stream, h2, watcher).await
    }

    /// Serves `io` with HTTP/2 or HTTP/1.1 until it ends, closing it if no request head has
    /// come by the deadline, or (HTTP/2) when it has been idle for the idle timeout.
    async fn serve<I>(
        self,
        io: I,
        h2: bool,
        watcher: hyper_util::server::graceful::Watcher,
    ) -> Result<(), Ended>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Activity::new();
        // Every request carries the peer's address as `ConnectInfo` (as `axum::serve` with
        // `into_make_service_with_connect_info` gives it): the login throttle counts failures
        // per client address.
        let (router, peer, seen) = (self.router, self.peer, activity.clone());
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let busy = seen.begin();
            let answer = router.clone().call(request);
            async move {
                let answer = answer.await;
                drop(busy);
                answer
            }
        });
        let limits = self.limits;
        let served = async {
            if h2 {
                let mut builder = http2::Builder::new(TokioExecutor::new());
                builder
                    .timer(TokioTimer::new())
                    .keep_alive_interval(limits.h2_keep_alive)
                    .keep_alive_timeout(limits.h2_keep_alive);
                let connection = builder.serve_connection(TokioIo::new(io), service);
                tokio::select! {
                    served = watcher.watch(connection) => served.map_err(Ended::from),
                    () = activity.idle_for(limits.h2_idle_timeout) => Ok(()),
                }
            } else {
                let mut builder = http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.head_timeout);
                let connection = builder.serve_connection(TokioIo::new(io), service);
                watcher.watch(connection).await.map_err(Ended::from)
            }
        };
        tokio::select! {
            served = served => served,
            () = activity.no_head_by(self.head_by) => Err("no request head before the deadline".into()),
        }
    }
}

/// Whether the stream opens with HTTP/2's preface: waits for as many bytes as it takes to tell
/// (any byte that differs says HTTP/1.1); an error when the client closes first.
async fn opens_with_h2_preface(stream: &TcpStream) -> std::io::Result<bool> {
    let mut seen = [0u8; H2_PREFACE.len()];
    loop {
        let n = stream.peek(&mut seen).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if seen[..n] != H2_PREFACE[..n] {
            return Ok(false);
        }
        if n == H2_PREFACE.len() {
            return Ok(true);
        }
        // Part of the preface, and the rest still on its way: peek again shortly.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a connection is doing: requests in flight, whether one has begun, and when it was
/// last busy.
struct Activity {
    in_flight: AtomicUsize,
    begun: AtomicBool,
    /// When the connection was served or last finished a request.
    last_busy: Mutex<Instant>,
}

/// A request in flight, counted until it is dropped.
struct Busy(Arc<Activity>);

impl Activity {
    /// A connection served from now, with nothing in flight.
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            begun: AtomicBool::new(false),
            last_busy: Mutex::new(Instant::now()),
        })
    }

    fn last_busy(&self) -> MutexGuard<'_, Instant> {
        self.last_busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A request began (its head came).
    fn begin(self: &Arc<Self>) -> Busy {
        self.begun.store(true, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Returns at `deadline` if no request has begun by then; never otherwise.
    async fn no_head_by(&self, deadline: Instant) {
        tokio::time::sleep_until(deadline).await;
        if self.begun.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
    }

    /// Returns once nothing has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let quiet = self.last_busy().elapsed();
            if self.in_flight.load(Ordering::Acquire) == 0 && quiet >= idle {
                return;
            }
            let left = idle.saturating_sub(quiet).max(idle / 4);
            tokio::time::sleep(left.max(Duration::from_millis(10))).await;
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last_busy() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The base URL of a listener on `addr`: `http://ADDR`, or `https://ADDR` over TLS.
pub(super) fn base_url(addr: SocketAddr, tls: bool) -> String {
    format!("{}://{addr}", if tls { "https" } else { "http" })
}
