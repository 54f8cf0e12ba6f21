//! A real Redis Cluster on free loopback ports: three masters, and optionally one replica each,
//! made with `redis-cli --cluster create`, with a node timeout of one second so that a killed
//! master's replica takes over quickly.
//!
//! Include it beside `redis_server.rs` (see `redis_tls.rs`). Stopped on drop.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{free_port, installed, wait_for, RedisServer};

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// The nodes' cluster config files; removed on drop.
    dir: PathBuf,
}

impl RedisCluster {
    /// Three masters and `replicas` replicas of each; `None` where redis-server or redis-cli
    /// is not installed.
    pub fn start(replicas: usize) -> Option<RedisCluster> {
        if !installed("redis-server") || !installed("redis-cli") {
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "token-resolver-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|i| {
                RedisServer::start_with(vec![
                    "--cluster-enabled".into(),
                    "yes".into(),
                    "--cluster-port".into(),
                    free_port().to_string(),
                    "--cluster-config-file".into(),
                    format!("nodes-{i}.conf"),
                    "--cluster-node-timeout".into(),
                    "1000".into(),
                    // A replica may take over however long ago it last heard its master.
                    "--cluster-replica-validity-factor".into(),
                    "0".into(),
                    "--dir".into(),
                    dir.to_string_lossy().into_owned(),
                ])
                .expect("redis-server is installed")
            })
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes, dir };
        cluster.wait_until_ok();
        Some(cluster)
    }

    /// Waits until every live node says the cluster is ok and knows every slot's master, and
    /// every live replica is in sync with its master.
    pub fn wait_until_ok(&self) {
        let text = |node: &RedisServer, args: &[&str]| {
            node.command(args)
                .ok()
                .and_then(|v| redis::from_redis_value::<String>(v).ok())
                .unwrap_or_default()
        };
        wait_for(
            "the cluster is ok on every node",
            Duration::from_secs(30),
            || {
                self.live().all(|node| {
                    let info = text(node, &["CLUSTER", "INFO"]);
                    let replication = text(node, &["INFO", "replication"]);
                    info.contains("cluster_state:ok")
                        && info.contains("cluster_slots_ok:16384")
                        && (replication.contains("role:master")
                            || replication.contains("master_link_status:up"))
                })
            },
        );
    }

    /// Kills master `node` and waits until its replica took over and the cluster is ok again.
    pub fn kill_and_wait_for_failover(&mut self, node: usize) {
        self.nodes[node].stop();
        wait_for("the cluster notices", Duration::from_secs(30), || {
            self.live().any(|n| {
                n.command(&["CLUSTER", "NODES"])
                    .ok()
                    .and_then(|v| redis::from_redis_value::<String>(v).ok())
                    .is_some_and(|nodes| nodes.contains("fail"))
            })
        });
        self.wait_until_ok();
    }

    fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.connection().is_ok())
    }

    /// `redis://127.0.0.1:<port>` for every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port()))
            .collect()
    }

    /// The nodes that are masters now (and alive), by index.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i]
                    .command(&["ROLE"])
                    .ok()
                    .and_then(|v| redis::from_redis_value::<Vec<redis::Value>>(v).ok())
                    .and_then(|v| v.into_iter().next())
                    .and_then(|v| redis::from_redis_value::<String>(v).ok())
                    .as_deref()
                    == Some("master")
            })
            .collect()
    }

    /// Keys on every live master, with `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.masters()
            .into_iter()
            .flat_map(|i| {
                self.nodes[i]
                    .command(&["KEYS", pattern])
                    .ok()
                    .and_then(|v| redis::from_redis_value::<Vec<String>>(v).ok())
                    .unwrap_or_default()
            })
            .collect()
    }

    pub fn key_count(&self) -> usize {
        self.keys("*").len()
    }

    /// Answers the shared tier holds on every master: its token entries.
    pub fn entry_count(&self) -> usize {
        self.keys("*:tok:*").len()
    }

    /// The index of the master that owns `key`'s slot now.
    pub fn owner_of(&self, key: &str) -> usize {
        let slot = self.slot_of(key);
        *self
            .masters()
            .iter()
            .find(|&&i| self.owns(i, slot))
            .expect("a master owns every slot")
    }

    pub fn slot_of(&self, key: &str) -> u16 {
        let v = self.nodes[self.masters()[0]]
            .command(&["CLUSTER", "KEYSLOT", key])
            .unwrap();
        redis::from_redis_value::<u16>(v).unwrap()
    }

    fn owns(&self, node: usize, slot: u16) -> bool {
        let myself = self.node_id(node);
        let nodes: String = self.nodes[node]
            .command(&["CLUSTER", "NODES"])
            .ok()
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or_default();
        nodes
            .lines()
            .find(|l| l.starts_with(&myself))
            .map(|line| {
                line.split_whitespace().skip(8).any(|range| {
                    let mut ends = range.split('-');
                    let lo: u16 = ends.next().and_then(|s| s.parse().ok()).unwrap_or(u16::MAX);
                    let hi: u16 = ends.next().and_then(|s| s.parse().ok()).unwrap_or(lo);
                    (lo..=hi).contains(&slot)
                })
            })
            .unwrap_or(false)
    }

    pub fn node_id(&self, node: usize) -> String {
        redis::from_redis_value(self.nodes[node].command(&["CLUSTER", "MYID"]).unwrap()).unwrap()
    }

    /// Starts moving `key`'s slot from its owner to master `to`: marks it migrating and
    /// importing and moves `key` over, so that its old owner answers `ASK`. Returns the slot.
    pub fn begin_migration(&self, key: &str, to: usize) -> u16 {
        let (from, slot) = (self.owner_of(key), self.slot_of(key));
        let s = slot.to_string();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        self.nodes[to]
            .command(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id])
            .unwrap();
        self.nodes[from]
            .command(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id])
            .unwrap();
        let to_port = self.nodes[to].port().to_string();
        self.nodes[from]
            .command(&["MIGRATE", "127.0.0.1", &to_port, key, "0", "5000"])
            .unwrap();
        slot
    }

    /// Finishes the move of `slot` to master `to` on every master: its old owner answers
    /// `MOVED` from now on.
    pub fn end_migration(&self, slot: u16, to: usize) {
        let (s, to_id) = (slot.to_string(), self.node_id(to));
        let mut order = vec![to];
        order.extend(self.masters().into_iter().filter(|&m| m != to));
        for m in order {
            self.nodes[m]
                .command(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id])
                .unwrap();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
