//! The reference API's integration tests, as one test binary (one link instead of one per file):
//! each module is what was one file, over real HTTP on loopback.

mod anonymous_bounds;
mod hostile_clients;
mod no_secret_leak_revocation;
mod reference_api;
mod reference_api_revocation;
mod reference_api_throttle;
