//! Game servers for the tests: a `GameServer` in this process on `127.0.0.1:0`, and the real
//! `token-resolver game-server` binary as a child process.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use token_resolver::Resolver;

/// A game server embedding `resolver`, serving `rooms`, on `127.0.0.1:0`.
pub async fn game_server(
    resolver: Resolver,
    rooms: Vec<token_resolver_game_server::RoomConfig>,
) -> token_resolver_game_server::RunningGameServer {
    game_server_with(
        resolver,
        token_resolver_game_server::GameServerConfig {
            rooms,
            ..Default::default()
        },
    )
    .await
}

pub async fn game_server_with(
    resolver: Resolver,
    config: token_resolver_game_server::GameServerConfig,
) -> token_resolver_game_server::RunningGameServer {
    token_resolver_game_server::GameServer::new(resolver, config)
        .expect("valid game server config")
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("game server binds to loopback")
}

/// A player of `game` connected with `token` and joined, with it, to the first room `game`
/// lists.
pub async fn in_the_first_room(
    game: &token_resolver_game_server::RunningGameServer,
    token: &str,
) -> token_resolver_player::GameClient {
    let mut client = token_resolver_player::GameClient::open(game.local_addr())
        .await
        .unwrap();
    client.connect(Some(token)).await.unwrap();
    let rooms = client.search_rooms().await.unwrap();
    let args = token_resolver_player::RoomJoinArgs::new(&rooms[0], Default::default());
    client.join(&args, Some(token)).await.unwrap();
    client
}

/// A room `{roomId, authUrl?}`.
pub fn room(id: &str, auth_url: Option<&str>) -> token_resolver_game_server::RoomConfig {
    token_resolver_game_server::RoomConfig {
        room_id: id.to_owned(),
        auth_url: auth_url.map(str::to_owned),
    }
}

/// A `token-resolver game-server` process listening on `127.0.0.1:0`, killed on drop.
pub struct GameServerProcess {
    child: std::process::Child,
    /// Where it listens, read from its banner.
    pub addr: SocketAddr,
    /// Where its admin listener listens, when `--admin-listen` was given.
    pub admin: Option<SocketAddr>,
    /// Where its WebSocket listener listens, when `--ws-listen` was given.
    pub websocket: Option<SocketAddr>,
    /// The banner it printed on stdout.
    pub banner: String,
    /// Kept open so that the server never writes to a closed pipe.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
    /// Everything it logged on stderr, gathered by a thread.
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl GameServerProcess {
    /// Starts `binary game-server --listen 127.0.0.1:0` with `args` and `envs`, logging at
    /// `warn`, and waits for its banner. `binary` is the `token-resolver` executable: its
    /// package's tests have it as `env!("CARGO_BIN_EXE_token-resolver")`.
    pub async fn start(binary: &str, args: &[&str], envs: &[(&str, &str)]) -> GameServerProcess {
        let mut all_envs = vec![("RUST_LOG", "warn")];
        all_envs.extend_from_slice(envs);
        GameServerProcess::start_raw(binary, &["--listen", "127.0.0.1:0"], args, &all_envs).await
    }

    /// Starts `binary game-server` with exactly `first` then `args` (no `--listen`) and
    /// `envs`, and waits for its banner: every line up to the one naming the messages.
    pub async fn start_raw(
        binary: &str,
        first: &[&str],
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> GameServerProcess {
        use std::io::{BufRead, Read};
        let mut child = std::process::Command::new(binary)
            .arg("game-server")
            .args(first)
            .args(args)
            .envs(envs.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().unwrap();
        let gathered = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                gathered.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (banner, reader) = tokio::task::spawn_blocking(move || {
            let mut reader = std::io::BufReader::new(stdout);
            let mut banner = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 {
                    break;
                }
                banner.push_str(&line);
                if line.starts_with("messages:") {
                    break;
                }
            }
            (banner, reader)
        })
        .await
        .unwrap();
        let address_after = |prefix: &str| {
            banner
                .lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| {
                    l.split_whitespace().find_map(|w| {
                        let w = w.trim_start_matches("http://").trim_start_matches("ws://");
                        w.trim_end_matches("/ws").parse().ok()
                    })
                })
        };
        let addr = address_after("game server listening").unwrap_or_else(|| {
            panic!(
                "no address in the banner {banner:?}; stderr: {}",
                String::from_utf8_lossy(&stderr.lock().unwrap())
            )
        });
        GameServerProcess {
            child,
            addr,
            admin: address_after("admin listener"),
            websocket: address_after("WebSocket listener"),
            banner,
            _stdout: reader,
            stderr,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged on stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Sends it SIGTERM, as an orchestrator does.
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }

    /// Its exit status, once it exits within `within`; `None` if it is still running then.
    pub async fn exited_within(
        &mut self,
        within: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
impl Drop for GameServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raises this process's file limit to its hard limit (children inherit it): what a bench
/// holding thousands of sockets needs. The limit now.
pub fn raise_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        }
    }
    limit.rlim_cur
}
