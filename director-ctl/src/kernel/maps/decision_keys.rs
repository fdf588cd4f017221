//! The decision tries' keys, shared by the code that reads, writes and fronts them.

use std::net::Ipv4Addr;

use anyhow::Result;
use aya::maps::lpm_trie::Key;
use director_common::maps::{DecisionKeyV4, DecisionKeyV6, SERVICE_BITS};
use ipnet::IpNet;

pub(super) enum DecisionKey {
    V4(Key<DecisionKeyV4>),
    V6(Key<DecisionKeyV6>),
}

/// The service and client prefix of an IPv4 trie key.
pub(super) fn entry_of4(k: &Key<DecisionKeyV4>) -> Result<(u32, IpNet)> {
    let len = (k.prefix_len() - SERVICE_BITS) as u8;
    let d = k.data();
    let net = IpNet::new(Ipv4Addr::from(d.addr).into(), len)?;
    Ok((u32::from_be_bytes(d.service), net))
}

/// The trie key of a service's decision for `net`: the service id, always matched in full,
/// then the client prefix.
pub(super) fn key(service: u32, net: &IpNet) -> DecisionKey {
    let bits = SERVICE_BITS + u32::from(net.prefix_len());
    let service = service.to_be_bytes();
    match net {
        IpNet::V4(n) => DecisionKey::V4(Key::new(
            bits,
            DecisionKeyV4 {
                service,
                addr: n.network().octets(),
            },
        )),
        IpNet::V6(n) => DecisionKey::V6(Key::new(
            bits,
            DecisionKeyV6 {
                service,
                addr: n.network().octets(),
            },
        )),
    }
}
