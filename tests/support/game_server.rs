//! Game servers for the tests: a `GameServer` in this process on `127.0.0.1:0`, and the real
//! `token-resolver game-server` binary as a child process.

use std::net::SocketAddr;

use token_resolver::Resolver;

/// A game server embedding `resolver`, serving `rooms`, on `127.0.0.1:0`.
pub async fn game_server(
    resolver: Resolver,
    rooms: Vec<token_resolver::game_server::RoomConfig>,
) -> token_resolver::game_server::RunningGameServer {
    game_server_with(
        resolver,
        token_resolver::game_server::GameServerConfig {
            rooms,
            ..Default::default()
        },
    )
    .await
}

pub async fn game_server_with(
    resolver: Resolver,
    config: token_resolver::game_server::GameServerConfig,
) -> token_resolver::game_server::RunningGameServer {
    token_resolver::game_server::GameServer::new(resolver, config)
        .expect("valid game server config")
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("game server binds to loopback")
}

/// A room `{roomId, authUrl?}`.
pub fn room(id: &str, auth_url: Option<&str>) -> token_resolver::game_server::RoomConfig {
    token_resolver::game_server::RoomConfig {
        room_id: id.to_owned(),
        auth_url: auth_url.map(str::to_owned),
    }
}

/// A `token-resolver game-server` process listening on `127.0.0.1:0`, killed on drop.
pub struct GameServerProcess {
    child: std::process::Child,
    /// Where it listens, read from its first line of output.
    pub addr: SocketAddr,
    /// Kept open so that the server never writes to a closed pipe.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl GameServerProcess {
    /// Starts `token-resolver game-server --listen 127.0.0.1:0` with `args` and `envs`.
    pub async fn start(args: &[&str], envs: &[(&str, &str)]) -> GameServerProcess {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_token-resolver"))
            .args(["game-server", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(envs.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first, reader) = tokio::task::spawn_blocking(move || {
            let mut reader = std::io::BufReader::new(stdout);
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            (line, reader)
        })
        .await
        .unwrap();
        let addr = first
            .split_whitespace()
            .find_map(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no address in {first:?}"));
        GameServerProcess {
            child,
            addr,
            _stdout: reader,
        }
    }
}

impl Drop for GameServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
