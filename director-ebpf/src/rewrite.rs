//! Rewrite: turns the query into its answer in place. Nothing before the resize may fail
//! silently; after it, any failed check drops the packet rather than pass a half-written one.

use aya_ebpf::{
    helpers::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_get_buff_len},
    programs::XdpContext,
};
use director_common::{
    checksum::{finish_ip, finish_udp, shift_odd, sum16},
    counters::Reason,
    dns::{self, Ecs},
    maps::{Scratch, MAX_CANDIDATES},
};

use crate::opaque::{hide, SLOT_COUNT, SLOT_SHAPE};
use crate::packet::{at_fenced as at, be16, put16, put32};
use crate::parse::Query;
use crate::policy::Plan;

const HOP_LIMIT: u8 = 64;

pub fn answer(ctx: &XdpContext, q: &Query, plan: &Plan, s: *mut Scratch) -> Result<(), Reason> {
    let n = plan.n & (MAX_CANDIDATES * 2 - 1);
    let rec_len = dns::record_len(q.aaaa);
    let tail_off = dns::HEADER_LEN + q.name_len + 4;
    let ecs_value = Ecs {
        family: q.ecs_family,
        source: q.ecs_source,
        addr: unsafe { (*s).ecs_addr },
    };
    let ecs = if q.has_ecs { Some(&ecs_value) } else { None };
    let opt_len = if q.edns { dns::opt_len(ecs) } else { 0 };
    let dns_len = tail_off + n * rec_len + opt_len;
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
        let keep = hide(
            s,
            SLOT_SHAPE,
            (q.dns + dns::HEADER_LEN + q.name_len + 4) as u64,
        ) as usize
            & 0x1ff;
        move_to_front(ctx, (delta as usize) & 0x1ff, keep).map_err(|_| Reason::Dropped)?;
    }
    // Every packet pointer is stale now; `at` re-reads data/data_end each time.
    write(ctx, q, plan, s, n, dns_len, ecs).map_err(|_| Reason::Dropped)
}

/// Moves the first `len` bytes of what now starts `by` bytes into the packet to its start,
/// forward in 8-byte words. The last word is read before anything is written and stored
/// last, ending exactly at `len`, so no byte-sized tail copy is needed.
#[inline(always)]
fn move_to_front(ctx: &XdpContext, by: usize, len: usize) -> Result<(), Reason> {
    const WORDS: usize = 512 / 8;
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
    let eth = at::<12>(ctx, 0, Reason::Dropped)?;
    unsafe {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&(&*eth)[0..6]);
        (&mut *eth).copy_within(6..12, 0);
        (&mut *eth)[6..12].copy_from_slice(&mac);
    }

    let udp_len = (8 + dns_len) as u16;
    let (udp_off, addr_sum) = if q.ip6 {
        let ip = at::<40>(ctx, q.l3, Reason::Dropped)?;
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        unsafe {
            src.copy_from_slice(&(&*ip)[8..24]);
            dst.copy_from_slice(&(&*ip)[24..40]);
            (&mut *ip)[8..24].copy_from_slice(&dst);
            (&mut *ip)[24..40].copy_from_slice(&src);
            (*ip)[7] = HOP_LIMIT;
        }
        put16(ip, 4, udp_len);
        (q.l3 + 40, sum16(&src) + sum16(&dst))
    } else {
        let ip = at::<20>(ctx, q.l3, Reason::Dropped)?;
        let mut both = [0u8; 16];
        unsafe {
            both[..4].copy_from_slice(&(&*ip)[16..20]);
            both[4..8].copy_from_slice(&(&*ip)[12..16]);
            (&mut *ip)[12..20].copy_from_slice(&both[..8]);
            (*ip)[8] = HOP_LIMIT;
        }
        put16(ip, 2, 20 + udp_len);
        put16(ip, 10, 0);
        let mut sum = 0u64;
        let mut i = 0;
        while i < 20 {
            sum += be16(ip, i) as u64;
            i += 2;
        }
        put16(ip, 10, finish_ip(sum));
        (q.l3 + 20, sum16(&both))
    };

    let udp = at::<8>(ctx, udp_off, Reason::Dropped)?;
    let (sport, dport) = (be16(udp, 0), be16(udp, 2));
    put16(udp, 0, dport);
    put16(udp, 2, sport);
    put16(udp, 4, udp_len);

    let flags = dns::answer_flags(q.flags);
    let ar = q.edns as u16;
    let hdr = at::<{ dns::HEADER_LEN }>(ctx, q.dns, Reason::Dropped)?;
    put16(hdr, 2, flags);
    put16(hdr, 6, n as u16);
    put16(hdr, 8, 0);
    put16(hdr, 10, ar);

    let qtype = if q.aaaa { dns::TYPE_AAAA } else { dns::TYPE_A };
    let tail = q.dns + dns::HEADER_LEN + q.name_len + 4;
    let mut tail_sum = write_records(ctx, q, plan, s, n, tail)?;
    // The loop left the verifier one state per record count; read the count back so that
    // what follows is verified once, not once per count.
    let n = hide(s, SLOT_COUNT, n as u64) as usize & 15;
    if q.edns {
        let rec_len = dns::record_len(hide(s, SLOT_SHAPE, q.aaaa as u64) & 1 == 1);
        write_opt(ctx, plan, tail + n * rec_len, ecs, q.dnssec_ok)?;
        tail_sum += dns::opt_sum(ecs, plan.scope, q.dnssec_ok);
    }
    let n = hide(s, SLOT_COUNT, n as u64) as usize & 15;

    // The UDP checksum over the answer as written: pseudo-header, UDP header, DNS header,
    // the echoed question (its name summed during the walk) and the appended records.
    let odd = q.name_len & 1 == 1;
    let name_sum = unsafe { core::ptr::read_volatile(&(*s).name_sum) };
    let sum = addr_sum
        + 17
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
    let udp = at::<8>(ctx, udp_off, Reason::Dropped)?;
    put16(udp, 6, finish_udp(sum));
    Ok(())
}

#[inline(always)]
fn write_records(
    ctx: &XdpContext,
    q: &Query,
    plan: &Plan,
    s: *mut Scratch,
    n: usize,
    tail: usize,
) -> Result<u64, Reason> {
    let rec_len = dns::record_len(q.aaaa);
    let mut sum = 0u64;
    let mut i = 0;
    while i < MAX_CANDIDATES {
        if i < n {
            let addr = unsafe { &(*s).addrs[i] };
            let off = tail + i * rec_len;
            if q.aaaa {
                let r = at::<28>(ctx, off, Reason::Dropped)?;
                record_head(r, dns::TYPE_AAAA, plan.ttl, 16);
                unsafe { (&mut *r)[12..28].copy_from_slice(addr) };
            } else {
                let r = at::<16>(ctx, off, Reason::Dropped)?;
                record_head(r, dns::TYPE_A, plan.ttl, 4);
                unsafe { (&mut *r)[12..16].copy_from_slice(&addr[..4]) };
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
    let o = at::<{ dns::OPT_FIXED_LEN }>(ctx, off, Reason::Dropped)?;
    unsafe { (*o)[0] = 0 };
    put16(o, 1, dns::TYPE_OPT);
    put16(o, 3, dns::EDNS_UDP_SIZE);
    put32(o, 5, if dnssec_ok { dns::EDNS_DO } else { 0 });
    let Some(e) = ecs else {
        put16(o, 9, 0);
        return Ok(());
    };
    let alen = e.addr_len();
    put16(o, 9, (8 + alen) as u16);
    let eh = at::<8>(ctx, off + dns::OPT_FIXED_LEN, Reason::Dropped)?;
    put16(eh, 0, dns::OPTION_ECS);
    put16(eh, 2, (4 + alen) as u16);
    put16(eh, 4, e.family);
    unsafe {
        (*eh)[6] = e.source;
        (*eh)[7] = plan.scope;
    }
    let mut j = 0;
    while j < 16 {
        if j < alen {
            let b = at::<2>(ctx, off + dns::OPT_FIXED_LEN + 7 + j, Reason::Dropped)?;
            unsafe { (*b)[1] = e.addr[j] };
        }
        j += 1;
    }
    Ok(())
}

#[inline(always)]
fn record_head<const N: usize>(r: *mut [u8; N], rtype: u16, ttl: u32, rdlen: u16) {
    put16(r, 0, dns::NAME_POINTER);
    put16(r, 2, rtype);
    put16(r, 4, dns::CLASS_IN);
    put32(r, 6, ttl);
    put16(r, 10, rdlen);
}
