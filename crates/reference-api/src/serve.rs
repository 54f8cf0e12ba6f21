//! Serving the reference API on a socket, in the clear or over TLS (tokio-rustls), with
//! HTTP/1.1 or HTTP/2, chosen by ALPN over TLS and by the client's preface in the clear, within
//! [`ServeLimits`]:
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
//! The loop is the listener crate's ([`http::serve_with`]); what is the API's own is how it
//! counts what a load run needs to know from the server's side: the TCP connections accepted
//! and the TLS handshakes completed ([`ConnectionCounts`]). It owns no routing; that is the
//! router's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use token_resolver_listener::http::{self, Bounds, Protocol, Protocols, Transport};
use token_resolver_listener::Stopped;

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
    stop: Stopped,
    grace: Duration,
) {
    let bounds = Bounds {
        max_connections: limits.max_connections,
        max_connections_per_address: limits.max_connections_per_address,
        head_timeout: limits.head_timeout,
        protocols: Protocols::Both {
            keep_alive: limits.h2_keep_alive,
            idle_timeout: limits.h2_idle_timeout,
        },
        grace,
    };
    match tls {
        None => http::serve_with(listener, router, bounds, Counted(counts), stop).await,
        Some(acceptor) => {
            let tls = Tls { acceptor, counts };
            http::serve_with(listener, router, bounds, tls, stop).await;
        }
    }
}

/// In the clear, counting the connections accepted.
struct Counted(Arc<ConnectionCounts>);

impl Transport for Counted {
    type Io = TcpStream;

    fn answers_before_handshake(&self) -> bool {
        true
    }

    fn accepted(&self) {
        self.0.accepted.fetch_add(1, Ordering::Relaxed);
    }

    async fn handshake(&self, stream: TcpStream) -> std::io::Result<(TcpStream, Option<Protocol>)> {
        Ok((stream, None))
    }
}

/// Over TLS, HTTP/2 when ALPN chose it, counting the connections accepted and the handshakes
/// completed.
struct Tls {
    acceptor: TlsAcceptor,
    counts: Arc<ConnectionCounts>,
}

impl Transport for Tls {
    type Io = TlsStream<TcpStream>;

    /// Over TLS no answer can come before a handshake: a connection past a cap is closed.
    fn answers_before_handshake(&self) -> bool {
        false
    }

    fn accepted(&self) {
        self.counts.accepted.fetch_add(1, Ordering::Relaxed);
    }

    async fn handshake(
        &self,
        stream: TcpStream,
    ) -> std::io::Result<(TlsStream<TcpStream>, Option<Protocol>)> {
        let stream = self.acceptor.accept(stream).await?;
        self.counts.handshakes.fetch_add(1, Ordering::Relaxed);
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let chosen = if h2 { Protocol::Http2 } else { Protocol::Http1 };
        Ok((stream, Some(chosen)))
    }
}

/// The base URL of a listener on `addr`: `http://ADDR`, or `https://ADDR` over TLS.
pub(super) fn base_url(addr: SocketAddr, tls: bool) -> String {
    format!("{}://{addr}", if tls { "https" } else { "http" })
}
