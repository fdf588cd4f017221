//! Offsets and lengths of the header fields director reads and rewrites in front of the DNS
//! message. Offsets are from the start of their own header.

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
