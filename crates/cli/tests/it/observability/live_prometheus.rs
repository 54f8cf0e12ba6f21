//! A real Prometheus (Debian's `prometheus`) scraping a real `game-server` and a real `sidecar`
//! with `alerts.yaml` loaded: every metric the dashboard and the rules name is exported, and
//! every panel's query runs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::{login_and_take_token, reference_api, GameServerProcess};
use token_resolver_game_server::GameClient;
use token_resolver_player::RoomJoinArgs;
use token_resolver_support as support;

use super::promql::{metric_names, unexported, variable_metric_names};
use super::{dashboard, deploy, panels, program, ALERTS, BIN};

/// A `token-resolver sidecar` process on loopback with its admin listener, killed on drop.
struct Sidecar {
    child: Child,
    /// Kept open so that the sidecar never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
    http: SocketAddr,
    admin: SocketAddr,
}

impl Sidecar {
    /// Starts it on `auth_url` and waits for its banner.
    fn start(auth_url: &str) -> Sidecar {
        let mut child = Command::new(BIN)
            .args([
                "sidecar",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .args(["--auth-url", auth_url])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap() == 0 || line.starts_with("SIGTERM") {
                break;
            }
            banner.push_str(&line);
        }
        let addr = |prefix: &str| -> SocketAddr {
            let line = (banner.lines().find(|l| l.starts_with(prefix)))
                .unwrap_or_else(|| panic!("no {prefix:?} in {banner:?}"));
            (line.split_whitespace())
                .find_map(|w| w.trim_start_matches("http://").parse().ok())
                .unwrap_or_else(|| panic!("no address in {line:?}"))
        };
        let (http, admin) = (addr("sidecar listening on"), addr("admin listener on"));
        Sidecar {
            child,
            _stdout: stdout,
            http,
            admin,
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's `prometheus`, on a free loopback port with its configuration and its storage in a
/// directory of its own; killed, and the directory removed, on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Prometheus {
    /// Starts `binary` scraping `targets` (job name, address) every second, with `alerts`
    /// loaded as its rule file.
    fn start(binary: &Path, targets: &[(&str, SocketAddr)], alerts: &Path) -> Prometheus {
        let dir = std::env::temp_dir().join(format!(
            "token-resolver-prometheus-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {:?}\nscrape_configs:\n",
            alerts.canonicalize().unwrap()
        );
        for (job, addr) in targets {
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: [\"{addr}\"]\n"
            ));
        }
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        // A free port: Prometheus takes no port 0 it would tell us of.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Prometheus {
            child,
            dir,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// What it logged, for a failure's message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET {url}{path}` with `query`: the `data` of a successful answer, or `None`.
    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Option<Value> {
        let answer = reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .query(query)
            .send()
            .await
            .ok()?;
        let body: Value = answer.json().await.ok()?;
        (body["status"] == "success").then(|| body["data"].clone())
    }

    /// The value of the instant query `query` for its first series, if any.
    async fn value(&self, query: &str) -> Option<f64> {
        let data = self.api("/api/v1/query", &[("query", query)]).await?;
        data["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A dashboard query as Prometheus can run it: Grafana's variables given values.
fn as_prometheus_query(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$job", ".*")
        .replace("$instance", ".*")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scraping_the_products_has_every_metric_the_dashboard_and_alerts_name() {
    // Pins down "no panel on a metric nobody exports": a real Prometheus scrapes a real game
    // server and a real sidecar (each after a little real traffic), loads alerts.yaml, and then
    // has every metric each panel and each rule names, runs every panel's query, and shows the
    // bound, readiness and the sidecar's open event stream as the products hold them.
    let Some(binary) = program("prometheus") else {
        support::present(false, "prometheus", "prometheus");
        return;
    };
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let game = GameServerProcess::start(
        BIN,
        &["--auth-url", &base, "--admin-listen", "127.0.0.1:0"],
        &[],
    )
    .await;
    let sidecar = Sidecar::start(&base);

    // A connect (a miss: one call) and a join (a hit) on the game server; a resolve on the
    // sidecar, and a game server following its events.
    let mut player = GameClient::open(game.addr).await.unwrap();
    player.connect(Some(&token)).await.unwrap();
    let rooms = player.search_rooms().await.unwrap();
    player
        .join(
            &RoomJoinArgs::new(&rooms[0], Default::default()),
            Some(&token),
        )
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let resolved = http
        .post(format!("http://{}/v1/resolve", sidecar.http))
        .json(&json!({"access_token": token, "session": "s-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);
    let events = http
        .get(format!("http://{}/v1/events", sidecar.http))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);

    let alerts = deploy().join("prometheus/alerts.yaml");
    let admin = game.admin.expect("the banner names the admin listener");
    let prometheus = Prometheus::start(
        &binary,
        &[("game-server", admin), ("sidecar", sidecar.admin)],
        &alerts,
    );
    support::eventually_within(
        "Prometheus scrapes both targets",
        Duration::from_secs(60),
        || async {
            let Some(targets) = prometheus.api("/api/v1/targets", &[]).await else {
                return false;
            };
            let up: BTreeSet<&str> = (targets["activeTargets"].as_array().into_iter().flatten())
                .filter(|t| t["health"] == "up")
                .filter_map(|t| t["labels"]["job"].as_str())
                .collect();
            up.contains("game-server") && up.contains("sidecar")
        },
    )
    .await;
    let both = |job: &'static str| {
        let prometheus = &prometheus;
        async move {
            let q = format!("game_server_ready{{job=\"{job}\"}}");
            prometheus.value(&q).await == Some(1.0)
        }
    };
    support::eventually_within(
        "both targets' samples are queryable",
        Duration::from_secs(30),
        || async { both("game-server").await && both("sidecar").await },
    )
    .await;

    // Every metric a panel, a dashboard variable or a rule names.
    let dashboard = dashboard();
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (title, queries) in panels(&dashboard) {
        for query in queries {
            for name in metric_names(&query) {
                wanted
                    .entry(name)
                    .or_default()
                    .insert(format!("panel {title:?}"));
            }
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            for name in variable_metric_names(query) {
                let name_of = variable["name"].as_str().unwrap_or("");
                wanted
                    .entry(name)
                    .or_default()
                    .insert(format!("variable {name_of}"));
            }
        }
    }
    let rules = prometheus.api("/api/v1/rules", &[]).await.expect("rules");
    let loaded: Vec<(String, String)> = (rules["groups"].as_array().into_iter().flatten())
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            let name = r["name"].as_str().unwrap_or("").to_owned();
            (name, r["query"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    let loaded_names: BTreeSet<&str> = loaded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        loaded_names,
        ALERTS.into_iter().collect(),
        "Prometheus loaded every alert of alerts.yaml: {}",
        prometheus.log()
    );
    for (alert, query) in &loaded {
        for name in metric_names(query) {
            wanted
                .entry(name)
                .or_default()
                .insert(format!("alert {alert}"));
        }
    }
    assert!(wanted.len() >= 25, "{} metrics named", wanted.len());

    let exported: BTreeSet<String> = (prometheus.api("/api/v1/label/__name__/values", &[]).await)
        .and_then(|names| names.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    let names: Vec<String> = wanted.keys().cloned().collect();
    let missing: Vec<String> = unexported(&exported, &names)
        .into_iter()
        .map(|name| format!("{name} (named by {:?})", wanted[&name]))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics named by the dashboard or the alerts that neither product exports: {missing:#?}"
    );
    // A `_bucket`, `_sum` or `_count` is a histogram's, as the exporter types it.
    for name in &names {
        let Some(base) = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
        else {
            continue;
        };
        let metadata = prometheus
            .api("/api/v1/metadata", &[("metric", base)])
            .await
            .unwrap_or_default();
        assert_eq!(
            metadata[base][0]["type"], "histogram",
            "{name} is a histogram's series: {metadata}"
        );
    }

    // Every panel's query runs (Grafana's variables given values).
    for (title, queries) in panels(&dashboard) {
        for query in queries {
            let run = as_prometheus_query(&query);
            assert!(
                prometheus
                    .api("/api/v1/query", &[("query", &run)])
                    .await
                    .is_some(),
                "panel {title:?}: Prometheus refuses {run}"
            );
        }
    }
    // What the products hold shows: the bound (the default 64), the sidecar's one stream, the
    // game server's hit and its miss, no alert firing on a healthy pair.
    let value = |q: &'static str| prometheus.value(q);
    assert_eq!(
        value("token_resolver_upstream_slots{job=\"game-server\"}").await,
        Some(64.0)
    );
    assert_eq!(
        value("sidecar_event_streams_open{job=\"sidecar\"}").await,
        Some(1.0)
    );
    assert_eq!(
        value("token_resolver_resolutions_total{job=\"game-server\",outcome=\"hit\"}").await,
        Some(1.0)
    );
    assert_eq!(
        value("token_resolver_resolutions_total{job=\"sidecar\",outcome=\"miss\"}").await,
        Some(1.0)
    );
    assert_eq!(
        value("game_server_not_ready{job=\"game-server\",reason=\"draining\"}").await,
        Some(0.0)
    );
    let firing = prometheus.api("/api/v1/alerts", &[]).await.expect("alerts");
    assert_eq!(firing["alerts"], json!([]), "no alert on a healthy pair");
    drop(events);
}
