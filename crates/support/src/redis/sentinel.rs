//! A real Sentinel group on free loopback ports: one master, one replica and three sentinels
//! (`redis-server --sentinel`) that fail over within about a second of the master's death.
//!
//! Include it beside `redis_server.rs` (see `redis_tls.rs`). Stopped on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, wait_for, RedisServer};

/// The name the sentinels monitor the master under.
pub const MASTER: &str = "tokens";

pub struct SentinelGroup {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    /// The sentinels' config files (Sentinel rewrites them); removed on drop.
    dir: PathBuf,
}

impl SentinelGroup {
    /// Starts the group and waits until every sentinel knows the replica and the other
    /// sentinels (a failover needs both); `None` where redis-server is not installed.
    pub fn start() -> Option<SentinelGroup> {
        let master = RedisServer::start()?;
        let replica = RedisServer::start_with(vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port().to_string(),
        ])?;
        let dir = std::env::temp_dir().join(format!(
            "token-resolver-sentinel-{}-{}",
            std::process::id(),
            master.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let sentinels = (0..3)
            .map(|_| {
                let port = free_port();
                let conf = dir.join(format!("sentinel-{port}.conf"));
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\n\
                         sentinel monitor {MASTER} 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds {MASTER} 500\n\
                         sentinel failover-timeout {MASTER} 2000\n\
                         sentinel parallel-syncs {MASTER} 1\n",
                        master.port()
                    ),
                )
                .unwrap();
                let child = Command::new("redis-server")
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server --sentinel starts");
                (port, child)
            })
            .collect();
        let group = SentinelGroup {
            master,
            replica,
            sentinels,
            dir,
        };
        wait_for(
            "the sentinels know the replica and each other",
            Duration::from_secs(20),
            || {
                group.sentinel_ports().iter().all(|&port| {
                    let count = |what: &str| -> usize {
                        sentinel_query(port, &["SENTINEL", what, MASTER])
                            .map(|v| v.len())
                            .unwrap_or(0)
                    };
                    count("REPLICAS") == 1 && count("SENTINELS") == 2
                })
            },
        );
        Some(group)
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(port, _)| *port).collect()
    }

    /// `redis://127.0.0.1:<port>` for every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_ports()
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// The master's port, as the first sentinel that answers names it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinel_ports().iter().find_map(|&port| {
            let mut c = sentinel_connection(port).ok()?;
            let (_, master_port): (String, u16) = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER)
                .query(&mut c)
                .ok()?;
            Some(master_port)
        })
    }

    /// Kills the master and waits until the sentinels name the replica as master and it takes
    /// writes.
    pub fn kill_master_and_wait_for_failover(&mut self) {
        self.master.stop();
        let replica = self.replica.port();
        wait_for(
            "the sentinels promote the replica",
            Duration::from_secs(30),
            || {
                self.master_port() == Some(replica)
                    && self
                        .replica
                        .command(&["SET", "failover-probe", "1"])
                        .is_ok()
            },
        );
    }
}

fn sentinel_connection(port: u16) -> redis::RedisResult<redis::Connection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))?
        .get_connection_with_timeout(Duration::from_millis(200))
}

fn sentinel_query(port: u16, args: &[&str]) -> redis::RedisResult<Vec<redis::Value>> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut sentinel_connection(port)?)
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
