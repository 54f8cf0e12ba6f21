//! The `forwarded` target: the client's address behind trusted proxies, from
//! `X-Forwarded-For` or `Forwarded` (RFC 7239), as the reference API's login throttle and the
//! listeners read it.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use token_resolver_listener::TrustedProxies;

/// The trusted sets the input chooses from: none, a private network, loopback (both
/// families), and everything.
const TRUSTED: [&[&str]; 4] = [
    &[],
    &["10.0.0.0/8"],
    &["127.0.0.1", "::1/128"],
    &["0.0.0.0/0", "::/0"],
];

/// The peers the input chooses from: inside and outside those sets, and a mapped IPv4.
const PEERS: [&str; 4] = [
    "10.0.0.1:443",
    "203.0.113.9:443",
    "[::ffff:10.0.0.2]:443",
    "[::1]:443",
];

/// Input of the `forwarded` target: a byte choosing the trusted set and the peer (low two bits
/// each) and the header (bit 4: `Forwarded`, else `X-Forwarded-For`; bit 5: both), then the
/// header's values, one per line (a value that is no header value is dropped).
pub fn fuzz_forwarded(data: &[u8]) {
    let [choice, rest @ ..] = data else {
        return;
    };
    let trusted = TrustedProxies::parse(TRUSTED[usize::from(choice & 3)]).expect("valid networks");
    let peer: SocketAddr = PEERS[usize::from((choice >> 2) & 3)].parse().unwrap();
    let mut headers = HeaderMap::new();
    let names: &[&str] = match (choice >> 4) & 3 {
        0 => &["x-forwarded-for"],
        1 => &["forwarded"],
        _ => &["x-forwarded-for", "forwarded"],
    };
    for (i, line) in rest.split(|&b| b == b'\n').enumerate() {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(HeaderName::from_static(names[i % names.len()]), value);
        }
    }
    check_forwarded(&trusted, peer, &headers);
}

/// The forwarded-address properties:
///
/// - the client is the address a straightforward reading gives: the peer (IPv4-mapped as its
///   IPv4) unless trusted; else, walking the chain from the right (`X-Forwarded-For` when
///   present, else the `for=` of each `Forwarded` element; every value of the header, comma
///   separated, in order), the first address that is not trusted, or the last one reached when
///   an entry is no address or the chain ends;
/// - so the client is the peer or an address the headers name, never another;
/// - headers change nothing when the peer is not trusted.
pub fn check_forwarded(trusted: &TrustedProxies, peer: SocketAddr, headers: &HeaderMap) {
    let client = trusted.client_address(peer, headers);
    assert_eq!(
        client,
        reference_client(trusted, peer, headers),
        "client of {headers:?} from {peer} trusting {trusted:?}"
    );
    let named = reference_chain(headers);
    assert!(
        client == canonical(peer.ip()) || named.iter().flatten().any(|a| canonical(*a) == client),
        "{client} named by nobody in {headers:?}"
    );
    if !trusted.trusts(peer.ip()) {
        assert_eq!(
            client,
            canonical(peer.ip()),
            "an untrusted peer's headers were read"
        );
    }
}

fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

fn reference_client(trusted: &TrustedProxies, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    let mut client = canonical(peer.ip());
    let mut chain = reference_chain(headers);
    while trusted.trusts(client) {
        match chain.pop() {
            Some(Some(hop)) => client = canonical(hop),
            _ => break,
        }
    }
    client
}

/// The chain, leftmost first; `None` for an entry that is no address.
fn reference_chain(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let xff = headers.contains_key("x-forwarded-for");
    let name = if xff { "x-forwarded-for" } else { "forwarded" };
    let mut chain = Vec::new();
    for value in headers.get_all(name) {
        // A value with bytes beyond visible ASCII is read as empty: one entry, no address.
        let text = value.to_str().unwrap_or("");
        for entry in text.split(',') {
            let entry = entry.trim();
            let node = if xff {
                Some(entry)
            } else {
                entry.split(';').find_map(|pair| {
                    let (k, v) = pair.trim().split_once('=')?;
                    k.trim().eq_ignore_ascii_case("for").then(|| v.trim())
                })
            };
            if let Some(node) = node {
                chain.push(node_address(node));
            }
        }
    }
    chain
}

/// `192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]:4711`, `[2001:db8::1]`, `2001:db8::1`, quoted
/// or not; a `[` opening what goes up to the first `]` (or the end).
fn node_address(node: &str) -> Option<IpAddr> {
    let node = node.trim_matches('"');
    if let Ok(address) = node.parse::<IpAddr>() {
        return Some(address);
    }
    if let Ok(socket) = node.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    let inside = node.strip_prefix('[')?;
    let end = inside.find(']').unwrap_or(inside.len());
    inside[..end].parse().ok()
}
