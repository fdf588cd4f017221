//! Parse: from the Ethernet header to the end of the DNS message, deciding whether this is
//! a well-formed query director may answer. Nothing here writes to the packet.

use aya_ebpf::programs::XdpContext;
use director_common::{
    checksum,
    counters::Reason,
    dns,
    handover::{Layout, Query, Slot},
    headers::{eth, ipv4, ipv6, udp, vlan},
    maps::{Iface, Scratch, LOCAL_SLOTS, NAME_BUF, SLOT_OVERFLOW, SLOT_USED},
    name::{self, HASH_INIT, MAX_LABELS, MAX_WIRE_LEN},
    peers,
};

use crate::maps::{DIR_FRONT, DIR_IFACES, DIR_LOCAL, DIR_LOCAL_SLOTS};
use crate::opaque;
use crate::packet::{at, at_fenced, be16, header_sum, ld};

/// Larger frames (jumbo frames are 9 KB) are left to the host.
const MAX_FRAME: usize = 16 * 1024;

pub fn query(ctx: &XdpContext, s: *mut Scratch) -> Result<Query, Reason> {
    let frame = at::<{ eth::LEN }>(ctx, 0, Reason::NotIp)?;
    let mut ethertype = be16(frame, eth::TYPE);
    let mut l3 = eth::LEN;
    if ethertype == eth::P_8021Q {
        let tag = at::<{ vlan::LEN }>(ctx, eth::LEN, Reason::NotIp)?;
        ethertype = be16(tag, vlan::TYPE);
        l3 += vlan::LEN;
    }

    let (ip6, udp_off, ip_payload) = match ethertype {
        eth::P_IPV4 => {
            let ip = at::<{ ipv4::LEN }>(ctx, l3, Reason::Malformed)?;
            // SAFETY: `at` checked the header is in the packet.
            let (vihl, proto) = unsafe { ((*ip)[ipv4::VERSION_IHL], (*ip)[ipv4::PROTOCOL]) };
            let (version, ihl) = (vihl >> 4, vihl & 0xf);
            if version != ipv4::VERSION || ihl < ipv4::IHL_MIN {
                return Err(Reason::Malformed);
            }
            if ihl != ipv4::IHL_MIN || be16(ip, ipv4::FRAGMENT) & ipv4::FRAGMENT_MASK != 0 {
                return Err(Reason::IpFragmentOrOptions);
            }
            if proto != udp::PROTOCOL {
                return Err(Reason::NotDns);
            }
            let total = be16(ip, ipv4::TOTAL_LEN) as usize;
            if total < ipv4::LEN {
                return Err(Reason::Malformed);
            }
            // The packet's source, until an ECS option says otherwise.
            let src = ld::<u32, { ipv4::LEN }>(ip, ipv4::SRC) as u64;
            set_client(s, src, 0);
            set_source(s, src, 0);
            (false, l3 + ipv4::LEN, total - ipv4::LEN)
        }
        eth::P_IPV6 => {
            let ip = at::<{ ipv6::LEN }>(ctx, l3, Reason::Malformed)?;
            // SAFETY (both reads): `at` checked the header is in the packet.
            if unsafe { (*ip)[ipv6::VERSION_BYTE] } >> 4 != ipv6::VERSION {
                return Err(Reason::Malformed);
            }
            // Extension headers (fragments included) are left to the host.
            if unsafe { (*ip)[ipv6::NEXT_HEADER] } != udp::PROTOCOL {
                return Err(Reason::NotDns);
            }
            let src = ipv6::SRC;
            let (lo, hi) = (ld(ip, src), ld(ip, src + 8));
            set_client(s, lo, hi);
            set_source(s, lo, hi);
            (true, l3 + ipv6::LEN, be16(ip, ipv6::PAYLOAD_LEN) as usize)
        }
        _ => return Err(Reason::NotIp),
    };

    let uh = at::<{ udp::LEN }>(ctx, udp_off, Reason::Malformed)?;
    if be16(uh, udp::DST_PORT) != dns::PORT {
        return Err(Reason::NotDns);
    }
    let udp_len = be16(uh, udp::LENGTH) as usize;
    if udp_len != ip_payload || udp_len < udp::LEN + dns::HEADER_LEN {
        return Err(Reason::Malformed);
    }
    let dns = udp_off + udp::LEN;
    let msg_end = udp_off + udp_len;
    // The verifier only tracks packet offsets below 64 KiB; real frames are far smaller.
    if msg_end > MAX_FRAME {
        return Err(Reason::Malformed);
    }

    // Forget which of the four Ethernet/IP layouts this was, so that what follows is
    // verified once rather than once per layout.
    let layout = Layout {
        ip6,
        l3,
        dns,
        msg_end,
    };
    opaque::put_words(s, Slot::Layout, layout.pack());
    let Layout { ip6, l3, .. } = Layout::unpack(opaque::get_words(s, Slot::Layout));

    check_peers(ctx, ip6, l3, s)?;
    // Read the layout again: inside the checks each family's branch pinned `ip6` (and
    // what follows from it) to a constant, and the verifier would walk the rest of the
    // program once per family.
    let Layout {
        ip6,
        l3,
        dns,
        msg_end,
    } = Layout::unpack(opaque::get_words(s, Slot::Layout));

    let hdr = at::<{ dns::HEADER_LEN }>(ctx, dns, Reason::Malformed)?;
    let flags = be16(hdr, dns::header::FLAGS);
    let ar = be16(hdr, dns::header::ARCOUNT);
    dns::check_header(
        flags,
        be16(hdr, dns::header::QDCOUNT),
        be16(hdr, dns::header::ANCOUNT),
        be16(hdr, dns::header::NSCOUNT),
        ar,
    )?;
    let id = be16(hdr, dns::header::ID);

    walk_labels(ctx, dns + dns::HEADER_LEN, s)?;
    // Read back through memory: the verifier then sees one bounded length instead of one
    // value per exit of the walk, and can merge what follows.
    // SAFETY: `s` is the scratch map's value.
    let name_len = unsafe { core::ptr::read_volatile(&(*s).name_len) } as usize & 0xff;
    read_name(ctx, dns + dns::HEADER_LEN, name_len, s)?;
    // And again: each exit of the word loop narrowed the length to a different range.
    // SAFETY: as above.
    let name_len = unsafe { core::ptr::read_volatile(&(*s).name_len) } as usize & 0xff;

    let name_end = dns + dns::HEADER_LEN + name_len;
    let qp = at::<{ dns::QUESTION_FIXED_LEN }>(ctx, name_end, Reason::Malformed)?;
    let aaaa = dns::check_question(
        be16(qp, dns::question::TYPE),
        be16(qp, dns::question::CLASS),
    )?;
    let q_end = name_end + dns::QUESTION_FIXED_LEN;

    let mut q = Query {
        ip6,
        l3,
        dns,
        question_end: q_end,
        id,
        flags,
        aaaa,
        name_len,
        udp_size: dns::CLASSIC_UDP_SIZE,
        edns: false,
        dnssec_ok: false,
        has_ecs: false,
        ecs_family: 0,
        ecs_source: 0,
        client_v6: ip6,
        client_bits: if ip6 { 128 } else { 32 },
    };

    if ar == 0 {
        if q_end != msg_end {
            return Err(Reason::Malformed);
        }
        return Ok(q);
    }
    parse_opt(ctx, q_end, msg_end, &mut q, s)?;
    // Only now: done earlier, the compiler uses it to drop the header checks the verifier
    // needs. Option bodies are not all read, so the frame must be shown to hold them.
    at::<2>(ctx, msg_end - 2, Reason::Malformed)?;
    Ok(q)
}

/// Whether the query may be answered at all, whoever it asks about: a header that verifies,
/// a source that can be a client, a source port that does not reflect, and a destination
/// that is this edge (see `peers`). Only queries to port 53 get here, so everything else
/// still reaches the host untouched. Header words already in the cache: a few ns, and the
/// one lookup of the destination address. Fenced pointers: the compiler would derive them
/// from pointers checked earlier, at offsets the verifier cannot bound.
#[inline(always)]
fn check_peers(ctx: &XdpContext, ip6: bool, l3: usize, s: *mut Scratch) -> Result<(), Reason> {
    let udp_off = l3 + if ip6 { ipv6::LEN } else { ipv4::LEN };
    let uh = at_fenced::<{ udp::LEN }>(ctx, udp_off, Reason::Malformed)?;
    let (src_port, udp_sum) = (be16(uh, udp::SRC_PORT), be16(uh, udp::CHECKSUM));
    let (key, v6_group) = if ip6 {
        let ip = at_fenced::<{ ipv6::LEN }>(ctx, l3, Reason::Malformed)?;
        if udp_sum == 0 {
            return Err(Reason::BadChecksum);
        }
        let (hi, lo) = (word(ip, ipv6::SRC), word(ip, ipv6::SRC + 8));
        if !peers::v6_source_ok(hi, lo) {
            return Err(Reason::BadSource);
        }
        // SAFETY: `at` checked the header is in the packet.
        let group = peers::v6_dest_is_group(unsafe { (*ip)[ipv6::DST] });
        (
            [
                ld::<u64, { ipv6::LEN }>(ip, ipv6::DST),
                ld(ip, ipv6::DST + 8),
            ],
            group,
        )
    } else {
        let ip = at_fenced::<{ ipv4::LEN }>(ctx, l3, Reason::Malformed)?;
        if checksum::fold(header_sum(ip)) != 0xffff {
            return Err(Reason::BadChecksum);
        }
        // SAFETY: `at` checked the header is in the packet.
        let (src, dst) = unsafe {
            (
                (*ip)[ipv4::SRC],
                [
                    (*ip)[ipv4::DST],
                    (*ip)[ipv4::DST + 1],
                    (*ip)[ipv4::DST + 2],
                    (*ip)[ipv4::DST + 3],
                ],
            )
        };
        if !peers::v4_source_ok(src) {
            return Err(Reason::BadSource);
        }
        if peers::v4_dest_is_group(dst[0]) {
            return Err(Reason::GroupDestination);
        }
        (peers::local_words(&peers::local_key_v4(dst)), false)
    };
    let frame = at_fenced::<{ eth::LEN }>(ctx, 0, Reason::Malformed)?;
    // SAFETY: `at` checked the header is in the packet.
    let (dst0, src0) = unsafe { ((*frame)[eth::DST], (*frame)[eth::SRC]) };
    if peers::mac_is_group(src0) {
        return Err(Reason::BadSource);
    }
    if peers::source_port_reflects(src_port) {
        return Err(Reason::ReflectingPort);
    }
    if peers::mac_is_group(dst0) || v6_group {
        return Err(Reason::GroupDestination);
    }
    // SAFETY: the context pointer is the kernel's for this packet.
    let ifindex = unsafe { (*ctx.ctx).ingress_ifindex };
    // An interface director was not attached to by `attach` (BPF_PROG_TEST_RUN's loopback)
    // has no entry: only the address is checked there.
    if let Some(iface) = DIR_IFACES.get(ifindex) {
        // The entry as one word (MAC in its first six bytes, `attached` in the seventh),
        // compared with the destination MAC as loaded: no byte swaps, one compare.
        // SAFETY: `Iface` is 8 bytes and array values are 8-aligned.
        let word = unsafe { *(iface as *const Iface as *const u64) };
        let mac = ld::<u32, { eth::LEN }>(frame, eth::DST) as u64
            | (ld::<u16, { eth::LEN }>(frame, eth::DST + 4) as u64) << 32;
        if (word >> 48) & 0xff != 0 && mac != word & 0xffff_ffff_ffff {
            return Err(Reason::NotForUs);
        }
    }
    if is_local(&key, s) {
        Ok(())
    } else {
        Err(Reason::NotForUs)
    }
}

/// Whether `key` (`peers::local_words`) is one of the edge's addresses: its slot in the
/// copy of `DIR_LOCAL_SLOTS` in use, two array reads the verifier inlines; the hash map, a
/// chain of kernel calls, only for a slot more than one address fell in.
#[inline(always)]
fn is_local(key: &[u64; 2], s: *mut Scratch) -> bool {
    let copy = DIR_FRONT.get(0).map_or(0, |f| f.active & 1);
    // SAFETY: `s` is the scratch map's value.
    unsafe { core::ptr::write_volatile(&mut (*s).front, copy) };
    let Some(slot) = DIR_LOCAL_SLOTS.get(copy * LOCAL_SLOTS + peers::local_slot(*key)) else {
        return false;
    };
    if slot.flags & SLOT_USED != 0 && slot.key[0] == key[0] && slot.key[1] == key[1] {
        return true;
    }
    // SAFETY: the map is only read.
    slot.flags & SLOT_OVERFLOW != 0 && unsafe { DIR_LOCAL.get(key) }.is_some()
}

/// A big-endian 8-byte word of a header.
#[inline(always)]
fn word<const N: usize>(p: *const [u8; N], i: usize) -> u64 {
    ((be16(p, i) as u64) << 48)
        | ((be16(p, i + 2) as u64) << 32)
        | ((be16(p, i + 4) as u64) << 16)
        | be16(p, i + 6) as u64
}

fn parse_opt(
    ctx: &XdpContext,
    q_end: usize,
    msg_end: usize,
    q: &mut Query,
    s: *mut Scratch,
) -> Result<(), Reason> {
    let opt = at::<{ dns::OPT_FIXED_LEN }>(ctx, q_end, Reason::Malformed)?;
    let ttl = ((be16(opt, dns::opt::TTL) as u32) << 16) | be16(opt, dns::opt::TTL + 2) as u32;
    // SAFETY: `at` checked the OPT record's fixed part is in the packet.
    let owner = unsafe { (*opt)[dns::opt::OWNER] };
    q.udp_size = dns::check_opt(
        owner,
        be16(opt, dns::opt::TYPE),
        be16(opt, dns::opt::CLASS),
        ttl,
    )?;
    q.edns = true;
    q.dnssec_ok = ttl & dns::EDNS_DO != 0;
    let opts_end = q_end + dns::OPT_FIXED_LEN + be16(opt, dns::opt::RDLEN) as usize;
    if opts_end != msg_end {
        return Err(Reason::Malformed);
    }
    let mut off = q_end + dns::OPT_FIXED_LEN;
    let mut n = 0;
    while n < dns::MAX_OPTIONS {
        if off >= opts_end {
            break;
        }
        let oh = at::<{ dns::option::HEADER_LEN }>(ctx, off, Reason::Malformed)?;
        let code = be16(oh, dns::option::CODE);
        let len = be16(oh, dns::option::LEN) as usize;
        let body = off + dns::option::HEADER_LEN;
        if body + len > opts_end {
            return Err(Reason::Edns);
        }
        if code == dns::OPTION_ECS {
            if q.has_ecs || len < dns::ecs::ADDR {
                return Err(Reason::Edns);
            }
            read_ecs(ctx, body, len, q, s)?;
        }
        off = body + len;
        n += 1;
    }
    if off != opts_end {
        return Err(Reason::Edns);
    }
    Ok(())
}

fn read_ecs(
    ctx: &XdpContext,
    body: usize,
    len: usize,
    q: &mut Query,
    s: *mut Scratch,
) -> Result<(), Reason> {
    let e = at::<{ dns::ecs::ADDR }>(ctx, body, Reason::Malformed)?;
    let family = be16(e, dns::ecs::FAMILY);
    // SAFETY: `at` checked the option's fixed part is in the packet.
    let (source, scope) = unsafe { ((*e)[dns::ecs::SOURCE], (*e)[dns::ecs::SCOPE]) };
    let alen = dns::check_ecs(family, source, scope, len as u16)? & 0x1f;
    // The address in two host-order words, zero past its `alen` bytes. A partial word is
    // read as the 8 bytes that end where the address ends (the option's header and the OPT
    // record are before it, so they are in the packet) and shifted down.
    let addr = body + dns::ecs::ADDR;
    let (lo, hi, last) = if alen == 0 {
        (0, 0, 0)
    } else if alen <= 8 {
        let p = at_fenced::<8>(ctx, addr + alen - 8, Reason::Malformed)?;
        let w = ld::<u64, 8>(p, 0);
        (w >> (8 * (8 - alen)), 0, (w >> 56) as u8)
    } else {
        let p = at_fenced::<8>(ctx, addr, Reason::Malformed)?;
        let lo = ld::<u64, 8>(p, 0);
        let p = at_fenced::<8>(ctx, addr + alen - 8, Reason::Malformed)?;
        let w = ld::<u64, 8>(p, 0);
        (lo, w >> (8 * (16 - alen)), (w >> 56) as u8)
    };
    // Zero past the address: the decision key is the address masked to SOURCE.
    set_client(s, lo, hi);
    // SAFETY: `s` is the scratch map's value; `ecs_addr` follows `client`, 8-aligned.
    unsafe {
        let e = (*s).ecs_addr.as_mut_ptr() as *mut u64;
        core::ptr::write_volatile(e, lo);
        core::ptr::write_volatile(e.add(1), hi);
    }
    if !dns::ecs_last_byte_ok(source, last) {
        return Err(Reason::Edns);
    }
    q.has_ecs = true;
    q.ecs_family = family;
    q.ecs_source = source;
    q.client_v6 = family == dns::ECS_FAMILY_V6;
    q.client_bits = source;
    Ok(())
}

/// Stores the client address as two host-order words (an IPv4 address in the first four
/// bytes, zero after).
#[inline(always)]
fn set_client(s: *mut Scratch, lo: u64, hi: u64) {
    // SAFETY: `s` is the scratch map's value; `client` is 16 bytes at an 8-aligned offset.
    unsafe {
        let c = (*s).client.as_mut_ptr() as *mut u64;
        core::ptr::write_volatile(c, lo);
        core::ptr::write_volatile(c.add(1), hi);
    }
}

/// Stores the packet's source address as `set_client` does: rate limiting counts it, never
/// the ECS address.
#[inline(always)]
fn set_source(s: *mut Scratch, lo: u64, hi: u64) {
    // SAFETY: `s` is the scratch map's value; `source` is 16 bytes at an 8-aligned offset.
    unsafe {
        let c = (*s).source.as_mut_ptr() as *mut u64;
        core::ptr::write_volatile(c, lo);
        core::ptr::write_volatile(c.add(1), hi);
    }
}

/// Follows the question name's labels (no compression, at most 255 bytes) to its end and
/// stores its wire length in scratch: a handful of steps, one per label, where a walk byte
/// by byte took one per character.
#[inline(always)]
fn walk_labels(ctx: &XdpContext, start: usize, s: *mut Scratch) -> Result<(), Reason> {
    let mut off = 0usize;
    let mut n = 0;
    while n < MAX_LABELS {
        // The byte before the name is the header's last.
        let p = at::<2>(ctx, start + off - 1, Reason::Malformed)?;
        // SAFETY: `at` checked both bytes are in the packet.
        let len = unsafe { (*p)[1] };
        if len == 0 {
            // SAFETY: `s` is the scratch map's value.
            unsafe { core::ptr::write_volatile(&mut (*s).name_len, (off + 1) as u32) };
            return Ok(());
        }
        if len & 0xc0 != 0 {
            return Err(Reason::BadName);
        }
        off += len as usize + 1;
        if off >= MAX_WIRE_LEN {
            return Err(Reason::BadName);
        }
        n += 1;
    }
    Err(Reason::BadName)
}

/// Reads the `len`-byte name at `start` 8 bytes at a time: stores it lower-cased in scratch
/// with its hash, and the checksum sum of the bytes as they came. The last word is read as
/// the 8 bytes that end where the name ends (the DNS header is before a short name, so they
/// are always in the packet) and shifted down, so nothing past the name is read or stored.
#[inline(always)]
fn read_name(ctx: &XdpContext, start: usize, len: usize, s: *mut Scratch) -> Result<(), Reason> {
    let mut h = HASH_INIT;
    let mut sum = 0u64;
    let mut w = 0;
    while w < NAME_BUF / 8 {
        let base = w * 8;
        if base >= len {
            break;
        }
        // Plain 8-byte loads (unaligned in the packet, which BPF allows on this target);
        // `read_unaligned` would become eight byte loads.
        let word = if base + 8 <= len {
            let p = at::<8>(ctx, start + base, Reason::Malformed)?;
            // SAFETY: `at` checked the 8 bytes are in the packet.
            unsafe { core::ptr::read_volatile(p as *const u64) }
        } else {
            let p = at_fenced::<8>(ctx, start + len - 8, Reason::Malformed)?;
            // SAFETY: as above.
            (unsafe { core::ptr::read_volatile(p as *const u64) }) >> (8 * (8 - (len - base)))
        };
        // Little-endian 16-bit lanes; swapped to the network's order once, below.
        sum += checksum::halves(word);
        let lowered = name::lower_word(word);
        h = name::hash_word(h, lowered);
        // SAFETY: `s` is the scratch map's value; the mask keeps the word inside `name`.
        unsafe {
            let dst = (*s).name.as_mut_ptr().add(base & (NAME_BUF - 8)) as *mut u64;
            core::ptr::write_volatile(dst, lowered);
        }
        w += 1;
    }
    // SAFETY: `s` is the scratch map's value.
    unsafe {
        (*s).name_hash = name::hash_finish(h, len);
        (*s).name_sum = checksum::le_to_network(sum);
    }
    Ok(())
}
