//! `clients/csharp`, the C# client of the sidecar, end to end under Mono: `mcs` compiles the
//! client alone (warnings as errors) and the example game server against it, and `mono` runs
//! that game server against a real `token-resolver sidecar` process in front of the reference
//! API. A token resolves to its user; a ban at the reference API reaches the C# game server as
//! `Revoked` and closes that player; the sidecar killed and started again on the same port makes
//! the client raise `Resync`, and the game server resolves its players again: the one banned
//! while no sidecar ran is closed, the other kept, and the new sidecar watches its session. A
//! token that expires raises `ReauthRequired`: the player who sends a fresh one in time is
//! refreshed, the other revoked (`session_expired`). The game server holds untrusted players to
//! its bounds: a line past `MaxLine` is refused before its newline comes, and a connection that
//! does not log in is closed after the login timeout. And `clients/csharp/tests/ClientChecks.cs`
//! checks the client's parts against the same sidecar: its JSON reader, the answers and error
//! codes, the bounds of a call (time and size), and the events reader's parsing, bounds, backoff
//! and stop.
//! Needs Debian's mono-mcs, mono-runtime and libmono-system-net-http4.0-cil: skipped with a
//! note without them, a failure under CI, which installs them.

use token_resolver_support as support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::redis::free_port;
use support::{ApiCalls, TempDir};
use token_resolver_reference_api::{ApiConfig, RunningApi};
use token_resolver_sessions::AdminSecret;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The `token-resolver` binary.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

/// The reference API's admin secret, and the sidecar's for `/admin/revoke`.
const SECRET: &str = "csharp-client-test-secret-of-32-bytes";

/// The C# sources.
const CLIENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/csharp");

/// How long the game server has to act on something the test did.
const BOUND: Duration = Duration::from_secs(15);

/// The game server's `LOGIN_TIMEOUT_MS` in these tests: short, so that the test of it is quick;
/// the other tests' players send their token as soon as they connect.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest line the game server reads, in bytes without its newline (`MaxLine` in
/// `GameServer.cs`).
const MAX_LINE: usize = 16 * 1024;

/// Whether `mcs` and `mono` run here, and Mono's `System.Net.Http.dll` is beside them; without
/// them the test is skipped with a note, or fails under CI.
fn mono_installed() -> bool {
    let runs = |program: &str| {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    // `mcs -r:System.Net.Http.dll` finds it in <prefix>/lib/mono/4.5, beside <prefix>/bin/mcs.
    let http = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            dir.join("mcs").is_file()
                && dir
                    .parent()
                    .is_some_and(|prefix| prefix.join("lib/mono/4.5/System.Net.Http.dll").is_file())
        })
    });
    support::present(
        runs("mcs") && runs("mono") && http,
        "Mono (mcs, mono, System.Net.Http)",
        "mono-mcs mono-runtime libmono-system-net-http4.0-cil",
    )
}

/// Runs `mcs` with `args`, asserting that it compiled.
fn mcs(args: &[&str]) {
    let output = Command::new("mcs")
        .arg("-nologo")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "mcs {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Compiles the client alone into a library, then `program` (a path under `clients/csharp`)
/// against that library (so that it uses the client's public API only), into `dir`: the
/// program's path.
fn compile(dir: &Path, program: &str) -> PathBuf {
    let library = dir.join("TokenResolverClient.dll");
    let exe = dir.join(
        Path::new(program)
            .with_extension("exe")
            .file_name()
            .unwrap(),
    );
    if !library.exists() {
        mcs(&[
            "-warnaserror",
            "-target:library",
            "-r:System.Net.Http.dll",
            &format!("-out:{}", library.display()),
            &format!("{CLIENTS}/TokenResolverClient.cs"),
        ]);
    }
    mcs(&[
        "-warnaserror",
        "-r:System.Net.Http.dll",
        &format!("-r:{}", library.display()),
        &format!("-out:{}", exe.display()),
        &format!("{CLIENTS}/{program}"),
    ]);
    exe
}

/// A `token-resolver sidecar` process, killed on drop.
struct SidecarProcess(Child);

impl SidecarProcess {
    /// Starts a sidecar on `listen` with its admin listener on `admin`, resolving at
    /// `auth_url`, with `args`, and waits for its banner.
    fn start(
        listen: SocketAddr,
        admin: SocketAddr,
        auth_url: &str,
        args: &[&str],
    ) -> SidecarProcess {
        let mut child = Command::new(BIN)
            .arg("sidecar")
            .args(["--listen", &listen.to_string()])
            .args(["--admin-listen", &admin.to_string()])
            .args(["--auth-url", auth_url])
            .args(args)
            .env("RUST_LOG", "warn")
            .env("TOKEN_RESOLVER_ADMIN_TOKEN", SECRET)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut banner = BufReader::new(child.stdout.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            let n = banner.read_line(&mut line).unwrap();
            assert!(n > 0, "the sidecar ended before its banner: {seen:?}");
            seen.push_str(&line);
            if line.starts_with("SIGTERM") {
                break;
            }
        }
        SidecarProcess(child)
    }

    /// Kills the process (SIGKILL: its streams break, its sessions are lost).
    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The C# game server under `mono`, killed on drop, and the lines it prints.
struct GameServer {
    child: Child,
    addr: SocketAddr,
    lines: mpsc::UnboundedReceiver<String>,
    /// Every line read so far.
    printed: Vec<String>,
}

impl GameServer {
    /// Runs `exe` against the sidecar at `sidecar`, on a free port.
    fn start(exe: &Path, sidecar: SocketAddr) -> GameServer {
        let mut child = Command::new("mono")
            .arg(exe)
            .env("TOKEN_RESOLVER_URL", format!("http://{sidecar}"))
            .env("PORT", "0")
            .env("RESYNC_WITHIN_MS", "10000")
            .env("LOGIN_TIMEOUT_MS", LOGIN_TIMEOUT.as_millis().to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        stdout.read_line(&mut banner).unwrap();
        let addr = (banner.trim().rsplit(' ').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {banner:?}"));
        let (send, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        GameServer {
            child,
            addr,
            lines,
            printed: vec![banner.trim().to_owned()],
        }
    }

    /// The next line printed that `wanted` accepts, within [`BOUND`].
    async fn expect(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => line,
                Ok(None) => panic!("the game server ended before {what}: {:#?}", self.printed),
                Err(_) => panic!("no {what} within {BOUND:?}: {:#?}", self.printed),
            };
            self.printed.push(line.clone());
            if wanted(&line) {
                return line;
            }
        }
    }

    /// The session of the next player admitted, asserting that it is `user`.
    async fn admitted(&mut self, user: &str) -> String {
        let line = self
            .expect("a player admitted", |l| l.starts_with("connected "))
            .await;
        assert!(line.ends_with(&format!(" {user}")), "{line}");
        session_of(&line)
    }

    /// Everything printed, with what is still to read.
    fn all_printed(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.printed.push(line);
        }
        self.printed.join("\n")
    }
}

impl Drop for GameServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `session=` of a line the game server printed.
fn session_of(line: &str) -> String {
    (line.split(' '))
        .find_map(|w| w.strip_prefix("session="))
        .unwrap_or_else(|| panic!("no session in {line:?}"))
        .to_owned()
}

/// A player's connection to the C# game server.
struct Player {
    lines: AsyncBufReader<TcpStream>,
}

impl Player {
    /// Connects, sending nothing yet.
    async fn open(addr: SocketAddr) -> Player {
        let stream = TcpStream::connect(addr).await.unwrap();
        Player {
            lines: AsyncBufReader::new(stream),
        }
    }

    /// Connects and sends `token`: the player and the server's answer.
    async fn connect(addr: SocketAddr, token: &str) -> (Player, Value) {
        let mut player = Player::open(addr).await;
        player.send(token).await;
        let answer = player.read(BOUND).await.expect("an answer");
        (player, answer)
    }

    /// Sends `{"type": "connect", "access_token": token}`: the first, or a refresh.
    async fn send(&mut self, token: &str) {
        let hello = json!({"type": "connect", "access_token": token}).to_string() + "\n";
        self.write(hello.as_bytes()).await;
    }

    /// Sends `bytes` as they are.
    async fn write(&mut self, bytes: &[u8]) {
        self.lines.get_mut().write_all(bytes).await.unwrap();
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

    /// Asserts that the server tells this player it was revoked, then closes its socket.
    async fn assert_revoked(&mut self, who: &str) {
        self.assert_closed(who, "revoked").await;
    }

    /// Asserts that the server tells this player it was revoked for `reason`, then closes its
    /// socket.
    async fn assert_closed(&mut self, who: &str, reason: &str) {
        let told = self.read(BOUND).await;
        assert_eq!(
            told,
            Some(json!({"type": "revoked", "reason": reason})),
            "{who}"
        );
        assert_eq!(self.read(BOUND).await, None, "{who}'s socket closed");
    }

    /// Asserts that the server still serves this player and told it nothing meanwhile: a line
    /// it answers without changing anything (a message that is not a connect: `bad_request`)
    /// gets that answer first. A positive signal in place of waiting a while for nothing: what
    /// the server would have sent this player for what the test saw happen (a close, a
    /// resync's end) it sent before, so it comes first on the socket.
    async fn assert_kept(&mut self, who: &str) {
        self.write(b"{\"type\":\"ping\"}\n").await;
        assert_eq!(
            self.read(BOUND).await,
            Some(json!({"type": "error", "error": "bad_request"})),
            "{who} is told nothing and kept"
        );
    }

    /// Asserts that the server tells this player `error` (its message naming `names`), then
    /// closes its socket.
    async fn assert_refused(&mut self, error: &str, names: &str) {
        let told = self.read(BOUND).await.expect("an error");
        assert_eq!(
            (told["type"].as_str(), told["error"].as_str()),
            (Some("error"), Some(error)),
            "{told}"
        );
        let message = told["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{told}");
        assert_eq!(self.read(BOUND).await, None, "closed after {error}");
    }
}

/// Bans `user_id` at the reference API at `base`, which tells the sidecar's admin listener.
async fn ban(base: &str, user_id: i64) {
    let answer = ApiCalls::new(base)
        .admin(
            "ban",
            Some(&format!("Bearer {SECRET}")),
            &json!({"user_id": user_id}).to_string(),
        )
        .await;
    assert_eq!(answer.status(), 200);
}

/// The reference API, a sidecar process resolving at it and told of its bans, and the C# game
/// server on that sidecar, its event stream open.
struct Parties {
    base: String,
    listen: SocketAddr,
    admin: SocketAddr,
    sidecar_args: &'static [&'static str],
    sidecar: Option<SidecarProcess>,
    game: GameServer,
    // Dropped last: the API, then the compiled example.
    _api: RunningApi,
    _dir: TempDir,
}

impl Parties {
    /// Compiles the C# sources, then starts the reference API with `api` (told to notify the
    /// sidecar), the sidecar with `sidecar_args`, and the game server.
    async fn start(api: ApiConfig, sidecar_args: &'static [&'static str]) -> Parties {
        let dir = TempDir::new("csharp");
        let exe = compile(dir.path(), "example/GameServer.cs");
        // The reference API tells the sidecar's admin listener of bans: its port comes first.
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let api = support::reference_api_with(ApiConfig {
            notify: vec![format!("http://{admin}")],
            admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
            ..api
        })
        .await;
        let base = api.base_url();
        let sidecar = SidecarProcess::start(listen, admin, &base, sidecar_args);
        let mut game = GameServer::start(&exe, listen);
        game.expect("the event stream", |l| l == "events: connected")
            .await;
        Parties {
            base,
            listen,
            admin,
            sidecar_args,
            sidecar: Some(sidecar),
            game,
            _api: api,
            _dir: dir,
        }
    }

    /// Kills the sidecar (SIGKILL), runs `meanwhile`, and starts a new one on the same ports.
    async fn restart_sidecar(&mut self, meanwhile: impl std::future::Future<Output = ()>) {
        self.sidecar.take().expect("a sidecar runs").kill();
        meanwhile.await;
        let again = SidecarProcess::start(self.listen, self.admin, &self.base, self.sidecar_args);
        self.sidecar = Some(again);
    }

    /// A fresh token of `username` (demo password).
    async fn token(&self, username: &str) -> String {
        let password = match username {
            "alice" => "wonderland",
            "bob" => "builder",
            _ => "carolina",
        };
        support::login_and_take_token(&self.base, username, password).await
    }
}

/// Resolve, Revoked closing a banned player, Forget, and Resync after a sidecar restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csharp_client_resolves_closes_a_banned_player_and_resyncs_after_a_sidecar_restart() {
    if !mono_installed() {
        return;
    }
    let mut parties = Parties::start(ApiConfig::default(), &[]).await;
    let base = parties.base.clone();
    let tokens = [
        parties.token("alice").await,
        parties.token("bob").await,
        parties.token("carol").await,
        parties.token("bob").await,
    ];
    let game = &mut parties.game;
    let (mut alice, hello) = Player::connect(game.addr, &tokens[0]).await;
    assert_eq!(
        hello,
        json!({"type": "connected", "user": {"id": 1, "name": "Alice"}})
    );
    game.admitted("user=1 name=Alice").await;
    let (mut bob, hello) = Player::connect(game.addr, &tokens[1]).await;
    assert_eq!(hello["user"]["id"], 2);
    let bob_session = game.admitted("user=2 name=Bob").await;
    let (mut carol, hello) = Player::connect(game.addr, &tokens[2]).await;
    assert_eq!(hello["user"]["id"], 3);
    let carol_session = game.admitted("user=3 name=Carol").await;
    let (mut refused, answer) = Player::connect(game.addr, "not-issued").await;
    assert_eq!(
        answer,
        json!({"type": "error", "error": "token_rejected"}),
        "the sidecar's code, through TokenResolverException.Code"
    );
    assert_eq!(refused.read(BOUND).await, None, "and closed");

    // A player who leaves is forgotten at the sidecar (ForgetAsync: 204).
    let (leaving, _) = Player::connect(game.addr, &tokens[3]).await;
    let leaving_session = game.admitted("user=2 name=Bob").await;
    drop(leaving);
    let forgotten = format!("left session={leaving_session} forgotten");
    game.expect("the leaver forgotten", |l| l == forgotten)
        .await;

    // A ban reaches the game server as Revoked.
    ban(&base, 3).await;
    carol.assert_revoked("carol").await;
    let closed = format!("closed session={carol_session} user=3 reason=revoked");
    game.expect("carol closed", |l| l == closed).await;
    alice.assert_kept("alice").await;

    // The sidecar dies; alice is banned while none runs (the reference API keeps retrying its
    // notice); a new sidecar comes up on the same ports, knowing nothing of the C# server's
    // players. The client comes back with the old process's Last-Event-ID and is sent resync.
    parties.restart_sidecar(ban(&base, 1)).await;
    let game = &mut parties.game;
    game.expect("the resync", |l| l == "resync: checking 2 players")
        .await;
    game.expect("the resync's end", |l| l.starts_with("resync: done"))
        .await;
    assert_eq!(
        game.printed.last().unwrap(),
        "resync: done, 1 kept, 1 closed"
    );
    alice
        .assert_revoked("alice, banned while no sidecar ran")
        .await;
    bob.assert_kept("bob").await;

    // The resync resolved bob with his session: the new sidecar watches it.
    ban(&base, 2).await;
    bob.assert_revoked("bob, after the resync").await;
    let closed = format!("closed session={bob_session} user=2 reason=revoked");
    game.expect("bob closed", |l| l == closed).await;

    let printed = game.all_printed();
    for token in &tokens {
        assert!(!printed.contains(token.as_str()), "a token was printed");
    }
}

/// ReauthRequired: a refresh in time keeps the player, none revokes it with session_expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csharp_client_raises_reauth_required_and_a_session_not_refreshed_in_time_is_revoked() {
    if !mono_installed() {
        return;
    }
    // Tokens live 3 s, and a session has 4 s to refresh once its token expired.
    let api = ApiConfig {
        token_ttl: Duration::from_secs(3),
        ..ApiConfig::default()
    };
    let sidecar = &["--clock-skew", "0", "--reauth-grace", "4"];
    let mut parties = Parties::start(api, sidecar).await;
    // Each token is taken just before its player connects: it lives only so long.
    let alice_token = parties.token("alice").await;
    let (mut alice, _) = Player::connect(parties.game.addr, &alice_token).await;
    let alice_session = parties.game.admitted("user=1 name=Alice").await;
    let bob_token = parties.token("bob").await;
    let game = &mut parties.game;
    let (mut bob, _) = Player::connect(game.addr, &bob_token).await;
    let bob_session = game.admitted("user=2 name=Bob").await;

    // Each token expires: ReauthRequired names its session, with the grace in milliseconds.
    let asked = json!({"type": "reauth_required", "within_ms": 4000});
    assert_eq!(alice.read(BOUND).await, Some(asked.clone()));
    assert_eq!(bob.read(BOUND).await, Some(asked));
    // In either order: the two expiries may fall in the same second.
    let mut awaited: Vec<String> = [&alice_session, &bob_session]
        .map(|session| format!("reauth_required session={session} within_ms=4000"))
        .to_vec();
    while !awaited.is_empty() {
        let line = (game.expect("reauth_required", |l| awaited.iter().any(|a| a == l))).await;
        awaited.retain(|a| *a != line);
    }

    // Alice sends a fresh token in time: her session's refresh. Bob does not: revoked.
    let fresh = parties.token("alice").await;
    alice.send(&fresh).await;
    assert_eq!(
        alice.read(BOUND).await,
        Some(json!({"type": "connected", "user": {"id": 1, "name": "Alice"}}))
    );
    let game = &mut parties.game;
    let refreshed = format!("connected session={alice_session} user=1 name=Alice (refreshed)");
    game.expect("alice refreshed", |l| l == refreshed).await;
    bob.assert_closed("bob, who did not refresh", "session_expired")
        .await;
    let closed = format!("closed session={bob_session} user=2 reason=session_expired");
    game.expect("bob closed", |l| l == closed).await;
    let printed = game.all_printed();
    for token in [&alice_token, &bob_token, &fresh] {
        assert!(!printed.contains(token.as_str()), "a token was printed");
    }
}

/// The game server's bounds on a player: a line of `MaxLine` bytes is read, one byte more is
/// refused (`line_too_long`) without waiting for a newline, and a connection not logged in within
/// the login timeout is closed (`login_timeout`), whatever lines it sent meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csharp_game_server_refuses_an_over_long_line_and_closes_a_connection_that_does_not_log_in(
) {
    if !mono_installed() {
        return;
    }
    let mut parties = Parties::start(ApiConfig::default(), &[]).await;
    let token = parties.token("alice").await;
    let game = &mut parties.game;

    // The silent connections' clocks start now; they are checked last.
    let opened = Instant::now();
    let mut silent = Player::open(game.addr).await;
    let mut chatty = Player::open(game.addr).await;
    chatty.write(b"{\"type\":\"hello\"}\n").await;
    assert_eq!(
        chatty.read(BOUND).await,
        Some(json!({"type": "error", "error": "bad_request"}))
    );

    // A connect padded with spaces to exactly MAX_LINE bytes is read and admits its player.
    let mut hello = json!({"type": "connect", "access_token": token}).to_string();
    hello.push_str(&" ".repeat(MAX_LINE - hello.len()));
    hello.push('\n');
    let mut alice = Player::open(game.addr).await;
    alice.write(hello.as_bytes()).await;
    assert_eq!(
        alice.read(BOUND).await,
        Some(json!({"type": "connected", "user": {"id": 1, "name": "Alice"}}))
    );
    game.admitted("user=1 name=Alice").await;

    // One byte more and no newline: refused as it passes the bound, not when a newline comes.
    let mut long = Player::open(game.addr).await;
    long.write(&vec![b'x'; MAX_LINE + 1]).await;
    long.assert_refused("line_too_long", &MAX_LINE.to_string())
        .await;
    game.expect("the long line's close", |l| {
        l.starts_with("closed session=") && l.ends_with(" reason=line_too_long")
    })
    .await;

    // Not logged in within the login timeout, silent or not: closed then, and not before.
    let ms = LOGIN_TIMEOUT.as_millis().to_string();
    silent.assert_refused("login_timeout", &ms).await;
    chatty.assert_refused("login_timeout", &ms).await;
    let waited = opened.elapsed();
    assert!(
        waited >= LOGIN_TIMEOUT,
        "closed after {waited:?}, before the login timeout"
    );
    for _ in 0..2 {
        game.expect("a login timeout's close", |l| {
            l.starts_with("closed session=") && l.ends_with(" reason=login_timeout")
        })
        .await;
    }
    // Alice, admitted, is past the login timeout too, and still served.
    alice.assert_kept("alice").await;
    let printed = game.all_printed();
    assert!(!printed.contains(&token), "a token was printed");
}

/// The client's parts, checked by a C# program of its own against a real sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csharp_client_checks_pass_against_a_real_sidecar() {
    if !mono_installed() {
        return;
    }
    let dir = TempDir::new("csharp");
    let checks = compile(dir.path(), "tests/ClientChecks.cs");
    let api = support::reference_api().await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _sidecar = SidecarProcess::start(listen, admin, &api.base_url(), &[]);
    let token = support::login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let run = tokio::process::Command::new("mono")
        .arg(&checks)
        .env("TOKEN_RESOLVER_URL", format!("http://{listen}"))
        .env("ALICE_TOKEN", &token)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the checks end within 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for check in [
        "json_accepts",
        "json_refuses",
        "json_quote_round_trips",
        "resolve_answers_the_user",
        "resolve_through_the_callers_http_client",
        "resolve_with_a_session_then_its_refresh",
        "a_refused_token_carries_the_code_and_not_the_token",
        "a_bad_session_names_the_field",
        "forget_escapes_the_session",
        "no_sidecar_is_sidecar_unavailable",
        "a_silent_sidecar_is_bounded_by_request_timeout",
        "an_answer_past_the_bound_is_sidecar_bad_answer",
        "events_stop_on_cancel_and_run_again",
        "events_parse_the_stream_and_resync_on_what_they_cannot_read",
        "a_silent_stream_is_lost_and_tried_again_with_backoff",
        "a_stream_past_the_bound_is_lost_with_a_resync",
    ] {
        let passed = format!("ok {check}");
        assert!(stdout.lines().any(|l| l == passed), "{check}: {stdout}");
    }
    assert!(!stdout.contains(&token), "no token is printed");
}
