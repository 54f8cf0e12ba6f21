//! The world a run plays in: `redis-server`, two reference APIs behind their proxies, the
//! game-server nodes and the sidecar, each a real child process of the `token-resolver`
//! binary on fixed free loopback ports (so that a restart comes back where it was), and a
//! relay between each node or the sidecar and Redis. It owns starting, killing, restarting
//! and stopping them; dropping it kills every child.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use token_resolver_loopback::{free_port, RedisServer, Relay};

use crate::proxy::Proxy;
use crate::record::lock;
use crate::schedule::{Api, Target};

/// Where Debian's libfaketime may be.
const FAKETIME_LIBS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// libfaketime's path, when installed.
pub(crate) fn faketime_lib() -> Option<&'static str> {
    FAKETIME_LIBS.into_iter().find(|p| Path::new(p).exists())
}

/// One child process of the binary, with what it takes to start it again the same way.
#[derive(Debug)]
pub(crate) struct Child {
    /// Its name in the history: `api`, `api-b`, `node-1`, `sidecar`.
    pub(crate) name: String,
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Its stderr and stdout, appended across restarts.
    pub(crate) log: PathBuf,
    /// Where to ask whether it is ready: `/readyz` on an admin listener, or any answer.
    ready_url: String,
    ready_needs_200: bool,
    /// The admin listener (`/metrics`), for nodes and the sidecar.
    pub(crate) admin: Option<SocketAddr>,
    process: Option<tokio::process::Child>,
}

impl Child {
    /// Starts it, under libfaketime `offset` seconds off when given.
    fn spawn(&mut self, offset: Option<i64>) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let out = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        if let (Some(offset), Some(lib)) = (offset, faketime_lib()) {
            command
                .env("LD_PRELOAD", lib)
                .env("FAKETIME", format!("{offset:+}s"))
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        let process = command
            .spawn()
            .map_err(|e| format!("starting {} ({}): {e}", self.name, self.binary.display()))?;
        self.process = Some(process);
        Ok(())
    }

    /// Waits until it answers as ready, for at most `limit`.
    async fn ready(&mut self, http: &reqwest::Client, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(process) = self.process.as_mut() {
                if let Ok(Some(status)) = process.try_wait() {
                    return Err(format!(
                        "{} exited at start ({status}); its log: {}, ending:\n{}",
                        self.name,
                        self.log.display(),
                        self.log_tail()
                    ));
                }
            }
            if let Ok(answer) = http.get(&self.ready_url).send().await {
                if !self.ready_needs_200 || answer.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} not ready within {limit:?}; its log: {}, ending:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last lines of its log, for an error that says why it did not start (CI keeps no
    /// work directory).
    fn log_tail(&self) -> String {
        const LINES: usize = 20;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LINES)..].join("\n")
    }

    /// SIGKILL, and waits for it to be gone.
    pub(crate) async fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.start_kill();
            let _ = process.wait().await;
        }
    }

    /// The process id while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(tokio::process::Child::id)
    }
}

/// Everything the run plays against.
pub(crate) struct World {
    /// Where the logs and files are.
    pub(crate) dir: PathBuf,
    pub(crate) redis: Mutex<RedisServer>,
    /// One relay to Redis per node and the sidecar.
    pub(crate) relays: HashMap<Target, Relay>,
    /// The integrators as the products see them.
    pub(crate) proxies: HashMap<Api, Proxy>,
    /// The APIs' own base URLs (logins, logouts, bans).
    pub(crate) api_urls: HashMap<Api, String>,
    pub(crate) apis: Vec<tokio::sync::Mutex<Child>>,
    pub(crate) nodes: Vec<tokio::sync::Mutex<Child>>,
    /// The nodes' game ports.
    pub(crate) game_addrs: Vec<SocketAddr>,
    pub(crate) sidecar: tokio::sync::Mutex<Child>,
    pub(crate) sidecar_url: String,
    pub(crate) admin_token: String,
    pub(crate) http: reqwest::Client,
    /// Players, as the users files name them: user `i + 1` at A, `B_USERS + i + 1` at B.
    pub(crate) players: usize,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("dir", &self.dir)
            .field("nodes", &self.nodes.len())
            .field("sidecar_url", &self.sidecar_url)
            .finish_non_exhaustive()
    }
}

/// User ids at the second API start here, so that a user id names one user in the history.
pub(crate) const B_USERS: i64 = 100_000;

/// The password of player `i` (the same at both APIs).
pub(crate) fn password(i: usize) -> String {
    format!("chaos-password-{i}")
}

impl World {
    /// Starts everything and waits until each part is ready.
    ///
    /// # Errors
    ///
    /// A sentence saying what could not start (exit 2).
    pub(crate) async fn start(
        binary: &Path,
        dir: &Path,
        players: usize,
        nodes: usize,
    ) -> Result<World, String> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| e.to_string())?;
        let redis = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("redis-server is not installed (apt-get install redis-server)")?;
        let mut relays = HashMap::new();
        for n in 0..nodes {
            relays.insert(Target::Node(n), Relay::start(redis.addr()).await);
        }
        relays.insert(Target::Sidecar, Relay::start(redis.addr()).await);
        let admin_token = format!(
            "chaos-admin-{:016x}{:016x}",
            fastrand::u64(..),
            fastrand::u64(..)
        );
        let redis_secret = format!(
            "chaos-redis-{:016x}{:016x}",
            fastrand::u64(..),
            fastrand::u64(..)
        );
        // Every child's ports, chosen before any of them binds: `free_port` never hands out one
        // twice, and chooses below the ephemeral range.
        let api_ports = [free_port(), free_port()];
        let mut api_urls = HashMap::new();
        let mut proxies = HashMap::new();
        for (api, port) in [(Api::A, api_ports[0]), (Api::B, api_ports[1])] {
            let url = format!("http://127.0.0.1:{port}");
            let proxy = Proxy::start(url.clone())
                .await
                .map_err(|e| format!("the integrator proxy: {e}"))?;
            api_urls.insert(api, url);
            proxies.insert(api, proxy);
        }
        let auth_a = proxies[&Api::A].url();
        let auth_b = proxies[&Api::B].url();
        // Rooms: `lobby` on the default authUrl, `arena` on the second.
        let rooms = dir.join("rooms.json");
        let rooms_json = serde_json::json!([
            {"roomId": "lobby"},
            {"roomId": "arena", "authUrl": auth_b},
        ]);
        std::fs::write(&rooms, rooms_json.to_string()).map_err(|e| e.to_string())?;
        let secrets = vec![
            ("TOKEN_RESOLVER_ADMIN_TOKEN".to_owned(), admin_token.clone()),
            ("TOKEN_RESOLVER_REDIS_SECRET".to_owned(), redis_secret),
        ];
        let live = [
            "--allow-insecure-http",
            "--clock-skew",
            "5",
            "--reauth-grace",
            "10",
        ];
        let mut node_children = Vec::new();
        let mut game_addrs = Vec::new();
        let mut notify = Vec::new();
        for n in 0..nodes {
            let game: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let mut args: Vec<String> = [
                "game-server",
                "--listen",
                &game.to_string(),
                "--admin-listen",
                &admin.to_string(),
                "--auth-url",
                &auth_a,
                "--allow-auth-url",
                &auth_b,
                "--rooms",
                rooms.to_str().ok_or("the work directory is not UTF-8")?,
                "--idle-timeout",
                "3600",
                "--rejection-budget",
                "1000000",
                "--max-connections-per-address",
                "100000",
                "--redis-url",
                &format!("redis://{}", relays[&Target::Node(n)].addr()),
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            args.extend(live.iter().map(|s| (*s).to_owned()));
            notify.push(format!("http://{admin}"));
            game_addrs.push(game);
            node_children.push(Child {
                name: format!("node-{}", n + 1),
                binary: binary.to_owned(),
                args,
                env: secrets.clone(),
                log: dir.join(format!("node-{}.log", n + 1)),
                ready_url: format!("http://{admin}/readyz"),
                ready_needs_200: true,
                admin: Some(admin),
                process: None,
            });
        }
        let side_listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let side_admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        notify.push(format!("http://{side_admin}"));
        let mut side_args: Vec<String> = [
            "sidecar",
            "--listen",
            &side_listen.to_string(),
            "--admin-listen",
            &side_admin.to_string(),
            "--auth-url",
            &auth_a,
            "--allow-auth-url",
            &auth_b,
            "--redis-url",
            &format!("redis://{}", relays[&Target::Sidecar].addr()),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        side_args.extend(live.iter().map(|s| (*s).to_owned()));
        let sidecar = Child {
            name: "sidecar".to_owned(),
            binary: binary.to_owned(),
            args: side_args,
            env: secrets.clone(),
            log: dir.join("sidecar.log"),
            ready_url: format!("http://{side_admin}/readyz"),
            ready_needs_200: true,
            admin: Some(side_admin),
            process: None,
        };
        let mut api_children = Vec::new();
        for (k, api) in [Api::A, Api::B].into_iter().enumerate() {
            let base = if api == Api::A { 0 } else { B_USERS };
            let users: Vec<serde_json::Value> = (0..players)
                .map(|i| {
                    serde_json::json!({
                        "id": base + i64::try_from(i).unwrap_or(0) + 1,
                        "name": format!("Player {i}"),
                        "username": format!("p{i}"),
                        "password": password(i),
                    })
                })
                .collect();
            let name = if api == Api::A { "api" } else { "api-b" };
            let users_file = dir.join(format!("{name}-users.json"));
            std::fs::write(&users_file, serde_json::Value::Array(users).to_string())
                .map_err(|e| e.to_string())?;
            let mut args: Vec<String> = [
                "serve-api",
                "--listen",
                &format!("127.0.0.1:{}", api_ports[k]),
                "--users",
                users_file
                    .to_str()
                    .ok_or("the work directory is not UTF-8")?,
                "--public-url",
                &proxies[&api].url(),
                "--max-connections-per-address",
                "100000",
                "--sessions-per-user",
                "64",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            for target in &notify {
                args.push("--notify".to_owned());
                args.push(target.clone());
            }
            api_children.push(Child {
                name: name.to_owned(),
                binary: binary.to_owned(),
                args,
                env: secrets.clone(),
                log: dir.join(format!("{name}.log")),
                ready_url: format!("{}/api/user", api_urls[&api]),
                ready_needs_200: false,
                admin: None,
                process: None,
            });
        }
        let world = World {
            dir: dir.to_owned(),
            redis: Mutex::new(redis),
            relays,
            proxies,
            api_urls,
            apis: api_children
                .into_iter()
                .map(tokio::sync::Mutex::new)
                .collect(),
            nodes: node_children
                .into_iter()
                .map(tokio::sync::Mutex::new)
                .collect(),
            game_addrs,
            sidecar: tokio::sync::Mutex::new(sidecar),
            sidecar_url: format!("http://{side_listen}"),
            admin_token,
            http,
            players,
        };
        // The APIs hash every password at start: give them time.
        for api in &world.apis {
            let mut api = api.lock().await;
            api.spawn(None)?;
            api.ready(&world.http, Duration::from_secs(120)).await?;
        }
        for node in &world.nodes {
            let mut node = node.lock().await;
            node.spawn(None)?;
            node.ready(&world.http, Duration::from_secs(30)).await?;
        }
        let mut side = world.sidecar.lock().await;
        side.spawn(None)?;
        side.ready(&world.http, Duration::from_secs(30)).await?;
        drop(side);
        Ok(world)
    }

    /// The child a fault target names.
    pub(crate) fn child(&self, target: Target) -> &tokio::sync::Mutex<Child> {
        match target {
            Target::Node(n) => &self.nodes[n],
            Target::Sidecar => &self.sidecar,
        }
    }

    /// Starts `child` again (after a kill) on its ports, under a clock `offset` when given,
    /// and waits until it is ready.
    pub(crate) async fn restart(
        &self,
        child: &mut Child,
        offset: Option<i64>,
    ) -> Result<(), String> {
        child.kill().await;
        child.spawn(offset)?;
        child.ready(&self.http, Duration::from_secs(30)).await
    }

    /// Every child's name, process id and admin listener (which exports its tokio tasks):
    /// for the resource sampler.
    pub(crate) async fn pids(&self) -> Vec<(String, u32, Option<SocketAddr>)> {
        let mut pids = Vec::new();
        for child in self
            .apis
            .iter()
            .chain(&self.nodes)
            .chain(std::iter::once(&self.sidecar))
        {
            let child = child.lock().await;
            if let Some(pid) = child.pid() {
                pids.push((child.name.clone(), pid, child.admin));
            }
        }
        pids
    }

    /// Kills every child (Redis goes when the world is dropped).
    pub(crate) async fn stop(&self) {
        for child in self
            .apis
            .iter()
            .chain(&self.nodes)
            .chain(std::iter::once(&self.sidecar))
        {
            child.lock().await.kill().await;
        }
        lock(&self.redis).stop();
    }
}
