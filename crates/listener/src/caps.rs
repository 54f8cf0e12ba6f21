//! What a listener does at its caps: [`PerAddress`] counts the connections each client address
//! holds open, so that a public listener can cap them per address as well as in all, and one
//! address cannot take every slot; [`TurnAway`] answers a connection past a cap with a quick
//! 503 rather than a reset.
//!
//! An address is counted while it has a connection open, and forgotten with its last one: the
//! map holds at most as many addresses as the listener holds connections. Addresses count by
//! [`address_key`]: an IPv6 client by its /64 (one host often holds a whole /64).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Connections past a cap being answered 503 at once, at most; past that they are closed.
const TURNED_AWAY_AT_ONCE: usize = 64;
/// Longest a connection past a cap is kept to be answered 503.
const TURN_AWAY_DEADLINE: Duration = Duration::from_secs(1);

/// The key a client address is counted by: IPv4 as it is (an IPv4-mapped IPv6 address as its
/// IPv4), IPv6 by its /64.
pub fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

/// Open connections per client address, each address at most `cap`.
#[derive(Debug)]
pub struct PerAddress {
    cap: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection of an address, counted until it is dropped.
#[derive(Debug)]
pub struct AddressSlot {
    of: Arc<PerAddress>,
    address: IpAddr,
}

impl PerAddress {
    /// A count with `cap` connections per address (at least one).
    pub fn new(cap: usize) -> Arc<PerAddress> {
        Arc::new(PerAddress {
            cap: cap.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more connection of `address`; `None` when it holds `cap` already.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Option<AddressSlot> {
        let address = address_key(address);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let held = open.entry(address).or_insert(0);
        if *held >= self.cap {
            return None;
        }
        *held += 1;
        Some(AddressSlot {
            of: self.clone(),
            address,
        })
    }

    /// Connections `address` holds now.
    pub fn held(&self, address: IpAddr) -> usize {
        let address = address_key(address);
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&address).copied().unwrap_or(0)
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.of.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = open.get_mut(&self.address) {
            *held -= 1;
            if *held == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Counter, labels `outcome` and `cap`: connections an HTTP listener (the admin listener, the
/// WebSocket listener, the sidecar's) turned away at a cap. `outcome`: `refused` (answered 503
/// with `Retry-After`) or `shed` (closed without an answer: too many being answered already, or
/// a listener whose clients cannot read one). `cap` ([`Cap`]): `total` (the listener is full) or
/// `per_address` (the listener has room, but that client address holds its share already).
pub const TURNED_AWAY_TOTAL: &str = "game_server_http_turned_away_total";

/// Which cap a connection was turned away at: the label `cap` of [`TURNED_AWAY_TOTAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The listener holds its `max_connections`: it is full, whoever asks.
    Total,
    /// The listener has room, but the client's address holds its `max_connections_per_address`:
    /// one client over its share, not a full node.
    PerAddress,
}

impl Cap {
    /// Every cap, as registered at zero.
    pub const ALL: [Cap; 2] = [Cap::Total, Cap::PerAddress];

    /// The value of the `cap` label: `total` or `per_address`.
    pub fn label(self) -> &'static str {
        match self {
            Cap::Total => "total",
            Cap::PerAddress => "per_address",
        }
    }
}

/// Describes [`TURNED_AWAY_TOTAL`] to the installed recorder and registers every outcome and
/// cap at zero.
pub fn register_metrics() {
    metrics::describe_counter!(
        TURNED_AWAY_TOTAL,
        "Connections an HTTP listener turned away at a cap, by outcome (refused: 503, or shed) \
         and by cap (total: the listener is full; per_address: one address over its share)."
    );
    for outcome in ["refused", "shed"] {
        for cap in Cap::ALL {
            let _ =
                metrics::counter!(TURNED_AWAY_TOTAL, "outcome" => outcome, "cap" => cap.label());
        }
    }
}

/// Counts one connection turned away at `cap`, `refused` or `shed`.
pub(crate) fn count_turned_away(outcome: &'static str, cap: Cap) {
    metrics::counter!(TURNED_AWAY_TOTAL, "outcome" => outcome, "cap" => cap.label()).increment(1);
}

/// What a connection past a cap is answered: a 503 that says when to come back.
const BUSY_ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 22\r\n\
\r\n\
{\"error\":\"overloaded\"}";

/// Answers HTTP connections past a cap 503 with `Retry-After: 1` and closes them: at most 64
/// at once, each within a second; past that bound a connection is closed without an answer,
/// so that a flood costs a bounded number of tasks.
#[derive(Debug, Clone)]
pub struct TurnAway {
    at_once: Arc<Semaphore>,
}

impl Default for TurnAway {
    fn default() -> Self {
        TurnAway {
            at_once: Arc::new(Semaphore::new(TURNED_AWAY_AT_ONCE)),
        }
    }
}

impl TurnAway {
    /// Answers `stream`, turned away at `cap`, 503 in a task of its own, or closes it when too
    /// many are being answered already.
    pub fn answer(&self, stream: TcpStream, cap: Cap) {
        let Ok(permit) = self.at_once.clone().try_acquire_owned() else {
            count_turned_away("shed", cap);
            return;
        };
        count_turned_away("refused", cap);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(TURN_AWAY_DEADLINE, answer_busy(stream)).await;
            drop(permit);
        });
    }
}

/// Answers `stream` 503 and closes it, after reading what it sent so that the close does not
/// reset the answer away.
async fn answer_busy(mut stream: TcpStream) {
    if stream.write_all(BUSY_ANSWER).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_cap_and_is_forgotten_with_its_last_connection() {
        let count = PerAddress::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = count.admit(a).expect("one");
        let second = count.admit(a).expect("two");
        assert!(count.admit(a).is_none(), "a third from the same address");
        assert!(count.admit(b).is_some(), "another address is not held back");
        drop(first);
        let third = count.admit(a).expect("a slot freed");
        drop((second, third));
        assert_eq!(count.held(a), 0);
        assert!(
            count.open.lock().unwrap().is_empty(),
            "nothing kept per address"
        );
    }
}
