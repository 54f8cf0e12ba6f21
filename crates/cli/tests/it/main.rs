//! The binary's integration tests, as one test binary (one link instead of one per file): each
//! module is what was one file, and runs the real `token-resolver` binary against real servers on
//! loopback (the reference API, redis-server, ChromeDriver and Chromium).
//!
//! The shared tier's test (`tests/shared_cache.rs`) stays a binary of its own: it captures every
//! log line and metric of its process.

mod browser;
mod check;
mod cli;
mod cli_serve_api;
mod csharp;
mod deploy_examples;
mod game_server;
mod observability;
mod operations;
mod otlp;
mod run;
mod sidecar;
mod sidecar_loopback;
