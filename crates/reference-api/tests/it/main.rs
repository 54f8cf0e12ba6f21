//! The reference API's integration tests, as one test binary (one link instead of one per file):
//! each module is what was one file, over real HTTP on loopback.
//!
//! The no-secret-leak test (`tests/no_secret_leak_revocation.rs`) stays a binary of its own: it
//! captures every log line and metric of its process.

mod anonymous_bounds;
mod hostile_clients;
mod reference_api;
mod reference_api_revocation;
mod reference_api_throttle;
