//! A free loopback port for a server started later on it (a child process that binds it
//! itself: redis-server, the products the chaos run starts), chosen where no outgoing
//! connection can take it in between.

use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::net::TcpListener;
use std::sync::{Mutex, PoisonError};

/// Where [`free_port`] starts choosing: above the well-known ports and most services' own.
const FIRST_CHOSEN_PORT: u16 = 10_000;

/// The ports [`free_port`] handed out in this process: two servers a test or a run starts are
/// never given the same one, however close together they ask.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback port nobody listens on now, for a server started later on it, and never one this
/// process was handed before.
///
/// Chosen at random below the kernel's ephemeral range (`ip_local_port_range`) where there is
/// room: a port from that range can be taken between this choice and the server's bind by any
/// outgoing connection on the machine (the chaos run's relays and products make hundreds), and
/// the server then fails to start. Below it, only another explicit bind can take it. Falls
/// back to a port the kernel picks where the range starts too low to leave room.
pub fn free_port() -> u16 {
    if let Some(end) = ephemeral_start().filter(|&start| start > FIRST_CHOSEN_PORT + 1_000) {
        let random = std::hash::RandomState::new();
        for attempt in 0u32..100 {
            let spread = random.hash_one(attempt) % u64::from(end - FIRST_CHOSEN_PORT);
            let port = FIRST_CHOSEN_PORT + u16::try_from(spread).unwrap_or(0);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() && hand_out(port) {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Records `port` as handed out; `false` when it was before.
fn hand_out(port: u16) -> bool {
    HANDED_OUT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(port)
}

/// The first port of the kernel's ephemeral range, where Linux says it.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chosen_port_is_below_the_ephemeral_range_and_free() {
        let Some(start) = ephemeral_start() else {
            eprintln!("skipped: no /proc/sys/net/ipv4/ip_local_port_range here");
            return;
        };
        let mut seen = BTreeSet::new();
        for _ in 0..50 {
            let port = free_port();
            assert!(seen.insert(port), "{port} was handed out twice");
            if start > FIRST_CHOSEN_PORT + 1_000 {
                assert!(
                    (FIRST_CHOSEN_PORT..start).contains(&port),
                    "{port} is not below the ephemeral range starting at {start}"
                );
            }
            TcpListener::bind(("127.0.0.1", port)).expect("the chosen port is free");
        }
    }
}
