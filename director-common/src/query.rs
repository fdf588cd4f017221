//! Host-side parse of a whole DNS query, built from the same rules the kernel applies byte by
//! byte. Tests use it as the model of "what gets answered"; tools use it to explain a packet.

use crate::counters::Reason;
use crate::dns::*;
use crate::name::{self, Walked};

#[derive(Clone, Copy)]
pub struct ParsedQuery {
    pub id: u16,
    pub flags: u16,
    pub name: Walked,
    /// AAAA rather than A.
    pub v6: bool,
    /// Whether the query had an OPT record, and the client's UDP payload size.
    pub edns: Option<u16>,
    /// The query's DO bit (copied to the answer).
    pub dnssec_ok: bool,
    pub ecs: Option<Ecs>,
    /// Where the question ends (the answer's records start here).
    pub question_end: usize,
}

fn be16(b: &[u8], at: usize) -> Result<u16, Reason> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(Reason::Malformed)
}

/// Parses a UDP payload as a query director would answer, or says why not.
pub fn parse(msg: &[u8]) -> Result<ParsedQuery, Reason> {
    if msg.len() < HEADER_LEN {
        return Err(Reason::Malformed);
    }
    let flags = be16(msg, 2)?;
    check_header(
        flags,
        be16(msg, 4)?,
        be16(msg, 6)?,
        be16(msg, 8)?,
        be16(msg, 10)?,
    )?;
    let ar = be16(msg, 10)?;
    let walked = match name::walk(&msg[HEADER_LEN..]) {
        Some(w) => w,
        None if msg.len() < HEADER_LEN + 1 => return Err(Reason::Malformed),
        None => return Err(Reason::BadName),
    };
    let mut at = HEADER_LEN + walked.len;
    let v6 = check_question(be16(msg, at)?, be16(msg, at + 2)?)?;
    at += 4;
    let question_end = at;
    let mut edns = None;
    let mut ecs = None;
    let mut dnssec_ok = false;
    if ar == 1 {
        let owner = *msg.get(at).ok_or(Reason::Malformed)?;
        let rtype = be16(msg, at + 1)?;
        let class = be16(msg, at + 3)?;
        let ttl = ((be16(msg, at + 5)? as u32) << 16) | be16(msg, at + 7)? as u32;
        let rdlen = be16(msg, at + 9)? as usize;
        edns = Some(check_opt(owner, rtype, class, ttl)?);
        dnssec_ok = ttl & EDNS_DO != 0;
        at += OPT_FIXED_LEN;
        let end = at + rdlen;
        if end > msg.len() {
            return Err(Reason::Malformed);
        }
        let mut options = 0;
        while at < end {
            // The kernel looks at this many options and passes queries with more.
            if options == MAX_OPTIONS {
                return Err(Reason::Edns);
            }
            options += 1;
            let code = be16(msg, at)?;
            let len = be16(msg, at + 2)? as usize;
            at += 4;
            if at + len > end {
                return Err(Reason::Edns);
            }
            if code == OPTION_ECS {
                if ecs.is_some() || len < 4 {
                    return Err(Reason::Edns);
                }
                let family = be16(msg, at)?;
                let source = msg[at + 2];
                let alen = check_ecs(family, source, msg[at + 3], len as u16)?;
                let mut e = Ecs {
                    family,
                    source,
                    addr: [0; 16],
                };
                e.addr[..alen].copy_from_slice(&msg[at + 4..at + 4 + alen]);
                if alen > 0 && !ecs_last_byte_ok(source, e.addr[alen - 1]) {
                    return Err(Reason::Edns);
                }
                ecs = Some(e);
            }
            at += len;
        }
    }
    if at != msg.len() {
        return Err(Reason::Malformed);
    }
    Ok(ParsedQuery {
        id: be16(msg, 0)?,
        flags,
        name: walked,
        v6,
        edns,
        dnssec_ok,
        ecs,
        question_end,
    })
}
