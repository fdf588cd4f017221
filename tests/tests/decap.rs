//! The server-side decapsulator (`director_decap`) for `ipip` forwarding: BPF_PROG_TEST_RUN
//! fixtures byte for byte, and a namespace pair in which tunnelled UDP sent over an
//! AF_PACKET socket reaches a listener on the VIP.
//!
//! Needs root: `cargo test -p director-tests --test decap -- --test-threads=1`.

use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use director_tests::fixture::{Fixture, XDP_PASS};
use director_tests::netns::{ctl_binary, describe};
use director_tests::packets::*;
use director_tests::pins;

const DECAP: &str = "director_decap";

/// The tunnel's ends (the director's per-flow source, the server) and the client's packet
/// inside, to the VIP.
const OUTER_SRC_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 200);
const OUTER_DST_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 20);
const OUTER_SRC_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xd1, 0, 0, 0, 0, 0x200);
const OUTER_DST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xdc, 0, 0, 0, 0, 0x20);
const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 7);
const VIP_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 80);
const VIP_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x80);
const VIP_PORT: u16 = 8053;

// ---------------------------------------------------------------------------------------
// BPF_PROG_TEST_RUN.

fn decap_fixture() -> Fixture {
    let mut fx = Fixture::new().expect("loading director's object (run as root)");
    fx.load_program(DECAP)
        .expect("the verifier refused director_decap");
    fx
}

fn to_vip_v4() -> Flow {
    let mut f = Flow::v4(CLIENT_V4);
    f.server = (VIP_V4, VIP_PORT).into();
    f
}

fn to_vip_v6() -> Flow {
    let mut f = Flow::v6(CLIENT_V6);
    f.server = (VIP_V6, VIP_PORT).into();
    f
}

/// A client's SYN to the VIP, as an IP packet (what director's ipip mode encapsulates).
fn syn_packet(flow: &Flow) -> Vec<u8> {
    // MSS 1460: the option a SYN carries.
    let options = [2, 4, 0x05, 0xb4];
    ip_packet(flow, 6, &tcp_segment_with(flow, TCP_SYN, &options, &[]))
}

fn outer_v4() -> (IpAddr, IpAddr) {
    (OUTER_SRC_V4.into(), OUTER_DST_V4.into())
}

fn outer_v6() -> (IpAddr, IpAddr) {
    (OUTER_SRC_V6.into(), OUTER_DST_V6.into())
}

/// Runs the decapsulator and asserts it passed the frame unchanged.
fn assert_untouched(fx: &Fixture, frame: &[u8], what: &str) {
    let (verdict, out) = fx.try_run_program(DECAP, frame).unwrap();
    assert_eq!(verdict, XDP_PASS, "{what}: verdict");
    assert_eq!(out, frame, "{what}: the frame was changed");
}

/// Runs the decapsulator and asserts the output is the frame's Ethernet header followed
/// by `inner` and then `trailer` (padding after the outer packet stays).
fn assert_decapsulated(fx: &Fixture, frame: &[u8], inner: &[u8], trailer: &[u8], what: &str) {
    let (verdict, out) = fx.try_run_program(DECAP, frame).unwrap();
    assert_eq!(verdict, XDP_PASS, "{what}: verdict");
    let want = [&frame[..ETH_LEN], inner, trailer].concat();
    assert_eq!(out, want, "{what}: not Ethernet + the inner packet");
}

#[test]
fn ipv4_in_ipv4_loses_its_outer_header() {
    let fx = decap_fixture();
    let (s, d) = outer_v4();
    for (inner, what) in [
        (udp_packet(&to_vip_v4(), b"datagram to the VIP"), "UDP"),
        (syn_packet(&to_vip_v4()), "TCP SYN"),
    ] {
        let frame = encapsulated_frame(s, d, &inner);
        assert_decapsulated(&fx, &frame, &inner, &[], what);
        // Outer options: the header's length comes from IHL (8 bytes: NOP NOP NOP EOL and
        // a padded word).
        let opts = [1, 1, 1, 0, 0, 0, 0, 0];
        let frame = encapsulated_frame_with(s, d, &inner, &opts, 0);
        assert_decapsulated(&fx, &frame, &inner, &[], &format!("{what}, outer options"));
        // DF on the outer header is no fragment.
        let frame = encapsulated_frame_with(s, d, &inner, &[], IPV4_DF);
        assert_decapsulated(&fx, &frame, &inner, &[], &format!("{what}, outer DF"));
    }
    // A short packet in a frame padded to Ethernet's minimum: the padding is not the
    // outer packet's, and the stack trims it from the inner one the same way.
    let inner = udp_packet(&to_vip_v4(), b"");
    let mut frame = encapsulated_frame(s, d, &inner);
    let pad = vec![0u8; 64usize.saturating_sub(frame.len()).max(6)];
    frame.extend(&pad);
    assert_decapsulated(&fx, &frame, &inner, &pad, "padded frame");
}

#[test]
fn ipv6_in_ipv6_loses_its_outer_header() {
    let fx = decap_fixture();
    let (s, d) = outer_v6();
    for (inner, what) in [
        (udp_packet(&to_vip_v6(), b"datagram to the VIP"), "UDP"),
        (syn_packet(&to_vip_v6()), "TCP SYN"),
    ] {
        let frame = encapsulated_frame(s, d, &inner);
        assert_decapsulated(&fx, &frame, &inner, &[], what);
    }
}

#[test]
fn frames_that_are_not_tunnelled_pass_unchanged() {
    let fx = decap_fixture();
    let v4 = to_vip_v4();
    let v6 = to_vip_v6();
    let syn = |f: &Flow| ip_frame(f, 6, &tcp_segment_with(f, TCP_SYN, &[], &[]));
    for (frame, what) in [
        (udp_frame(&v4, b"plain UDP"), "IPv4 UDP"),
        (udp_frame(&v6, b"plain UDP"), "IPv6 UDP"),
        (syn(&v4), "IPv4 TCP"),
        (syn(&v6), "IPv6 TCP"),
        (udp_frame(&v4.with_vlan(7), b"tagged"), "VLAN-tagged UDP"),
        (arp_frame(), "ARP"),
    ] {
        assert_untouched(&fx, &frame, what);
    }
    // A tunnel inside a VLAN tag is not taken either (the NIC usually strips tags).
    let inner = udp_packet(&v4, b"x");
    let (s, d) = outer_v4();
    let mut tagged = encapsulated_frame(s, d, &inner);
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    assert_untouched(&fx, &tagged, "tunnel in a VLAN tag");
}

#[test]
fn truncated_tunnels_pass_unchanged() {
    let fx = decap_fixture();
    for (outer, inner) in [
        (outer_v4(), udp_packet(&to_vip_v4(), b"datagram to the VIP")),
        (outer_v6(), udp_packet(&to_vip_v6(), b"datagram to the VIP")),
    ] {
        let (s, d) = outer;
        let frame = encapsulated_frame(s, d, &inner);
        let outer_len = if s.is_ipv6() { IPV6_LEN } else { IPV4_LEN };
        // The frame cut inside the outer header, inside the inner header, and by a byte
        // of payload (the outer length then claims more than the frame holds).
        for cut in [
            ETH_LEN + outer_len - 4,
            ETH_LEN + outer_len + 10,
            frame.len() - 1,
        ] {
            assert_untouched(&fx, &frame[..cut], &format!("{s}: frame cut to {cut}"));
        }
        // A consistent outer header around an incomplete inner one.
        let short = encapsulated_frame(s, d, &inner[..10]);
        assert_untouched(&fx, &short, &format!("{s}: 10 bytes of inner header"));
        // An inner header whose length claims more than the outer packet carries.
        let cut_inner = encapsulated_frame(s, d, &inner[..inner.len() - 3]);
        assert_untouched(&fx, &cut_inner, &format!("{s}: inner packet cut"));
    }
}

#[test]
fn outer_fragments_pass_unchanged() {
    let fx = decap_fixture();
    let inner = udp_packet(&to_vip_v4(), b"datagram to the VIP");
    let (s, d) = outer_v4();
    for (flags, what) in [
        (IPV4_MF, "first fragment (MF)"),
        (0x0003, "last fragment (offset 24)"),
        (IPV4_MF | 0x0010, "middle fragment"),
    ] {
        let frame = encapsulated_frame_with(s, d, &inner, &[], flags);
        assert_untouched(&fx, &frame, what);
    }
}

#[test]
fn wrong_inner_families_and_bad_outer_headers_pass_unchanged() {
    let fx = decap_fixture();
    let (s4, d4) = outer_v4();
    let (s6, d6) = outer_v6();
    let v4 = udp_packet(&to_vip_v4(), b"datagram to the VIP");
    let v6 = udp_packet(&to_vip_v6(), b"datagram to the VIP");
    // Protocol 4 carrying IPv6, next header 41 carrying IPv4, and garbage.
    assert_untouched(
        &fx,
        &encapsulated_frame(s4, d4, &v6),
        "protocol 4, IPv6 inside",
    );
    assert_untouched(
        &fx,
        &encapsulated_frame(s6, d6, &v4),
        "next header 41, IPv4 inside",
    );
    let garbage = [0x11u8; 40];
    assert_untouched(
        &fx,
        &encapsulated_frame(s4, d4, &garbage),
        "protocol 4, garbage",
    );
    assert_untouched(
        &fx,
        &encapsulated_frame(s6, d6, &garbage),
        "next header 41, garbage",
    );

    // Each outer header edit below is resealed with a right checksum, so that the check
    // named is the one that refuses it.
    let good = encapsulated_frame(s4, d4, &v4);
    let ip = ETH_LEN;
    let mut bad_sum = good.clone();
    bad_sum[ip + 10] ^= 0x01;
    assert_untouched(&fx, &bad_sum, "outer checksum wrong");
    let mut short_ihl = good.clone();
    short_ihl[ip] = 0x44;
    reseal(&mut short_ihl);
    assert_untouched(&fx, &short_ihl, "outer IHL 4");
    let mut long_ihl = good.clone();
    long_ihl[ip] = 0x4f;
    reseal(&mut long_ihl);
    assert_untouched(&fx, &long_ihl, "outer IHL 15 over the inner header");
    let mut version = good.clone();
    version[ip] = 0x65;
    reseal(&mut version);
    assert_untouched(&fx, &version, "outer version 6 behind an IPv4 ethertype");
    let mut inner_ihl = good.clone();
    inner_ihl[ip + IPV4_LEN] = 0x44;
    assert_untouched(&fx, &inner_ihl, "inner IHL 4");
    let mut too_short = good.clone();
    too_short[ip + 2..ip + 4].copy_from_slice(&(IPV4_LEN as u16 + 10).to_be_bytes());
    reseal(&mut too_short);
    assert_untouched(
        &fx,
        &too_short,
        "outer total length shorter than an inner header",
    );
    let mut resealed = good.clone();
    reseal(&mut resealed);
    assert_eq!(resealed, good, "reseal changes a right header");

    let good6 = encapsulated_frame(s6, d6, &v6);
    let mut jumbo = good6.clone();
    jumbo[ip + 4..ip + 6].copy_from_slice(&[0, 0]);
    assert_untouched(&fx, &jumbo, "outer payload length 0");
    let mut inner_version = good6;
    inner_version[ip + IPV6_LEN] = 0x45;
    assert_untouched(&fx, &inner_version, "inner version 4 in next header 41");
}

/// Writes the outer IPv4 header's checksum again after an edit (over 20 bytes, or IHL
/// words if more), as RFC 1071 sums it.
fn reseal(frame: &mut [u8]) {
    let ip = ETH_LEN;
    let len = (usize::from(frame[ip] & 0xf) * 4).clamp(IPV4_LEN, frame.len() - ip);
    frame[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
    let mut sum: u32 = frame[ip..ip + len]
        .chunks(2)
        .map(|w| u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0)))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    frame[ip + 10..ip + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

// ---------------------------------------------------------------------------------------
// Namespaces: dc-a sends tunnelled frames over its veth end, dc-b decapsulates on its own.

const NS_A: &str = "dc-a";
const NS_B: &str = "dc-b";
const IF_A: &str = "dc-a0";
const IF_B: &str = "dc-b0";
const A_V4: &str = "192.0.2.1";
const B_V4: &str = "192.0.2.2";
const A_V6: &str = "2001:db8:dc::1";
const B_V6: &str = "2001:db8:dc::2";

fn cmd(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn cmd_ok(program: &str, args: &[&str]) -> Output {
    let out = cmd(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        describe(&out)
    );
    out
}

/// Both namespaces and this test's pins; dropped (also on a panic) it detaches, deletes
/// the namespaces (and with them the veth pair) and removes the pins.
struct DecapLab {
    pin_dir: PathBuf,
}

impl DecapLab {
    fn new() -> DecapLab {
        // The names are fixed: a run killed before its Drop leaves them behind.
        for ns in [NS_A, NS_B] {
            let _ = cmd("ip", &["netns", "del", ns]);
        }
        let lab = DecapLab {
            pin_dir: pins::dir(&pins::name("dc-decap", 0)),
        };
        for ns in [NS_A, NS_B] {
            cmd_ok("ip", &["netns", "add", ns]);
            let net = format!("--net=/run/netns/{ns}");
            for conf in ["all", "default"] {
                let dad = format!("net.ipv6.conf.{conf}.accept_dad=0");
                cmd_ok("nsenter", &[&net, "sysctl", "-q", "-w", &dad]);
            }
            cmd_ok("ip", &["-n", ns, "link", "set", "lo", "up"]);
        }
        cmd_ok(
            "ip",
            &[
                "link", "add", IF_A, "netns", NS_A, "type", "veth", "peer", "name", IF_B, "netns",
                NS_B,
            ],
        );
        for (ns, ifname, v4, v6) in [(NS_A, IF_A, A_V4, A_V6), (NS_B, IF_B, B_V4, B_V6)] {
            cmd_ok(
                "ip",
                &["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", ifname],
            );
            let v6 = format!("{v6}/64");
            cmd_ok(
                "ip",
                &["-n", ns, "addr", "add", &v6, "dev", ifname, "nodad"],
            );
            cmd_ok("ip", &["-n", ns, "link", "set", ifname, "up"]);
        }
        // The server: VIPs on lo, and reverse-path filtering off, since the inner source
        // is the client's, reached by no route through dc-b0.
        cmd_ok(
            "ip",
            &[
                "-n",
                NS_B,
                "addr",
                "add",
                &format!("{VIP_V4}/32"),
                "dev",
                "lo",
            ],
        );
        cmd_ok(
            "ip",
            &[
                "-n",
                NS_B,
                "addr",
                "add",
                &format!("{VIP_V6}/128"),
                "dev",
                "lo",
            ],
        );
        let net = format!("--net=/run/netns/{NS_B}");
        for conf in ["all", "default", IF_B] {
            let rp = format!("net.ipv4.conf.{conf}.rp_filter=0");
            cmd_ok("nsenter", &[&net, "sysctl", "-q", "-w", &rp]);
        }
        lab.wait_carrier();
        lab
    }

    fn wait_carrier(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while ![(NS_A, IF_A), (NS_B, IF_B)].iter().all(|(ns, ifname)| {
            let out = cmd_ok("ip", &["-n", ns, "-o", "link", "show", "dev", ifname]);
            String::from_utf8_lossy(&out.stdout).contains("LOWER_UP")
        }) {
            assert!(
                Instant::now() < deadline,
                "veth pair without carrier after 10 s"
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// director-ctl in dc-b (its pins in bpffs, which namespaces share).
    fn ctl(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{NS_B}"))
            .arg(ctl_binary())
            .arg("--pin-dir")
            .arg(&self.pin_dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running director-ctl")
    }

    fn mac(ns: &str, ifname: &str) -> [u8; 6] {
        let out = cmd_ok("ip", &["-n", ns, "-o", "link", "show", "dev", ifname]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let hex = text
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .unwrap_or_else(|| panic!("no MAC in {text:?}"));
        let mut mac = [0u8; 6];
        for (b, h) in mac.iter_mut().zip(hex.split(':')) {
            *b = u8::from_str_radix(h, 16).expect("a MAC in hex");
        }
        mac
    }
}

impl Drop for DecapLab {
    fn drop(&mut self) {
        let _ = self.ctl(&["decap", "detach", "--iface", IF_B]);
        for ns in [NS_A, NS_B] {
            let _ = cmd("ip", &["netns", "del", ns]);
        }
        pins::remove(&pins::pass_dir(&self.pin_dir));
        pins::remove(&self.pin_dir);
    }
}

/// Runs `f` on a thread that has entered `ns`: sockets made there belong to `ns` and stay
/// usable from any thread; the test's own thread never changes namespace.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: a descriptor of an open namespace file; this thread alone moves.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("the namespace thread panicked")
}

/// A raw AF_PACKET socket bound to `ifname` in the namespace it was made in, for sending
/// whole frames.
struct RawSender {
    fd: libc::c_int,
    ifindex: libc::c_int,
}

impl RawSender {
    fn open(ns: &str, ifname: &'static str) -> RawSender {
        in_netns(ns, move || {
            let name = CString::new(ifname).unwrap();
            // SAFETY: plain calls; protocol 0 only sends, nothing is queued for reading.
            let (fd, ifindex) = unsafe {
                (
                    libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
                    libc::if_nametoindex(name.as_ptr()) as libc::c_int,
                )
            };
            assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
            assert!(ifindex > 0, "no {ifname}");
            RawSender { fd, ifindex }
        })
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: a zeroed sockaddr_ll filled in for this interface; the frame outlives
        // the call.
        let n = unsafe {
            let mut sa: libc::sockaddr_ll = std::mem::zeroed();
            sa.sll_family = libc::AF_PACKET as u16;
            sa.sll_ifindex = self.ifindex;
            sa.sll_halen = 6;
            sa.sll_addr[..6].copy_from_slice(&frame[..6]);
            libc::sendto(
                self.fd,
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
                &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        assert_eq!(
            n,
            frame.len() as isize,
            "sendto: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for RawSender {
    fn drop(&mut self) {
        // SAFETY: this struct's own descriptor.
        unsafe { libc::close(self.fd) };
    }
}

/// The next datagram within `wait`, with its source.
fn receive(sock: &UdpSocket, wait: Duration) -> Option<(Vec<u8>, SocketAddr)> {
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 2048];
    match sock.recv_from(&mut buf) {
        Ok((n, from)) => Some((buf[..n].to_vec(), from)),
        Err(_) => None,
    }
}

/// Sends `frame` until `sock` receives a datagram (at most 5 tries, 1 s apart).
fn send_until_received(
    tx: &RawSender,
    frame: &[u8],
    sock: &UdpSocket,
) -> Option<(Vec<u8>, SocketAddr)> {
    for _ in 0..5 {
        tx.send(frame);
        if let Some(got) = receive(sock, Duration::from_secs(1)) {
            return Some(got);
        }
    }
    None
}

#[test]
fn tunnelled_udp_reaches_a_listener_on_the_vip() {
    let lab = DecapLab::new();
    let (l4, l6) = in_netns(NS_B, || {
        (
            UdpSocket::bind((VIP_V4, VIP_PORT)).expect("binding the IPv4 VIP"),
            UdpSocket::bind((VIP_V6, VIP_PORT)).expect("binding the IPv6 VIP"),
        )
    });
    let tx = RawSender::open(NS_A, IF_A);
    let (mac_a, mac_b) = (DecapLab::mac(NS_A, IF_A), DecapLab::mac(NS_B, IF_B));
    let frame = |outer: (&str, &str), inner: &[u8]| {
        let (s, d): (IpAddr, IpAddr) = (outer.0.parse().unwrap(), outer.1.parse().unwrap());
        let mut f = encapsulated_frame(s, d, inner);
        f[..6].copy_from_slice(&mac_b);
        f[6..12].copy_from_slice(&mac_a);
        f
    };
    let v4 = frame(
        (A_V4, B_V4),
        &udp_packet(&to_vip_v4(), b"through the v4 tunnel"),
    );
    let v6 = frame(
        (A_V6, B_V6),
        &udp_packet(&to_vip_v6(), b"through the v6 tunnel"),
    );

    // Without the decapsulator this kernel (no ipip module) has nothing that takes them.
    tx.send(&v4);
    tx.send(&v6);
    assert_eq!(
        receive(&l4, Duration::from_millis(300)),
        None,
        "IPv4 without decap"
    );
    assert_eq!(
        receive(&l6, Duration::from_millis(300)),
        None,
        "IPv6 without decap"
    );

    let mode = std::env::var("DIRECTOR_XDP_MODE").unwrap_or_else(|_| "native".into());
    let out = lab.ctl(&["decap", "attach", "--iface", IF_B, "--mode", &mode]);
    assert!(out.status.success(), "decap attach: {}", describe(&out));

    let got = send_until_received(&tx, &v4, &l4).expect("no IPv4 datagram on the VIP");
    assert_eq!(got.0, b"through the v4 tunnel");
    assert_eq!(got.1, SocketAddr::from((CLIENT_V4, CLIENT_PORT)));
    let got = send_until_received(&tx, &v6, &l6).expect("no IPv6 datagram on the VIP");
    assert_eq!(got.0, b"through the v6 tunnel");
    assert_eq!(got.1, SocketAddr::from((CLIENT_V6, CLIENT_PORT)));

    // Plain traffic still flows through the interface: dc-a reaches dc-b over the veth.
    let ping = cmd(
        "ip",
        &["netns", "exec", NS_A, "ping", "-c", "1", "-W", "2", B_V4],
    );
    assert!(
        ping.status.success(),
        "ping past decap: {}",
        describe(&ping)
    );

    let out = lab.ctl(&["decap", "detach", "--iface", IF_B]);
    assert!(out.status.success(), "decap detach: {}", describe(&out));
    tx.send(&v4);
    assert_eq!(
        receive(&l4, Duration::from_millis(300)),
        None,
        "after detach"
    );
}

#[test]
fn decap_attach_refuses_an_unknown_interface_in_one_line() {
    let pin_dir = pins::dir(&pins::name("dc-decap", 1));
    let out = Command::new(ctl_binary())
        .arg("--pin-dir")
        .arg(&pin_dir)
        .args(["decap", "attach", "--iface", "dc-nosuch0"])
        .stdin(Stdio::null())
        .output()
        .expect("running director-ctl");
    let left = pins::pass_dir(&pin_dir).exists();
    pins::remove(&pins::pass_dir(&pin_dir));
    assert!(!out.status.success(), "attached to a missing interface");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains("dc-nosuch0"), "{err}");
    assert!(!left, "a refused attach left a pin directory");
}
