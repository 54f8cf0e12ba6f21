//! Misbehaving upstreams for the fault-injection suites: raw TCP servers that read a request's
//! head and then break HTTP on purpose (stall, trickle, stream forever, cut or reset). A
//! behaviour that panics fails the test when the server is dropped.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;

use super::scripted::panic_message;

/// An upstream on loopback that reads each request's head and then does whatever the test's
/// behaviour does with the raw connection: stall, trickle, stream forever, cut or reset.
pub struct RawServer {
    addr: SocketAddr,
    /// TCP connections accepted.
    connections: Arc<AtomicUsize>,
    /// The head (request line and headers) of every request read, in order.
    heads: Arc<Mutex<Vec<String>>>,
    /// What each behaviour that panicked said.
    panics: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    /// Starts on `127.0.0.1:0`; each connection runs `behaviour(n, head, stream)` once its first
    /// request head is read, `n` counting connections from 0.
    pub async fn start<F, Fut>(behaviour: F) -> RawServer
    where
        F: Fn(usize, String, tokio::net::TcpStream) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        RawServer::start_on("127.0.0.1", behaviour).await
    }

    /// As [`start`](Self::start), on another loopback address such as `127.0.0.2`.
    pub async fn start_on<F, Fut>(ip: &str, behaviour: F) -> RawServer
    where
        F: Fn(usize, String, tokio::net::TcpStream) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let panics = Arc::new(Mutex::new(Vec::new()));
        let (c, h, p) = (connections.clone(), heads.clone(), panics.clone());
        let task = tokio::spawn(async move {
            // Dropped with the accept loop when the server is: every connection task ends too.
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let n = c.fetch_add(1, Ordering::SeqCst);
                let (h, behaviour) = (h.clone(), behaviour.clone());
                let p = p.clone();
                tasks.spawn(async move {
                    if let Some(head) = read_head(&mut stream).await {
                        h.lock().unwrap().push(head.clone());
                        let run = AssertUnwindSafe(behaviour(n, head, stream));
                        if let Err(panic) = run.catch_unwind().await {
                            p.lock().unwrap().push(panic_message(panic.as_ref()));
                        }
                    }
                });
                while tasks.try_join_next().is_some() {}
            }
        });
        RawServer {
            addr,
            connections,
            heads,
            panics,
            task,
        }
    }

    /// `http://IP:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests whose head was read.
    pub fn requests(&self) -> usize {
        self.heads.lock().unwrap().len()
    }

    /// How many behaviours panicked so far.
    pub fn panics(&self) -> usize {
        self.panics.lock().unwrap().len()
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
        let panics = self.panics.lock().unwrap().clone();
        if !panics.is_empty() && !std::thread::panicking() {
            panic!("a behaviour of the raw server panicked: {panics:?}");
        }
    }
}

/// Reads up to the blank line ending a request head (the resolver sends no body); `None` when
/// the peer closes first or the head is absurdly long.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Writes `bytes`, ignoring a peer that already left.
pub async fn write_raw(stream: &mut tokio::net::TcpStream, bytes: &[u8]) -> bool {
    use tokio::io::AsyncWriteExt;
    stream.write_all(bytes).await.is_ok() && stream.flush().await.is_ok()
}

/// Behaviour: read the request, then never send a byte (the connection stays open).
pub async fn never_answer(_: usize, _: String, stream: tokio::net::TcpStream) {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    drop(stream);
}

/// Behaviour: a 200 head announcing a 64-byte body, then the body one byte a second.
pub async fn trickle_body(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let body = br#"{"id":1,"name":"trickled","pad":"................................"}"#;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    if !write_raw(&mut stream, head.as_bytes()).await {
        return;
    }
    for byte in body {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !write_raw(&mut stream, &[*byte]).await {
            return;
        }
    }
}

/// Behaviour: a 200 with a chunked body that never ends, 4 KiB chunks as fast as they go.
pub async fn endless_chunked(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    if !write_raw(&mut stream, head.as_bytes()).await {
        return;
    }
    let mut chunk = b"1000\r\n".to_vec();
    chunk.extend_from_slice(&[b' '; 0x1000]);
    chunk.extend_from_slice(b"\r\n");
    while write_raw(&mut stream, &chunk).await {}
}

/// Behaviour: a 200 announcing 100 bytes of body, 24 of them, then a clean close.
pub async fn short_body_then_close(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let response = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"id\":1,\"name\":\"short\"}";
    write_raw(&mut stream, response.as_bytes()).await;
    use tokio::io::AsyncWriteExt;
    let _ = stream.shutdown().await;
}

/// Behaviour: a 200 announcing 100 bytes of body, 24 of them, then a TCP reset (RST).
pub async fn reset_mid_body(_: usize, _: String, mut stream: tokio::net::TcpStream) {
    let response = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"id\":1,\"name\":\"reset\"}";
    write_raw(&mut stream, response.as_bytes()).await;
    // Let the client take the head before the reset, so the reset lands mid-body.
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream.set_zero_linger().unwrap();
    drop(stream);
}

/// Behaviour: close the connection without answering.
pub async fn close_at_once(_: usize, _: String, stream: tokio::net::TcpStream) {
    drop(stream);
}
