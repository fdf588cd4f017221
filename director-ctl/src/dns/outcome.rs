//! What became of a query: the listeners count it, `prove` decides what denial it needs.

/// What happened to a query, for counters and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    NoData,
    NxDomain,
    Refused,
    NotImp,
    FormErr,
    ServFail,
    BadVers,
    /// Signed with TSIG: under a key director does not have (it has none).
    NotAuth,
    Truncated,
    /// Over the source prefix's rate limit (UDP): sent truncated (`slip`) ...
    RateLimitedSlipped,
    /// ... or not at all.
    RateLimitedDropped,
    /// Not a query (a response, or shorter than a header): no answer.
    Ignored,
}
