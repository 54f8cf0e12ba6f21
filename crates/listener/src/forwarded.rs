//! The client's address behind reverse proxies: [`TrustedProxies`] reads `X-Forwarded-For`
//! or `Forwarded` (RFC 7239) only when the connection comes from a proxy the operator named,
//! and then believes only what trusted proxies appended.
//!
//! A client writes whatever headers it likes, so a listener that read them from anyone would
//! let each request choose the address it is throttled by. With no trusted proxy (the
//! default) the headers are ignored and the client is the TCP peer.
//!
//! The chain is read from the right, skipping trusted proxies: the first address that is not
//! one is the client. `X-Forwarded-For` is read when present (nginx, Envoy, Traefik, HAProxy
//! and cloud load balancers write it), `Forwarded` otherwise; a proxy that writes only
//! `Forwarded` must drop a client's `X-Forwarded-For`. An entry that is not an address
//! (`unknown`, an obfuscated `_node`) ends the walk at the proxy that appended it.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

/// The proxies whose forwarding headers are believed, as networks (`10.0.0.0/8`,
/// `127.0.0.1/32`, `::1/128`; a bare address is its own network).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
}

/// A `--trusted-proxy` value that is neither an address nor a CIDR network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a CIDR network (10.0.0.0/8, ::1/128) or an IP address")]
pub struct TrustedProxyError(String);

impl FromStr for TrustedProxies {
    type Err = TrustedProxyError;

    /// One network: `10.0.0.0/8`, `fd00::/8`, or a bare address.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let network = text
            .parse::<IpNet>()
            .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| TrustedProxyError(text.to_owned()))?;
        Ok(TrustedProxies {
            networks: vec![network.trunc()],
        })
    }
}

impl TrustedProxies {
    /// The proxies in `networks`; none trusts no one.
    ///
    /// # Errors
    ///
    /// [`TrustedProxyError`] naming the first value that is neither a CIDR network nor an
    /// address.
    pub fn parse<S: AsRef<str>>(networks: &[S]) -> Result<Self, TrustedProxyError> {
        let mut trusted = TrustedProxies::default();
        for network in networks {
            trusted
                .networks
                .extend(network.as_ref().parse::<TrustedProxies>()?.networks);
        }
        Ok(trusted)
    }

    /// Whether no proxy is trusted (the headers are never read).
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// Whether `address` is one of the trusted proxies.
    pub fn trusts(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        self.networks.iter().any(|net| net.contains(&address))
    }

    /// The client of a request that came from `peer` with `headers`: `peer` itself unless it
    /// is a trusted proxy, otherwise the rightmost forwarded address that is not one.
    pub fn client_address(&self, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = canonical(peer.ip());
        if !self.trusts(client) {
            return client;
        }
        for hop in forwarded_chain(headers).into_iter().rev() {
            let Some(hop) = hop else { break };
            client = canonical(hop);
            if !self.trusts(client) {
                break;
            }
        }
        client
    }
}

/// The forwarded chain, leftmost (the original client) first; `None` for an entry that is not
/// an address.
fn forwarded_chain(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
    let (name, element): (&HeaderName, fn(&str) -> Option<&str>) =
        if headers.contains_key(&X_FORWARDED_FOR) {
            (&X_FORWARDED_FOR, |entry| Some(entry))
        } else {
            (&axum::http::header::FORWARDED, forwarded_for)
        };
    headers
        .get_all(name)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("").split(','))
        .filter_map(|entry| element(entry.trim()))
        .map(parse_node)
        .collect()
}

/// The `for=` parameter of one `Forwarded` element, if it has one.
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| value.trim())
    })
}

/// A node as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `"[2001:db8::1]:4711"`,
/// `2001:db8::1`; `None` for anything else.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim_matches('"');
    if let Ok(address) = node.parse::<IpAddr>() {
        return Some(address);
    }
    if let Ok(socket) = node.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    node.strip_prefix('[')?
        .split(']')
        .next()?
        .parse::<IpAddr>()
        .ok()
}

/// An IPv4-mapped IPv6 address as its IPv4, so that one client is one address.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn peer(address: &str) -> SocketAddr {
        SocketAddr::new(address.parse().unwrap(), 40_000)
    }

    fn ip(address: &str) -> IpAddr {
        address.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_headers_are_ignored() {
        let none = TrustedProxies::default();
        let forged = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            none.client_address(peer("10.0.0.1"), &forged),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn a_peer_that_is_not_trusted_is_the_client_whatever_it_forwards() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).unwrap();
        let forged = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            trusted.client_address(peer("198.51.100.7"), &forged),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_address_is_the_client() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8", "127.0.0.1"]).unwrap();
        // The client forged the first entry; the edge proxy appended what it saw.
        let chain = headers(&[("x-forwarded-for", "1.2.3.4, 198.51.100.7, 10.1.1.1")]);
        assert_eq!(
            trusted.client_address(peer("127.0.0.1"), &chain),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn a_chain_of_trusted_proxies_only_is_its_leftmost() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).unwrap();
        let chain = headers(&[
            ("x-forwarded-for", "10.2.2.2"),
            ("x-forwarded-for", "10.1.1.1"),
        ]);
        assert_eq!(
            trusted.client_address(peer("10.0.0.1"), &chain),
            ip("10.2.2.2")
        );
    }

    #[test]
    fn forwarded_is_read_when_there_is_no_x_forwarded_for() {
        let trusted = TrustedProxies::parse(&["::1"]).unwrap();
        let chain = headers(&[(
            "forwarded",
            r#"for=192.0.2.60;proto=http, For="[2001:db8:cafe::17]:4711""#,
        )]);
        assert_eq!(
            trusted.client_address(peer("::1"), &chain),
            ip("2001:db8:cafe::17")
        );
    }

    #[test]
    fn an_entry_that_is_not_an_address_ends_the_walk_at_the_proxy_that_wrote_it() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).unwrap();
        let chain = headers(&[("x-forwarded-for", "198.51.100.7, unknown, 10.1.1.1")]);
        assert_eq!(
            trusted.client_address(peer("10.0.0.1"), &chain),
            ip("10.1.1.1")
        );
    }

    #[test]
    fn a_value_that_is_not_a_network_is_refused_by_name() {
        let error = TrustedProxies::parse(&["10.0.0.0/8", "proxy.internal"]).unwrap_err();
        assert!(error.to_string().contains("`proxy.internal`"), "{error}");
        assert!(TrustedProxies::parse(&["10.0.0.0/33"]).is_err());
    }
}
