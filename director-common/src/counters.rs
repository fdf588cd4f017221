//! Fixed keys of the per-CPU counter array: one per verdict reason.

/// Why a packet got the verdict it got. The discriminant is the counter's key.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Answered with XDP_TX. The program leaves this key at 0: each answer is counted once,
    /// in `DIR_SVC_STATS`, and `director-ctl` reads their sum here.
    Answered = 0,
    /// Not IPv4/IPv6 over Ethernet (or more than one VLAN tag).
    NotIp = 1,
    /// IP, but not UDP to port 53 (TCP, other ports, IPv6 extension headers).
    NotDns = 2,
    /// IPv4 fragment or IPv4 header with options.
    IpFragmentOrOptions = 3,
    /// Lengths that do not add up, or a packet cut short.
    Malformed = 4,
    /// A response, another opcode, TC set, or section counts of something other than a query.
    NotQuery = 5,
    /// A compression pointer or extended label in the question name, or a name over 255 bytes.
    BadName = 6,
    /// A type other than A/AAAA or a class other than IN.
    QType = 7,
    /// EDNS that cannot be handled: bad OPT, unknown version, bad or repeated ECS, other records.
    Edns = 8,
    /// A name director does not own.
    UnknownName = 9,
    /// No decision entry for the client's prefix.
    NoDecision = 10,
    /// No chosen server is up with an address of the asked family.
    NoServer = 11,
    /// The answer would not fit the client's UDP payload size.
    TooBig = 12,
    /// The packet could not be resized (it is passed unchanged).
    ResizeFailed = 13,
    /// Dropped: a check failed after the packet was already resized (never expected).
    Dropped = 14,
    /// A query whose destination MAC or IP is not the edge's (`DIR_IFACES`, `DIR_LOCAL`):
    /// left to the host, which forwards or drops it by its own rules.
    NotForUs = 15,
    /// A query to a broadcast or multicast MAC or IP: left to the host.
    GroupDestination = 16,
    /// Dropped: a source that cannot be a client (group MAC, 0/8, 127/8, 224/4, 240/4, ::,
    /// ::1, ff00::/8, IPv4-mapped): an answer would go nowhere or to many.
    BadSource = 17,
    /// Dropped: source port 0, 7 (echo) or 19 (chargen), where an answer starts a loop.
    ReflectingPort = 18,
    /// Dropped: an IPv4 header checksum that does not verify, or an IPv6 UDP checksum of 0
    /// (RFC 8200 §8.1: discard).
    BadChecksum = 19,
    /// Answered (counted under `Answered` too) with a CNAME to the service's alternate:
    /// none of its servers could be.
    FallbackAlternate = 20,
    /// Answered (counted under `Answered` too) with the service's origin address.
    FallbackOrigin = 21,
    /// Dropped: over the service's response rate limit for the source's prefix (`rrl`),
    /// and not this one's turn to slip.
    RateLimitedDropped = 22,
    /// Over the rate limit and sent truncated (TC=1, no records: `rrl`'s slip), so that a
    /// real resolver retries over TCP. Not counted under `Answered`.
    RateLimitedSlipped = 23,
}

pub const COUNTER_SLOTS: u32 = 32;

pub const ALL: [Reason; 24] = [
    Reason::Answered,
    Reason::NotIp,
    Reason::NotDns,
    Reason::IpFragmentOrOptions,
    Reason::Malformed,
    Reason::NotQuery,
    Reason::BadName,
    Reason::QType,
    Reason::Edns,
    Reason::UnknownName,
    Reason::NoDecision,
    Reason::NoServer,
    Reason::TooBig,
    Reason::ResizeFailed,
    Reason::Dropped,
    Reason::NotForUs,
    Reason::GroupDestination,
    Reason::BadSource,
    Reason::ReflectingPort,
    Reason::BadChecksum,
    Reason::FallbackAlternate,
    Reason::FallbackOrigin,
    Reason::RateLimitedDropped,
    Reason::RateLimitedSlipped,
];

impl Reason {
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Answered => "answered",
            Reason::NotIp => "pass_not_ip",
            Reason::NotDns => "pass_not_dns",
            Reason::IpFragmentOrOptions => "pass_ip_fragment_or_options",
            Reason::Malformed => "pass_malformed",
            Reason::NotQuery => "pass_not_query",
            Reason::BadName => "pass_bad_name",
            Reason::QType => "pass_qtype_or_class",
            Reason::Edns => "pass_edns",
            Reason::UnknownName => "pass_unknown_name",
            Reason::NoDecision => "pass_no_decision",
            Reason::NoServer => "pass_no_server",
            Reason::TooBig => "pass_too_big",
            Reason::ResizeFailed => "pass_resize_failed",
            Reason::Dropped => "dropped",
            Reason::NotForUs => "pass_not_for_us",
            Reason::GroupDestination => "pass_group_destination",
            Reason::BadSource => "drop_bad_source",
            Reason::ReflectingPort => "drop_reflecting_port",
            Reason::BadChecksum => "drop_bad_checksum",
            Reason::FallbackAlternate => "answered_alternate",
            Reason::FallbackOrigin => "answered_origin",
            Reason::RateLimitedDropped => "drop_rate_limited",
            Reason::RateLimitedSlipped => "truncated_rate_limited",
        }
    }

    /// Whether the packet is dropped (XDP_DROP) rather than passed to the host.
    pub const fn drops(self) -> bool {
        matches!(
            self,
            Reason::Dropped
                | Reason::BadSource
                | Reason::ReflectingPort
                | Reason::BadChecksum
                | Reason::RateLimitedDropped
        )
    }
}
