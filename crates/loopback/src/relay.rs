//! A TCP relay the test controls, between two real processes: what makes a network fault
//! without a flag in the code under test.
//!
//! [`Relay::start`] listens on `127.0.0.1:0` and forwards every connection to the target. The
//! test can then make the connections open now go silent without a FIN or RST (a half-open
//! link: a crashed host, a NAT entry dropped), refuse new connections (a partition), or delay
//! every chunk it forwards (a slow path).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The relay; stops (dropping every connection) when dropped.
///
/// # Example
///
/// ```
/// use token_resolver_loopback::Relay;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use tokio::net::{TcpListener, TcpStream};
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// rt.block_on(async {
///     // The real server behind it echoes what it reads.
///     let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let target = server.local_addr().unwrap();
///     tokio::spawn(async move {
///         while let Ok((mut conn, _)) = server.accept().await {
///             tokio::spawn(async move {
///                 let mut buf = [0; 4];
///                 let n = conn.read(&mut buf).await.unwrap();
///                 conn.write_all(&buf[..n]).await.unwrap();
///             });
///         }
///     });
///     let relay = Relay::start(target).await;
///     let mut client = TcpStream::connect(relay.addr()).await.unwrap();
///     client.write_all(b"ping").await.unwrap();
///     let mut echo = [0; 4];
///     client.read_exact(&mut echo).await.unwrap();
///     assert_eq!(&echo, b"ping");
///
///     // A partition: a new connection is closed before it carries a byte.
///     relay.refuse(true);
///     let mut refused = TcpStream::connect(relay.addr()).await.unwrap();
///     assert_eq!(refused.read(&mut [0; 1]).await.unwrap_or(0), 0);
/// });
/// ```
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct State {
    target: SocketAddr,
    /// New connections are closed at once.
    refusing: AtomicBool,
    /// Milliseconds each forwarded chunk waits.
    delay_ms: AtomicU64,
    /// One flag per connection: set, the connection carries nothing more either way.
    silenced: Mutex<Vec<Arc<AtomicBool>>>,
}

impl Relay {
    /// Forwards `127.0.0.1:<port>` to `target`.
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            target,
            refusing: AtomicBool::new(false),
            delay_ms: AtomicU64::new(0),
            silenced: Mutex::new(Vec::new()),
        });
        let accepting = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if accepting.refusing.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(client, accepting.clone()));
            }
        });
        Relay { addr, state, task }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connections open now carry nothing more, in either direction, and are never
    /// closed: their peers hear neither bytes nor a FIN. New connections still work.
    pub fn silence_open_connections(&self) {
        for flag in self.state.silenced.lock().unwrap().drain(..) {
            flag.store(true, Ordering::SeqCst);
        }
    }

    /// From now on, new connections are closed as soon as they come (a partition).
    pub fn refuse(&self, refusing: bool) {
        self.state.refusing.store(refusing, Ordering::SeqCst);
    }

    /// From now on, every chunk waits `delay` before it is forwarded.
    pub fn delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.state.delay_ms.store(ms, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
        self.silence_open_connections();
    }
}

/// Forwards one connection both ways until either side closes or it is silenced.
async fn relay(client: TcpStream, state: Arc<State>) {
    let Ok(server) = TcpStream::connect(state.target).await else {
        return;
    };
    // Forwarded as it comes, as a router would: Nagle's algorithm on a relay that waits for
    // the peer's delayed ACK would add 40 ms stalls that no real path has.
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let silenced = Arc::new(AtomicBool::new(false));
    state.silenced.lock().unwrap().push(silenced.clone());
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let there = tokio::spawn(pump(
        client_read,
        server_write,
        state.clone(),
        silenced.clone(),
    ));
    let back = tokio::spawn(pump(server_read, client_write, state, silenced));
    let _ = tokio::join!(there, back);
}

/// Copies `from` to `to`, each chunk after the relay's delay; once `silenced`, reads on and
/// drops what it reads, so that neither side sees an end.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    state: Arc<State>,
    silenced: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) if silenced.load(Ordering::SeqCst) => {
                // The peer gave up: a silenced link stays open on the other side for ever.
                std::future::pending::<()>().await;
                return;
            }
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silenced.load(Ordering::SeqCst) {
            continue;
        }
        let delay = state.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
