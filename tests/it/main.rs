//! The library's integration tests, as one test binary (one link instead of one per file, and
//! per feature set in CI): each module is what was one file, against real servers on loopback (the
//! reference API, misbehaving axum servers, TCP relays for faults, real `redis-server`s). The
//! modules for the `redis` and `axum` features are compiled only with them.
//!
//! Three files stay test binaries of their own, since each installs process-wide state: the
//! no-token-leak tests capture every log line and metric, and the shared tier's integrity tests
//! count forged messages through a global metrics recorder.

mod axum_integration;
mod capacity;
mod concurrency;
mod expiry;
mod fault_injection;
mod fuzz_regressions;
mod load_under_faults;
mod properties;
mod resilience;
mod resolve_reference_api;
mod shared_cache;
mod shared_cache_cluster;
mod shared_cache_sentinel;
mod tls;
mod trace_context;
mod upstream_answers;
