//! The dashboard and the alerts under `deploy/`, against what the products really export:
//! `promtool check rules` and `promtool test rules` pass, the Grafana dashboard parses and every
//! panel has a query, and a real Prometheus (Debian's `prometheus`) scraping a running
//! `token-resolver game-server` and `token-resolver sidecar` has every metric each panel and
//! each rule names, and evaluates every expression.

use token_resolver_support as support;

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

/// `promtool` when installed; otherwise the test is skipped with a note (failed under CI).
fn promtool() -> Option<PathBuf> {
    let found = program("promtool");
    support::present(found.is_some(), "promtool", "prometheus").then(|| found.unwrap())
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    // Pins down alerts.yaml as Prometheus reads it and its unit tests: every alert fires where
    // alerts_test.yaml says and stays silent where it says, with its labels and annotations.
    let Some(promtool) = promtool() else { return };
    let dir = deploy().join("prometheus");
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts_test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "promtool {}: {text}", args.join(" "));
        assert!(
            text.contains("SUCCESS"),
            "promtool {}: {text}",
            args.join(" ")
        );
    }
    // Every alert has its own unit tests: at least one case where it fires and one where it
    // is expected silent.
    let tests = std::fs::read_to_string(dir.join("alerts_test.yaml")).unwrap();
    for alert in ALERTS {
        let cases: Vec<&str> = tests
            .split(&format!("alertname: {alert}\n"))
            .skip(1)
            .map(|after| after.split("- eval_time").next().unwrap_or(after))
            .collect();
        assert!(
            cases
                .iter()
                .any(|c| c.trim_start().starts_with("exp_alerts:\n")),
            "{alert} has no case where it fires"
        );
        assert!(
            cases
                .iter()
                .any(|c| c.trim_start().starts_with("exp_alerts: []")),
            "{alert} has no case where it stays silent"
        );
    }
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

/// PromQL words that are no metric: aggregations, operators, modifiers, literals.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
];

/// Clauses whose parenthesised list holds label names, not metrics.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: every identifier that is not in a string, a
/// label matcher `{…}`, a range or subquery `[…]`, a label list (`by (…)`, `on (…)`…), and is
/// neither a function (followed by `(`), a keyword nor part of a number.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut words: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if words
                .last()
                .is_some_and(|w| LABEL_LISTS.contains(&w.as_str())) =>
            {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
                words.push(")".into());
            }
            '0'..='9' | '.' => {
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || ".+-_".contains(chars[i]))
                {
                    // An exponent's sign belongs to the number; any other sign ends it.
                    if "+-".contains(chars[i]) && !matches!(chars[i - 1], 'e' | 'E') {
                        break;
                    }
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                let keyword = KEYWORDS.contains(&word.to_ascii_lowercase().as_str());
                if next != Some(&'(') && !keyword {
                    names.insert(word.clone());
                }
                words.push(word.to_ascii_lowercase());
            }
            _ => {
                if !c.is_whitespace() {
                    words.push(c.to_string());
                }
                i += 1;
            }
        }
    }
    names
}

/// The metric names of a Grafana variable's query: `label_values(SELECTOR, label)` names the
/// metrics of its selector (its label is none); anything else is PromQL.
fn variable_metric_names(query: &str) -> BTreeSet<String> {
    match query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|inner| inner.rsplit_once(','))
    {
        Some((selector, _label)) => metric_names(selector),
        None => metric_names(query),
    }
}

#[test]
fn metric_names_are_taken_from_expressions_and_nothing_else() {
    // Pins down the extraction the Prometheus test relies on: functions, label names in
    // matchers and in `by`/`on` lists, strings, durations, Grafana's variables and numbers are
    // not metrics; every selected metric is one, however it is written.
    let names = |expr: &str| metric_names(expr).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            "histogram_quantile(0.99, sum by (job, le) (rate(x_seconds_bucket{job=~\"$job\", le!=\"1e3\"}[$__rate_interval])))"
        ),
        ["x_seconds_bucket"]
    );
    assert_eq!(
        names(
            "max by (job, instance) (a) == 0\nunless on (job, instance)\nmax by(job,instance)(b{reason=\"draining\"}) == 1"
        ),
        ["a", "b"]
    );
    assert_eq!(
        names("sum(rate(c_total[5m] offset 1h)) / ignoring(code) group_left(le) d > 1e-3 * 2"),
        ["c_total", "d"]
    );
    assert_eq!(names("increase(servce_total[15m]) > 3"), ["servce_total"]);
    assert_eq!(names("{__name__=\"x\"} or vector(0)"), Vec::<String>::new());
    assert_eq!(
        variable_metric_names("label_values(y_total{job=~\"$job\"}, instance)")
            .into_iter()
            .collect::<Vec<_>>(),
        ["y_total"]
    );
    // And a name nobody exports is one the comparison reports.
    let exported: BTreeSet<String> = ["a".to_owned()].into();
    assert_eq!(
        unexported(&exported, &names("a + servce_total")),
        ["servce_total"]
    );
}

/// The names of `wanted` that are not in `exported`.
fn unexported(exported: &BTreeSet<String>, wanted: &[String]) -> Vec<String> {
    wanted
        .iter()
        .filter(|name| !exported.contains(*name))
        .cloned()
        .collect()
}

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

/// Held by the tests that serve `/metrics` from this process: its gauges are the process's,
/// and a scrape sets `game_server_ready` from the node scraped, so two such nodes scraped at
/// once would read each other's readiness.
static IN_PROCESS_METRICS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `GET /metrics` of an admin listener.
async fn scrape(admin: SocketAddr) -> String {
    reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the sample of `name` whose labels include every one of `labels` (`k="v"`).
fn sample(exposition: &str, name: &str, labels: &[&str]) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let rest = series.strip_prefix(name)?;
        let wanted = (rest.is_empty() || rest.starts_with('{'))
            && labels.iter().all(|label| rest.contains(label));
        wanted.then(|| value.parse().ok()).flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_shows_in_metrics_and_says_why_a_node_is_not_ready() {
    // Pins down the gauges the readiness and revocation-channel alerts read: a node whose
    // Redis revocation channel is not subscribed (nothing listens on its Redis port) scrapes
    // as not ready for `shared_cache_invalidation`, and once it drains, for `draining` too.
    // In this process, with the recorder the binary installs: the drain of a process ends
    // with its admin listener, too soon to be scraped.
    let _alone = IN_PROCESS_METRICS.lock().await;
    let metrics = token_resolver_game_server::telemetry::Metrics::install().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", closed.local_addr().unwrap());
    drop(closed);
    let resolver = token_resolver::Resolver::builder()
        .auth_required(false)
        .shared_cache(token_resolver::RedisTier::new(
            url,
            "a-secret-of-16-bytes-or-more",
        ))
        .build()
        .unwrap();
    let game = support::game_server(resolver, vec![support::room("lobby", None)]).await;
    let config = token_resolver_game_server::AdminConfig {
        metrics: Some(metrics),
        ..Default::default()
    };
    let admin = game
        .spawn_admin("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let admin = admin.local_addr();
    let text = scrape(admin).await;
    assert_eq!(sample(&text, "game_server_ready", &[]), Some(0.0), "{text}");
    for (reason, value) in [
        ("shared_cache_invalidation", 1.0),
        ("draining", 0.0),
        ("game_listener", 0.0),
    ] {
        let label = format!("reason=\"{reason}\"");
        assert_eq!(
            sample(&text, "game_server_not_ready", &[&label]),
            Some(value),
            "{reason} in {text}"
        );
    }
    let drained = tokio::spawn(game.drain(Duration::from_secs(1)));
    support::eventually_async("the draining node scrapes as draining", || async {
        let text = scrape(admin).await;
        sample(&text, "game_server_not_ready", &["reason=\"draining\""]) == Some(1.0)
    })
    .await;
    assert_eq!(
        sample(&scrape(admin).await, "game_server_ready", &[]),
        Some(0.0)
    );
    drained.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_from_another_node_is_timed_where_it_is_applied() {
    // Pins down token_resolver_revocation_delay_seconds: a ban made on node one through its
    // admin listener is timed once on node two, which applies it from Redis, well under a
    // second on loopback; node one, where it was made, times nothing.
    let Some(redis) = support::redis::RedisServer::start() else {
        return;
    };
    const SECRET: &str = "observability-secret-of-32-bytes";
    const ADMIN: &str = "observability-admin-secret-32-b";
    let api = reference_api().await;
    let base = api.base_url();
    let redis_url = redis.url();
    let args = [
        "--auth-url",
        &base,
        "--redis-url",
        &redis_url,
        "--admin-listen",
        "127.0.0.1:0",
    ];
    let envs = [
        ("TOKEN_RESOLVER_REDIS_SECRET", SECRET),
        ("TOKEN_RESOLVER_ADMIN_TOKEN", ADMIN),
    ];
    let one = GameServerProcess::start(BIN, &args, &envs).await;
    let two = GameServerProcess::start(BIN, &args, &envs).await;
    let (admin_one, admin_two) = (one.admin.unwrap(), two.admin.unwrap());
    for admin in [admin_one, admin_two] {
        support::eventually_async("the node hears the revocation stream", || async {
            let text = scrape(admin).await;
            sample(&text, "game_server_ready", &[]) == Some(1.0)
        })
        .await;
    }
    let count = "token_resolver_revocation_delay_seconds_count";
    assert_eq!(sample(&scrape(admin_two).await, count, &[]), Some(0.0));

    let revoked = reqwest::Client::new()
        .post(format!("http://{admin_one}/admin/revoke"))
        .bearer_auth(ADMIN)
        .json(&json!({"user_id": 1, "auth_url": base}))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    support::eventually_async("node two times the revocation it applies", || async {
        sample(&scrape(admin_two).await, count, &[]) == Some(1.0)
    })
    .await;
    let text = scrape(admin_two).await;
    let seconds = sample(&text, "token_resolver_revocation_delay_seconds_sum", &[]).unwrap();
    assert!((0.0..1.0).contains(&seconds), "{seconds} s on loopback");
    assert_eq!(
        sample(
            &text,
            "token_resolver_revocation_delay_seconds_bucket",
            &["le=\"+Inf\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "token_resolver_invalidations_total",
            &["scope=\"user\"", "source=\"remote\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&scrape(admin_one).await, count, &[]),
        Some(0.0),
        "the node that made it applied it at once, untimed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_turned_away_at_an_http_listeners_cap_is_counted() {
    // Pins down game_server_http_turned_away_total{outcome="refused"}: a connection past the
    // admin listener's cap of one is answered 503 and counted. The counter is the process's
    // (other tests here may add to it): it grows by at least this one.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _alone = IN_PROCESS_METRICS.lock().await;
    let metrics = token_resolver_game_server::telemetry::Metrics::install().unwrap();
    let resolver = token_resolver::Resolver::builder()
        .auth_required(false)
        .build()
        .unwrap();
    let game = support::game_server(resolver, vec![support::room("lobby", None)]).await;
    let config = token_resolver_game_server::AdminConfig {
        metrics: Some(metrics),
        max_connections: 1,
        ..Default::default()
    };
    let running = game
        .spawn_admin("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let admin = running.local_addr();
    let refused = "game_server_http_turned_away_total";
    let before = sample(&scrape(admin).await, refused, &["outcome=\"refused\""]).unwrap();
    let mut holder = tokio::net::TcpStream::connect(admin).await.unwrap();
    holder
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    let mut over = tokio::net::TcpStream::connect(admin).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), over.read_to_end(&mut answer))
        .await
        .expect("answered at once")
        .unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 503"), "{answer:?}");
    drop(holder);
    support::eventually_async("the refusal is counted", || async {
        let Ok(response) = reqwest::get(format!("http://{admin}/metrics")).await else {
            return false;
        };
        let text = response.text().await.unwrap_or_default();
        sample(&text, refused, &["outcome=\"refused\""]).is_some_and(|after| after > before)
    })
    .await;
}
