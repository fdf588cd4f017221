//! Offsets and lengths of the header fields director reads and rewrites: in front of the
//! DNS message, and of the TCP, ICMP and tunnel packets SYN steering and `ipip` forwarding
//! handle. Offsets are from the start of their own header.

/// Ethernet II.
pub mod eth {
    pub const LEN: usize = 14;
    pub const DST: usize = 0;
    pub const SRC: usize = 6;
    pub const ADDR_LEN: usize = 6;
    /// The EtherType (or the VLAN tag's TPID).
    pub const TYPE: usize = 12;

    pub const P_IPV4: u16 = 0x0800;
    pub const P_IPV6: u16 = 0x86dd;
    pub const P_8021Q: u16 = 0x8100;
}

/// An 802.1Q tag, after the outer EtherType.
pub mod vlan {
    pub const LEN: usize = 4;
    /// The EtherType of what the tag carries.
    pub const TYPE: usize = 2;
}

/// IPv4 without options (director leaves packets with options to the host).
pub mod ipv4 {
    pub const LEN: usize = 20;
    /// Version (high nibble) and header length in 32-bit words (low nibble).
    pub const VERSION_IHL: usize = 0;
    pub const TOTAL_LEN: usize = 2;
    /// Flags and fragment offset.
    pub const FRAGMENT: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
    pub const ADDR_LEN: usize = 4;

    pub const VERSION: u8 = 4;
    /// The IHL of a header without options.
    pub const IHL_MIN: u8 = 5;
    /// With the most options: IHL is 4 bits of 32-bit words.
    pub const MAX_LEN: usize = 60;
    /// More-fragments and the fragment offset: any bit set means a fragment.
    pub const FRAGMENT_MASK: u16 = 0x3fff;
}

pub mod ipv6 {
    pub const LEN: usize = 40;
    /// Version in the high nibble of the first byte.
    pub const VERSION_BYTE: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
    pub const ADDR_LEN: usize = 16;

    pub const VERSION: u8 = 6;
}

pub mod udp {
    pub const LEN: usize = 8;
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    /// Header and payload.
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;

    /// The IP protocol number (IPv4 protocol, IPv6 next header).
    pub const PROTOCOL: u8 = 17;
}

/// TCP, as far as steering reads and forwarding rewrites it.
pub mod tcp {
    /// Without options.
    pub const LEN: usize = 20;
    /// With the most options: the data offset is 4 bits of 32-bit words.
    pub const MAX_LEN: usize = 60;
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK_NUM: usize = 8;
    /// The data offset (the header's length in 32-bit words) in the high nibble.
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const CHECKSUM: usize = 16;

    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const ACK: u8 = 0x10;

    /// Option kinds (RFC 9293 §3.2): the end of the list, a one-byte NOP, and the MSS
    /// with its length.
    pub const OPT_END: u8 = 0;
    pub const OPT_NOP: u8 = 1;
    pub const OPT_MSS: u8 = 2;
    pub const OPT_MSS_LEN: u8 = 4;

    /// The IP protocol number (IPv4 protocol, IPv6 next header).
    pub const PROTOCOL: u8 = 6;
}

/// An ICMP error (RFC 792): type, code, checksum, 4 bytes; then the start of the packet it
/// is about.
pub mod icmp {
    pub const LEN: usize = 8;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;

    /// Destination unreachable, code fragmentation needed (RFC 1191).
    pub const UNREACHABLE: u8 = 3;
    pub const FRAG_NEEDED: u8 = 4;

    /// The IPv4 protocol number.
    pub const PROTOCOL: u8 = 1;
}

/// An ICMPv6 error (RFC 4443): laid out as ICMP's.
pub mod icmpv6 {
    pub const LEN: usize = 8;
    pub const TYPE: usize = 0;

    /// Packet too big (RFC 4443 §3.2).
    pub const TOO_BIG: u8 = 2;

    /// The IPv6 next header number.
    pub const PROTOCOL: u8 = 58;
}

/// IP in IP: the protocol numbers that say an IP header of the same family follows.
pub mod ipip {
    /// IPv4 in IPv4 (RFC 2003), in the outer IPv4 protocol field.
    pub const V4: u8 = 4;
    /// IPv6 in IPv6 (RFC 2473), in the outer IPv6 next header field.
    pub const V6: u8 = 41;
}
