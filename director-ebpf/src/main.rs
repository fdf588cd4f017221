//! director's XDP program: answers DNS queries for the names it owns with the best servers
//! for the client, in place, and passes everything else to the host untouched.
//!
//! parse (is this a query we own?) → policy (map lookups: who answers?) → rrl (may this
//! source have it now?) → rewrite. What is not DNS may be TCP to a VIP: l4 (parse) →
//! steer (flow table and decision) → forward (rewrite and send to the server).
#![no_std]
#![feature(asm_experimental_arch)]
#![no_main]

mod counter;
mod decap;
mod demand;
#[cfg(feature = "floor")]
mod floor;
mod forward;
mod handshake;
mod l4;
mod maps;
mod opaque;
mod packet;
mod parse;
mod policy;
mod rewrite;
mod rrl;
mod rtt;
mod steer;
mod synflood;
mod turnaround;

use aya_ebpf::{
    bindings::{xdp_action, TC_ACT_UNSPEC},
    macros::{classifier, sock_ops, xdp},
    programs::{SockOpsContext, TcContext, XdpContext},
};
use aya_log_ebpf::debug;
use director_common::{
    counters::Reason,
    fallback::Kinds,
    handover::{Plan, Query, Slot},
};

use counter::count;
use maps::{DIR_COUNTERS, DIR_SCRATCH, DIR_SRV_STATS, DIR_SVC_STATS};

#[xdp]
pub fn director(ctx: XdpContext) -> u32 {
    // The bench's answer floor: what it cannot answer (dig's checks) goes on as usual.
    #[cfg(feature = "floor")]
    if floor::answer(&ctx).is_ok() {
        return xdp_action::XDP_TX;
    }
    // Two subprograms, each verified once and each with its own stack frame: together in
    // one frame they would pass the kernel's 512-byte limit.
    let verdict = dns(ctx.ctx);
    if verdict != steer::NOT_MINE {
        return verdict;
    }
    // TCP to a VIP, or an ICMP error about such a flow: steered, and counted apart.
    let verdict = match steer::packet(ctx.ctx) {
        // The choice in a frame beside the parse's, not under it (see `steer::packet`).
        steer::CHOOSE => steer::fresh(ctx.ctx),
        v => v,
    };
    if verdict != steer::NOT_MINE {
        return verdict;
    }
    count(&DIR_COUNTERS, Reason::NotDns as u32);
    xdp_action::XDP_PASS
}

/// The verdict for a DNS query (answered, passed or dropped, and counted), or `NOT_MINE`
/// for a packet that is not one (not counted yet: it may be a VIP's).
#[inline(never)]
fn dns(raw: *mut aya_ebpf::bindings::xdp_md) -> u32 {
    let ctx = XdpContext::new(raw);
    let reason = match answer(&ctx) {
        Ok((_, _, _, true)) => Reason::RateLimitedSlipped,
        Ok((service, server, fallback, false)) => {
            // Not counted under `Answered` too: that counter is the sum of the services'
            // (`DIR_SVC_STATS`, which `director-ctl` reads as `answered`), and every answer
            // saves a counter update, 3 % of its cost.
            count(&DIR_SVC_STATS, service);
            if fallback == Kinds::ALTERNATE {
                count(&DIR_COUNTERS, Reason::FallbackAlternate as u32);
            } else if fallback.is_origin() {
                count(&DIR_COUNTERS, Reason::FallbackOrigin as u32);
            } else {
                count(&DIR_SRV_STATS, server as u32);
            }
            return xdp_action::XDP_TX;
        }
        Err(r) => r,
    };
    if reason == Reason::NotDns {
        return steer::NOT_MINE;
    }
    count(&DIR_COUNTERS, reason as u32);
    match reason {
        Reason::Answered | Reason::RateLimitedSlipped => xdp_action::XDP_TX,
        r if r.drops() => xdp_action::XDP_DROP,
        _ => {
            // Compiled out by the verifier unless the loader enabled debug logging.
            // The number is a `counters::Reason`; `stats` names them.
            debug!(&ctx, "pass: reason {}", reason as u32);
            xdp_action::XDP_PASS
        }
    }
}

#[inline(always)]
/// Answers the query in place; returns the service, the server it was sent to, whether a
/// fallback answered instead, and whether the answer was truncated by the rate limit.
fn answer(ctx: &XdpContext) -> Result<(u32, u16, Kinds, bool), Reason> {
    let s = DIR_SCRATCH.get_ptr_mut(0).ok_or(Reason::Malformed)?;
    // Each stage starts from what the last one stored (see `opaque`).
    opaque::put_words(s, Slot::Query, parse::query(ctx, s)?.pack());
    let q = Query::unpack(opaque::get_words(s, Slot::Query));
    opaque::put_words(s, Slot::Plan, policy::decide(&q, s)?.pack());
    let q = Query::unpack(opaque::get_words(s, Slot::Query));
    let mut plan = Plan::unpack(opaque::get_words(s, Slot::Plan));
    match rrl::check(plan.service, q.ip6, s) {
        rrl::ANSWER => {}
        rrl::SLIP => {
            // The question alone (and the OPT): a real resolver retries over TCP.
            plan.n = 0;
            plan.fallback = Kinds::NONE;
            plan.truncate = true;
        }
        _ => return Err(Reason::RateLimitedDropped),
    }
    // Stored and read back: rewrite is then verified once, not once per verdict.
    opaque::put_words(s, Slot::Plan, plan.pack());
    let plan = Plan::unpack(opaque::get_words(s, Slot::Plan));
    rewrite::answer(ctx, &q, &plan, s)?;
    if !plan.truncate {
        demand::answered(s, &q, &plan);
    }
    Ok((plan.service, plan.first, plan.fallback, plan.truncate))
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

/// A pass-through for the far end of a veth pair: XDP_TX frames from the near end are only
/// delivered promptly when the peer runs an XDP program (tests and the demo use it).
#[xdp]
pub fn director_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// The bench's ceiling (see `turnaround`): DNS queries turned around in place, nothing
/// answered. Never attached by director itself; `director-ctl ceiling` attaches it.
#[xdp]
pub fn director_turnaround(ctx: XdpContext) -> u32 {
    match turnaround::turn(&ctx) {
        Ok(()) => xdp_action::XDP_TX,
        Err(_) => xdp_action::XDP_PASS,
    }
}

/// The SYN flood bench's generator (see `synflood`): run by BPF_PROG_TEST_RUN with live
/// frames, never attached; each run sends a SYN from a random source.
#[xdp]
pub fn director_synflood(ctx: XdpContext) -> u32 {
    match synflood::next(&ctx) {
        Ok(()) => xdp_action::XDP_TX,
        Err(_) => xdp_action::XDP_ABORTED,
    }
}

/// The server's end of `ipip` forwarding (see `decap`): IPv4-in-IPv4 and IPv6-in-IPv6
/// lose their outer header and go to the stack; everything else passes as it came.
/// Never attached by director itself; `director-ctl decap attach` attaches it.
#[xdp]
pub fn director_decap(ctx: XdpContext) -> u32 {
    // Passed either way: a frame that is not ours is the stack's to judge.
    let _ = decap::strip(&ctx);
    xdp_action::XDP_PASS
}

/// Passive RTT for `director-ctl agent` (see `rtt`): attached to a cgroup of a site's
/// servers, never to director's edge. Each accepted connection's handshake RTT is added
/// to its client prefix's histogram; the connection itself is not touched.
#[sock_ops]
pub fn director_rtt(ctx: SockOpsContext) -> u32 {
    rtt::observe(&ctx);
    // sock_ops programs answer 1 for "carry on"; no reply is set.
    1
}

/// Passive RTT where the handshakes pass but do not end (see `handshake`): tc, on ingress
/// and egress of a site gateway's interface, for `director-ctl agent --observe`. Never
/// changes or stops a packet; with tcx, the next program on the hook runs as well.
#[classifier]
pub fn director_rtt_tc(ctx: TcContext) -> i32 {
    handshake::observe(&ctx);
    TC_ACT_UNSPEC
}
