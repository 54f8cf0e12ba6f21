//! The seeded chaos run of issue 34, as a library its binary (`token-resolver-chaos`) and its
//! tests share.
//!
//! The run starts the products as real child processes of the `token-resolver` binary (two
//! reference APIs, game-server nodes, a sidecar) and a real `redis-server`, on free loopback
//! ports; plays a seeded schedule of players and faults against them; records every operation,
//! session event and fault in a history ([`token_resolver_chaos::Event`]); and has the checker
//! judge it. docs/chaos.md says how it works and how to reproduce a seed.
//!
//! # Layout
//!
//! | module | owns |
//! |---|---|
//! | [`args`] | the command line and its checks (a bad one exits 2) |
//! | [`schedule`] | the seeded plan: every operation and fault, from one RNG, before anything runs |
//! | `world` | the processes, Redis, the relays and the integrator proxies: start, kill, restart, stop |
//! | `proxy` | the integrator as the products see it: a proxy the run makes slow, failing or silent |
//! | `record` | the run's clock, the history being written, and the real tokens kept for the leak check |
//! | `players` | the players: their state, the dispatch of the schedule's actions, the integrator calls |
//! | `players::game` | a player's game connection: connect, join, refresh, leave, what the node pushes |
//! | `players::sidecar` | resolve and authorize at the sidecar, and following its events |
//! | `faults` | making and healing each fault |
//! | `sampler` | the products' resident memory, descriptors, threads and tasks over the run, for the soak |
//! | [`run`](mod@run) | the whole run: world, schedule, collection, the report and the exit status |
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod args;
mod faults;
mod players;
mod proxy;
mod record;
pub mod run;
mod sampler;
pub mod schedule;
mod world;
