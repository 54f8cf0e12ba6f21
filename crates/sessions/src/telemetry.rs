//! What live sessions and the admin listener record, and how a process exposes it:
//! [`REVOKED_TOTAL`], the gauges set at each scrape ([`READY`], [`ALIVE_TASKS`]), and
//! [`Metrics`], the Prometheus recorder behind the admin listener's `/metrics`. The names keep
//! the `game_server_` prefix the game server gave them first: the sidecar's sessions are
//! counted under the same name.
//!
//! No label carries a token, a user name or a user id.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// Counter: sessions closed because a revocation named them (a logout, a ban, a revoked or
/// rejected token).
pub const REVOKED_TOTAL: &str = "game_server_sessions_revoked_total";
/// Gauge: 1 while `/readyz` would answer 200, 0 while it would answer 503; set at each scrape
/// of `/metrics`, so that an alert sees what an orchestrator sees.
///
/// It is the process's, like every metric of the recorder: a process that runs two admin
/// listeners (two nodes embedded in one process) shows the readiness of whichever was scraped
/// last, whichever listener serves the scrape. Run one admin listener per process, or read
/// each node's `/readyz` instead.
pub const READY: &str = "game_server_ready";
/// Gauge, label `reason` (`game_listener`, `draining`, `shared_cache_invalidation`): 1 while
/// that reason keeps `/readyz` at 503, else 0; set at each scrape of `/metrics`, process-wide
/// as [`READY`] is.
pub const NOT_READY: &str = "game_server_not_ready";
/// Gauge: the process's alive tokio tasks (tokio's `RuntimeMetrics::num_alive_tasks`), set at
/// each scrape of `/metrics`. A count that keeps rising under a steady load is a task leak: the
/// soak check (`token_resolver_chaos::soak`) holds its slope to a tolerance.
///
/// It counts the tasks of the runtime that serves the scrape: the binary runs one runtime per
/// process, so that is every task of the game server or the sidecar.
pub const ALIVE_TASKS: &str = "token_resolver_runtime_alive_tasks";
/// Every `reason` of [`NOT_READY`].
pub const NOT_READY_REASONS: [&str; 3] = ["game_listener", "draining", "shared_cache_invalidation"];

/// The upper bounds of every latency histogram's buckets, in seconds: 0.5 ms to 10 s.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How often the recorder folds recorded samples into its histograms when nobody scrapes:
/// keeps its memory bounded between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// This process's metrics in the Prometheus text format: the recorder every `metrics` call of
/// the process reports to, installed once, with latency histograms as true histograms.
#[derive(Debug, Clone)]
pub struct Metrics {
    handle: PrometheusHandle,
}

/// Why [`Metrics::install`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The bucket configuration was refused.
    #[error("cannot configure the Prometheus recorder: {0}")]
    Build(#[from] BuildError),
    /// Another recorder is installed in this process already: install this one first, before
    /// anything records a metric.
    #[error("another metrics recorder is installed already")]
    Taken,
}

impl Metrics {
    /// Installs the Prometheus recorder as this process's global recorder, or returns the one
    /// installed by an earlier call. Call it before the first resolution: the resolver
    /// registers its counters then. A thread folds samples into the histograms every 5 s.
    ///
    /// # Errors
    ///
    /// [`MetricsError::Taken`] when another recorder was installed first.
    pub fn install() -> Result<Metrics, MetricsError> {
        static INSTALLED: Mutex<Option<Metrics>> = Mutex::new(None);
        let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(metrics) = &*installed {
            return Ok(metrics.clone());
        }
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &LATENCY_BUCKETS)?
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).map_err(|_| MetricsError::Taken)?;
        register();
        let metrics = installed.insert(Metrics { handle }).clone();
        let upkeep = metrics.handle.clone();
        let _ = std::thread::Builder::new()
            .name("metrics-upkeep".to_owned())
            .spawn(move || loop {
                std::thread::sleep(UPKEEP_EVERY);
                upkeep.run_upkeep();
            });
        Ok(metrics)
    }

    /// Every metric recorded so far, in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

/// Describes and registers at zero the resolver's metrics
/// ([`token_resolver::telemetry::register`]) and those of live sessions and the admin
/// listener, so that the first scrape already has every series a dashboard or an alert names.
fn register() {
    use metrics::{describe_counter, describe_gauge};
    token_resolver::telemetry::register();
    token_resolver_listener::caps::register_metrics();
    describe_counter!(
        REVOKED_TOTAL,
        "Sessions closed because a revocation named them."
    );
    describe_gauge!(
        READY,
        "1 while /readyz answers 200, else 0 (set at each scrape, process-wide: with two admin \
         listeners in one process, the node scraped last)."
    );
    describe_gauge!(
        NOT_READY,
        "1 while this reason keeps /readyz at 503, by reason (set at each scrape, process-wide: \
         with two admin listeners in one process, the node scraped last)."
    );
    describe_gauge!(
        ALIVE_TASKS,
        "The process's alive tokio tasks (set at each scrape)."
    );
    let _ = metrics::counter!(REVOKED_TOTAL);
    let _ = metrics::gauge!(READY);
    let _ = metrics::gauge!(ALIVE_TASKS);
    for reason in NOT_READY_REASONS {
        let _ = metrics::gauge!(NOT_READY, "reason" => reason);
    }
}
