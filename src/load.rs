//! `token-resolver load`: a side-by-side throughput run of the resolver and of the baselines a
//! game server could use instead, printed as one table, and a fill of the cache that measures
//! the memory of one entry.
//!
//! Every row resolves the same request stream: a Zipf(s) draw over a set of players' tokens,
//! with a share of tokens never seen before (players who just logged in), from a number of
//! concurrent tasks. Rows with a cache are warmed with the token set first, so the run is the
//! steady state. For each row: resolutions/s, p50 and p99 latency of one resolution, the
//! upstream calls made, and the process's peak RSS during the row (`VmHWM`, reset before each
//! row). The rows:
//!
//! - `token-resolver`: [`Resolver::resolve`].
//! - `reqwest + moka (hand-written)`: a moka cache keyed by the token `String`, a reqwest POST
//!   and a serde_json parse on a miss: no coalescing, no validation, no slot limit.
//! - `reqwest, no cache`: a reqwest POST and a serde_json parse per resolution.
//! - `hyper, no cache`: a bare hyper POST per resolution, the body read but not parsed: the
//!   floor for a resolution that goes to the network (`http://` targets only).
//!
//! The target is the reference API (`reference_api`) served in-process on `127.0.0.1:0` from
//! its own thread, with tokens minted by logging in once and asking `/api/access_token` for
//! many; or an external API given by `--auth-url`, with tokens from `--tokens-file` or minted
//! the same way if it speaks the reference API's login.
//!
//! The fill resolves `--fill` distinct 43-byte tokens through the public API against an
//! in-process upstream that answers any token with a user of a 16-byte name, and reports the
//! RSS delta per entry. This module is the harness only; it changes nothing in the resolver.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;

use crate::client::IntegratorClient;
use crate::reference_api::{ApiConfig, ReferenceApi};
use crate::{Endpoint, Resolver};

/// `load` arguments.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Base URL of an external integrator API; default: the reference API, in-process.
    #[arg(long, value_name = "URL")]
    pub auth_url: Option<String>,
    /// Access tokens, one per line, for an external API that has no reference-API login.
    #[arg(long, value_name = "FILE")]
    pub tokens_file: Option<PathBuf>,
    /// User to log in as to mint tokens (reference-API login).
    #[arg(long, default_value = "alice")]
    pub username: String,
    /// Password of that user (or set TOKEN_RESOLVER_PASSWORD, which keeps it out of `ps`).
    #[arg(
        long,
        env = "TOKEN_RESOLVER_PASSWORD",
        hide_env_values = true,
        default_value = "wonderland"
    )]
    pub password: String,
    /// Permit http:// to a non-loopback --auth-url.
    #[arg(long)]
    pub allow_insecure_http: bool,
    /// Resolutions per row.
    #[arg(long, default_value_t = 200_000)]
    pub requests: usize,
    /// Concurrent tasks per row.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Distinct tokens the Zipf stream draws from.
    #[arg(long, default_value_t = 10_000)]
    pub tokens: usize,
    /// Zipf exponent s.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Share of resolutions that are of a token never seen before.
    #[arg(long, default_value_t = 0.01)]
    pub new_share: f64,
    /// Cache entries for the bytes-per-entry fill; 0 skips it.
    #[arg(long, default_value_t = 1_000_000)]
    pub fill: u64,
}

/// Runs the table and the fill, printing them on stdout.
pub async fn run(args: LoadArgs) -> ExitCode {
    match run_inner(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run_inner(args: LoadArgs) -> Result<(), String> {
    if args.tokens == 0 || args.requests == 0 || args.concurrency == 0 {
        return Err("--tokens, --requests and --concurrency must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&args.new_share) || args.zipf <= 0.0 {
        return Err("--new-share must be in [0, 1] and --zipf above 0".into());
    }
    let new_needed = (args.requests as f64 * args.new_share).ceil() as usize;
    let needed = args.tokens + new_needed.max(1);

    let (base, target, _server) = match &args.auth_url {
        Some(url) => (url.clone(), format!("{url} (external)"), None),
        None => {
            let (base, server) = start_reference_api()?;
            let target = format!("{base} (in-process reference API)");
            (base, target, Some(server))
        }
    };
    let endpoint =
        Endpoint::parse(&base, args.allow_insecure_http).map_err(|e| format!("--auth-url: {e}"))?;
    let mut all_tokens = match &args.tokens_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => mint(&base, &args.username, &args.password, needed).await?,
    };
    if all_tokens.len() <= args.tokens {
        return Err(format!(
            "{} tokens, need more than --tokens ({})",
            all_tokens.len(),
            args.tokens
        ));
    }
    let pool = all_tokens.split_off(args.tokens);
    if pool.len() < new_needed {
        eprintln!(
            "warning: {} new tokens for {new_needed} new-token resolutions; they repeat",
            pool.len()
        );
    }
    let plan = Arc::new(Plan {
        stream: stream(args.requests, args.tokens, args.zipf, args.new_share),
        tokens: all_tokens,
        pool,
    });

    println!(
        "token-resolver load: {} resolutions per row, Zipf(s={}) over {} tokens, {}% new, \
         concurrency {}, against {target}; {} cores",
        args.requests,
        args.zipf,
        args.tokens,
        args.new_share * 100.0,
        args.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!();
    println!("| row | resolutions/s | p50 | p99 | upstream calls | errors | peak RSS |");
    println!("|---|---:|---:|---:|---:|---:|---:|");

    let resolver = Resolver::builder()
        .default_auth_url(&base)
        .allow_insecure_http(args.allow_insecure_http)
        .build()
        .map_err(|e| e.to_string())?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let url = endpoint.as_str().to_owned();
    let mut subjects = vec![
        Subject::Resolver {
            resolver,
            base: base.clone(),
        },
        Subject::HandCache {
            cache: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(60))
                .build(),
            http: http.clone(),
            url: url.clone(),
        },
        Subject::Naive {
            http,
            url: url.clone(),
        },
    ];
    if endpoint.url().scheme() == "http" {
        let uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        subjects.push(Subject::Hyper {
            client: hyper_util::client::legacy::Client::builder(
                hyper_util::rt::TokioExecutor::new(),
            )
            .build_http(),
            uri,
        });
    }
    let mut throughput = Vec::new();
    for subject in subjects {
        let row = run_row(Arc::new(subject), &plan, args.concurrency).await;
        println!("{}", row.line());
        throughput.push((row.label, row.per_second));
    }
    println!();
    if let [(_, ours), rest @ ..] = &throughput[..] {
        let ratios: Vec<String> = rest
            .iter()
            .map(|(label, theirs)| format!("{:.1}x {label}", ours / theirs))
            .collect();
        println!("token-resolver throughput: {}", ratios.join(", "));
    }

    if args.fill > 0 {
        fill(args.fill, args.concurrency).await?;
    }
    Ok(())
}

/// The request stream shared by every row, and the tokens it names.
struct Plan {
    /// Per resolution: an index into `tokens`, or [`NEW`].
    stream: Vec<u32>,
    /// The Zipf-drawn token set, most popular first.
    tokens: Vec<String>,
    /// Tokens for new-token resolutions, used in order.
    pool: Vec<String>,
}

/// Marks a new-token resolution in [`Plan::stream`].
const NEW: u32 = u32::MAX;

/// Resolutions a task takes from the stream at once, so the tasks do not contend on its cursor.
const CHUNK: usize = 64;

/// `len` draws: a Zipf(s) rank over `n` (0-based), or [`NEW`] with probability `new_share`.
fn stream(len: usize, n: usize, s: f64, new_share: f64) -> Vec<u32> {
    let mut total = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            total += (k as f64).powf(-s);
            total
        })
        .collect();
    cdf.iter_mut().for_each(|c| *c /= total);
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    (0..len)
        .map(|_| {
            if rng.f64() < new_share {
                NEW
            } else {
                let u = rng.f64();
                cdf.partition_point(|&c| c < u).min(n - 1) as u32
            }
        })
        .collect()
}

/// Who resolves in a row.
enum Subject {
    Resolver {
        resolver: Resolver,
        base: String,
    },
    HandCache {
        cache: moka::sync::Cache<String, Arc<Answer>>,
        http: reqwest::Client,
        url: String,
    },
    Naive {
        http: reqwest::Client,
        url: String,
    },
    Hyper {
        client: hyper_util::client::legacy::Client<
            hyper_util::client::legacy::connect::HttpConnector,
            http_body_util::Empty<hyper::body::Bytes>,
        >,
        uri: axum::http::Uri,
    },
}

/// What the hand-written baselines parse an answer into.
#[derive(Deserialize)]
#[allow(dead_code)]
struct Answer {
    id: i64,
    name: String,
}

impl Subject {
    fn label(&self) -> &'static str {
        match self {
            Subject::Resolver { .. } => "token-resolver",
            Subject::HandCache { .. } => "reqwest + moka (hand-written)",
            Subject::Naive { .. } => "reqwest, no cache",
            Subject::Hyper { .. } => "hyper, no cache (floor)",
        }
    }

    fn has_cache(&self) -> bool {
        matches!(self, Subject::Resolver { .. } | Subject::HandCache { .. })
    }

    /// Resolves `token`: `Ok(true)` when that made an upstream call the subject cannot count
    /// itself (the resolver counts its own).
    async fn resolve(&self, token: &str) -> Result<bool, String> {
        match self {
            Subject::Resolver { resolver, base } => resolver
                .resolve(base, token)
                .await
                .map(|_| false)
                .map_err(|e| e.code().as_str().to_owned()),
            Subject::HandCache { cache, http, url } => {
                if cache.get(token).is_some() {
                    return Ok(false);
                }
                let answer = Arc::new(post_and_parse(http, url, token).await?);
                cache.insert(token.to_owned(), answer);
                Ok(true)
            }
            Subject::Naive { http, url } => post_and_parse(http, url, token).await.map(|_| true),
            Subject::Hyper { client, uri } => {
                use http_body_util::BodyExt;
                let request = axum::http::Request::post(uri.clone())
                    .header(header::AUTHORIZATION, format!("Bearer {token}"))
                    .header(header::ACCEPT, "application/json")
                    .header(header::CONTENT_LENGTH, "0")
                    .body(http_body_util::Empty::new())
                    .map_err(|e| e.to_string())?;
                let response = client.request(request).await.map_err(|e| e.to_string())?;
                let status = response.status();
                response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?;
                if status != StatusCode::OK {
                    return Err(format!("HTTP {status}"));
                }
                Ok(true)
            }
        }
    }

    fn upstream_calls(&self) -> u64 {
        match self {
            Subject::Resolver { resolver, .. } => resolver.stats().upstream_calls,
            _ => 0,
        }
    }
}

/// A reqwest POST with the bearer token and a serde_json parse: what an integrator writes.
async fn post_and_parse(http: &reqwest::Client, url: &str, token: &str) -> Result<Answer, String> {
    let response = http
        .post(url)
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if response.status() != StatusCode::OK {
        return Err(format!("HTTP {}", response.status()));
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| e.without_url().to_string())?;
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

/// One row of the table.
struct Row {
    label: &'static str,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    upstream_calls: u64,
    errors: u64,
    peak_rss_kib: Option<u64>,
}

impl Row {
    fn line(&self) -> String {
        format!(
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            self.label,
            self.per_second,
            micros(self.p50),
            micros(self.p99),
            self.upstream_calls,
            self.errors,
            self.peak_rss_kib.map_or("n/a".to_owned(), |k| format!(
                "{:.1} MiB",
                k as f64 / 1024.0
            )),
        )
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Warms `subject` (its cache with every token of the set, its connections in any case), then
/// runs the plan's stream from `concurrency` tasks.
async fn run_row(subject: Arc<Subject>, plan: &Arc<Plan>, concurrency: usize) -> Row {
    let warm: Vec<usize> = if subject.has_cache() {
        (0..plan.tokens.len()).collect()
    } else {
        (0..concurrency.min(plan.tokens.len())).collect()
    };
    let warm = Arc::new(warm);
    let cursor = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (subject, plan, warm, cursor) =
            (subject.clone(), plan.clone(), warm.clone(), cursor.clone());
        tasks.spawn(async move {
            loop {
                let i = cursor.fetch_add(1, Ordering::Relaxed);
                let Some(&t) = warm.get(i) else { break };
                let _ = subject.resolve(&plan.tokens[t]).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}

    let calls_before = subject.upstream_calls();
    reset_peak_rss();
    let label = subject.label();
    let total = plan.stream.len();
    let cursor = Arc::new(AtomicUsize::new(0));
    let next_new = Arc::new(AtomicUsize::new(0));
    let progress = Progress::start(label, total as u64, cursor.clone());
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (subject, plan, cursor, next_new) = (
            subject.clone(),
            plan.clone(),
            cursor.clone(),
            next_new.clone(),
        );
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(total / concurrency + CHUNK);
            let (mut calls, mut errors) = (0u64, 0u64);
            loop {
                let first = cursor.fetch_add(CHUNK, Ordering::Relaxed);
                if first >= total {
                    break;
                }
                for &draw in &plan.stream[first..(first + CHUNK).min(total)] {
                    let token = match draw {
                        NEW => {
                            let n = next_new.fetch_add(1, Ordering::Relaxed);
                            &plan.pool[n % plan.pool.len()]
                        }
                        rank => &plan.tokens[rank as usize],
                    };
                    let began = Instant::now();
                    match subject.resolve(token).await {
                        Ok(called) => calls += u64::from(called),
                        Err(_) => errors += 1,
                    }
                    latencies.push(began.elapsed());
                }
            }
            (latencies, calls, errors)
        });
    }
    let mut latencies = Vec::with_capacity(total);
    let (mut calls, mut errors) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        if let Ok((l, c, e)) = done {
            latencies.extend(l);
            calls += c;
            errors += e;
        }
    }
    let elapsed = start.elapsed();
    progress.finish();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Row {
        label,
        per_second: total as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        upstream_calls: calls + subject.upstream_calls() - calls_before,
        errors,
        peak_rss_kib: proc_status_kib("VmHWM:"),
    }
}

/// Fills a resolver with `entries` distinct tokens through `resolve`, against an in-process
/// upstream that answers any token, and prints the RSS delta per entry.
async fn fill(entries: u64, concurrency: usize) -> Result<(), String> {
    let (base, _server) = start_fill_upstream()?;
    let resolver = Resolver::builder()
        .default_auth_url(&base)
        .cache_ttl(Duration::from_secs(3600))
        // Room for the warm-up and the fill, no more: moka sizes its frequency sketch by this.
        .max_cache_entries(entries + WARM_UP_PER_TASK * concurrency as u64)
        .build()
        .map_err(|e| e.to_string())?;
    // Connections and buffers exist before the first measurement: a concurrent warm-up opens
    // as many connections as the fill will use, on both sides.
    let mut warm_up = tokio::task::JoinSet::new();
    for task in 0..concurrency as u64 {
        let (resolver, base) = (resolver.clone(), base.clone());
        warm_up.spawn(async move {
            for i in 0..WARM_UP_PER_TASK {
                resolver
                    .resolve(&base, &fill_token(u64::MAX - task * WARM_UP_PER_TASK - i))
                    .await?;
            }
            Ok::<(), crate::ResolveError>(())
        });
    }
    while let Some(done) = warm_up.join_next().await {
        done.map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    let rss_before = proc_status_kib("VmRSS:").ok_or("no /proc/self/status")?;
    let entries_before = resolver.stats().entries;
    let cursor = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("fill", entries, cursor.clone());
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (resolver, base, cursor) = (resolver.clone(), base.clone(), cursor.clone());
        tasks.spawn(async move {
            loop {
                let i = cursor.fetch_add(1, Ordering::Relaxed);
                if i >= entries {
                    return Ok::<(), String>(());
                }
                resolver
                    .resolve(&base, &fill_token(i))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    let elapsed = start.elapsed();
    progress.finish();
    let filled = resolver.stats().entries - entries_before;
    let rss_after = proc_status_kib("VmRSS:").ok_or("no /proc/self/status")?;
    let delta = rss_after.saturating_sub(rss_before) * 1024;
    println!(
        "fill: {filled} entries (43-byte tokens, 16-byte names) through resolve in {:.1} s: \
         RSS +{:.1} MiB = {:.0} bytes/entry (target <= 512)",
        elapsed.as_secs_f64(),
        delta as f64 / (1024.0 * 1024.0),
        delta as f64 / filled.max(1) as f64,
    );
    Ok(())
}

/// Resolutions each task of the fill makes before the first reading (and entries they leave).
const WARM_UP_PER_TASK: u64 = 4;

/// The fill's `i`th token: 43 bytes, like 32 random bytes in base64url.
fn fill_token(i: u64) -> String {
    format!("f{i:042}")
}

/// Mints `n` access tokens at a reference-API-compatible `base`: one login, then
/// `/api/access_token` from a few concurrent clients sharing the session.
async fn mint(base: &str, username: &str, password: &str, n: usize) -> Result<Vec<String>, String> {
    let mut client = IntegratorClient::new(base);
    client
        .login_password(username, password)
        .await
        .map_err(|e| format!("login as {username} at {base}: {e}"))?;
    let minted = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("minting tokens", n as u64, minted.clone());
    const MINTERS: usize = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for m in 0..MINTERS {
        let mut client = client.clone();
        let minted = minted.clone();
        let count = n / MINTERS + usize::from(m < n % MINTERS);
        tasks.spawn(async move {
            let mut tokens = Vec::with_capacity(count);
            for _ in 0..count {
                let token = client
                    .fetch_access_token()
                    .await
                    .map_err(|e| format!("minting a token: {e}"))?;
                tokens.push(token.secret().to_owned());
                minted.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, String>(tokens)
        });
    }
    let mut tokens = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        tokens.extend(done.map_err(|e| e.to_string())??);
    }
    progress.finish();
    Ok(tokens)
}

/// A progress bar on stderr that appears only once a run has lasted a second.
struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start<C: Counter>(label: &'static str, total: u64, done: Arc<C>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
            if let Ok(style) =
                ProgressStyle::with_template("{msg:>30} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(label);
            let began = Instant::now();
            let mut shown = false;
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if !shown && began.elapsed() > Duration::from_secs(1) {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    shown = true;
                }
                bar.set_position(done.get().min(total));
            }
            bar.finish_and_clear();
        });
        Progress {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a progress bar reads.
trait Counter: Send + Sync + 'static {
    fn get(&self) -> u64;
}

impl Counter for AtomicU64 {
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl Counter for AtomicUsize {
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed) as u64
    }
}

/// A field of `/proc/self/status` in KiB (`VmRSS:`, `VmHWM:`); `None` off Linux.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Resets `VmHWM` to the current RSS (Linux 4.0+), so each row reports its own peak.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A server running on its own thread and runtime, so it does not take the measured runtime's
/// workers; stopped when dropped.
struct ServerThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Runs `serve` on a new thread; it sends its base URL (or why it could not start), then
    /// serves until the receiver fires.
    fn start<F, Fut>(serve: F) -> Result<(String, ServerThread), String>
    where
        F: FnOnce(
                tokio::sync::oneshot::Receiver<()>,
                std::sync::mpsc::Sender<Result<String, String>>,
            ) -> Fut
            + Send
            + 'static,
        Fut: Future<Output = ()>,
    {
        let (ready, started) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread =
            std::thread::spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(serve(stopped, ready)),
                    Err(e) => {
                        let _ = ready.send(Err(e.to_string()));
                    }
                }
            });
        let base = started
            .recv()
            .map_err(|_| "the server thread ended before it started".to_owned())??;
        Ok((
            base,
            ServerThread {
                stop: Some(stop),
                thread: Some(thread),
            },
        ))
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reference API with its demo users on `127.0.0.1:0`.
fn start_reference_api() -> Result<(String, ServerThread), String> {
    ServerThread::start(|stopped, ready| async move {
        let running = match ReferenceApi::new(ApiConfig::default()) {
            Ok(api) => api
                .spawn(([127, 0, 0, 1], 0).into())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match running {
            Ok(running) => {
                let _ = ready.send(Ok(running.base_url()));
                let _ = stopped.await;
            }
            Err(e) => {
                let _ = ready.send(Err(e));
            }
        }
    })
}

/// An upstream on `127.0.0.1:0` answering any bearer token with a user whose name is 16 bytes.
fn start_fill_upstream() -> Result<(String, ServerThread), String> {
    async fn user(headers: HeaderMap) -> Response {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        if headers.get(header::AUTHORIZATION).is_none() {
            return StatusCode::UNAUTHORIZED.into_response();
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let body = format!(
            r#"{{"id":{id},"name":"player{:010}"}}"#,
            id % 10_000_000_000
        );
        (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "private, max-age=3600"),
            ],
            body,
        )
            .into_response()
    }
    ServerThread::start(|stopped, ready| async move {
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", 0)).await {
            Ok(listener) => listener,
            Err(e) => {
                let _ = ready.send(Err(e.to_string()));
                return;
            }
        };
        let base = listener
            .local_addr()
            .map(|a| format!("http://{a}"))
            .map_err(|e| e.to_string());
        let _ = ready.send(base);
        let app = axum::Router::new().route("/api/user", axum::routing::post(user));
        tokio::select! {
            _ = axum::serve(listener, app) => {}
            _ = stopped => {}
        }
    })
}
