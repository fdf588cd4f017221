//! Internet checksum (RFC 1071) arithmetic.
//!
//! Sums are kept as plain integers of big-endian 16-bit words so pieces of a packet can be
//! summed separately (even from values, before they are written) and combined. A piece that
//! starts at an odd offset contributes its byte-swapped folded sum (RFC 1071 §2(B)).

/// Folds a wide one's-complement sum to 16 bits. Four rounds are enough for any u64.
#[inline(always)]
pub fn fold(sum: u64) -> u16 {
    let mut s = sum;
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The sum of a piece that started at an odd offset, as seen from an even one. Not folded:
/// swapping a 16-bit value's bytes is multiplying it by 256 modulo 0xffff (2^16 = 1 there),
/// so a shift gives an equivalent sum without the four folding rounds a swap needs, and
/// the one fold at the end (`finish_*`) does for all. `sum` must be below 2^56.
#[inline(always)]
pub fn shift_odd(sum: u64, odd: bool) -> u64 {
    sum << (8 * odd as u32)
}

/// A host-order 8-byte word as two 32-bit halves, to add to a host-order sum: the kernel
/// sums packet bytes a word at a time this way.
#[inline(always)]
pub fn halves(w: u64) -> u64 {
    (w & 0xffff_ffff) + (w >> 32)
}

/// A sum of little-endian words as the sum of the same bytes read big-endian, the form the
/// rest of this module adds (RFC 1071 §2(B): byte order only swaps the folded result; the
/// swap is a shift, as in `shift_odd`). `sum` must be below 2^56.
#[inline(always)]
pub fn le_to_network(sum: u64) -> u64 {
    sum << 8
}

/// The value to store in an IPv4 header checksum field.
#[inline(always)]
pub fn finish_ip(sum: u64) -> u16 {
    !fold(sum)
}

/// The value to store in a UDP checksum field: zero is sent as all ones (RFC 768).
#[inline(always)]
pub fn finish_udp(sum: u64) -> u16 {
    let c = !fold(sum);
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// Sum of a byte slice that starts at an even offset (host reference and small fixed buffers).
#[inline(always)]
pub fn sum_bytes(data: &[u8]) -> u64 {
    let mut s = 0u64;
    let mut i = 0;
    while i + 1 < data.len() {
        s += u16::from_be_bytes([data[i], data[i + 1]]) as u64;
        i += 2;
    }
    if i < data.len() {
        s += (data[i] as u64) << 8;
    }
    s
}

/// Sum of a 16-byte buffer (an IPv6 address, or a zero-padded IPv4/ECS address).
#[inline(always)]
pub fn sum16(a: &[u8; 16]) -> u64 {
    let mut s = 0u64;
    let mut i = 0;
    while i < 16 {
        s += u16::from_be_bytes([a[i], a[i + 1]]) as u64;
        i += 2;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn word_sums_in_host_order_equal_network_sums(
            words in proptest::collection::vec(any::<u64>(), 0..40),
        ) {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let host: u64 = words.iter().map(|&w| halves(w)).sum();
            prop_assert_eq!(fold(le_to_network(host)), fold(sum_bytes(&bytes)));
        }

        #[test]
        fn split_sums_equal_whole(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            cut in 0usize..300,
        ) {
            let cut = cut.min(data.len());
            let whole = fold(sum_bytes(&data));
            let parts = fold(
                sum_bytes(&data[..cut]) + shift_odd(sum_bytes(&data[cut..]), cut % 2 == 1),
            );
            prop_assert_eq!(whole, parts);
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 worked example: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        assert_eq!(
            fold(sum_bytes(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            0xddf2
        );
    }

    #[test]
    fn udp_zero_is_sent_as_ones() {
        assert_eq!(finish_udp(0xffff), 0xffff);
        assert_eq!(finish_udp(0x1234), !0x1234u16);
    }
}
