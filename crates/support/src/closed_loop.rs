//! A closed-loop load client for the benches that compare a server with its peer: a number of
//! callers, each sending its next request when the last is answered, for a fixed time; the
//! throughput, the latencies' median and 99th percentile, and the failures of one run.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

/// What one row gave in one run.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Answers a second.
    pub per_second: f64,
    /// The median latency.
    pub p50: Duration,
    /// The 99th-percentile latency.
    pub p99: Duration,
    /// Calls that failed or were refused.
    pub errors: usize,
}

/// One caller of a closed loop: it makes one call at a time.
pub trait Caller: Send + 'static {
    /// Makes one call; whether it was answered as expected.
    fn call(&mut self) -> impl Future<Output = bool> + Send;
}

/// Runs `callers` (each on a task of its own) for `length`.
pub async fn closed_loop<C: Caller>(callers: Vec<C>, length: Duration) -> Run {
    let started = Instant::now();
    let deadline = started + length;
    let tasks: Vec<_> = callers
        .into_iter()
        .map(|mut caller| {
            tokio::spawn(async move {
                let (mut latencies, mut errors) = (Vec::new(), 0);
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let ok = caller.call().await;
                    latencies.push(asked.elapsed());
                    errors += usize::from(!ok);
                }
                (latencies, errors)
            })
        })
        .collect();
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (l, e) = task.await.expect("a caller task");
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let at = |q: f64| {
        (latencies.get(((latencies.len() as f64 * q) as usize).min(latencies.len().max(1) - 1)))
            .copied()
            .unwrap_or_default()
    };
    Run {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        errors,
    }
}

/// The median of `values`.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A request a [`HttpCaller`] sends, built afresh for each call.
pub type MakeRequest = Box<dyn Fn() -> hyper::Request<Full<Bytes>> + Send + Sync>;

/// A caller over one keep-alive HTTP/1.1 connection (reopened if the server closes it): a 2xx
/// answer, read to its end, is a success.
pub struct HttpCaller {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    make: MakeRequest,
}

impl HttpCaller {
    /// A connection to `addr` sending what `make` builds.
    pub async fn open(addr: SocketAddr, make: MakeRequest) -> HttpCaller {
        HttpCaller {
            addr,
            sender: connect(addr).await,
            make,
        }
    }

    /// A connection to `addr` asking for `path` at `host` with `token` as its bearer, as a
    /// client of an API behind an auth proxy does.
    pub async fn bearer_get(
        addr: SocketAddr,
        host: &'static str,
        path: &'static str,
        token: &str,
    ) -> HttpCaller {
        let bearer = format!("Bearer {token}");
        let make: MakeRequest = Box::new(move || {
            hyper::Request::get(path)
                .header("host", host)
                .header("authorization", &bearer)
                .body(Full::default())
                .expect("a request")
        });
        HttpCaller::open(addr, make).await
    }
}

impl Caller for HttpCaller {
    async fn call(&mut self) -> bool {
        if self.sender.ready().await.is_err() {
            // The server closed the connection (it may, after an error answer).
            self.sender = connect(self.addr).await;
        }
        match self.sender.send_request((self.make)()).await {
            Ok(response) => {
                let ok = response.status().is_success();
                response.into_body().collect().await.is_ok() && ok
            }
            Err(_) => false,
        }
    }
}

/// A keep-alive HTTP/1.1 connection to `addr`, with `TCP_NODELAY`.
async fn connect(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("a connection");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("an HTTP/1.1 connection");
    tokio::spawn(conn);
    sender
}
