//! Who resolves in a row of the table (the resolver, or a baseline), and running one row:
//! warm-up, then the plan's stream from many tasks, timed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use token_resolver::Resolver;

use super::plan::{Plan, CHUNK, NEW};
use super::progress::{proc_status_kib, reset_peak_rss, Progress};
use token_resolver_loadgen::baselines::{hyper_post, naive_resolve, HandWritten, HyperClient};

/// Who resolves in a row. One value per row of the table, so the size of the largest
/// variant does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Subject {
    Resolver {
        resolver: Resolver,
        base: String,
    },
    HandWritten(HandWritten),
    Naive {
        http: reqwest::Client,
        url: String,
    },
    Hyper {
        /// Boxed: hyper-util's client is some 400 bytes, the other rows' a few dozen.
        client: Box<HyperClient>,
        uri: axum::http::Uri,
    },
}

impl Subject {
    fn label(&self) -> &'static str {
        match self {
            Subject::Resolver { .. } => "token-resolver",
            Subject::HandWritten(_) => "reqwest + moka (hand-written)",
            Subject::Naive { .. } => "reqwest, no cache",
            Subject::Hyper { .. } => "hyper, no cache (floor)",
        }
    }

    fn has_cache(&self) -> bool {
        matches!(self, Subject::Resolver { .. } | Subject::HandWritten(_))
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
            Subject::HandWritten(cache) => cache.resolve(token).await.map(|(_, called)| called),
            Subject::Naive { http, url } => naive_resolve(http, url, token).await.map(|_| true),
            Subject::Hyper { client, uri } => hyper_post(client, uri, token).await.map(|_| true),
        }
    }

    fn upstream_calls(&self) -> u64 {
        match self {
            Subject::Resolver { resolver, .. } => resolver.stats().upstream_calls,
            _ => 0,
        }
    }
}

/// Resolves every token of the set once with a cache (so the row measures the steady state),
/// or one per task without (so its connections are open).
async fn warm_up(subject: &Arc<Subject>, plan: &Arc<Plan>, concurrency: usize) {
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
}

/// One row of the table.
pub(super) struct Row {
    pub(super) label: &'static str,
    pub(super) per_second: f64,
    p50: Duration,
    p99: Duration,
    upstream_calls: u64,
    errors: u64,
    peak_rss_kib: Option<u64>,
    /// The whole process's CPU time over the timed part, per resolution: both cores, the
    /// in-process upstream's thread included.
    pub(super) cpu_per_resolution: Option<Duration>,
}

impl Row {
    pub(super) fn line(&self) -> String {
        format!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} |",
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
            self.cpu_per_resolution
                .map_or("n/a".to_owned(), |cpu| format!(
                    "{:.2} µs",
                    cpu.as_secs_f64() * 1e6
                )),
        )
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Warms `subject` (its cache with every token of the set, its connections in any case), then
/// runs the plan's stream from `concurrency` tasks.
pub(super) async fn run_row(subject: Arc<Subject>, plan: &Arc<Plan>, concurrency: usize) -> Row {
    warm_up(&subject, plan, concurrency).await;
    let calls_before = subject.upstream_calls();
    reset_peak_rss();
    let label = subject.label();
    let total = plan.stream.len();
    let cursor = Arc::new(AtomicUsize::new(0));
    let next_new = Arc::new(AtomicUsize::new(0));
    let progress = Progress::start(label, total as u64, cursor.clone());
    let cpu_before = process_cpu();
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
    let cpu = process_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before).div_f64(total.max(1) as f64));
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
        cpu_per_resolution: cpu,
    }
}

/// The CPU time this process has used, on every thread: what a row costs, which the machine's
/// other tenants move less than its throughput.
fn process_cpu() -> Option<Duration> {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .ok()
        .map(Duration::from)
}
