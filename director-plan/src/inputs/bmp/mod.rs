//! Live BGP routes from routers over BMP (RFC 7854; Loc-RIB, RFC 9069): the pure part.
//! director-ctl's listener owns the sockets and hands in whole messages and the time; this
//! keeps the routing state. Parsing is bgpkit-parser's; framing ([`frame`]) and state are ours.
//!
//! # State
//! One RIB per (router, peer, view): a peer is the per-peer header's address, AS and
//! distinguisher (a Loc-RIB is a peer of type 3), a view is pre-policy Adj-RIB-In,
//! post-policy Adj-RIB-In (the L flag) or Loc-RIB ([`Policy`]). Adj-RIB-Out is ignored. An
//! announcement replaces that peer's route, a withdrawal removes it; a Peer Down removes all of
//! the peer's routes. A route keeps only what the metrics and the decision process use (see
//! [`crate::inputs::mrt`]), as an id into one table of distinct attribute sets.
//!
//! FRR prepends the router's own AS to the paths in route monitoring; the first AS of a path
//! is removed once when it is the AS the router sent in its OPEN to that peer (see
//! `decision::path_metrics` for why that is safe for iBGP peers and other routers).
//!
//! # Sessions
//! A router's dump is synced when every peer of the session has sent End-of-RIB for each
//! unicast address family both OPENs named, or after [`Settings::quiet`] without route
//! messages (GoBGP sends no End-of-RIB; FRR none for a family it does not monitor). When the
//! session ends (Termination, or the listener's `session_down`) the router's routes turn
//! stale: they still count, and are removed after [`Settings::hold`] without a new session.
//! A new session refreshes them; when its dump is synced, every route not refreshed since the
//! reconnect is swept, with the peers not heard of again.
//!
//! # Changes
//! Every prefix whose candidates change in any RIB is recorded (a refresh with the same
//! attributes is not a change), also during a dump; [`Collector::take_dirty`] hands them over.
//!
//! # Not handled
//! ADD-PATH in route monitoring (bgpkit's BMP parser reads NLRI without path ids), route
//! mirroring and statistics (ignored).

mod collector;
pub mod encode;
pub mod frame;
mod rib;
mod view;

#[cfg(test)]
mod tests;

pub use collector::Collector;
pub use frame::{Framer, MAX_MESSAGE_LEN};
pub use view::{PeerStatus, Policy, RouterRef, RouterStatus, Settings, Synced, ViewSpec};
