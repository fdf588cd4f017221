//! The kinds of answer a service gives when none of its decision's servers can: one type
//! for what the controller stores (`maps::Fallback::kinds`: every kind the service has)
//! and for what policy hands rewrite (`handover::Plan::fallback`: the one kind that
//! answered, or none).
//!
//! A leaf: it imports nothing from the crate.

use core::ops::{BitOr, BitOrAssign};

/// A set of fallback kinds, a bit each. One byte, so the map value and the hand-over word
/// both carry it as it is.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Kinds(u8);

impl Kinds {
    pub const NONE: Kinds = Kinds(0);
    /// A CNAME record to the service's alternate domain.
    pub const ALTERNATE: Kinds = Kinds(1);
    /// The origin's IPv4 address.
    pub const ORIGIN4: Kinds = Kinds(2);
    /// The origin's IPv6 address.
    pub const ORIGIN6: Kinds = Kinds(4);
    /// Every kind: no set holds other bits.
    pub const ALL: Kinds = Kinds(7);

    #[inline(always)]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Not masked with `ALL`: the program's readers bound the value where they unpack it,
    /// and a mask here would cost an instruction on every packet.
    #[inline(always)]
    pub const fn from_bits(bits: u8) -> Kinds {
        Kinds(bits)
    }

    #[inline(always)]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Every kind of `other` is in the set.
    #[inline(always)]
    pub const fn contains(self, other: Kinds) -> bool {
        self.0 & other.0 == other.0
    }

    /// The origin of the asked family: IPv6 for AAAA, else IPv4.
    #[inline(always)]
    pub const fn origin(v6: bool) -> Kinds {
        if v6 {
            Kinds::ORIGIN6
        } else {
            Kinds::ORIGIN4
        }
    }

    /// Either origin.
    #[inline(always)]
    pub const fn is_origin(self) -> bool {
        self.0 & (Kinds::ORIGIN4.0 | Kinds::ORIGIN6.0) != 0
    }
}

impl BitOr for Kinds {
    type Output = Kinds;
    #[inline(always)]
    fn bitor(self, rhs: Kinds) -> Kinds {
        Kinds(self.0 | rhs.0)
    }
}

impl BitOrAssign for Kinds {
    #[inline(always)]
    fn bitor_assign(&mut self, rhs: Kinds) {
        self.0 |= rhs.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_distinct_bits_within_all() {
        let each = [Kinds::ALTERNATE, Kinds::ORIGIN4, Kinds::ORIGIN6];
        let mut seen = Kinds::NONE;
        for k in each {
            assert_eq!(k.bits().count_ones(), 1);
            assert!(!seen.contains(k) && Kinds::ALL.contains(k));
            seen |= k;
        }
        assert_eq!(seen, Kinds::ALL);
    }

    #[test]
    fn an_origin_is_of_the_asked_family() {
        assert_eq!(Kinds::origin(true), Kinds::ORIGIN6);
        assert_eq!(Kinds::origin(false), Kinds::ORIGIN4);
        assert!(Kinds::ORIGIN4.is_origin() && Kinds::ORIGIN6.is_origin());
        assert!(!Kinds::ALTERNATE.is_origin() && !Kinds::NONE.is_origin());
        assert!(Kinds::NONE.is_empty() && !Kinds::ALTERNATE.is_empty());
    }
}
