//! A real `redis-server` on a free loopback port, stopped on drop: the shared tier of the tests
//! and of the chaos run's nodes. It owns starting one (retrying on other ports when its port was
//! taken), killing it and starting it again on the same port, and the tests' own look at its
//! data; TLS, Sentinel and Cluster are the test support's, built on this.
//!
//! Without `redis-server` on the PATH the tests that need it are skipped with a note, unless
//! `CI` is set: `.ci/run` installs it, and there a missing server is a failure.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// One `redis-server` process on `127.0.0.1`, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    /// Where it listens, kept across restarts.
    port: u16,
    /// Further redis-server arguments (TLS, cluster, replication), kept for restarts.
    extra: Vec<String>,
    /// The process while it runs; `None` once stopped.
    child: Option<Child>,
}

/// Whether `binary` runs here; without it a test is skipped with a note, or fails under CI.
pub fn installed(binary: &str) -> bool {
    let found = Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    crate::present(found, binary, "redis-server redis-tools")
}

/// Times [`RedisServer::start_with`] tries ports before it gives up.
const PORT_ATTEMPTS: usize = 5;

/// Polls `condition` every 20 ms for up to `limit`; panics naming `what` past it.
pub fn wait_for(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl RedisServer {
    /// Starts one, or returns `None` (and says so) where redis-server is not installed.
    pub fn start() -> Option<RedisServer> {
        Self::start_with(Vec::new())
    }

    /// Starts one with further arguments (e.g. `--tls-port …`); `None` as [`start`](Self::start).
    ///
    /// A free port can be taken by another test between its choice and redis-server's bind;
    /// redis-server then exits at once, and it is started again on other ports (its own and
    /// `--cluster-port`'s), a few times.
    pub fn start_with(extra: Vec<String>) -> Option<RedisServer> {
        if !installed("redis-server") {
            return None;
        }
        let mut server = RedisServer {
            port: free_port(),
            extra,
            child: None,
        };
        for _ in 0..PORT_ATTEMPTS {
            if server.spawn_and_wait() {
                return Some(server);
            }
            server.port = free_port();
            let cluster_port = server.extra.iter().position(|a| a == "--cluster-port");
            if let Some(value) = cluster_port.and_then(|at| server.extra.get_mut(at + 1)) {
                *value = free_port().to_string();
            }
        }
        panic!("redis-server exited at once {PORT_ATTEMPTS} times, on other ports each time");
    }

    /// The plain port (for the test's own look at the data).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts it on its port, and waits until it answers.
    fn launch(&mut self) {
        assert!(
            self.spawn_and_wait(),
            "redis-server exited at once on port {} (taken by another process?)",
            self.port
        );
    }

    /// Starts it, and waits until it answers (`true`) or exits, as it does at once when its
    /// port is taken (`false`).
    fn spawn_and_wait(&mut self) -> bool {
        // A replica writes the snapshot it syncs from its master into its working directory,
        // `--save ""` or not: keep it out of the checkout.
        let dir = std::env::temp_dir().join(format!("token-resolver-redis-{}", self.port));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server under the temp dir");
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--dir",
                dir.to_str().expect("the temp dir is UTF-8"),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self
                .connection()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok()
            {
                return true;
            }
            let exited = (self.child.as_mut()).is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited {
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not answer PING on port {}", self.port);
    }

    /// Where it listens.
    pub fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port()).into()
    }

    /// Whether Redis has trimmed entries off the shared tier's revocation stream (under the
    /// default prefix): a node that was away since then cannot catch up exactly.
    pub fn revocations_trimmed(&self) -> bool {
        let info = self.command(&["XINFO", "STREAM", "token-resolver:revocations"]);
        let Ok(redis::Value::Array(fields)) = info else {
            return false;
        };
        let field = |wanted: &str| {
            fields.chunks(2).find_map(|pair| match pair {
                [name, value]
                    if redis::from_redis_value_ref::<String>(name).is_ok_and(|n| n == wanted) =>
                {
                    redis::from_redis_value_ref::<u64>(value).ok()
                }
                _ => None,
            })
        };
        // More entries were added than the stream holds: Redis trimmed the oldest.
        matches!(
            (field("entries-added"), field("length")),
            (Some(added), Some(length)) if added > length
        )
    }

    /// `redis://127.0.0.1:<port>`, for a client of the plain port.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain connection as Redis's `default` user, for the test's own commands.
    ///
    /// # Errors
    ///
    /// Redis's error when the server does not accept a connection within 200 ms (stopped,
    /// not started yet, or behind a fault).
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_millis(200))
    }

    /// Kills the server (as a crash would).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Every key, with its value (strings), members (sets) or entries' fields and values
    /// (streams), as bytes.
    pub fn dump(&self) -> Vec<(Vec<u8>, Vec<Vec<u8>>)> {
        let mut c = self.connection().unwrap();
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
        keys.into_iter()
            .filter_map(|key| {
                let kind: String = redis::cmd("TYPE").arg(&key).query(&mut c).unwrap();
                let values = match kind.as_str() {
                    "string" => vec![redis::cmd("GET").arg(&key).query(&mut c).unwrap()],
                    "set" => redis::cmd("SMEMBERS").arg(&key).query(&mut c).unwrap(),
                    "stream" => {
                        let entries: Vec<(Vec<u8>, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
                            .arg(&key)
                            .arg("-")
                            .arg("+")
                            .query(&mut c)
                            .unwrap();
                        entries.into_iter().flat_map(|(_, fields)| fields).collect()
                    }
                    // Expired since KEYS listed it.
                    "none" => return None,
                    other => panic!("unexpected Redis type {other}"),
                };
                Some((key, values))
            })
            .collect()
    }

    /// Overwrites every token entry's value with `value`, keeping its time to live.
    pub fn overwrite_entries(&self, value: &str) {
        let mut c = self.connection().unwrap();
        for (key, _) in self.dump() {
            if is_entry(&key) {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value)
                    .arg("KEEPTTL")
                    .query::<()>(&mut c)
                    .unwrap();
            }
        }
    }

    /// Runs `args` as one command as the `default` user.
    ///
    /// # Errors
    ///
    /// Redis's error when no connection is made (see [`connection`](Self::connection)) or the
    /// server refuses the command.
    pub fn command(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.connection()?)
    }

    /// How many keys it holds (`DBSIZE`); 0 when it does not answer.
    pub fn key_count(&self) -> usize {
        self.connection()
            .and_then(|mut c| redis::cmd("DBSIZE").query::<usize>(&mut c))
            .unwrap_or(0)
    }

    /// Answers the shared tier holds here: its token entries (`...:tok:{...}`), not its
    /// indexes, tombstones, generation or revocation stream.
    pub fn entry_count(&self) -> usize {
        self.connection()
            .and_then(|mut c| {
                redis::cmd("KEYS")
                    .arg("*:tok:*")
                    .query::<Vec<Vec<u8>>>(&mut c)
            })
            .map_or(0, |keys| keys.len())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `key` is one of the shared tier's token entries.
fn is_entry(key: &[u8]) -> bool {
    key.windows(5).any(|w| w == b":tok:")
}
