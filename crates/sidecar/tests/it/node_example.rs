//! `examples/node-game-server/server.js`, a game server in Node.js, end to end: it resolves its
//! players through a real sidecar in front of the reference API, and closes a player's socket
//! when a ban at the reference API reaches the sidecar as a `revoked` event, or, after the
//! sidecar restarted, when the `resync` it is sent makes it resolve its players again. Needs
//! `node` (Debian's `nodejs`): skipped with a note without it, a failure under CI, which
//! installs it.

use super::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Parties;
use serde_json::{json, Value};
use token_resolver_sidecar::SidecarConfig;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpStream;

/// The Node.js game server, killed on drop.
struct NodeServer {
    child: Child,
    addr: SocketAddr,
}

impl Drop for NodeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `node` runs here; without it the test is skipped with a note, or fails under CI.
fn node_installed() -> bool {
    let found = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    token_resolver_support::present(found, "node", "nodejs")
}

/// Starts the example against the sidecar at `sidecar`, on a free port.
fn start_node(sidecar: SocketAddr) -> NodeServer {
    start_node_with(sidecar, &[])
}

/// [`start_node`] with more of its environment.
fn start_node_with(sidecar: SocketAddr, env: &[(&str, &str)]) -> NodeServer {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/node-game-server/server.js"
    );
    let mut child = Command::new("node")
        .arg(script)
        .env("SIDECAR_URL", format!("http://{sidecar}"))
        .env("PORT", "0")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let addr = banner
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {banner:?}"));
    NodeServer { child, addr }
}

/// A player's connection to the Node.js server.
struct Player {
    lines: AsyncBufReader<TcpStream>,
}

impl Player {
    async fn connect(addr: SocketAddr, token: &str) -> (Player, Value) {
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut player = Player {
            lines: AsyncBufReader::new(stream),
        };
        let hello = json!({"type": "connect", "access_token": token}).to_string() + "\n";
        player
            .lines
            .get_mut()
            .write_all(hello.as_bytes())
            .await
            .unwrap();
        let answer = player
            .read(Duration::from_secs(5))
            .await
            .expect("an answer");
        (player, answer)
    }

    /// The next message within `within`; `None` at the end of the stream.
    async fn read(&mut self, within: Duration) -> Option<Value> {
        let mut line = String::new();
        let n = tokio::time::timeout(within, self.lines.read_line(&mut line))
            .await
            .expect("a message or the end within the bound")
            .unwrap();
        (n > 0).then(|| serde_json::from_str(&line).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_game_server_closes_a_banned_players_socket_and_keeps_the_others() {
    if !node_installed() {
        return;
    }
    let parties = Parties::start(
        SidecarConfig::default(),
        token_resolver_reference_api::demo_users(),
    )
    .await;
    let node = start_node(parties.sidecar.local_addr());
    let (mut alice, hello) = Player::connect(node.addr, &parties.token("alice").await).await;
    assert_eq!(
        hello,
        json!({"type": "connected", "user": {"id": 1, "name": "Alice"}})
    );
    let (mut bob, hello) = Player::connect(node.addr, &parties.token("bob").await).await;
    assert_eq!(hello["user"]["id"], 2);
    let (_, refused) = Player::connect(node.addr, "not-issued").await;
    assert_eq!(refused, json!({"type": "error", "error": "token_rejected"}));

    parties.ban(1).await;
    let told = alice.read(Duration::from_secs(5)).await;
    assert_eq!(told, Some(json!({"type": "revoked", "reason": "revoked"})));
    assert_eq!(alice.read(Duration::from_secs(5)).await, None, "and closed");
    let quiet = tokio::time::timeout(Duration::from_millis(300), bob.read(Duration::from_secs(1)));
    assert!(
        quiet.await.is_err(),
        "bob is still connected and told nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sidecar_restart_the_node_game_server_resolves_its_players_again_and_closes_the_banned(
) {
    if !node_installed() {
        return;
    }
    let parties = Parties::start(
        SidecarConfig::default(),
        token_resolver_reference_api::demo_users(),
    )
    .await;
    let node = start_node(parties.sidecar.local_addr());
    let (mut alice, _) = Player::connect(node.addr, &parties.token("alice").await).await;
    let (mut bob, hello) = Player::connect(node.addr, &parties.token("bob").await).await;
    assert_eq!(hello["user"]["id"], 2);
    let (mut carol, _) = Player::connect(node.addr, &parties.token("carol").await).await;
    // Carol's ban shows that the Node server reads the stream before the restart.
    parties.ban(3).await;
    let told = carol.read(Duration::from_secs(5)).await;
    assert_eq!(told, Some(json!({"type": "revoked", "reason": "revoked"})));

    // The sidecar dies; alice is banned while no sidecar watches her session; a new sidecar
    // comes up on the same port, knowing nothing of the Node server's players.
    let base = parties.api.base_url();
    let parties = parties
        .restart(SidecarConfig::default(), common::ban_at(&base, 1))
        .await;
    let bound = Duration::from_secs(10);
    let told = alice.read(bound).await;
    assert_eq!(told, Some(json!({"type": "revoked", "reason": "revoked"})));
    assert_eq!(alice.read(Duration::from_secs(5)).await, None, "and closed");
    let quiet = tokio::time::timeout(Duration::from_millis(300), bob.read(Duration::from_secs(1)));
    assert!(
        quiet.await.is_err(),
        "bob is still connected and told nothing"
    );
    assert_eq!(
        parties.sidecar.sidecar().sessions(),
        1,
        "bob's session is watched by the new sidecar"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_the_node_game_server_cannot_check_again_after_a_resync_is_closed_within_its_bound(
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use token_resolver::Resolver;
    use token_resolver_sidecar::Sidecar;
    use token_resolver_support::{respond, user_answer, Scripted};

    if !node_installed() {
        return;
    }
    let down = Arc::new(AtomicBool::new(false));
    let upstream = {
        let down = down.clone();
        Scripted::start(move |_, _| {
            let down = down.load(Ordering::SeqCst);
            async move {
                if down {
                    respond(503, &[("retry-after", "1")], b"")
                } else {
                    user_answer(7, "grace")
                }
            }
        })
        .await
    };
    let sidecar_at = |addr: SocketAddr| {
        let resolver = Resolver::builder()
            .default_auth_url(upstream.url())
            .build()
            .unwrap();
        async move {
            Sidecar::new(resolver, SidecarConfig::default())
                .spawn(addr)
                .await
        }
    };
    let sidecar = sidecar_at("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = sidecar.local_addr();
    let node = start_node_with(addr, &[("RESYNC_WITHIN_MS", "1500")]);
    let (mut grace, hello) = Player::connect(node.addr, "some-token").await;
    assert_eq!(hello["user"]["id"], 7);

    // The Node server opened its stream when it started, and holds the id it was sent first
    // (no event came). Real time: node is a real process, and nothing it does shows that the id
    // has arrived; this is time for it to, with room for a loaded machine.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A new sidecar, and the integrator cannot answer: the player can be neither confirmed nor
    // refused.
    sidecar.shutdown().await;
    down.store(true, Ordering::SeqCst);
    let _again = sidecar_at(addr).await.unwrap();
    let since = std::time::Instant::now();
    let told = grace.read(Duration::from_secs(15)).await;
    assert_eq!(
        told,
        Some(json!({"type": "revoked", "reason": "unverified"}))
    );
    assert!(
        since.elapsed() >= Duration::from_millis(1000),
        "not before the bound: {:?}",
        since.elapsed()
    );
    assert_eq!(grace.read(Duration::from_secs(5)).await, None, "and closed");
}
