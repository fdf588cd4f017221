//! Parse: from the Ethernet header to the end of the DNS message, deciding whether this is
//! a well-formed query director may answer. Nothing here writes to the packet.

use aya_ebpf::programs::XdpContext;
use director_common::{
    counters::Reason,
    dns,
    maps::Scratch,
    name::{self, Step, HASH_INIT, MAX_WIRE_LEN},
};

use crate::opaque::{hide, SLOT_LAYOUT};
use crate::packet::{at, be16};

const ETH_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const IPPROTO_UDP: u8 = 17;
const UDP_LEN: usize = 8;
/// Larger frames (jumbo frames are 9 KB) are left to the host.
const MAX_FRAME: usize = 16 * 1024;

pub struct Query {
    /// IPv6 packet (else IPv4).
    pub ip6: bool,
    /// Offsets of the IP header and the DNS message.
    pub l3: usize,
    pub dns: usize,
    pub id: u16,
    pub flags: u16,
    /// AAAA (else A).
    pub aaaa: bool,
    /// Wire length of the question name.
    pub name_len: usize,
    /// Largest answer the client accepts.
    pub udp_size: u16,
    pub edns: bool,
    /// The query's DO bit, copied to the answer (RFC 3225 §3).
    pub dnssec_ok: bool,
    pub has_ecs: bool,
    pub ecs_family: u16,
    pub ecs_source: u8,
    /// Family and prefix length of the address the decision is for (`Scratch::client`).
    pub client_v6: bool,
    pub client_bits: u8,
}

pub fn query(ctx: &XdpContext, s: *mut Scratch) -> Result<Query, Reason> {
    let eth = at::<ETH_LEN>(ctx, 0, Reason::NotIp)?;
    let mut ethertype = be16(eth, 12);
    let mut l3 = ETH_LEN;
    if ethertype == ETH_P_8021Q {
        let tag = at::<VLAN_LEN>(ctx, ETH_LEN, Reason::NotIp)?;
        ethertype = be16(tag, 2);
        l3 += VLAN_LEN;
    }

    // The packet's source, until an ECS option says otherwise.
    unsafe {
        let c = (*s).client.as_mut_ptr() as *mut u64;
        core::ptr::write_volatile(c, 0);
        core::ptr::write_volatile(c.add(1), 0);
    }
    let (ip6, udp, ip_payload) = match ethertype {
        ETH_P_IPV4 => {
            let ip = at::<20>(ctx, l3, Reason::Malformed)?;
            let (vihl, proto) = unsafe { ((*ip)[0], (*ip)[9]) };
            if vihl >> 4 != 4 || vihl & 0xf < 5 {
                return Err(Reason::Malformed);
            }
            if vihl & 0xf != 5 || be16(ip, 6) & 0x3fff != 0 {
                return Err(Reason::IpFragmentOrOptions);
            }
            if proto != IPPROTO_UDP {
                return Err(Reason::NotDns);
            }
            let total = be16(ip, 2) as usize;
            if total < 20 {
                return Err(Reason::Malformed);
            }
            copy_bytes::<4, 20>(ip, 12, s);
            (false, l3 + 20, total - 20)
        }
        ETH_P_IPV6 => {
            let ip = at::<40>(ctx, l3, Reason::Malformed)?;
            if unsafe { (*ip)[0] } >> 4 != 6 {
                return Err(Reason::Malformed);
            }
            // Extension headers (fragments included) are left to the host.
            if unsafe { (*ip)[6] } != IPPROTO_UDP {
                return Err(Reason::NotDns);
            }
            copy_bytes::<16, 40>(ip, 8, s);
            (true, l3 + 40, be16(ip, 4) as usize)
        }
        _ => return Err(Reason::NotIp),
    };

    let uh = at::<UDP_LEN>(ctx, udp, Reason::Malformed)?;
    if be16(uh, 2) != dns::PORT {
        return Err(Reason::NotDns);
    }
    let udp_len = be16(uh, 4) as usize;
    if udp_len != ip_payload || udp_len < UDP_LEN + dns::HEADER_LEN {
        return Err(Reason::Malformed);
    }
    let dns = udp + UDP_LEN;
    let msg_end = udp + udp_len;
    // The verifier only tracks packet offsets below 64 KiB; real frames are far smaller.
    if msg_end > MAX_FRAME {
        return Err(Reason::Malformed);
    }

    // Forget which of the four Ethernet/IP layouts this was, so that what follows is
    // verified once rather than once per layout.
    let packed = hide(
        s,
        SLOT_LAYOUT,
        (l3 as u64) | (dns as u64) << 8 | (msg_end as u64) << 16 | (ip6 as u64) << 40,
    );
    let l3 = (packed & 0x1f) as usize;
    let dns = ((packed >> 8) & 0x7f) as usize;
    let msg_end = ((packed >> 16) & 0x3fff) as usize;
    let ip6 = (packed >> 40) & 1 != 0;

    let hdr = at::<{ dns::HEADER_LEN }>(ctx, dns, Reason::Malformed)?;
    let flags = be16(hdr, 2);
    let ar = be16(hdr, 10);
    dns::check_header(flags, be16(hdr, 4), be16(hdr, 6), be16(hdr, 8), ar)?;
    let id = be16(hdr, 0);

    walk_name(ctx, dns + dns::HEADER_LEN, s)?;
    // Read back through memory: the verifier then sees one bounded length instead of 255
    // different constants, one per exit of the walk, and can merge what follows.
    let name_len = unsafe { core::ptr::read_volatile(&(*s).name_len) } as usize & 0xff;

    let q_off = dns + dns::HEADER_LEN + name_len;
    let qp = at::<4>(ctx, q_off, Reason::Malformed)?;
    let aaaa = dns::check_question(be16(qp, 0), be16(qp, 2))?;
    let q_end = q_off + 4;

    let mut q = Query {
        ip6,
        l3,
        dns,
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

fn parse_opt(
    ctx: &XdpContext,
    q_end: usize,
    msg_end: usize,
    q: &mut Query,
    s: *mut Scratch,
) -> Result<(), Reason> {
    let opt = at::<{ dns::OPT_FIXED_LEN }>(ctx, q_end, Reason::Malformed)?;
    let ttl = ((be16(opt, 5) as u32) << 16) | be16(opt, 7) as u32;
    q.udp_size = dns::check_opt(unsafe { (*opt)[0] }, be16(opt, 1), be16(opt, 3), ttl)?;
    q.edns = true;
    q.dnssec_ok = ttl & dns::EDNS_DO != 0;
    let opts_end = q_end + dns::OPT_FIXED_LEN + be16(opt, 9) as usize;
    if opts_end != msg_end {
        return Err(Reason::Malformed);
    }
    let mut off = q_end + dns::OPT_FIXED_LEN;
    let mut n = 0;
    while n < dns::MAX_OPTIONS {
        if off >= opts_end {
            break;
        }
        let oh = at::<4>(ctx, off, Reason::Malformed)?;
        let code = be16(oh, 0);
        let len = be16(oh, 2) as usize;
        let body = off + 4;
        if body + len > opts_end {
            return Err(Reason::Edns);
        }
        if code == dns::OPTION_ECS {
            if q.has_ecs || len < 4 {
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
    let e = at::<4>(ctx, body, Reason::Malformed)?;
    let family = be16(e, 0);
    let (source, scope) = unsafe { ((*e)[2], (*e)[3]) };
    let alen = dns::check_ecs(family, source, scope, len as u16)?;
    let mut last = 0u8;
    let mut i = 0;
    while i < 16 {
        let mut b = 0u8;
        if i < alen {
            let p = at::<2>(ctx, body + 3 + i, Reason::Malformed)?;
            b = unsafe { (*p)[1] };
            last = b;
        }
        // Zero past the address: the decision key is the address masked to SOURCE.
        unsafe {
            core::ptr::write_volatile(&mut (*s).ecs_addr[i], b);
            core::ptr::write_volatile(&mut (*s).client[i], b);
        }
        i += 1;
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

/// Copies `N` address bytes from a checked header into `Scratch::client`, byte by byte
/// (a copy between byte-aligned memory would become a looping memcpy call).
#[inline(always)]
fn copy_bytes<const N: usize, const H: usize>(h: *const [u8; H], from: usize, s: *mut Scratch) {
    let mut i = 0;
    while i < N {
        unsafe { core::ptr::write_volatile(&mut (*s).client[i], (*h)[from + i]) };
        i += 1;
    }
}

/// Walks the question name byte by byte (no compression, at most 255 bytes), storing it
/// lower-cased in scratch with its hash and the checksum sum of the bytes as they came.
#[inline(always)]
fn walk_name(ctx: &XdpContext, start: usize, s: *mut Scratch) -> Result<(), Reason> {
    let mut left = 0u8;
    let mut h = HASH_INIT;
    let mut sum = 0u64;
    let mut i = 0usize;
    while i < MAX_WIRE_LEN {
        // The byte before the name is the header's last.
        let p = at::<2>(ctx, start + i - 1, Reason::Malformed)?;
        let b = unsafe { (*p)[1] };
        // The name starts at an even offset of the DNS message.
        sum += if i & 1 == 0 {
            (b as u64) << 8
        } else {
            b as u64
        };
        match name::step(&mut left, b) {
            Step::Byte(c) => {
                unsafe { (*s).name[i] = c };
                h = name::hash_step(h, c);
            }
            Step::End => {
                unsafe {
                    (*s).name[i] = 0;
                    (*s).name_len = (i + 1) as u32;
                    (*s).name_hash = name::hash_step(h, 0);
                    (*s).name_sum = sum;
                }
                return Ok(());
            }
            Step::Invalid => return Err(Reason::BadName),
        }
        i += 1;
    }
    Err(Reason::BadName)
}
