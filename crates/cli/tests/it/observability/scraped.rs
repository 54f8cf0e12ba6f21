//! The metrics the alerts read, scraped from an admin listener's `/metrics`: readiness and why
//! not, the revocation delay, connections turned away at an HTTP listener's caps.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::{reference_api, GameServerProcess};
use token_resolver_support as support;

use super::BIN;

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

/// A TCP connection to `to` from the loopback address `from` (any of 127.0.0.0/8).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// Opens a connection to `to` from `from` past a cap of the listener there: it is answered 503
/// at once.
async fn turned_away(from: [u8; 4], to: SocketAddr) {
    use tokio::io::AsyncReadExt;
    let mut over = connect_from(from, to).await;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), over.read_to_end(&mut answer))
        .await
        .expect("answered at once")
        .unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 503"), "{answer:?}");
}

/// `game_server_http_turned_away_total{outcome="refused",cap=CAP}` in `admin`'s metrics, once
/// a scrape gets through (the listener may still hold the connections of a test). The scrape
/// asks the listener to close its connection and reads until it has, so that it holds no slot
/// a test then counts on.
async fn refused_at(admin: SocketAddr, cap: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let label = format!("cap=\"{cap}\"");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
        let request = b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n";
        let mut answer = Vec::new();
        if stream.write_all(request).await.is_ok() && stream.read_to_end(&mut answer).await.is_ok()
        {
            let text = String::from_utf8_lossy(&answer);
            if let Some(value) = sample(&text, TURNED_AWAY, &["outcome=\"refused\"", &label]) {
                return value;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {TURNED_AWAY} at {cap} from {admin}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The counter of connections an HTTP listener turned away.
const TURNED_AWAY: &str = "game_server_http_turned_away_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_turned_away_at_a_full_http_listener_is_counted_at_the_total_cap() {
    // Pins down game_server_http_turned_away_total{outcome="refused",cap="total"}: with the
    // admin listener's one connection taken, a connection from another address and one from
    // the same address are both answered 503 and counted at the total cap (a full listener is
    // full whoever asks), none at the per-address cap. The counters are the process's: total
    // grows by at least these two; only tests holding IN_PROCESS_METRICS meet a per-address cap.
    use tokio::io::AsyncWriteExt;
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
    let (total, per_address) = (
        refused_at(admin, "total").await,
        refused_at(admin, "per_address").await,
    );
    let mut holder = connect_from([127, 0, 0, 1], admin).await;
    holder
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    // The holder is admitted once the listener answers others 503 (a scrape's connection may
    // still be closing).
    turned_away([127, 0, 0, 2], admin).await;
    turned_away([127, 0, 0, 1], admin).await;
    drop(holder);
    support::eventually_async("both refusals are counted at the total cap", || async {
        refused_at(admin, "total").await >= total + 2.0
    })
    .await;
    assert_eq!(
        refused_at(admin, "per_address").await,
        per_address,
        "a full listener is no address over its share"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_over_its_addresss_share_is_counted_at_the_per_address_cap() {
    // Pins down game_server_http_turned_away_total{outcome="refused",cap="per_address"}: the
    // WebSocket listener, with room for a thousand connections but one per address, answers an
    // address's second connection 503 and counts it at the per-address cap: one client over its
    // share, which the GameServerFull alert does not take for a full node.
    use tokio::io::AsyncWriteExt;
    let _alone = IN_PROCESS_METRICS.lock().await;
    let metrics = token_resolver_game_server::telemetry::Metrics::install().unwrap();
    let resolver = token_resolver::Resolver::builder()
        .auth_required(false)
        .build()
        .unwrap();
    let config = token_resolver_game_server::GameServerConfig {
        rooms: vec![support::room("lobby", None)],
        max_connections_per_address: 1,
        ..Default::default()
    };
    let mut game = support::game_server_with(resolver, config).await;
    let ws = game
        .listen_websocket("127.0.0.1:0".parse().unwrap(), Default::default())
        .await
        .unwrap();
    let config = token_resolver_game_server::AdminConfig {
        metrics: Some(metrics),
        ..Default::default()
    };
    let running = game
        .spawn_admin("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let admin = running.local_addr();
    let per_address = refused_at(admin, "per_address").await;
    let mut holder = connect_from([127, 0, 0, 1], ws).await;
    holder.write_all(b"GET /ws HTTP/1.1\r\n").await.unwrap();
    turned_away([127, 0, 0, 1], ws).await;
    support::eventually_async("the refusal is counted at the per-address cap", || async {
        refused_at(admin, "per_address").await > per_address
    })
    .await;
    // Another address still gets in: the listener was not full.
    let mut other = connect_from([127, 0, 0, 2], ws).await;
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    use tokio::io::AsyncReadExt;
    tokio::time::timeout(Duration::from_secs(5), other.read_to_end(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    assert!(!answer.starts_with(b"HTTP/1.1 503"), "{answer:?}");
    drop(holder);
}
