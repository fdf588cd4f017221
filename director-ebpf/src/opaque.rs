//! Making the verifier forget constants.
//!
//! The verifier follows every path with every constant it can track; where paths differ
//! only in such constants (which of 255 bytes ended the name, which servers are up, whether
//! there was a VLAN tag, how long the ECS address was) it cannot merge them and runs out of
//! its 1 M instruction budget. A value written to a map and read back is unknown to it, so
//! the paths merge. Reads are volatile so the compiler does not forward the written value.
//!
//! What goes through here, and in which slot, is `director_common::handover`'s business;
//! callers bound what they read back with a mask the verifier can see.

use director_common::{
    handover::{Slot, HIDDEN_WORDS},
    maps::Scratch,
};

/// `v`, as a value the verifier knows nothing about.
#[inline(always)]
pub fn hide(s: *mut Scratch, slot: Slot, v: u64) -> u64 {
    put(s, slot, v);
    get(s, slot)
}

/// Stores a one-word value in `slot`.
#[inline(always)]
pub fn put(s: *mut Scratch, slot: Slot, v: u64) {
    put_word(s, slot.index(), v);
}

/// Reads a one-word value back from `slot`, unknown to the verifier.
#[inline(always)]
pub fn get(s: *const Scratch, slot: Slot) -> u64 {
    get_word(s, slot.index())
}

/// Stores a packed hand-over in the words from `slot` on.
#[inline(always)]
pub fn put_words<const N: usize>(s: *mut Scratch, slot: Slot, words: [u64; N]) {
    let mut i = 0;
    while i < N {
        put_word(s, slot.index() + i, words[i]);
        i += 1;
    }
}

/// Reads a packed hand-over back from the words from `slot` on.
#[inline(always)]
pub fn get_words<const N: usize>(s: *const Scratch, slot: Slot) -> [u64; N] {
    let mut words = [0u64; N];
    let mut i = 0;
    while i < N {
        words[i] = get_word(s, slot.index() + i);
        i += 1;
    }
    words
}

#[inline(always)]
fn put_word(s: *mut Scratch, w: usize, v: u64) {
    // SAFETY: `s` is the scratch map's value (the caller's lookup checked it is not null)
    // and the mask keeps `w` within `hidden`.
    unsafe { core::ptr::write_volatile(&mut (*s).hidden[w & (HIDDEN_WORDS - 1)], v) }
}

#[inline(always)]
fn get_word(s: *const Scratch, w: usize) -> u64 {
    // SAFETY: as in `put_word`.
    unsafe { core::ptr::read_volatile(&(*s).hidden[w & (HIDDEN_WORDS - 1)]) }
}
