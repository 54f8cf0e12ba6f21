//! `game-server`'s shared-tier flags: the four ways to reach Redis, the private CA, the
//! password from the environment, and the connection check at start.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use token_resolver::{RedisTier, RedisTierError};

/// Where the shared tier is; at most one of `--redis-url`, `--redis-sentinel`,
/// `--redis-cluster-node`. The key-derivation secret comes from TOKEN_RESOLVER_REDIS_SECRET,
/// a password the URLs lack from TOKEN_RESOLVER_REDIS_PASSWORD.
#[derive(Debug, Args)]
pub(crate) struct RedisArgs {
    /// Share cached answers and invalidations with other nodes through the Redis at this URL:
    /// redis://[user:password@]host:port or rediss:// for TLS.
    #[arg(long, value_name = "URL", conflicts_with_all = ["redis_sentinel", "redis_cluster_node"])]
    pub(crate) redis_url: Option<String>,
    /// A sentinel of the Redis to share through (repeatable); needs --redis-master.
    #[arg(
        long,
        value_name = "URL",
        requires = "redis_master",
        conflicts_with = "redis_cluster_node"
    )]
    pub(crate) redis_sentinel: Vec<String>,
    /// The name the sentinels know the master by.
    #[arg(long, value_name = "NAME", requires = "redis_sentinel")]
    pub(crate) redis_master: Option<String>,
    /// A node of the Redis Cluster to share through (repeatable; any nodes, the rest are found).
    #[arg(long, value_name = "URL")]
    pub(crate) redis_cluster_node: Vec<String>,
    /// PEM file of the CA that signed the Redis servers' certificates (for rediss://).
    #[arg(long, value_name = "FILE")]
    pub(crate) redis_ca: Option<PathBuf>,
    /// Prefix of the shared tier's Redis keys and channel.
    #[arg(long, value_name = "PREFIX", default_value = "token-resolver:")]
    pub(crate) redis_prefix: String,
    /// Revocations the shared tier's stream keeps (approximately): a node cut off for longer
    /// than they span catches up by re-checking every session instead.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) redis_stream_len: u64,
}

impl RedisArgs {
    /// The shared tier the flags describe, if any; a usage error names the flag or variable
    /// at fault.
    pub(crate) fn tier(&self) -> Result<Option<RedisTier>, String> {
        let configured = self.redis_url.is_some()
            || !self.redis_sentinel.is_empty()
            || !self.redis_cluster_node.is_empty();
        if !configured {
            if self.redis_ca.is_some() {
                return Err(
                    "--redis-ca needs --redis-url, --redis-sentinel or --redis-cluster-node".into(),
                );
            }
            return Ok(None);
        }
        let secret = std::env::var("TOKEN_RESOLVER_REDIS_SECRET").map_err(|_| {
            "the shared cache needs TOKEN_RESOLVER_REDIS_SECRET (at least 16 bytes, the same on every node)"
                .to_owned()
        })?;
        let mut tier = match (&self.redis_url, &self.redis_master) {
            (Some(url), _) => RedisTier::new(url, secret),
            (None, Some(master)) => RedisTier::sentinel(&self.redis_sentinel, master, secret),
            (None, None) => RedisTier::cluster(&self.redis_cluster_node, secret),
        };
        tier = tier
            .key_prefix(&self.redis_prefix)
            .stream_len(self.redis_stream_len);
        match std::env::var("TOKEN_RESOLVER_REDIS_PASSWORD") {
            Ok(password) => tier = tier.password(password),
            Err(std::env::VarError::NotPresent) => {}
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err("TOKEN_RESOLVER_REDIS_PASSWORD is not valid UTF-8".into())
            }
        }
        if let Some(path) = &self.redis_ca {
            let pem =
                std::fs::read(path).map_err(|e| format!("--redis-ca {}: {e}", path.display()))?;
            tier = tier.root_certificate(pem);
        }
        Ok(Some(tier))
    }
}

/// Connects to the shared tier once: a configuration that cannot work is an error (the caller
/// exits 2); a Redis that is only down now is a warning, since the tier keeps trying by itself
/// and resolutions go on through the API meanwhile.
pub(crate) async fn check_at_start(tier: &RedisTier) -> Result<(), RedisTierError> {
    match tier.check(Duration::from_secs(3)).await {
        Err(e) if !e.is_config() => {
            eprintln!("warning: shared cache (Redis): {e}; starting without it for now");
            Ok(())
        }
        outcome => outcome,
    }
}
