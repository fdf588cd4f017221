//! DNSSEC made ahead, where the key is: a zone's key ([`key`]: ECDSA P-256, its DNSKEY, DS
//! and files), RRSIGs over RRsets in fixed daily validity windows ([`sign`]; deterministic,
//! so an unchanged set signs to the same bytes), the NSEC chain for denial ([`nsec`]), in
//! canonical wire form ([`wire`]). Whoever answers (the XDP program, the listeners, an edge
//! of a fleet) serves what was signed here and holds no key.

pub mod key;
pub mod nsec;
pub mod sets;
pub mod sign;
pub mod wire;
