//! An HTTPS upstream whose certificate nobody trusts: it counts the handshakes that failed and
//! the requests that got through anyway (none should).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An HTTPS upstream on `127.0.0.1:0` with a fresh self-signed certificate (for `localhost`
/// and `127.0.0.1`) that no client trusts. It counts handshakes that failed and HTTP requests
/// that got through (it would answer them with a user, and none should come).
pub struct UntrustedTls {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    failed_handshakes: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl UntrustedTls {
    pub async fn start() -> UntrustedTls {
        use tokio_rustls::rustls;
        let certified = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .unwrap();
        let cert = certified.cert.der().clone();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let failed_handshakes = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (c, f, r) = (
            connections.clone(),
            failed_handshakes.clone(),
            requests.clone(),
        );
        let task = tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let (acceptor, f, r) = (acceptor.clone(), f.clone(), r.clone());
                tasks.spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        f.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let mut buf = [0u8; 4096];
                    if tls.read(&mut buf).await.unwrap_or(0) > 0 {
                        r.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"id":666,"name":"over-untrusted-tls"}"#;
                        let response = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = tls.write_all(response.as_bytes()).await;
                    }
                });
                while tasks.try_join_next().is_some() {}
            }
        });
        UntrustedTls {
            addr,
            connections,
            failed_handshakes,
            requests,
            task,
        }
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// `https://localhost:PORT`
    pub fn localhost_url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn failed_handshakes(&self) -> usize {
        self.failed_handshakes.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for UntrustedTls {
    fn drop(&mut self) {
        self.task.abort();
    }
}
