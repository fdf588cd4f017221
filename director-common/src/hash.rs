//! The one integer mixer the kernel's keyed choices share: the flow's rendezvous hash
//! (`steer`) and the rate limit's bucket tags (`rrl`).

/// A 64-bit finaliser (splitmix64's): every input bit moves every output bit.
#[inline(always)]
pub const fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
