//! Rewrite: turns the query into its answer in place. Nothing before the resize may fail
//! silently; after it, any failed check drops the packet rather than pass a half-written one.

use aya_ebpf::{
    helpers::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_get_buff_len},
    programs::XdpContext,
};
use director_common::{
    checksum::{finish_ip, finish_udp, shift_odd, sum16},
    counters::Reason,
    dns::{self, record, Ecs},
    handover::{Plan, Query, Slot},
    headers::{eth, ipv4, ipv6, udp},
    maps::{Scratch, MAX_CANDIDATES},
};

use crate::opaque::hide;
use crate::packet::{at_fenced as at, be16, put16, put32};

const HOP_LIMIT: u8 = 64;
/// Bound (a mask) of what moves when the packet grows at the front: the headers and the
/// question, and the distance, both under 512 bytes.
const MAX_MOVE: usize = 0x1ff;

pub fn answer(ctx: &XdpContext, q: &Query, plan: &Plan, s: *mut Scratch) -> Result<(), Reason> {
    let n = plan.n & (MAX_CANDIDATES * 2 - 1);
    let rec_len = dns::record_len(q.aaaa);
    let ecs_value = Ecs {
        family: q.ecs_family,
        source: q.ecs_source,
        addr: unsafe { (*s).ecs_addr },
    };
    let ecs = if q.has_ecs { Some(&ecs_value) } else { None };
    let opt_len = if q.edns { dns::opt_len(ecs) } else { 0 };
    let dns_len = q.question_end - q.dns + n * rec_len + opt_len;
    if dns_len > q.udp_size as usize {
        return Err(Reason::TooBig);
    }

    let new_len = q.dns + dns_len;
    let old_len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) } as usize;
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
    write(ctx, q, plan, s, n, dns_len, ecs).map_err(|_| Reason::Dropped)
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
    let last = unsafe { core::ptr::read_unaligned(last_src as *const u64) };
    let mut off = 0;
    let mut i = 0;
    while i < WORDS {
        if off + 8 > len {
            break;
        }
        let src = at::<8>(ctx, by + off, Reason::Dropped)?;
        let dst = at::<8>(ctx, off, Reason::Dropped)?;
        unsafe {
            core::ptr::write_unaligned(
                dst as *mut u64,
                core::ptr::read_unaligned(src as *const u64),
            )
        };
        off += 8;
        i += 1;
    }
    let dst = at::<8>(ctx, len - 8, Reason::Dropped)?;
    unsafe { core::ptr::write_unaligned(dst as *mut u64, last) };
    Ok(())
}

#[inline(always)]
fn write(
    ctx: &XdpContext,
    q: &Query,
    plan: &Plan,
    s: *mut Scratch,
    n: usize,
    dns_len: usize,
    ecs: Option<&Ecs>,
) -> Result<(), Reason> {
    // The answer goes back the way the query came: swap the MACs (the EtherType stays).
    const MACS: usize = eth::TYPE;
    let frame = at::<MACS>(ctx, 0, Reason::Dropped)?;
    // SAFETY (every block below that writes through a packet pointer): the pointer comes
    // from `at`, which checked that the whole array is in the packet.
    unsafe {
        let mut mac = [0u8; eth::ADDR_LEN];
        mac.copy_from_slice(&(&*frame)[eth::DST..eth::DST + eth::ADDR_LEN]);
        (&mut *frame).copy_within(eth::SRC..eth::SRC + eth::ADDR_LEN, eth::DST);
        (&mut *frame)[eth::SRC..eth::SRC + eth::ADDR_LEN].copy_from_slice(&mac);
    }

    let udp_len = (udp::LEN + dns_len) as u16;
    let (udp_off, addr_sum) = if q.ip6 {
        const SRC: core::ops::Range<usize> = ipv6::SRC..ipv6::SRC + ipv6::ADDR_LEN;
        const DST: core::ops::Range<usize> = ipv6::DST..ipv6::DST + ipv6::ADDR_LEN;
        let ip = at::<{ ipv6::LEN }>(ctx, q.l3, Reason::Dropped)?;
        let mut src = [0u8; ipv6::ADDR_LEN];
        let mut dst = [0u8; ipv6::ADDR_LEN];
        unsafe {
            src.copy_from_slice(&(&*ip)[SRC]);
            dst.copy_from_slice(&(&*ip)[DST]);
            (&mut *ip)[SRC].copy_from_slice(&dst);
            (&mut *ip)[DST].copy_from_slice(&src);
            (*ip)[ipv6::HOP_LIMIT] = HOP_LIMIT;
        }
        put16(ip, ipv6::PAYLOAD_LEN, udp_len);
        (q.l3 + ipv6::LEN, sum16(&src) + sum16(&dst))
    } else {
        const SRC: core::ops::Range<usize> = ipv4::SRC..ipv4::SRC + ipv4::ADDR_LEN;
        const DST: core::ops::Range<usize> = ipv4::DST..ipv4::DST + ipv4::ADDR_LEN;
        let ip = at::<{ ipv4::LEN }>(ctx, q.l3, Reason::Dropped)?;
        // Destination then source, as they will be written; 16 bytes for `sum16`.
        let mut both = [0u8; 16];
        unsafe {
            both[..ipv4::ADDR_LEN].copy_from_slice(&(&*ip)[DST]);
            both[ipv4::ADDR_LEN..2 * ipv4::ADDR_LEN].copy_from_slice(&(&*ip)[SRC]);
            (&mut *ip)[ipv4::SRC..ipv4::DST + ipv4::ADDR_LEN]
                .copy_from_slice(&both[..2 * ipv4::ADDR_LEN]);
            (*ip)[ipv4::TTL] = HOP_LIMIT;
        }
        put16(ip, ipv4::TOTAL_LEN, ipv4::LEN as u16 + udp_len);
        put16(ip, ipv4::CHECKSUM, 0);
        let mut sum = 0u64;
        let mut i = 0;
        while i < ipv4::LEN {
            sum += be16(ip, i) as u64;
            i += 2;
        }
        put16(ip, ipv4::CHECKSUM, finish_ip(sum));
        (q.l3 + ipv4::LEN, sum16(&both))
    };

    let uh = at::<{ udp::LEN }>(ctx, udp_off, Reason::Dropped)?;
    let (sport, dport) = (be16(uh, udp::SRC_PORT), be16(uh, udp::DST_PORT));
    put16(uh, udp::SRC_PORT, dport);
    put16(uh, udp::DST_PORT, sport);
    put16(uh, udp::LENGTH, udp_len);

    let flags = dns::answer_flags(q.flags);
    let ar = q.edns as u16;
    let hdr = at::<{ dns::HEADER_LEN }>(ctx, q.dns, Reason::Dropped)?;
    put16(hdr, dns::header::FLAGS, flags);
    put16(hdr, dns::header::ANCOUNT, n as u16);
    put16(hdr, dns::header::NSCOUNT, 0);
    put16(hdr, dns::header::ARCOUNT, ar);

    let qtype = if q.aaaa { dns::TYPE_AAAA } else { dns::TYPE_A };
    let mut tail_sum = write_records(ctx, q, plan, s, n)?;
    // The loop left the verifier one state per record count; read the count back so that
    // what follows is verified once, not once per count.
    let n = hide(s, Slot::Records, n as u64) as usize & Plan::MAX_N;
    if q.edns {
        let rec_len = dns::record_len(hide(s, Slot::Aaaa, q.aaaa as u64) & 1 == 1);
        write_opt(ctx, plan, q.question_end + n * rec_len, ecs, q.dnssec_ok)?;
        tail_sum += dns::opt_sum(ecs, plan.scope, q.dnssec_ok);
    }
    let n = hide(s, Slot::Records, n as u64) as usize & Plan::MAX_N;

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
    let mut sum = 0u64;
    let mut i = 0;
    while i < MAX_CANDIDATES {
        if i < n {
            let addr = unsafe { &(*s).addrs[i] };
            let off = q.question_end + i * rec_len;
            if q.aaaa {
                const LEN: usize = dns::record_len(true);
                let r = at::<LEN>(ctx, off, Reason::Dropped)?;
                record_head(r, dns::TYPE_AAAA, plan.ttl, ipv6::ADDR_LEN as u16);
                unsafe { (&mut *r)[record::RDATA..LEN].copy_from_slice(addr) };
            } else {
                const LEN: usize = dns::record_len(false);
                let r = at::<LEN>(ctx, off, Reason::Dropped)?;
                record_head(r, dns::TYPE_A, plan.ttl, ipv4::ADDR_LEN as u16);
                unsafe { (&mut *r)[record::RDATA..LEN].copy_from_slice(&addr[..ipv4::ADDR_LEN]) };
            }
            sum += dns::record_sum(q.aaaa, plan.ttl, addr);
        }
        i += 1;
    }
    Ok(sum)
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
    let addr = off + dns::OPT_FIXED_LEN + ECS_FIXED_LEN;
    let mut j = 0;
    while j < e.addr.len() {
        if j < alen {
            // Written as the second of a pair (see `packet::at`).
            let b = at::<2>(ctx, addr - 1 + j, Reason::Dropped)?;
            unsafe { (*b)[1] = e.addr[j] };
        }
        j += 1;
    }
    Ok(())
}

#[inline(always)]
fn record_head<const N: usize>(r: *mut [u8; N], rtype: u16, ttl: u32, rdlen: u16) {
    put16(r, record::NAME, dns::NAME_POINTER);
    put16(r, record::TYPE, rtype);
    put16(r, record::CLASS, dns::CLASS_IN);
    put32(r, record::TTL, ttl);
    put16(r, record::RDLEN, rdlen);
}
