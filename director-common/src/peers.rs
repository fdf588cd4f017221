//! Who may be answered: rules on a query's addresses and ports that keep director from
//! answering frames a host would never answer (and from being used as a reflector). Pure,
//! so the kernel and the host tests run the same code.
//!
//! The kernel's own addresses are data (`DIR_LOCAL`); these are the rules that hold
//! everywhere.

/// A group (broadcast or multicast) Ethernet address: the I/G bit of its first byte.
#[inline(always)]
pub fn mac_is_group(first_byte: u8) -> bool {
    first_byte & 1 != 0
}

/// An IPv4 destination that is not one host: multicast 224.0.0.0/4, and 240.0.0.0/4, which
/// holds the limited broadcast 255.255.255.255 and is reserved otherwise.
#[inline(always)]
pub fn v4_dest_is_group(first_byte: u8) -> bool {
    first_byte >= 224
}

/// An IPv6 destination that is not one host: multicast ff00::/8.
#[inline(always)]
pub fn v6_dest_is_group(first_byte: u8) -> bool {
    first_byte == 0xff
}

/// Whether an IPv4 source can be a client: not "this network" 0.0.0.0/8, loopback
/// 127.0.0.0/8, multicast 224.0.0.0/4, or 240.0.0.0/4 (reserved, and the broadcast
/// address). A query from one of them is spoofed or misrouted, and its answer would go
/// nowhere or to many.
#[inline(always)]
pub fn v4_source_ok(first_byte: u8) -> bool {
    first_byte != 0 && first_byte != 127 && first_byte < 224
}

/// Whether an IPv6 source can be a client: not unspecified (::), loopback (::1), multicast
/// (ff00::/8), or IPv4-mapped (::ffff:0:0/96, which never appears on the wire, RFC 4291
/// §2.5.5.2). Taken as the address's two big-endian halves.
#[inline(always)]
pub fn v6_source_ok(hi: u64, lo: u64) -> bool {
    if hi >> 56 == 0xff {
        return false;
    }
    if hi == 0 {
        // ::, ::1, and ::ffff:a.b.c.d.
        if lo <= 1 || lo >> 32 == 0xffff {
            return false;
        }
    }
    true
}

/// Source ports never answered: 0 (no socket sends from it) and the UDP services that
/// answer anything sent to them, echo (7) and chargen (19): an answer aimed at one of them
/// starts a loop or an amplification between two servers. Port 53 itself stays answered,
/// as some resolvers still send from it.
#[inline(always)]
pub fn source_port_reflects(port: u16) -> bool {
    port == 0 || port == 7 || port == 19
}

/// The `DIR_LOCAL` key of an address: IPv6 as it is, IPv4 mapped (::ffff:a.b.c.d), so both
/// families share one map.
#[inline(always)]
pub fn local_key_v4(addr: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, addr[0], addr[1], addr[2], addr[3],
    ]
}

/// The `DIR_LOCAL` key of an address as the two native-endian words the kernel loads.
#[inline(always)]
pub fn local_words(key: &[u8; 16]) -> [u64; 2] {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&key[..8]);
    hi.copy_from_slice(&key[8..]);
    [u64::from_ne_bytes(lo), u64::from_ne_bytes(hi)]
}

/// The `DIR_LOCAL_SLOTS` slot of an address (its `local_words`): a multiply-shift of the
/// two words, whose top bits depend on every bit of both (IPv4-mapped keys differ only in
/// their last four bytes).
#[inline(always)]
pub fn local_slot(words: [u64; 2]) -> u32 {
    let x = words[0] ^ words[1].rotate_left(29);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - crate::limits::LOCAL_SLOT_BITS)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn v4_ok(a: &str) -> bool {
        v4_source_ok(a.parse::<Ipv4Addr>().unwrap().octets()[0])
    }

    fn v6_ok(a: &str) -> bool {
        let x = u128::from(a.parse::<Ipv6Addr>().unwrap());
        v6_source_ok((x >> 64) as u64, x as u64)
    }

    #[test]
    fn impossible_sources_are_refused_and_clients_kept() {
        for a in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "224.0.0.251",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!v4_ok(a), "{a} taken as a client");
        }
        for a in [
            "1.0.0.1",
            "10.0.0.1",
            "126.255.255.255",
            "128.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "223.255.255.255",
        ] {
            assert!(v4_ok(a), "{a} refused");
        }
        for a in ["::", "::1", "ff02::1", "ff05::1:3", "::ffff:192.0.2.1"] {
            assert!(!v6_ok(a), "{a} taken as a client");
        }
        for a in [
            "2001:db8::1",
            "fe80::1",
            "fd00::1",
            "::2",
            "::192.0.2.1",
            "64:ff9b::c000:201",
            "::fffe:c000:201",
        ] {
            assert!(v6_ok(a), "{a} refused");
        }
    }

    #[test]
    fn group_destinations() {
        assert!(mac_is_group(0xff) && mac_is_group(0x01) && mac_is_group(0x33));
        assert!(!mac_is_group(0x02) && !mac_is_group(0x00));
        for (a, group) in [
            ("255.255.255.255", true),
            ("224.0.0.1", true),
            ("239.1.2.3", true),
            ("240.0.0.1", true),
            ("223.255.255.255", false),
            ("192.0.2.1", false),
        ] {
            let b = a.parse::<Ipv4Addr>().unwrap().octets()[0];
            assert_eq!(v4_dest_is_group(b), group, "{a}");
        }
        assert!(v6_dest_is_group(0xff) && !v6_dest_is_group(0xfe));
    }

    #[test]
    fn reflecting_ports() {
        for p in [0, 7, 19] {
            assert!(source_port_reflects(p));
        }
        for p in [1, 53, 1024, 5353, 65535] {
            assert!(!source_port_reflects(p));
        }
    }

    #[test]
    fn v4_keys_are_mapped() {
        let k = local_key_v4([192, 0, 2, 1]);
        let want: Ipv6Addr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(k, want.octets());
    }

    #[test]
    fn neighbouring_addresses_spread_over_the_slots() {
        use crate::limits::LOCAL_SLOTS;
        let mut used = std::collections::HashSet::new();
        for last in 1..=64u8 {
            let w = local_words(&local_key_v4([192, 0, 2, last]));
            assert!(local_slot(w) < LOCAL_SLOTS);
            used.insert(local_slot(w));
        }
        // 64 addresses into 256 slots: a random function leaves about 57 distinct.
        assert!(used.len() >= 50, "{} slots for 64 addresses", used.len());
        let mut used6 = std::collections::HashSet::new();
        for last in 1..=64u16 {
            let a = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last).octets();
            used6.insert(local_slot(local_words(&a)));
        }
        assert!(used6.len() >= 50, "{} slots for 64 addresses", used6.len());
    }
}
