//! `token-resolver load --storm`: a cold start over HTTPS. An empty cache, many distinct tokens
//! arriving at once (as when a server restarts under a full lobby), against the reference API
//! served over TLS with a certificate made at run time and trusted through
//! `add_root_certificate`, with a service time on `/api/user`.
//!
//! Rows: the resolver over HTTP/1.1 (the default), the resolver with `http2(true)`, and a bare
//! hyper + rustls client held to as many connections as the resolver has slots
//! (`max_concurrent_requests`), the floor. Each row: total time, resolutions/s, p50 and p99 of
//! one resolution (queueing for a slot or a connection included), errors, and the TLS
//! handshakes and TCP connections the server counted. The three rows run `--rounds` times in a
//! rotating order, each time with fresh clients; the table shows each row's median round.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use token_resolver::Resolver;
use token_resolver_reference_api::{ReferenceApi, RunningApi};
use tokio::sync::Semaphore;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// The storm's shape, from `load`'s arguments.
pub(super) struct Storm {
    /// Distinct tokens, each resolved once.
    pub(super) tokens: usize,
    /// Tasks resolving at once.
    pub(super) concurrency: usize,
    /// Service time of `/api/user`.
    pub(super) latency: Duration,
    /// The resolver's `max_concurrent_requests`, and the floor's connections.
    pub(super) slots: usize,
    /// Rounds of the three rows.
    pub(super) rounds: usize,
}

/// A CA, and a certificate for `127.0.0.1` it signed, made now.
struct Certificates {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn certificates() -> Result<Certificates, String> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let e = |e: rcgen::Error| e.to_string();
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().map_err(e)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).map_err(e)?;
    let leaf_key = KeyPair::generate().map_err(e)?;
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).map_err(e)?;
    Ok(Certificates {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

/// The reference API on a thread and runtime of its own, over TLS and (for minting tokens)
/// in the clear; dropping it stops both.
struct Server {
    tls: RunningApi,
    plain: RunningApi,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(certs: &Certificates, latency: Duration) -> Result<Server, String> {
        let api = ReferenceApi::new(super::loopback_api_config()).map_err(|e| e.to_string())?;
        api.set_user_latency(latency);
        let (cert, key) = (certs.cert_pem.clone(), certs.key_pem.clone());
        let (ready, started) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("storm-api".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return drop(ready.send(Err(e.to_string()))),
                };
                runtime.block_on(async move {
                    let addr: SocketAddr = ([127, 0, 0, 1], 0).into();
                    let served = async {
                        let plain = api.clone().spawn(addr).await?;
                        let tls = api.spawn_tls(addr, cert.as_bytes(), key.as_bytes()).await?;
                        Ok::<_, std::io::Error>((tls, plain))
                    };
                    let _ = ready.send(served.await.map_err(|e| e.to_string()));
                    let _ = stopped.await;
                });
            })
            .map_err(|e| e.to_string())?;
        let (tls, plain) = started
            .recv()
            .map_err(|_| "the API thread ended before it started".to_owned())??;
        Ok(Server {
            tls,
            plain,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// TLS handshakes and TCP connections so far.
    fn counts(&self) -> (u64, u64) {
        (self.tls.tls_handshakes(), self.tls.connections_accepted())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Who resolves in a storm row.
enum Client {
    Resolver { resolver: Resolver, base: String },
    Floor(Floor),
}

impl Client {
    async fn resolve(&self, token: &str) -> Result<(), String> {
        match self {
            Client::Resolver { resolver, base } => resolver
                .resolve(base, token)
                .await
                .map(drop)
                .map_err(|e| e.code().as_str().to_owned()),
            Client::Floor(floor) => floor.post(token).await,
        }
    }
}

/// A bare hyper HTTP/1.1 client over rustls, held to `slots` connections: a task takes a
/// connection from the pool (opening one while fewer than `slots` exist), POSTs, and puts it
/// back. No validation, no cache, no timeout.
struct Floor {
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    slots: Semaphore,
    idle: Mutex<Vec<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>>,
}

impl Floor {
    fn new(addr: SocketAddr, ca_pem: &str, slots: usize) -> Result<Floor, String> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(cert.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Floor {
            addr,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            slots: Semaphore::new(slots),
            idle: Mutex::new(Vec::new()),
        })
    }

    async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>, String> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::from(self.addr.ip());
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(send)
    }

    async fn post(&self, token: &str) -> Result<(), String> {
        let _slot = self.slots.acquire().await.map_err(|e| e.to_string())?;
        let pooled = self.idle.lock().map_err(|e| e.to_string())?.pop();
        let mut send = match pooled {
            Some(send) => send,
            None => self.connect().await?,
        };
        let request = Request::post("/api/user")
            .header(header::HOST, self.addr.to_string())
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_LENGTH, "0")
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let response = send
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        self.idle.lock().map_err(|e| e.to_string())?.push(send);
        if status != StatusCode::OK {
            return Err(format!("HTTP {status}"));
        }
        Ok(())
    }
}

/// One row of the storm table.
struct Row {
    label: &'static str,
    elapsed: Duration,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    errors: u64,
    handshakes: u64,
    connections: u64,
}

/// Resolves every token once from `concurrency` tasks, timed.
async fn run_row(
    label: &'static str,
    client: Arc<Client>,
    tokens: &Arc<Vec<String>>,
    concurrency: usize,
    server: &Server,
) -> Row {
    let (handshakes, connections) = server.counts();
    let cursor = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, tokens, cursor) = (client.clone(), tokens.clone(), cursor.clone());
        tasks.spawn(async move {
            let (mut latencies, mut errors) = (Vec::new(), 0u64);
            while let Some(token) = tokens.get(cursor.fetch_add(1, Ordering::Relaxed)) {
                let began = Instant::now();
                if client.resolve(token).await.is_err() {
                    errors += 1;
                }
                latencies.push(began.elapsed());
            }
            (latencies, errors)
        });
    }
    let (mut latencies, mut errors) = (Vec::with_capacity(tokens.len()), 0);
    while let Some(done) = tasks.join_next().await {
        let (l, e) = done.unwrap_or_default();
        latencies.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(i).copied().unwrap_or_default()
    };
    let (handshakes_after, connections_after) = server.counts();
    Row {
        label,
        elapsed,
        per_second: tokens.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.5),
        p99: at(0.99),
        errors,
        handshakes: handshakes_after - handshakes,
        connections: connections_after - connections,
    }
}

/// The round whose throughput is the median of `rows`.
fn median_row(rows: &[Row]) -> &Row {
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    sorted[sorted.len() / 2]
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Runs the storm and prints its table and targets.
pub(super) async fn run(storm: Storm) -> Result<(), String> {
    let certs = certificates()?;
    let server = Server::start(&certs, storm.latency)?;
    let base = server.tls.base_url();
    let tokens = Arc::new(
        super::mint(
            &server.plain.base_url(),
            "alice",
            "wonderland",
            storm.tokens,
        )
        .await?,
    );
    println!(
        "token-resolver load --storm: {} distinct tokens, empty cache, concurrency {}, against \
         the reference API over TLS at {base} (/api/user answers after {} ms); \
         max_concurrent_requests {}; {} cores",
        tokens.len(),
        storm.concurrency,
        storm.latency.as_millis(),
        storm.slots,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!();
    println!(
        "| row | total | resolutions/s | p50 | p99 | errors | TLS handshakes | TCP connections |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let resolver = |http2: bool| {
        Resolver::builder()
            .default_auth_url(&base)
            .add_root_certificate(certs.ca_pem.as_bytes())
            .max_concurrent_requests(storm.slots)
            .http2(http2)
            .build()
            .map(|resolver| {
                Arc::new(Client::Resolver {
                    resolver,
                    base: base.clone(),
                })
            })
            .map_err(|e| e.to_string())
    };
    // Rounds of the three rows, each with fresh clients (an empty cache, no connection), in a
    // rotating order: one row lasts a couple of seconds, and on a shared machine its neighbours
    // in time are not its neighbours in speed.
    let labels = [
        "token-resolver, HTTP/1.1",
        "token-resolver, HTTP/2",
        "hyper + rustls, HTTP/1.1 (floor)",
    ];
    let mut rows: [Vec<Row>; 3] = Default::default();
    for round in 0..storm.rounds {
        let floor = Floor::new(server.tls.local_addr(), &certs.ca_pem, storm.slots)?;
        let mut subjects = vec![
            (0, resolver(false)?),
            (1, resolver(true)?),
            (2, Arc::new(Client::Floor(floor))),
        ];
        subjects.rotate_left(round % 3);
        for (i, client) in subjects {
            let row = run_row(labels[i], client, &tokens, storm.concurrency, &server).await;
            rows[i].push(row);
        }
    }
    report(&rows, &storm);
    Ok(())
}

/// Prints the table (each row's median round) and the targets.
fn report(rows: &[Vec<Row>; 3], storm: &Storm) {
    let ratio = |of: usize, to: usize| {
        let mut ratios: Vec<f64> = (0..storm.rounds)
            .map(|r| rows[of][r].per_second / rows[to][r].per_second)
            .collect();
        ratios.sort_by(f64::total_cmp);
        (
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1],
        )
    };
    let (h1_floor, h2_h1) = (ratio(0, 2), ratio(1, 0));
    let worst = |i: usize, f: fn(&Row) -> u64| rows[i].iter().map(f).max().unwrap_or(0);
    let (h1_handshakes, h2_handshakes) = (worst(0, |r| r.handshakes), worst(1, |r| r.handshakes));
    let errors = |i: usize| rows[i].iter().map(|r| r.errors).sum::<u64>();
    for row in rows.iter().map(|rows| median_row(rows)) {
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            row.label,
            millis(row.elapsed),
            row.per_second,
            millis(row.p50),
            millis(row.p99),
            row.errors,
            row.handshakes,
            row.connections
        );
    }
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!();
    println!(
        "each row: its median round of {}; ratios: medians of the per-round ratios (range); \
         handshakes: the most any round made",
        storm.rounds
    );
    println!(
        "targets: errors 0 (HTTP/1.1 {}, HTTP/2 {}, all rounds) -> {}; HTTP/1.1 handshakes {} <= \
         {} -> {}; HTTP/1.1 throughput {:.2}x the floor ({:.2}x-{:.2}x; >= 0.9) -> {}; HTTP/2 \
         handshakes {} <= 2 -> {}; HTTP/2 throughput {:.2}x HTTP/1.1 ({:.2}x-{:.2}x; >= 1.0) -> {}",
        errors(0),
        errors(1),
        verdict(errors(0) == 0 && errors(1) == 0),
        h1_handshakes,
        storm.slots,
        verdict(h1_handshakes <= storm.slots as u64),
        h1_floor.0,
        h1_floor.1,
        h1_floor.2,
        verdict(h1_floor.0 >= 0.9),
        h2_handshakes,
        verdict(h2_handshakes <= 2),
        h2_h1.0,
        h2_h1.1,
        h2_h1.2,
        verdict(h2_h1.0 >= 1.0),
    );
}
