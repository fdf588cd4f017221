//! Tests of the router lab itself (tests/src/routers.rs), with a minimal BMP reader in the
//! test instead of director's collector: real FRR and GoBGP routers send BMP to a listener
//! in a namespace of the test's own, and the messages are framed by the common header and
//! parsed with bgpkit-parser.
//!
//! Run as root: `cargo test -p director-tests --test router_lab -- --nocapture` prints the
//! measured latencies and load times.

use std::{
    io::{ErrorKind, Read},
    net::{IpAddr, SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use bgpkit_parser::{
    models::{BgpElem, BgpMessage, ElemType},
    parser::bmp::{messages::BmpMessageBody, parse_bmp_msg},
    Elementor,
};
use director_tests::routers::{
    injector_v4, listen_in, Netns, Options, RouterKind, RouterLab, INJECTOR_AS, ROUTER_AS,
};

const COLLECTOR: &str = "192.0.2.10";
const PORT: u16 = 11019;
/// How long any one expected BMP message may take.
const WITHIN: Duration = Duration::from_secs(15);

/// A collector namespace with the collector's address on `lo`, listening: the address is
/// there before the lab, as for a collector that starts first.
fn collector(tag: &str) -> (Netns, TcpListener) {
    let ns = Netns::new(tag);
    let ok = Command::new("ip")
        .args([
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{COLLECTOR}/32"),
            "dev",
            "lo",
        ])
        .status()
        .expect("running ip");
    assert!(ok.success());
    let l = listen_in(&ns.name, SocketAddr::new(COLLECTOR.parse().unwrap(), PORT));
    (ns, l)
}

/// One BMP session, read message by message.
struct Bmp {
    stream: TcpStream,
}

/// What the tests look at in a message.
#[derive(Debug)]
enum Msg {
    Initiation,
    PeerUp {
        peer: IpAddr,
        asn: u32,
    },
    PeerDown {
        peer: IpAddr,
    },
    /// The elements of a route monitoring message (an End-of-RIB has none).
    Route {
        elems: Vec<BgpElem>,
    },
    /// Statistics, termination, mirroring, other BGP messages.
    Other,
}

impl Bmp {
    #[track_caller]
    fn accept(l: &TcpListener, within: Duration) -> Bmp {
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + within;
        loop {
            match l.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    return Bmp { stream };
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("accept: {e}"),
            }
            assert!(
                Instant::now() < deadline,
                "no BMP connection within {within:?}"
            );
            sleep(Duration::from_millis(10));
        }
    }

    /// The next message, or None if none arrives by `deadline` or the session ends.
    fn next(&mut self, deadline: Instant) -> Option<Msg> {
        let mut header = [0u8; 6];
        self.read_exact(&mut header, deadline)?;
        assert_eq!(header[0], 3, "BMP version");
        let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        assert!(len >= 6, "BMP length {len}");
        let mut msg = header.to_vec();
        msg.resize(len, 0);
        self.read_exact(&mut msg[6..], deadline)?;
        let mut bytes = bytes::Bytes::from(msg);
        let m = parse_bmp_msg(&mut bytes).unwrap_or_else(|e| panic!("parsing BMP: {e}"));
        let peer = m.per_peer_header.as_ref();
        Some(match m.message_body {
            BmpMessageBody::InitiationMessage(_) => Msg::Initiation,
            BmpMessageBody::PeerUpNotification(_) => Msg::PeerUp {
                peer: peer.unwrap().peer_ip,
                asn: peer.unwrap().peer_asn.to_u32(),
            },
            BmpMessageBody::PeerDownNotification(_) => Msg::PeerDown {
                peer: peer.unwrap().peer_ip,
            },
            BmpMessageBody::RouteMonitoring(rm) => match rm.bgp_message {
                BgpMessage::Update(u) => {
                    let p = peer.unwrap();
                    Msg::Route {
                        elems: Elementor::bgp_update_to_elems(u, 0.0, &p.peer_ip, &p.peer_asn),
                    }
                }
                _ => Msg::Other,
            },
            _ => Msg::Other,
        })
    }

    fn read_exact(&mut self, buf: &mut [u8], deadline: Instant) -> Option<()> {
        let mut done = 0;
        while done < buf.len() {
            let left = deadline.checked_duration_since(Instant::now())?;
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match self.stream.read(&mut buf[done..]) {
                Ok(0) => return None,
                Ok(n) => done += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("reading BMP: {e}"),
            }
        }
        Some(())
    }

    /// Reads until `want` picks a message; panics with what was seen after `within`.
    #[track_caller]
    fn wait<T>(
        &mut self,
        within: Duration,
        what: &str,
        mut want: impl FnMut(&Msg) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            match self.next(deadline) {
                Some(m) => {
                    if let Some(t) = want(&m) {
                        return t;
                    }
                    seen.push(m);
                }
                None => panic!(
                    "no {what} within {within:?}; saw {} messages: {:?}",
                    seen.len(),
                    &seen[..seen.len().min(20)]
                ),
            }
        }
    }

    /// The announcement of `prefix` (first element that has it).
    #[track_caller]
    fn announced(&mut self, prefix: &str) -> BgpElem {
        let p: ipnet::IpNet = prefix.parse().unwrap();
        self.wait(WITHIN, &format!("announcement of {prefix}"), |m| match m {
            Msg::Route { elems } => elems
                .iter()
                .find(|e| e.elem_type == ElemType::ANNOUNCE && e.prefix.prefix == p)
                .cloned(),
            _ => None,
        })
    }

    #[track_caller]
    fn withdrawn(&mut self, prefix: &str) {
        let p: ipnet::IpNet = prefix.parse().unwrap();
        self.wait(WITHIN, &format!("withdrawal of {prefix}"), |m| match m {
            Msg::Route { elems } => elems
                .iter()
                .any(|e| e.elem_type == ElemType::WITHDRAW && e.prefix.prefix == p)
                .then_some(()),
            _ => None,
        });
    }

    #[track_caller]
    fn peer_up(&mut self, peer: IpAddr) -> u32 {
        self.wait(WITHIN, &format!("peer up of {peer}"), |m| match m {
            Msg::PeerUp { peer: p, asn } if *p == peer => Some(*asn),
            _ => None,
        })
    }

    #[track_caller]
    fn peer_down(&mut self, peer: IpAddr) {
        self.wait(WITHIN, &format!("peer down of {peer}"), |m| match m {
            Msg::PeerDown { peer: p } if *p == peer => Some(()),
            _ => None,
        });
    }
}

fn as_path(e: &BgpElem) -> Vec<u32> {
    e.as_path
        .as_ref()
        .and_then(|p| p.to_u32_vec_opt(false))
        .unwrap_or_default()
}

fn addr() -> IpAddr {
    COLLECTOR.parse().unwrap()
}

#[test]
fn frr_reports_announce_withdraw_and_peer_down() {
    let (col, l) = collector("frr");
    let mut lab = RouterLab::start("frr", &col.name, addr(), PORT, RouterKind::Frr);
    let mut bmp = Bmp::accept(&l, WITHIN);
    bmp.wait(WITHIN, "initiation", |m| {
        matches!(m, Msg::Initiation).then_some(())
    });
    let inj = IpAddr::V4(injector_v4(0));
    assert_eq!(bmp.peer_up(inj), INJECTOR_AS[0]);

    let t = Instant::now();
    lab.announce("198.51.100.0/24", &[64500, 64501], Some(10), None);
    let e = bmp.announced("198.51.100.0/24");
    let announce_latency = t.elapsed();
    // FRR 8.4 prepends its own AS even to pre-policy routes: a collector must not take the
    // first AS for the peer's.
    assert_eq!(as_path(&e), [ROUTER_AS, INJECTOR_AS[0], 64500, 64501]);
    assert_eq!(e.med, Some(10));
    assert_eq!(e.peer_ip, inj);
    assert_eq!(e.peer_asn.to_u32(), INJECTOR_AS[0]);

    let t = Instant::now();
    lab.withdraw("198.51.100.0/24");
    bmp.withdrawn("198.51.100.0/24");
    let withdraw_latency = t.elapsed();
    eprintln!("FRR BMP latency: announce {announce_latency:?}, withdraw {withdraw_latency:?}");

    lab.peer_down();
    bmp.peer_down(inj);
    lab.peer_up();
    assert_eq!(bmp.peer_up(inj), INJECTOR_AS[0]);
}

#[test]
fn frr_reports_two_peers() {
    let (col, l) = collector("frr2");
    let mut opts = Options::new(RouterKind::Frr);
    opts.peers = 2;
    let lab = RouterLab::start_with("frr2", &col.name, SocketAddr::new(addr(), PORT), opts);
    let mut bmp = Bmp::accept(&l, WITHIN);
    let mut ups = Vec::new();
    for _ in 0..2 {
        ups.push(bmp.wait(WITHIN, "peer up", |m| match m {
            Msg::PeerUp { peer, asn } => Some((*peer, *asn)),
            _ => None,
        }));
    }
    ups.sort();
    assert_eq!(
        ups,
        [
            (IpAddr::V4(injector_v4(0)), INJECTOR_AS[0]),
            (IpAddr::V4(injector_v4(1)), INJECTOR_AS[1])
        ]
    );
    lab.announce_from(1, "198.51.100.0/24", &[64510], None, None);
    let e = bmp.announced("198.51.100.0/24");
    assert_eq!(e.peer_ip, IpAddr::V4(injector_v4(1)));
    assert_eq!(as_path(&e), [ROUTER_AS, INJECTOR_AS[1], 64510]);
}

#[test]
fn frr_bmp_session_comes_back_after_restart_and_cut() {
    let (col, l) = collector("frr3");
    let mut lab = RouterLab::start("frr3", &col.name, addr(), PORT, RouterKind::Frr);
    lab.announce("198.51.100.0/24", &[64500], None, None);
    let mut bmp = Bmp::accept(&l, WITHIN);
    bmp.announced("198.51.100.0/24");

    // A restart ends the session (FIN or RST) and a new one dumps the route again.
    lab.router_restart();
    assert!(
        drain_until_end(&mut bmp),
        "the old session did not end on a restart"
    );
    let mut bmp2 = Bmp::accept(&l, WITHIN);
    bmp2.wait(WITHIN, "initiation", |m| {
        matches!(m, Msg::Initiation).then_some(())
    });
    bmp2.announced("198.51.100.0/24");

    // A cut: no new session while the link is down, one soon after it is back.
    lab.bmp_down();
    sleep(Duration::from_millis(500));
    assert!(!lab.bmp_connected());
    lab.bmp_up();
    let t = Instant::now();
    let mut bmp3 = Bmp::accept(&l, WITHIN);
    eprintln!("FRR reconnected {:?} after the link came back", t.elapsed());
    bmp3.announced("198.51.100.0/24");

    // A reset: the collector sees the session end, then a new one.
    lab.bmp_reset();
    assert!(
        drain_until_end(&mut bmp3),
        "the old session did not end on bmp_reset"
    );
    let mut bmp4 = Bmp::accept(&l, WITHIN);
    bmp4.announced("198.51.100.0/24");
}

/// Reads until the session ends; false if it does not within `WITHIN`.
fn drain_until_end(bmp: &mut Bmp) -> bool {
    let deadline = Instant::now() + WITHIN;
    while Instant::now() < deadline {
        if bmp.next(deadline).is_none() {
            return Instant::now() < deadline;
        }
    }
    false
}

#[test]
fn gobgp_router_reports_announce() {
    let (col, l) = collector("gobgp");
    let lab = RouterLab::start("gobgp", &col.name, addr(), PORT, RouterKind::Gobgp);
    let mut bmp = Bmp::accept(&l, WITHIN);
    bmp.wait(WITHIN, "initiation", |m| {
        matches!(m, Msg::Initiation).then_some(())
    });
    let inj = IpAddr::V4(injector_v4(0));
    assert_eq!(bmp.peer_up(inj), INJECTOR_AS[0]);
    let t = Instant::now();
    lab.announce("198.51.100.0/24", &[64500, 64501], Some(20), None);
    let e = bmp.announced("198.51.100.0/24");
    let announce_latency = t.elapsed();
    // GoBGP reports the path as received: no own AS in front.
    assert_eq!(as_path(&e), [INJECTOR_AS[0], 64500, 64501]);
    assert_eq!(e.med, Some(20));
    let t = Instant::now();
    lab.withdraw("198.51.100.0/24");
    bmp.withdrawn("198.51.100.0/24");
    eprintln!(
        "GoBGP BMP latency: announce {announce_latency:?}, withdraw {:?}",
        t.elapsed()
    );
    lab.peer_down();
    bmp.peer_down(inj);
}

/// Real routes: the first 20,000 prefixes of a full IPv4 table (BGP4MP_ET updates, AS3856)
/// through GoBGP into FRR, every one reported by BMP.
#[test]
fn frr_reports_a_real_table_slice() {
    const ROUTES: usize = 20_000;
    let mrt = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/bgp/updates.et-header.2015.gz");
    let (col, l) = collector("mrt");
    let mut lab = RouterLab::start("mrt", &col.name, addr(), PORT, RouterKind::Frr);
    let mut bmp = Bmp::accept(&l, WITHIN);
    // The reader counts in a thread while the injector loads.
    let reader = std::thread::spawn(move || {
        let t = Instant::now();
        let mut prefixes = std::collections::HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(50);
        while prefixes.len() < ROUTES {
            match bmp.next(deadline) {
                Some(Msg::Route { elems }) => prefixes.extend(
                    elems
                        .into_iter()
                        .filter(|e| e.elem_type == ElemType::ANNOUNCE)
                        .map(|e| e.prefix.prefix),
                ),
                Some(_) => {}
                None => break,
            }
        }
        (prefixes.len(), t.elapsed())
    });
    let injected = lab.inject_mrt(&mrt, Some(ROUTES));
    assert_eq!(injected.routes, ROUTES);
    let (seen, took) = reader.join().unwrap();
    eprintln!("{injected:?}; BMP reader had {seen} prefixes after {took:?}");
    assert_eq!(seen, ROUTES, "prefixes reported by BMP");
}
