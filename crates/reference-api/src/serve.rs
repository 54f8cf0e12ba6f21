//! Serving the reference API on a socket: our own accept loop, in the clear or over TLS
//! (tokio-rustls), each connection handed to hyper-util's auto builder, which speaks HTTP/1.1
//! and HTTP/2 (chosen by ALPN over TLS, by the client's preface in the clear).
//!
//! The loop is ours rather than `axum::serve` so that it can count what a load run needs to
//! know from the server's side: the TCP connections accepted and the TLS handshakes completed
//! ([`ConnectionCounts`]). It owns no routing; that is the router's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tower_service::Service as _;

use token_resolver_listener::Stopped;

/// How long a client may take over its TLS handshake before it is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an HTTP/1.1 client may take to send a request's head (a slow-loris bound).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, at most; one more is closed at once. Far above what a load run
/// opens (its slots, or 512 for the storm's floor), far below the file descriptors a flood
/// would otherwise take.
const MAX_CONNECTIONS: usize = 10_000;

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

/// Accepts connections on `listener` (at most [`MAX_CONNECTIONS`] at once, each given
/// [`HEADER_TIMEOUT`] for a request's head) and serves `router` on each until `stop` fires;
/// then stops accepting, asks open connections to finish and waits for them at most `grace`.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    counts: Arc<ConnectionCounts>,
    mut stop: Stopped,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(%error, "reference API: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        counts.accepted.fetch_add(1, Ordering::Relaxed);
        let Ok(place) = places.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "reference API: too many connections; closed");
            continue;
        };
        let _ = stream.set_nodelay(true);
        // Every request carries the peer's address as `ConnectInfo` (as `axum::serve` with
        // `into_make_service_with_connect_info` gives it): the login throttle counts failures
        // per client address.
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            router.clone().call(request)
        });
        let watcher = graceful.watcher();
        let (tls, counts, builder) = (tls.clone(), counts.clone(), builder.clone());
        tokio::spawn(async move {
            let _place = place;
            let result = match tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    let stream = match handshake.await {
                        Ok(Ok(stream)) => stream,
                        Err(_) => {
                            tracing::debug!(%peer, "reference API: TLS handshake timed out");
                            return;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%error, %peer, "reference API: TLS handshake failed");
                            return;
                        }
                    };
                    counts.handshakes.fetch_add(1, Ordering::Relaxed);
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, %peer, "reference API: connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
}

/// The base URL of a listener on `addr`: `http://ADDR`, or `https://ADDR` over TLS.
pub(super) fn base_url(addr: SocketAddr, tls: bool) -> String {
    format!("{}://{addr}", if tls { "https" } else { "http" })
}
