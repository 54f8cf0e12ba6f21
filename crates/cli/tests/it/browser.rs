//! The whole flow from a real browser: headless Chromium, driven through ChromeDriver, opens the
//! reference API's `/play` page, which logs in, takes a token, opens the game server's
//! WebSocket, searches and joins, and writes the outcome into `<output id="result">`.
//!
//! Skipped with a note where `chromium` or `chromedriver` is missing (Debian's `chromium` and
//! `chromium-driver`), except under `CI`, where that is a failure: `.ci/run` installs them.

use token_resolver_support as support;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use fantoccini::{ClientBuilder, Locator};
use serde_json::json;
use support::{game_server_with, resolver_for, room};
use token_resolver_game_server::{GameServerConfig, RunningGameServer, WebSocketConfig};
use token_resolver_reference_api::{ApiConfig, ReferenceApi, RunningApi};

/// The flags the browser runs with: headless, and nothing that reaches beyond loopback.
const CHROMIUM_ARGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=900,1000",
];

/// One `chromedriver` for the whole test binary, on a free loopback port; `None` (with a
/// note) where the browser or the driver is missing outside CI.
fn chromedriver() -> Option<SocketAddr> {
    static DRIVER: OnceLock<Option<(SocketAddr, Child)>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let installed = |program: &str| {
                Command::new(program)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok()
            };
            if !installed("chromium") || !installed("chromedriver") {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
                );
                eprintln!("note: chromium or chromedriver is not installed; skipping a browser test");
                return None;
            }
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver starts");
            // It says when it listens ("ChromeDriver was started successfully on port N."); what
            // it prints later is drained, so that it never blocks on a full pipe.
            let stdout = BufReader::new(child.stdout.take().unwrap());
            let (listening, told) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in stdout.lines().map_while(Result::ok) {
                    if line.contains("started successfully") {
                        let _ = listening.send(());
                    }
                }
            });
            told.recv_timeout(Duration::from_secs(20))
                .expect("chromedriver does not listen");
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            Some((addr, child))
        })
        .as_ref()
        .map(|(addr, _)| *addr)
}

/// The integrator's API (which serves the page) and a game server listening on WebSocket that
/// allows the page's origin.
struct Parties {
    api: RunningApi,
    _game: RunningGameServer,
    ws: SocketAddr,
}

async fn parties() -> Parties {
    // The API's address first (the game server resolves there); the API itself once the
    // WebSocket's address, the one game server its page may open, is known.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let config = GameServerConfig {
        rooms: vec![
            room("lobby", None),
            room("arena", Some(&format!("{base}/"))),
        ],
        ..GameServerConfig::default()
    };
    let mut game = game_server_with(resolver_for(&base).build().unwrap(), config).await;
    let ws = game
        .listen_websocket(
            "127.0.0.1:0".parse().unwrap(),
            WebSocketConfig {
                allowed_origins: vec![base],
                ..WebSocketConfig::default()
            },
        )
        .await
        .unwrap();
    let config = ApiConfig {
        play_game_urls: vec![format!("ws://{ws}/ws")],
        ..ApiConfig::default()
    };
    let api = ReferenceApi::new(config)
        .unwrap()
        .spawn_on(listener)
        .unwrap();
    Parties {
        api,
        _game: game,
        ws,
    }
}

/// Opens `/play` with `query` in a fresh headless Chromium, waits for the autoplay's outcome,
/// and returns it with a screenshot of the page.
async fn play(driver: SocketAddr, parties: &Parties, query: &str) -> (String, Vec<u8>) {
    let profile = tempdir("profile");
    let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.display()));
    let capabilities = json!({
        "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
    });
    let browser = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities.as_object().unwrap().clone())
        .connect(&format!("http://{driver}"))
        .await
        .expect("a browser session");
    let game = match query.contains("game=") {
        true => String::new(),
        false => format!("game=ws://{}/ws&", parties.ws),
    };
    let url = format!("{}/play?autoplay=1&{game}{query}", parties.api.base_url());
    browser.goto(&url).await.unwrap();
    let outcome = browser
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::XPath(
            "//output[@id='result'][starts-with(., 'joined') or starts-with(., 'error')]",
        ))
        .await
        .expect("the page ends its flow")
        .text()
        .await
        .unwrap();
    let screenshot = browser.screenshot().await.unwrap();
    browser.close().await.unwrap();
    (outcome, screenshot)
}

/// A fresh directory under the target's temporary directory.
fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "browser-{name}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_logs_in_and_joins_the_arena_over_websocket() {
    // Pins down the whole flow from a browser: login, token, WebSocket, connect, search, the
    // room's authUrl by the client rule, join; the result line names room, user and id. The
    // screenshot is kept in the target's temporary directory (docs/play.png is one of them).
    let Some(driver) = chromedriver() else { return };
    let parties = parties().await;
    let (outcome, screenshot) = play(driver, &parties, "username=alice&password=wonderland").await;
    assert_eq!(outcome, "joined arena as Alice (1)");
    assert!(screenshot.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("play.png"),
        &screenshot,
    )
    .unwrap();
    assert_eq!(
        parties.api.api().user_requests(),
        1,
        "the join was a cache hit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_in_the_browser() {
    // Pins down the refusal a player sees for wrong credentials, before any game traffic.
    let Some(driver) = chromedriver() else { return };
    let parties = parties().await;
    let (outcome, _) = play(driver, &parties, "username=alice&password=wrong").await;
    assert_eq!(outcome, "error invalid_credentials");
    assert_eq!(parties.api.api().user_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_with_a_forged_auth_url_is_refused_in_the_browser() {
    // Pins down the allowlist from a browser: a join whose authUrl is not the room's own is
    // refused with auth_url_not_allowed, and the forged server is never called.
    let Some(driver) = chromedriver() else { return };
    let parties = parties().await;
    let (outcome, _) = play(
        driver,
        &parties,
        "username=alice&password=wonderland&forge_auth_url=https://vouches-for-anyone.example",
    )
    .await;
    assert_eq!(outcome, "error auth_url_not_allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_naming_another_game_server_logs_nobody_in_and_sends_it_nothing() {
    // Pins down the page's allowlist: `/play?autoplay=1&…&game=ws://attacker/ws` shows
    // game_url_not_allowed, and the attacker's server never hears from the browser (the page
    // checks its list before logging in, and its policy would stop the socket anyway).
    let Some(driver) = chromedriver() else { return };
    let parties = parties().await;
    let attacker = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let query = format!(
        "username=alice&password=wonderland&game=ws://{}/ws",
        attacker.local_addr().unwrap()
    );
    let (outcome, _) = play(driver, &parties, &query).await;
    assert_eq!(outcome, "error game_url_not_allowed");
    let knocked = tokio::time::timeout(Duration::from_millis(300), attacker.accept()).await;
    assert!(knocked.is_err(), "the attacker's server was reached");
    assert_eq!(parties.api.api().user_requests(), 0);
}
