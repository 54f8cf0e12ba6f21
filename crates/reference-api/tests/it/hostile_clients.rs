//! The reference API's listener against clients that do not do their part, over real TCP on
//! loopback: sockets that send nothing or stop in the middle of HTTP/2's preface, one address
//! holding more than its share, and HTTP/2 connections left idle.

use std::time::{Duration, Instant};

use token_resolver_reference_api::{ApiConfig, RunningApi, ServeLimits};
use token_resolver_support::{closed_within, eventually, eventually_async, get_and_close};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const HEAD_DEADLINE: Duration = Duration::from_millis(500);
/// What the deadlines may run over on a loaded machine.
const MARGIN: Duration = Duration::from_secs(2);

/// The API with `limits` on a free loopback port.
async fn api(limits: ServeLimits) -> RunningApi {
    let config = ApiConfig {
        serve: limits,
        ..ApiConfig::default()
    };
    token_resolver_support::reference_api_with(config).await
}

/// Limits with the short head deadline.
fn limits() -> ServeLimits {
    ServeLimits {
        head_timeout: HEAD_DEADLINE,
        ..ServeLimits::default()
    }
}

#[tokio::test]
async fn silent_sockets_and_a_cut_preface_are_closed_at_the_head_deadline_from_accept() {
    // Pins down the head deadline counted from accept: 40 sockets that send nothing, and one
    // that sends half of HTTP/2's preface, are closed once it passes, while a real client that
    // comes meanwhile is served.
    let running = api(limits()).await;
    let addr = running.local_addr();
    let started = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..40 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut cut = TcpStream::connect(addr).await.unwrap();
    cut.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    assert!(
        get_and_close(addr, "/play.css")
            .await
            .starts_with("HTTP/1.1 200"),
        "a real client is served"
    );
    for stream in silent.iter_mut().chain([&mut cut]) {
        assert!(
            closed_within(stream, HEAD_DEADLINE + MARGIN).await,
            "a socket that sent no head kept its connection"
        );
    }
    assert!(
        started.elapsed() >= HEAD_DEADLINE,
        "closed before the deadline"
    );
}

#[tokio::test]
async fn one_address_past_its_share_is_answered_503_and_served_once_it_lets_go() {
    // Pins down the per-address cap: an address holding its four connections gets a quick 503
    // with Retry-After for a fifth, and is served again once one closes.
    let running = api(ServeLimits {
        max_connections_per_address: 4,
        head_timeout: Duration::from_secs(30),
        ..ServeLimits::default()
    })
    .await;
    let addr = running.local_addr();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // The accept loop counts them in order: let it see all four (it admits each as it counts
    // it, before the next await).
    eventually("the four connections accepted", || {
        running.connections_accepted() == 4
    })
    .await;
    let refused = get_and_close(addr, "/play.css").await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 1"),
        "{refused}"
    );
    held.pop();
    eventually_async("served once one of the four closed", || async {
        get_and_close(addr, "/play.css")
            .await
            .starts_with("HTTP/1.1 200")
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn http2_in_the_clear_is_served_and_an_idle_connection_is_closed() {
    // Pins down HTTP/2 where the API means it (a client's preface in the clear), within an
    // idle timeout: after one answer and nothing in flight, the server closes the connection.
    // Client and server run on this runtime, so the wait is on its paused clock.
    const IDLE: Duration = Duration::from_millis(600);
    let running = api(ServeLimits {
        h2_idle_timeout: IDLE,
        ..limits()
    })
    .await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let url = format!("{}/play.css", running.base_url());
    let answer = client.get(&url).send().await.unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    assert!(answer.status().is_success());
    let opened = running.connections_accepted();
    // A sleep, not advance(): on the paused clock it costs no real time, yet lets the steps of
    // the close (idle timer, GOAWAY, the client's ping answer, the close) run one after the
    // other, each at its time, where advance() would jump past all of them at once.
    tokio::time::sleep(IDLE + MARGIN).await;
    let again = client.get(&url).send().await.unwrap();
    assert!(again.status().is_success());
    assert_eq!(
        running.connections_accepted(),
        opened + 1,
        "the idle connection was closed, so the client opened another"
    );
}
