//! The game server's integration tests, as one test binary (one link instead of one per file):
//! each module is what was one file, against the real reference API and game server on loopback.

mod integrator_revocation;
mod revocation_ack;
mod revocation_faults;
mod sessions;
mod websocket;
