//! Real `redis-server` processes on free loopback ports, stopped on drop: one server
//! ([`RedisServer`], with [`free_port`], [`installed`] and [`wait_for`]: crate
//! `token-resolver-loopback`'s, which the chaos run shares, re-exported here), one speaking TLS
//! with a CA made at run time ([`RedisTls`]), a master with sentinels ([`SentinelGroup`]) and a
//! cluster made with `redis-cli` ([`RedisCluster`]).
//!
//! Without `redis-server` on the PATH a test that needs one is skipped with a note, unless `CI`
//! is set: `.ci/run` installs it, and there a missing server is a failure.

mod cluster;
mod sentinel;
mod tls;

pub use cluster::RedisCluster;
pub use sentinel::{SentinelGroup, MASTER};
pub use tls::{certificates, RedisTls};
pub use token_resolver_loopback::{free_port, installed, wait_for, RedisServer};
