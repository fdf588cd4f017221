//! What a fleet of edges shares through the store, with no store in sight: the table cut
//! into content-addressed chunks ([`chunks`]), the manifest that names a version's chunks
//! and what it was compiled from ([`manifest`]), which edges observe which server and when
//! their votes take it out ([`observers`]), and the signed envelope every manifest and
//! overlay travels in ([`envelope`]). director-ctl's `fleet` moves these through
//! etcd; everything here is deterministic so that two publishers given the same inputs
//! publish the same bytes.

pub mod chunks;
pub mod envelope;
pub mod manifest;
pub mod observers;
