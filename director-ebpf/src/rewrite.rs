//! Rewrite: turns the query into its answer in place. Nothing before the resize may fail
//! silently; after it, any failed check drops the packet rather than pass a half-written one.

use aya_ebpf::{
    helpers::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail},
    programs::XdpContext,
};
use director_common::{
    checksum::{finish_ip, finish_udp, halves, le_to_network, shift_odd},
    counters::Reason,
    dns::{self, record, Ecs},
    fallback::Kinds,
    handover::{Plan, Query, Slot},
    headers::{eth, ipv4, ipv6, udp},
    maps::{Fallback, Scratch, CNAME_RECORD_BUF, MAX_CANDIDATES},
};

use crate::maps::DIR_FALLBACK;

use crate::opaque::hide;
use crate::packet::{at_fenced as at, be16, ld, put16, put32, st};

const HOP_LIMIT: u8 = 64;
/// Bound (a mask) of what moves when the packet grows at the front: the headers and the
/// question, and the distance, both under 512 bytes.
const MAX_MOVE: usize = 0x1ff;

pub fn answer(ctx: &XdpContext, q: &Query, plan: &Plan, s: *mut Scratch) -> Result<(), Reason> {
    let n = plan.n & (MAX_CANDIDATES * 2 - 1);
    // A CNAME to the alternate is the one record, as the controller built it.
    let cname = if plan.fallback == Kinds::ALTERNATE {
        Some(DIR_FALLBACK.get(plan.service).ok_or(Reason::NoServer)?)
    } else {
        None
    };
    let records_len = match cname {
        Some(fb) => fb.cname_len as usize & MAX_CNAME,
        None => n * dns::record_len(q.aaaa),
    };
    let ecs_value = Ecs {
        family: q.ecs_family,
        source: q.ecs_source,
        addr: unsafe { (*s).ecs_addr },
    };
    let ecs = if q.has_ecs { Some(&ecs_value) } else { None };
    let opt_len = if q.edns { dns::opt_len(ecs) } else { 0 };
    let dns_len = q.question_end - q.dns + records_len + opt_len;
    if dns_len > q.udp_size as usize {
        return Err(Reason::TooBig);
    }

    let new_len = q.dns + dns_len;
    // The program is not loaded for multi-buffer frames, so the frame is its linear part
    // (and a helper call per answer is saved).
    let old_len = ctx.data_end() - ctx.data();
    let delta = new_len as i32 - old_len as i32;
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } != 0 {
        // Some drivers leave little tailroom (veth hands over the sender's skb as is), but
        // every driver leaves XDP_PACKET_HEADROOM: grow at the front and move the headers
        // and question there instead.
        if delta <= 0 || unsafe { bpf_xdp_adjust_head(ctx.ctx, -delta) } != 0 {
            return Err(Reason::ResizeFailed);
        }
        // Everything up to the question's end stays; the records are written after it.
        let keep = hide(s, Slot::Keep, q.question_end as u64) as usize & MAX_MOVE;
        move_to_front(ctx, (delta as usize) & MAX_MOVE, keep).map_err(|_| Reason::Dropped)?;
    }
    // Every packet pointer is stale now; `at` re-reads data/data_end each time.
    write(ctx, q, plan, s, dns_len, ecs, cname).map_err(|_| Reason::Dropped)
}

/// Bound (a mask) of a CNAME record's length (at most 12 + 255).
const MAX_CNAME: usize = 0x1ff;

/// Copies the CNAME record into place after the question, in words: the last word is the
/// one that ends where the record ends, so no byte-sized tail is needed (the record is at
/// least 14 bytes). Returns the record's checksum sum from an even offset.
#[inline(always)]
fn write_cname(ctx: &XdpContext, off: usize, fb: &Fallback) -> Result<u64, Reason> {
    const WORDS: usize = CNAME_RECORD_BUF / 8;
    let len = fb.cname_len as usize & MAX_CNAME;
    if !(8..=CNAME_RECORD_BUF).contains(&len) {
        return Err(Reason::Dropped);
    }
    let src = fb.cname.as_ptr();
    let tail = (len - 8).min(CNAME_RECORD_BUF - 8);
    // SAFETY: tail + 8 <= CNAME_RECORD_BUF; map values may be read unaligned.
    let last = unsafe { (src.add(tail) as *const u64).read_unaligned() };
    let mut at_word = 0;
    let mut i = 0;
    while i < WORDS {
        if at_word + 8 > len {
            break;
        }
        // SAFETY: at_word + 8 <= len <= CNAME_RECORD_BUF, 8-aligned in an 8-aligned value.
        let w = unsafe { *(src.add(at_word.min(CNAME_RECORD_BUF - 8)) as *const u64) };
        let dst = at::<8>(ctx, off + at_word, Reason::Dropped)?;
        st(dst, 0, w);
        at_word += 8;
        i += 1;
    }
    // An opaque offset: folded, the -8 would become a negative packet offset, which the
    // verifier refuses.
    let tail_off = core::hint::black_box(off + len - 8);
    let dst = at::<8>(ctx, tail_off, Reason::Dropped)?;
    st(dst, 0, last);
    Ok(fb.cname_sum)
}

/// Moves the first `len` bytes of what now starts `by` bytes into the packet to its start,
/// forward in 8-byte words. The last word is read before anything is written and stored
/// last, ending exactly at `len`, so no byte-sized tail copy is needed.
#[inline(always)]
fn move_to_front(ctx: &XdpContext, by: usize, len: usize) -> Result<(), Reason> {
    const WORDS: usize = (MAX_MOVE + 1) / 8;
    if len < 8 {
        return Err(Reason::Dropped);
    }
    let last_src = at::<8>(ctx, by + len - 8, Reason::Dropped)?;
    let last: u64 = ld(last_src, 0);
    let mut off = 0;
    let mut i = 0;
    while i < WORDS {
        if off + 8 > len {
            break;
        }
        let src = at::<8>(ctx, by + off, Reason::Dropped)?;
        let dst = at::<8>(ctx, off, Reason::Dropped)?;
        st(dst, 0, ld::<u64, 8>(src, 0));
        off += 8;
        i += 1;
    }
    let dst = at::<8>(ctx, len - 8, Reason::Dropped)?;
    st(dst, 0, last);
    Ok(())
}

#[inline(always)]
fn write(
    ctx: &XdpContext,
    q: &Query,
    plan: &Plan,
    s: *mut Scratch,
    dns_len: usize,
    ecs: Option<&Ecs>,
    cname: Option<&Fallback>,
) -> Result<(), Reason> {
    let n = plan.n & (MAX_CANDIDATES * 2 - 1);
    // The answer goes back the way the query came: swap the MACs (the EtherType stays).
    const MACS: usize = eth::TYPE;
    let frame = at::<MACS>(ctx, 0, Reason::Dropped)?;
    let (d4, d2) = (ld::<u32, MACS>(frame, 0), ld::<u16, MACS>(frame, 4));
    let (s4, s2) = (ld::<u32, MACS>(frame, 6), ld::<u16, MACS>(frame, 10));
    st(frame, 0, s4);
    st(frame, 4, s2);
    st(frame, 6, d4);
    st(frame, 10, d2);

    let udp_len = (udp::LEN + dns_len) as u16;
    // Addresses swap as words; their sum is taken in host order and turned once.
    let (udp_off, addr_sum) = if q.ip6 {
        const L: usize = ipv6::LEN;
        let ip = at::<L>(ctx, q.l3, Reason::Dropped)?;
        let (s0, s1) = (ld::<u64, L>(ip, ipv6::SRC), ld::<u64, L>(ip, ipv6::SRC + 8));
        let (d0, d1) = (ld::<u64, L>(ip, ipv6::DST), ld::<u64, L>(ip, ipv6::DST + 8));
        st(ip, ipv6::SRC, d0);
        st(ip, ipv6::SRC + 8, d1);
        st(ip, ipv6::DST, s0);
        st(ip, ipv6::DST + 8, s1);
        // SAFETY: `at` checked the header is in the packet.
        unsafe { (*ip)[ipv6::HOP_LIMIT] = HOP_LIMIT };
        put16(ip, ipv6::PAYLOAD_LEN, udp_len);
        let lanes = halves(s0) + halves(s1) + halves(d0) + halves(d1);
        (q.l3 + ipv6::LEN, le_to_network(lanes))
    } else {
        const L: usize = ipv4::LEN;
        let ip = at::<L>(ctx, q.l3, Reason::Dropped)?;
        // The header as host-order words, all read before anything is written: summing it
        // again after narrower writes would load words the store buffer cannot forward.
        const W0: usize = ipv4::VERSION_IHL;
        const W2: usize = ipv4::TTL;
        const _: () = assert!(ipv4::TOTAL_LEN == W0 + 2 && ipv4::CHECKSUM == W2 + 2);
        let (w0, w1, w2) = (
            ld::<u32, L>(ip, W0),
            ld::<u32, L>(ip, W0 + 4),
            ld::<u32, L>(ip, W2),
        );
        let (src, dst) = (ld::<u32, L>(ip, ipv4::SRC), ld::<u32, L>(ip, ipv4::DST));
        // Word 0: version, IHL and DSCP kept, the new total length in its upper half;
        // word 2: the new TTL, the protocol kept, the checksum (0 while summing) above.
        let total = (ipv4::LEN as u16 + udp_len).to_be();
        let w0 = (w0 & 0xffff) | (total as u32) << 16;
        let w2 = (w2 & 0xff00) | HOP_LIMIT as u32;
        let sum = w0 as u64 + w1 as u64 + w2 as u64 + src as u64 + dst as u64;
        // The sum is of host-order words, so the result goes in in host order too.
        st(ip, W0, w0);
        st(ip, W2, w2 | (finish_ip(sum) as u32) << 16);
        st(ip, ipv4::SRC, dst);
        st(ip, ipv4::DST, src);
        (q.l3 + ipv4::LEN, le_to_network(src as u64 + dst as u64))
    };

    let uh = at::<{ udp::LEN }>(ctx, udp_off, Reason::Dropped)?;
    let (sport, dport) = (be16(uh, udp::SRC_PORT), be16(uh, udp::DST_PORT));
    put16(uh, udp::SRC_PORT, dport);
    put16(uh, udp::DST_PORT, sport);
    put16(uh, udp::LENGTH, udp_len);

    // A slipped answer (rate limited) says TC: "ask again over TCP".
    let flags = dns::answer_flags(q.flags) | if plan.truncate { dns::TC } else { 0 };
    let ar = q.edns as u16;
    let an = if cname.is_some() { 1 } else { n };
    let hdr = at::<{ dns::HEADER_LEN }>(ctx, q.dns, Reason::Dropped)?;
    put16(hdr, dns::header::FLAGS, flags);
    put16(hdr, dns::header::ANCOUNT, an as u16);
    put16(hdr, dns::header::NSCOUNT, 0);
    put16(hdr, dns::header::ARCOUNT, ar);

    let qtype = if q.aaaa { dns::TYPE_AAAA } else { dns::TYPE_A };
    let (mut tail_sum, records_len) = match cname {
        Some(fb) => (
            write_cname(ctx, q.question_end, fb)?,
            fb.cname_len as usize & MAX_CNAME,
        ),
        None => {
            let sum = write_records(ctx, q, plan, s, n)?;
            // The loop left the verifier one state per record count; read the count back
            // so that what follows is verified once, not once per count.
            let n = hide(s, Slot::Records, n as u64) as usize & Plan::MAX_N;
            let rec_len = dns::record_len(hide(s, Slot::Aaaa, q.aaaa as u64) & 1 == 1);
            (sum, n * rec_len)
        }
    };
    let records_len = hide(s, Slot::Records, records_len as u64) as usize & MAX_CNAME;
    if q.edns {
        write_opt(ctx, plan, q.question_end + records_len, ecs, q.dnssec_ok)?;
        // After a record of odd length the OPT's words start at the other parity.
        let opt = dns::opt_sum(ecs, plan.scope, q.dnssec_ok);
        tail_sum += shift_odd(opt, records_len & 1 == 1);
    }
    let n = hide(s, Slot::Records, an as u64) as usize & Plan::MAX_N;

    // The UDP checksum over the answer as written: pseudo-header, UDP header, DNS header,
    // the echoed question (its name summed during the walk) and the appended records.
    let odd = q.name_len & 1 == 1;
    let name_sum = unsafe { core::ptr::read_volatile(&(*s).name_sum) };
    let sum = addr_sum
        + udp::PROTOCOL as u64
        + udp_len as u64
        + sport as u64
        + dport as u64
        + udp_len as u64
        + q.id as u64
        + flags as u64
        + 1
        + n as u64
        + ar as u64
        + name_sum
        + shift_odd(qtype as u64 + dns::CLASS_IN as u64, odd)
        + shift_odd(tail_sum, odd);
    let uh = at::<{ udp::LEN }>(ctx, udp_off, Reason::Dropped)?;
    put16(uh, udp::CHECKSUM, finish_udp(sum));
    Ok(())
}

#[inline(always)]
fn write_records(
    ctx: &XdpContext,
    q: &Query,
    plan: &Plan,
    s: *mut Scratch,
    n: usize,
) -> Result<u64, Reason> {
    let rec_len = dns::record_len(q.aaaa);
    // Every record's first 12 bytes are the same (pointer, type, class, TTL, length):
    // built once as two words in wire order.
    let (rtype, rdlen) = if q.aaaa {
        (dns::TYPE_AAAA, ipv6::ADDR_LEN)
    } else {
        (dns::TYPE_A, ipv4::ADDR_LEN)
    };
    let [p0, p1] = dns::NAME_POINTER.to_be_bytes();
    let [t0, t1] = rtype.to_be_bytes();
    let [c0, c1] = dns::CLASS_IN.to_be_bytes();
    let ttl = plan.ttl.to_be_bytes();
    let head = u64::from_le_bytes([p0, p1, t0, t1, c0, c1, ttl[0], ttl[1]]);
    let head_end = u32::from_le_bytes([ttl[2], ttl[3], 0, rdlen as u8]);
    // The addresses are summed as the host-order words just loaded (turned to the network's
    // order once, below); the fixed part is the same for every record.
    let mut lanes = 0u64;
    let mut i = 0;
    while i < MAX_CANDIDATES {
        // Out at the count: running on to the bound cost about 4 % of an answer on the
        // wire (seven empty turns for the usual one record).
        if i >= n {
            break;
        }
        let addr = unsafe { &(*s).addrs[i] };
        let a = addr.as_ptr() as *const u64;
        // SAFETY: scratch addresses are 16 bytes, 8-aligned.
        let (a0, a1) = unsafe { (*a, *a.add(1)) };
        let off = q.question_end + i * rec_len;
        if q.aaaa {
            const LEN: usize = dns::record_len(true);
            let r = at::<LEN>(ctx, off, Reason::Dropped)?;
            st(r, record::NAME, head);
            st(r, record::TTL + 2, head_end);
            st(r, record::RDATA, a0);
            st(r, record::RDATA + 8, a1);
        } else {
            const LEN: usize = dns::record_len(false);
            let r = at::<LEN>(ctx, off, Reason::Dropped)?;
            st(r, record::NAME, head);
            st(r, record::TTL + 2, head_end);
            st(r, record::RDATA, a0 as u32);
        }
        lanes += halves(a0) + halves(a1);
        i += 1;
    }
    let fixed = dns::record_sum(q.aaaa, plan.ttl, &[0; 16]);
    Ok(n as u64 * fixed + le_to_network(lanes))
}

#[inline(always)]
fn write_opt(
    ctx: &XdpContext,
    plan: &Plan,
    off: usize,
    ecs: Option<&Ecs>,
    dnssec_ok: bool,
) -> Result<(), Reason> {
    use dns::{ecs as body, opt, option};
    // The ECS option: its header, then family, source and scope before the address.
    const ECS_FIXED_LEN: usize = option::HEADER_LEN + body::ADDR;
    if let Some(e) = ecs {
        // The address first, as whole words that end where it ends: what they write before
        // the address is the option's header, written over just after.
        let alen = e.addr_len() & 0x1f;
        let addr = off + dns::OPT_FIXED_LEN + ECS_FIXED_LEN;
        let (lo, hi) = e.addr_words();
        if alen > 8 {
            let w = at::<8>(ctx, addr + alen - 8, Reason::Dropped)?;
            st(w, 0, hi << (8 * (16 - alen)));
            let w = at::<8>(ctx, addr, Reason::Dropped)?;
            st(w, 0, lo);
        } else if alen > 0 {
            let w = at::<8>(ctx, addr + alen - 8, Reason::Dropped)?;
            st(w, 0, lo << (8 * (8 - alen)));
        }
    }
    let o = at::<{ dns::OPT_FIXED_LEN }>(ctx, off, Reason::Dropped)?;
    unsafe { (*o)[opt::OWNER] = 0 };
    put16(o, opt::TYPE, dns::TYPE_OPT);
    put16(o, opt::CLASS, dns::EDNS_UDP_SIZE);
    put32(o, opt::TTL, if dnssec_ok { dns::EDNS_DO } else { 0 });
    let Some(e) = ecs else {
        put16(o, opt::RDLEN, 0);
        return Ok(());
    };
    let alen = e.addr_len();
    put16(o, opt::RDLEN, (ECS_FIXED_LEN + alen) as u16);
    let eh = at::<ECS_FIXED_LEN>(ctx, off + dns::OPT_FIXED_LEN, Reason::Dropped)?;
    put16(eh, option::CODE, dns::OPTION_ECS);
    put16(eh, option::LEN, (body::ADDR + alen) as u16);
    put16(eh, option::HEADER_LEN + body::FAMILY, e.family);
    unsafe {
        (*eh)[option::HEADER_LEN + body::SOURCE] = e.source;
        (*eh)[option::HEADER_LEN + body::SCOPE] = plan.scope;
    }
    Ok(())
}
