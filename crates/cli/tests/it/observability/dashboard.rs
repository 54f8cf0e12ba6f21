//! The Grafana dashboard's shape: JSON, a datasource variable, every panel with a query.

use super::{dashboard, panels};

#[test]
fn the_dashboard_parses_and_every_panel_queries_the_datasource_variable() {
    // Pins down the dashboard's shape: JSON, a `datasource` variable of type datasource on
    // Prometheus, every panel (rows aside) titled with at least one non-empty query, on
    // `${datasource}`, and the panels the issue lists.
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a datasource template variable on Prometheus"
    );
    let panels = panels(&dashboard);
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for (title, queries) in &panels {
        assert!(!title.is_empty(), "a panel without a title");
        assert!(
            !queries.is_empty() && queries.iter().all(|q| !q.trim().is_empty()),
            "panel {title:?} has no query"
        );
    }
    let text = serde_json::to_string(&dashboard).unwrap();
    for datasource in text.split("\"datasource\":").skip(1) {
        let uid = datasource.split("\"uid\":").nth(1).unwrap_or("");
        assert!(
            datasource.starts_with('{') && uid.starts_with("\"${datasource}\""),
            "every datasource is the variable: {}",
            &datasource[..datasource.len().min(80)]
        );
    }
    let titles: Vec<&str> = panels.iter().map(|(t, _)| t.as_str()).collect();
    for wanted in [
        "Cache hit ratio",
        "Resolutions by outcome",
        "Integrator latency p50 / p99",
        "Integrator answers by status",
        "Calls in flight against the bound",
        "Shared tier hits, misses and errors",
        "Revocation channel health",
        "Revocation delay p50 / p99",
        "Sessions",
        "Connections refused and shed",
        "Event streams open",
        "Events delivered",
    ] {
        assert!(
            titles.contains(&wanted),
            "no panel {wanted:?} in {titles:?}"
        );
    }
}
