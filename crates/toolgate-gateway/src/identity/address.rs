//! Which address a request comes from: the connection's peer, or, when that peer is one of
//! `server.trusted_proxies`, the client the proxies name in `X-Forwarded-For`.
//!
//! Each proxy appends the address it received the request from, so the header reads
//! client, proxy 1, proxy 2, … and only its right end is written by proxies the gateway
//! trusts; whatever precedes them was written by the client, and may be anything. The
//! client is therefore the rightmost address that is not a trusted proxy, read from the
//! right and never further: a client cannot put itself in another's place by writing
//! addresses of its own into the header.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;

use crate::config::TrustedProxy;

/// The header proxies name the client in.
const FORWARDED_FOR: &str = "x-forwarded-for";

/// The most entries of `X-Forwarded-For` read, from its right end: more proxies than any
/// deployment chains, few enough that a long header costs nothing to walk.
const MAX_HOPS: usize = 16;

/// The address `headers`' request comes from, its connection's peer being `peer`; `None`
/// when the peer is not known (a router served without connection information).
pub fn client_address(
    peer: Option<&ConnectInfo<SocketAddr>>,
    headers: &HeaderMap,
    trusted: &[TrustedProxy],
) -> Option<IpAddr> {
    let peer = canonical(peer?.0.ip());
    if !is_trusted(peer, trusted) {
        return Some(peer);
    }
    // The header's lines in order, each a comma-separated list: read from the right end,
    // entry by entry (bytes a client put elsewhere in the line do not hide the address a
    // proxy appended), and no further than any real chain of proxies reaches.
    let hops = headers
        .get_all(FORWARDED_FOR)
        .iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|byte| *byte == b','))
        .take(MAX_HOPS);
    let mut client = peer;
    for hop in hops {
        // A hop that is not an address was not written by a trusted proxy (each writes
        // the address it saw): the last trusted one stands for the client.
        let Some(address) = parse_hop(hop) else {
            break;
        };
        client = address;
        if !is_trusted(address, trusted) {
            break;
        }
    }
    Some(client)
}

/// One entry of `X-Forwarded-For`: an address, or an address with its port (`1.2.3.4:80`,
/// `[2001:db8::1]:80`).
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let hop = std::str::from_utf8(hop).ok()?.trim();
    hop.parse::<IpAddr>()
        .or_else(|_| hop.parse::<SocketAddr>().map(|address| address.ip()))
        .ok()
        .map(canonical)
}

/// An IPv4 address written as IPv6 (`::ffff:1.2.3.4`) as the IPv4 address it is.
pub(crate) fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn is_trusted(address: IpAddr, trusted: &[TrustedProxy]) -> bool {
    trusted.iter().any(|proxy| proxy.contains(address))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(forwarded: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in forwarded {
            headers.append(FORWARDED_FOR, line.parse().unwrap());
        }
        headers
    }

    fn peer(address: &str) -> ConnectInfo<SocketAddr> {
        ConnectInfo(SocketAddr::new(address.parse().unwrap(), 40_000))
    }

    fn proxies(list: &[&str]) -> Vec<TrustedProxy> {
        list.iter().map(|p| p.parse().unwrap()).collect()
    }

    fn ip(address: &str) -> Option<IpAddr> {
        Some(address.parse().unwrap())
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_the_header_says() {
        let headers = request(&["203.0.113.9"]);
        let found = client_address(Some(&peer("198.51.100.7")), &headers, &[]);
        assert_eq!(found, ip("198.51.100.7"));
        let trusted = proxies(&["10.0.0.0/8"]);
        let found = client_address(Some(&peer("198.51.100.7")), &headers, &trusted);
        assert_eq!(found, ip("198.51.100.7"));
    }

    #[test]
    fn behind_a_trusted_proxy_the_client_is_the_rightmost_untrusted_hop() {
        let trusted = proxies(&["10.0.0.0/8", "192.168.1.7"]);
        // The client wrote a made-up address first; the proxies appended the real one.
        let headers = request(&["1.1.1.1, 203.0.113.9, 10.0.0.3"]);
        let found = client_address(Some(&peer("192.168.1.7")), &headers, &trusted);
        assert_eq!(found, ip("203.0.113.9"));
        // The same, over two header lines.
        let headers = request(&["1.1.1.1", "203.0.113.9, 10.0.0.3"]);
        let found = client_address(Some(&peer("192.168.1.7")), &headers, &trusted);
        assert_eq!(found, ip("203.0.113.9"));
    }

    #[test]
    fn a_hop_that_is_not_an_address_ends_the_walk_at_the_last_trusted_proxy() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let headers = request(&["203.0.113.9, unknown, 10.0.0.3"]);
        let found = client_address(Some(&peer("10.0.0.1")), &headers, &trusted);
        assert_eq!(found, ip("10.0.0.3"));
        // No header at all: the proxy itself.
        let found = client_address(Some(&peer("10.0.0.1")), &HeaderMap::new(), &trusted);
        assert_eq!(found, ip("10.0.0.1"));
    }

    #[test]
    fn hops_with_ports_and_mapped_ipv4_addresses_are_read_as_addresses() {
        let trusted = proxies(&["10.0.0.0/8", "fd00::/8"]);
        let headers = request(&["[2001:db8::5]:443, fd00::1"]);
        let found = client_address(Some(&peer("10.0.0.1")), &headers, &trusted);
        assert_eq!(found, ip("2001:db8::5"));
        let headers = request(&["203.0.113.9:5000"]);
        let found = client_address(Some(&peer("::ffff:10.0.0.1")), &headers, &trusted);
        assert_eq!(found, ip("203.0.113.9"));
    }

    #[test]
    fn bytes_a_client_wrote_do_not_hide_the_address_the_proxy_appended() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let mut headers = HeaderMap::new();
        let line = axum::http::HeaderValue::from_bytes(b"\xff\xfe, 203.0.113.9").unwrap();
        headers.insert(FORWARDED_FOR, line);
        let found = client_address(Some(&peer("10.0.0.1")), &headers, &trusted);
        assert_eq!(found, ip("203.0.113.9"));
    }

    #[test]
    fn a_header_longer_than_any_chain_of_proxies_is_read_no_further_than_that() {
        let trusted = proxies(&["10.0.0.0/8"]);
        // A client inside the trusted network wrote a thousand trusted hops before its own.
        let line = format!("198.51.100.1, {}", vec!["10.9.9.9"; 1000].join(", "));
        let headers = request(&[&line]);
        let found = client_address(Some(&peer("10.0.0.1")), &headers, &trusted);
        assert_eq!(found, ip("10.9.9.9"));
    }

    #[test]
    fn without_connection_information_there_is_no_address() {
        assert_eq!(client_address(None, &HeaderMap::new(), &[]), None);
    }
}
