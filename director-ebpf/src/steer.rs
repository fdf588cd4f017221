//! SYN steering: a TCP packet to a VIP goes to the server its flow is pinned to, or for a
//! new flow to the one the client's decision and the flow's rendezvous hash choose
//! (`director_common::steer`), and is pinned there. `l4` parses, this module looks up and
//! pins, `forward` rewrites.

use aya_ebpf::{
    bindings::{xdp_action, xdp_md, BPF_ANY},
    helpers::bpf_ktime_get_coarse_ns,
    maps::lpm_trie::Key,
    programs::XdpContext,
};
use director_common::{
    handover::Slot,
    maps::{DecisionKeyV4, DecisionKeyV6, MAX_CANDIDATES, SERVICE_ACTIVE, SERVICE_BITS},
    rrl::Verdict,
    select,
    steer::{self, Count, Flow, Forward, Handover, VipKey, FLOW_FROM_MIDSTREAM, FLOW_MOVED},
};

use crate::counter::count;
use crate::maps::*;
use crate::{forward, l4, opaque};

/// `packet`'s answer for a packet that is no VIP's: the caller goes on with it.
pub const NOT_MINE: u32 = u32::MAX;
/// `packet`'s answer for a VIP's packet whose flow needs a server chosen: it is in
/// `DIR_HANDOVER`, and `fresh` takes it on.
pub const CHOOSE: u32 = u32::MAX - 1;

/// The verdict for a packet the DNS path did not take: an XDP action if it belongs to a
/// VIP and its flow is pinned, `CHOOSE` if its flow needs a server, else `NOT_MINE`.
///
/// Not inlined, and given the bare context: the DNS path's many exits that reach it then
/// share one verified copy (inlined, each would walk it again). The choice is not called
/// from here: the parse's frame and the choice's together pass the kernel's 512 bytes of
/// stack, so the caller calls `fresh` after this returns.
#[inline(never)]
pub fn packet(raw: *mut xdp_md) -> u32 {
    let ctx = XdpContext::new(raw);
    match steer(&ctx) {
        Ok(action) => action,
        Err(None) => NOT_MINE,
        Err(Some(c)) => {
            count(&DIR_STEER_COUNTERS, c as u32);
            xdp_action::XDP_DROP
        }
    }
}

#[inline(always)]
fn steer(ctx: &XdpContext) -> Result<u32, Option<Count>> {
    let p = l4::packet(ctx).ok_or(None)?;
    let vip_key = VipKey {
        addr: p.key.vip,
        port: p.key.vip_port,
        family: p.key.family,
        proto: p.key.proto,
    };
    // SAFETY: the map's value, valid for this run. Not copied: its fields would be spilled
    // to this frame, the deepest.
    let vip = unsafe { DIR_VIPS.get(vip_key) }.ok_or(None)?;
    if !for_this_edge(ctx) {
        return Err(None);
    }
    let service = vip.service;
    if !DIR_SERVICES
        .get(service)
        .is_some_and(|s| s.flags & SERVICE_ACTIVE != 0)
    {
        return Err(Some(Count::NoServer));
    }
    let ports = u32::from_ne_bytes([
        p.key.client_port[0],
        p.key.client_port[1],
        p.key.vip_port[0],
        p.key.vip_port[1],
    ]);
    let flow = steer::flow_hash(&words(&p.key.client), &words(&p.key.vip), ports);
    let entry = DIR_FLOWS.get_ptr_mut(p.key);
    if let Some(f) = entry {
        // SAFETY: the map's value for this key, valid for this run.
        let pinned = unsafe { (*f).server };
        if alive(service, pinned, p.v6) {
            count(&DIR_STEER_COUNTERS, Count::Pinned as u32);
            if p.icmp {
                count(&DIR_STEER_COUNTERS, Count::Icmp as u32);
            }
            let mode = Forward::from_u8(vip.mode).ok_or(Some(Count::Failed))?;
            let shape = forward::Shape {
                v6: p.v6,
                l3: p.l3,
                syn: p.syn,
            };
            return forward::to_server(ctx, shape, vip, mode, pinned, flow);
        }
    }
    let h = DIR_HANDOVER.get_ptr_mut(0).ok_or(Some(Count::Failed))?;
    // SAFETY: this CPU's value; `fresh` reads it next, in this same run. Field by field:
    // a whole `Handover` would be built on this frame first.
    unsafe {
        let h = &mut *h;
        h.key = p.key;
        h.vip = *vip;
        h.service = service;
        h.flow = flow;
        h.l3 = p.l3 as u16;
        h.v6 = p.v6 as u8;
        h.syn = p.syn as u8;
        h.icmp = p.icmp as u8;
        h.pinned = entry.is_some() as u8;
    }
    Ok(CHOOSE)
}

/// The verdict for the packet `packet` left for a choice: the server the client's decision
/// and the flow's rendezvous hash give, the flow pinned there, the packet sent.
#[inline(never)]
pub fn fresh(raw: *mut xdp_md) -> u32 {
    let ctx = XdpContext::new(raw);
    match choose_and_send(&ctx) {
        Ok(action) => action,
        Err(c) => {
            count(&DIR_STEER_COUNTERS, c.unwrap_or(Count::Failed) as u32);
            xdp_action::XDP_DROP
        }
    }
}

#[inline(always)]
fn choose_and_send(ctx: &XdpContext) -> Result<u32, Option<Count>> {
    let h = DIR_HANDOVER.get_ptr_mut(0).ok_or(Some(Count::Failed))?;
    // SAFETY: this CPU's value, which `packet` wrote in this run.
    let h = unsafe { &*h };
    let v6 = h.v6 != 0;
    let client = words(&h.key.client);
    let (lo, hi) = (
        client[0] as u64 | (client[1] as u64) << 32,
        client[2] as u64 | (client[3] as u64) << 32,
    );
    // One call: each call of a subprogram is verified on its own.
    let picked = choose(h.service, lo, hi, h.flow as u64 | (v6 as u64) << 32);
    let chosen = picked as u16;
    if chosen == 0 {
        return Err(Some(Count::NoServer));
    }
    if h.pinned != 0 {
        // Its server went down: the flow moves to the next choice and stays there.
        // By reference: the key stays in the map value instead of a copy on this frame.
        #[allow(clippy::needless_borrows_for_generic_args)]
        let entry = DIR_FLOWS.get_ptr_mut(&h.key);
        if let Some(f) = entry {
            // SAFETY: the map's value for this key; a racing CPU writes the same choice.
            unsafe {
                (*f).server = chosen;
                (*f).flags |= FLOW_MOVED;
            }
        }
        count(&DIR_STEER_COUNTERS, Count::Moved as u32);
        count(&DIR_SRV_FLOWS, chosen as u32);
    } else if h.icmp == 0 {
        // An ICMP error is no flow's start: it is sent on, nothing is recorded.
        if h.syn != 0 {
            crate::demand::new_flow(h.service, (picked >> 32) as u32, v6, lo, hi);
        }
        record(h, chosen);
    }
    if h.icmp != 0 {
        count(&DIR_STEER_COUNTERS, Count::Icmp as u32);
    }
    let mode = Forward::from_u8(h.vip.mode).ok_or(Some(Count::Failed))?;
    let shape = forward::Shape {
        v6,
        l3: h.l3 as usize,
        syn: h.syn != 0,
    };
    forward::to_server(ctx, shape, &h.vip, mode, chosen, h.flow)
}

/// 16 bytes as four words.
#[inline(always)]
fn words(a: &[u8; 16]) -> [u32; 4] {
    // SAFETY: 16 bytes read as four words.
    unsafe { core::ptr::read_unaligned(a.as_ptr() as *const [u32; 4]) }
}

/// Records a new flow (a SYN) or one that lost its entry, unless the flood guard says no.
#[inline(always)]
fn record(h: &Handover, server: u16) {
    let syn = h.syn != 0;
    count(
        &DIR_STEER_COUNTERS,
        if syn {
            Count::NewFlow
        } else {
            Count::Midstream
        } as u32,
    );
    count(&DIR_SRV_FLOWS, server as u32);
    // The tick's clock: the guard's rate and the flow's age need no finer one, and the
    // fine clock's read was a tenth of a new flow's cost.
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_coarse_ns() };
    if let (Some(limit), Some(b)) = (DIR_STEER.get(0), DIR_FLOW_GUARD.get_ptr_mut(0)) {
        // SAFETY: this CPU's bucket; nothing else writes it during this run.
        if unsafe { (*b).take(now, limit) } != Verdict::Answer {
            count(&DIR_STEER_COUNTERS, Count::Guarded as u32);
            return;
        }
    }
    let flow = Flow {
        service: h.service,
        server,
        flags: if syn { 0 } else { FLOW_FROM_MIDSTREAM },
        _pad: 0,
        since_ns: now,
    };
    // By reference, as above.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = DIR_FLOWS.insert(&h.key, flow, BPF_ANY as u64);
}

/// Whether a pinned flow's server still takes it: up (drained is fine: it keeps its flows)
/// and not judged down by the service's health checks.
#[inline(always)]
fn alive(service: u32, server: u16, v6: bool) -> bool {
    DIR_SERVERS
        .get(server as u32)
        .is_some_and(|s| s.is_up() && s.has_family(v6))
        && DIR_HEALTH.get(service).is_some_and(|h| !h.is_down(server))
}

/// The server a new flow of `service` from the client (`lo`, `hi`: its address words)
/// goes to: the client's decision, less the servers that cannot take new clients, by
/// rendezvous on the flow hash (low 32 bits of `fam`; bit 32: IPv6). 0: none. The choice
/// index that decided comes with it, in the high 32 bits.
///
/// Not inlined: its branches over the candidates end at the return, so the forwarding
/// after it is verified once.
#[inline(never)]
fn choose(service: u32, lo: u64, hi: u64, fam: u64) -> u64 {
    let v6 = fam >> 32 != 0;
    let flow = fam as u32;
    let svc = service.to_be_bytes();
    let found = if v6 {
        let mut addr = [0u8; 16];
        addr[..8].copy_from_slice(&lo.to_ne_bytes());
        addr[8..].copy_from_slice(&hi.to_ne_bytes());
        let key = Key::new(SERVICE_BITS + 128, DecisionKeyV6 { service: svc, addr });
        DIR_DEC6.get(&key).copied()
    } else {
        // The /16's slot first, as for DNS: a new flow's first packet walks no trie there.
        crate::policy::front16(service, lo).or_else(|| {
            let b = (lo as u32).to_ne_bytes();
            let key = Key::new(
                SERVICE_BITS + 32,
                DecisionKeyV4 {
                    service: svc,
                    addr: b,
                },
            );
            DIR_DEC4.get(&key).copied()
        })
    };
    let Some(found) = found else {
        return 0;
    };
    let Some(d) = DIR_CHOICES.get(found.id) else {
        return 0;
    };
    let Some(health) = DIR_HEALTH.get(service) else {
        return 0;
    };
    let (ok, _) = select::usable_mask(d, |id| {
        DIR_SERVERS
            .get(id as u32)
            .is_some_and(|s| s.is_usable() && s.has_family(v6))
            && !health.is_out(id)
    });
    let Some(s) = DIR_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // Forget which combination was usable, through map memory (the verifier tracks the
    // stack exactly): it would walk the rendezvous once for each of the 2^8.
    let ok = opaque::hide(s, Slot::Usable, ok as u64) as u32 & 0xff;
    match steer::rendezvous(d, ok, flow) {
        // The compiler knows the index is below 8 and drops a plain mask; the verifier
        // does not know it, so the index is forgotten and masked again.
        Some(i) => {
            let i = opaque::hide(s, Slot::Start, i as u64) as usize & (MAX_CANDIDATES - 1);
            d.servers[i] as u64 | (found.id as u64) << 32
        }
        None => 0,
    }
}

/// The frame is addressed to the interface director is attached to (a frame the bridge or
/// switch flooded to it is someone else's).
#[inline(always)]
fn for_this_edge(ctx: &XdpContext) -> bool {
    // SAFETY: the context's field, readable in XDP.
    let ifindex = unsafe { (*ctx.ctx).ingress_ifindex };
    let Some(iface) = DIR_IFACES.get(ifindex).filter(|i| i.attached != 0) else {
        // Not attached by `attach` (BPF_PROG_TEST_RUN): nothing to compare with.
        return true;
    };
    forward::dst_mac_is(ctx, &iface.mac)
}
