//! `token_resolver_runtime_alive_tasks`, the soak's task count, scraped from a running
//! `game-server` and `sidecar`: registered from the first scrape, it rises with the sessions and
//! streams open and falls back when they end (a constant would fail both).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::{login_and_take_token, reference_api, GameServerProcess};
use token_resolver_game_server::GameClient;
use token_resolver_support as support;

use super::BIN;
use crate::sidecar::SidecarProcess;

const NAME: &str = "token_resolver_runtime_alive_tasks";

/// The task count an admin listener's `/metrics` shows now.
async fn alive_tasks(admin: SocketAddr) -> u64 {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{NAME} ")))
        .unwrap_or_else(|| panic!("no {NAME} in {text}"));
    value.trim().parse::<f64>().unwrap() as u64
}

/// Waits (10 s at most) until the count at `admin` satisfies `ok`: a process's tasks end a
/// moment after their connection closes, so only real time tells.
async fn tasks_until(admin: SocketAddr, what: &str, ok: impl Fn(u64) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = alive_tasks(admin).await;
        if ok(n) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what} (last scraped: {NAME} {n})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_game_servers_task_count_rises_with_sessions_and_falls_back() {
    // 24 players connected to a game-server process add at least a task each to the gauge;
    // once they leave it comes back to within 3 of where it was.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let game = GameServerProcess::start(
        BIN,
        &[
            "--admin-listen",
            "127.0.0.1:0",
            "--auth-url",
            &api.base_url(),
        ],
        &[],
    )
    .await;
    let admin = game.admin.expect("an admin listener");
    let before = alive_tasks(admin).await;
    assert!(before > 0, "the admin listener's own tasks count");
    let mut players = Vec::new();
    for _ in 0..24 {
        let mut client = GameClient::open(game.addr).await.unwrap();
        client.connect(Some(&token)).await.unwrap();
        players.push(client);
    }
    tasks_until(admin, "24 sessions add 24 tasks", |n| n >= before + 24).await;
    drop(players);
    tasks_until(admin, "the sessions' tasks end with them", |n| {
        n <= before + 3
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecars_task_count_rises_with_streams_and_sessions_and_falls_back() {
    // Eight `/v1/events` streams and sixteen sessions kept by a sidecar process add at least
    // a task each; once the streams close and the sessions are deleted it comes back to
    // within 3 of where it was.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let sidecar = SidecarProcess::spawn(SidecarProcess::command(&[
        "--admin-listen",
        "127.0.0.1:0",
        "--auth-url",
        &api.base_url(),
    ]));
    let (http, admin) = (
        sidecar.addr("sidecar listening on"),
        sidecar.addr("admin listener on"),
    );
    // No idle connection kept: each would hold a task on the sidecar.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let before = alive_tasks(admin).await;
    let mut streams = Vec::new();
    for _ in 0..8 {
        let stream = client
            .get(format!("http://{http}/v1/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        streams.push(stream);
    }
    for i in 0..16 {
        let resolved = client
            .post(format!("http://{http}/v1/resolve"))
            .json(&json!({"access_token": token, "session": format!("s{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(resolved.status(), 200);
    }
    tasks_until(admin, "8 streams and 16 sessions add 24 tasks", |n| {
        n >= before + 24
    })
    .await;
    drop(streams);
    for i in 0..16 {
        let forgotten = client
            .delete(format!("http://{http}/v1/sessions/s{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(forgotten.status(), 204);
    }
    tasks_until(admin, "the streams' and sessions' tasks end", |n| {
        n <= before + 3
    })
    .await;
}
