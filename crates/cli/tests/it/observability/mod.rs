//! The dashboard and the alerts under `deploy/`, against what the products really export, and
//! the metrics those read as the products record them. One module per concept:
//!
//! - [`rules`]: `promtool check rules` and `promtool test rules` pass, and every alert has a
//!   case where it fires and one where it stays silent;
//! - [`dashboard`]: the Grafana dashboard parses, every panel has a query on the datasource
//!   variable, and the panels the issue lists are there;
//! - [`promql`]: the metric names a PromQL expression selects, which the live test compares;
//! - [`live_prometheus`]: a real Prometheus (Debian's `prometheus`) scraping a running
//!   `token-resolver game-server` and `token-resolver sidecar` has every metric each panel and
//!   each rule names, and evaluates every expression;
//! - [`scraped`]: the metrics the alerts read (readiness, revocation delay, connections turned
//!   away and at which cap), scraped from an admin listener;
//! - [`tasks`]: the soak's task count, rising and falling with a product's sessions and
//!   streams.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod dashboard;
mod live_prometheus;
mod promql;
mod rules;
mod scraped;
mod tasks;

/// The `token-resolver` binary.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

/// The repository's `deploy/` folder.
fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every alert `alerts.yaml` defines: those the issue asks for (integrator errors or p99, hit
/// ratio, the bound saturated, the shared tier or its channel down, readiness, revocation
/// delay, login floods) and the two that warn before them (slots nearly full, a full node).
const ALERTS: [&str; 12] = [
    "TokenResolverIntegratorErrors",
    "TokenResolverIntegratorSlow",
    "TokenResolverHitRatioCollapsed",
    "TokenResolverOverloaded",
    "TokenResolverUpstreamSlotsNearlyFull",
    "TokenResolverSharedTierDown",
    "TokenResolverRevocationChannelDown",
    "TokenResolverRevocationChannelFlapping",
    "TokenResolverNotReady",
    "TokenResolverRevocationSlow",
    "GameServerLoginFloodThrottled",
    "GameServerFull",
];

/// Where `program` is on this machine, if anywhere: the PATH, then `/usr/bin`.
fn program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The dashboard, parsed.
fn dashboard() -> Value {
    let text = std::fs::read_to_string(deploy().join("grafana/token-resolver.json")).unwrap();
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every panel of the dashboard that shows data (rows only group them): title and queries.
fn panels(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = stack.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            stack.extend(nested);
        }
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().unwrap_or("").to_owned();
        let queries = (panel["targets"].as_array().into_iter().flatten())
            .filter_map(|t| t["expr"].as_str())
            .map(str::to_owned)
            .collect();
        found.push((title, queries));
    }
    found
}
