//! The sidecar's integration tests, as one test binary (one link instead of one per file):
//! each module is what was one file, run against the real sidecar, reference API, nginx and
//! Node.js on loopback.

mod common;

mod events;
mod ext_authz;
mod nginx_deaf;
mod nginx_example;
mod nginx_headers;
mod nginx_spellings;
mod node_example;
mod sidecar;
