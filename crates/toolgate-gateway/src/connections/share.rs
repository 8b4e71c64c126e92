//! The share of the connection cap one client address may hold
//! (`server.max_connections_per_address`), so that one host opening connections and
//! sending nothing cannot take every connection the gateway has.
//!
//! An address is counted as identity's failure counts are: IPv4 addresses (and IPv4
//! addresses mapped into IPv6) by themselves, IPv6 ones by their /64. Connections from
//! one of `server.trusted_proxies` have no share: a proxy carries many clients, and a
//! cap on it would be a cap on all of them.

use std::net::IpAddr;
use std::sync::Arc;

use toolgate_hooks::concurrency::{KeyedShare, SharePlace};

use crate::config::TrustedProxy;
use crate::identity::address::canonical;
use crate::identity::failures::counted;

/// How many connections each client address holds, and how many it may.
#[derive(Debug)]
pub(crate) struct AddressShare {
    exempt: Vec<TrustedProxy>,
    /// Only addresses with an open connection: at most as many as the connections.
    open: Arc<KeyedShare<IpAddr>>,
}

/// An address holds its whole share.
#[derive(Debug)]
pub(crate) struct ShareTaken;

/// One connection's place in its address's share, given back when dropped.
pub(crate) type AddressSlot = SharePlace<IpAddr>;

impl AddressShare {
    /// At most `max` connections per address, none counted for the `exempt` proxies.
    pub(crate) fn new(max: u32, exempt: Vec<TrustedProxy>) -> Arc<Self> {
        Arc::new(AddressShare {
            exempt,
            open: KeyedShare::new(max as usize),
        })
    }

    /// Takes a place for a connection from `peer`: `None` when its address has no share
    /// (a trusted proxy).
    ///
    /// # Errors
    ///
    /// [`ShareTaken`] when the address already holds `max` connections.
    pub(crate) fn enter(&self, peer: IpAddr) -> Result<Option<AddressSlot>, ShareTaken> {
        let peer = canonical(peer);
        if self.exempt.iter().any(|proxy| proxy.contains(peer)) {
            return Ok(None);
        }
        self.open.take(counted(peer)).map(Some).ok_or(ShareTaken)
    }

    /// How many addresses hold a connection now.
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.open.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(max: u32) -> Arc<AddressShare> {
        AddressShare::new(max, vec!["10.0.0.0/8".parse().unwrap()])
    }

    #[test]
    fn an_address_holds_at_most_its_share_and_gets_a_place_back_when_one_closes() {
        let share = share(2);
        let ann: IpAddr = "192.0.2.1".parse().unwrap();
        let first = share.enter(ann).unwrap();
        let _second = share.enter(ann).unwrap();
        assert!(share.enter(ann).is_err());
        assert!(
            share.enter("192.0.2.2".parse().unwrap()).is_ok(),
            "another address has its own share"
        );
        drop(first);
        assert!(share.enter(ann).is_ok());
    }

    #[test]
    fn an_ipv4_address_mapped_into_ipv6_shares_the_plain_addresss_count() {
        let share = share(1);
        let _plain = share.enter("192.0.2.1".parse().unwrap()).unwrap();
        assert!(share.enter("::ffff:192.0.2.1".parse().unwrap()).is_err());
        assert!(
            share.enter("::ffff:192.0.2.9".parse().unwrap()).is_ok(),
            "other IPv4 clients are not lumped together"
        );
    }

    #[test]
    fn ipv6_addresses_are_counted_by_their_64() {
        let share = share(1);
        let _one = share.enter("2001:db8:1:2::1".parse().unwrap()).unwrap();
        assert!(
            share
                .enter("2001:db8:1:2:ffff::9".parse().unwrap())
                .is_err()
        );
        assert!(share.enter("2001:db8:1:3::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn a_trusted_proxy_has_no_share_and_takes_no_room() {
        let share = share(1);
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        let slots: Vec<_> = (0..5).map(|_| share.enter(proxy).unwrap()).collect();
        assert!(slots.iter().all(Option::is_none));
        assert_eq!(share.addresses(), 0);
    }

    #[test]
    fn an_address_is_forgotten_once_its_last_connection_closes() {
        let share = share(3);
        let slots: Vec<_> = (1..=200)
            .map(|i| share.enter(IpAddr::from([192, 0, 2, i])).unwrap())
            .collect();
        assert_eq!(share.addresses(), 200);
        drop(slots);
        assert_eq!(share.addresses(), 0);
    }
}
