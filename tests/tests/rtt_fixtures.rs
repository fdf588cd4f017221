//! `director_rtt_tc` (the agent's `--observe` program) in the kernel with
//! BPF_PROG_TEST_RUN: frames in, the verdict (always "carry on", the frame unchanged) and
//! what `DIR_RTT` and its counters hold after. The clock is the kernel's own, so a sample
//! is the real time between two runs.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use aya::maps::{MapData, PerCpuArray, PerCpuHashMap};
use aya::programs::{SchedClassifier, TestRun, TestRunOptions};
use aya::Ebpf;
use director_common::rtt::{
    Count, Hist, RttKey, RttStats, MAP_RTT, MAP_RTT_COUNTERS, PROGRAM_RTT_TC,
};
use director_ctl::kernel::rtt::{load, prefix_of};
use director_tests::packets::{
    ip_frame, ip_frame_with, tcp_segment_numbered, udp_frame, Flow, IPPROTO_TCP, TCP_ACK, TCP_SYN,
};

/// TC_ACT_UNSPEC: the next program on the hook (or the stack) decides.
const CARRY_ON: u32 = u32::MAX;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;
/// The server's initial sequence number in these handshakes.
const ISN: u32 = 0x7000_0000;

struct Watcher {
    ebpf: Ebpf,
}

impl Watcher {
    fn new() -> Watcher {
        let mut ebpf = load(64, 64).expect("loading the object");
        let names: Vec<String> = ebpf.programs().map(|(n, _)| n.to_string()).collect();
        let prog: &mut SchedClassifier = ebpf
            .program_mut(PROGRAM_RTT_TC)
            .unwrap_or_else(|| panic!("no {PROGRAM_RTT_TC} among {names:?}"))
            .try_into()
            .expect("a classifier");
        prog.load().expect("the verifier takes it");
        Watcher { ebpf }
    }

    /// Runs one frame; asserts the verdict and that the frame went out as it came.
    fn run(&self, frame: &[u8]) {
        let prog: &SchedClassifier = self
            .ebpf
            .program(PROGRAM_RTT_TC)
            .expect("the tc program")
            .try_into()
            .expect("a classifier");
        let mut out = vec![0u8; 4096];
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                repeat: 1,
                ..TestRunOptions::new()
            })
            .expect("BPF_PROG_TEST_RUN");
        assert_eq!(r.return_value, CARRY_ON);
        assert_eq!(&out[..frame.len()], frame, "the frame was changed");
    }

    /// Per client prefix, the samples taken (all CPUs, both generations).
    fn samples(&self) -> BTreeMap<String, Hist> {
        let map: PerCpuHashMap<&MapData, RttKey, RttStats> =
            PerCpuHashMap::try_from(self.ebpf.map(MAP_RTT).expect("DIR_RTT")).expect("its type");
        let mut out: BTreeMap<String, Hist> = BTreeMap::new();
        for entry in map.iter() {
            let (k, values) = entry.expect("an entry");
            let h = out.entry(prefix_of(&k).to_string()).or_default();
            for v in values.iter() {
                h.add_stats(v);
            }
        }
        out
    }

    fn count(&self, c: Count) -> u64 {
        let map: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(self.ebpf.map(MAP_RTT_COUNTERS).expect("the counters"))
                .expect("its type");
        map.get(&(c as u32), 0).expect("a slot").iter().sum()
    }
}

fn client_v4() -> Flow {
    Flow::v4(Ipv4Addr::new(203, 0, 113, 77)).to_port(443)
}

fn client_v6() -> Flow {
    Flow::v6("2001:db8:7:1::77".parse::<Ipv6Addr>().expect("an address")).to_port(443)
}

/// The other direction of `f`: server to client.
fn back(f: &Flow) -> Flow {
    Flow {
        client: f.server,
        server: f.client,
        vlan: f.vlan,
    }
}

fn segment(f: &Flow, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    ip_frame(
        f,
        IPPROTO_TCP,
        &tcp_segment_numbered(f, flags, seq, ack, &[], &[]),
    )
}

fn syn_ack(f: &Flow) -> Vec<u8> {
    segment(&back(f), TCP_SYN | TCP_ACK, ISN, 0x100)
}

fn ack_of(f: &Flow, ack: u32) -> Vec<u8> {
    segment(f, TCP_ACK, 0x100, ack)
}

/// The time between a SYN-ACK and its ACK, for both families, is one sample of the
/// client's prefix; the same ACK again (or a data segment after it) adds nothing.
#[test]
fn a_syn_ack_and_its_ack_are_one_sample_of_the_time_between() {
    let w = Watcher::new();
    for (f, prefix) in [
        (client_v4(), "203.0.113.0/24"),
        (client_v6(), "2001:db8:7::/48"),
    ] {
        w.run(&syn_ack(&f));
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let elapsed_before = t.elapsed();
        w.run(&ack_of(&f, ISN + 1));
        let elapsed_after = t.elapsed();
        w.run(&ack_of(&f, ISN + 1));
        w.run(&segment(&f, TCP_ACK | 0x08, 0x100, ISN + 1));
        let got = w.samples();
        let h = got
            .get(prefix)
            .unwrap_or_else(|| panic!("{prefix}: {got:?}"));
        assert_eq!(h.samples, 1, "{prefix}");
        let us = u128::from(h.min_us);
        assert!(
            us >= elapsed_before.as_micros() && us <= elapsed_after.as_micros() + 1000,
            "{prefix}: {us} µs, slept {elapsed_before:?}..{elapsed_after:?}"
        );
    }
    assert_eq!(w.samples().len(), 2);
    assert_eq!(w.count(Count::SynAcks), 2);
    assert_eq!(w.count(Count::SamplesGen0) + w.count(Count::SamplesGen1), 2);
}

/// Only the client's ACK of the SYN-ACK's number ends a handshake: another number, the
/// same ACK going the other way, a RST or FIN do not (nor do they end the wait).
#[test]
fn only_the_ack_of_the_syn_ack_ends_the_handshake() {
    let w = Watcher::new();
    let f = client_v4();
    w.run(&syn_ack(&f));
    w.run(&ack_of(&f, ISN));
    w.run(&ack_of(&f, ISN + 2));
    w.run(&segment(&back(&f), TCP_ACK, ISN + 1, ISN + 1));
    w.run(&segment(&f, RST | TCP_ACK, 0x100, ISN + 1));
    w.run(&segment(&f, FIN | TCP_ACK, 0x100, ISN + 1));
    // Another client port: another connection.
    let mut other = f;
    other.client.set_port(f.client.port() + 1);
    w.run(&ack_of(&other, ISN + 1));
    assert!(w.samples().is_empty(), "{:?}", w.samples());
    w.run(&ack_of(&f, ISN + 1));
    assert_eq!(w.samples()["203.0.113.0/24"].samples, 1);
}

/// Karn's rule: a SYN-ACK that passed twice gives no sample (which copy its ACK answers
/// is unknown), and is counted as a handshake without an RTT. A new SYN-ACK on the same
/// four-tuple (another sequence number: a new connection) starts afresh.
#[test]
fn a_resent_syn_ack_gives_no_sample() {
    let w = Watcher::new();
    let f = client_v4();
    w.run(&syn_ack(&f));
    w.run(&syn_ack(&f));
    w.run(&ack_of(&f, ISN + 1));
    assert!(w.samples().is_empty(), "{:?}", w.samples());
    assert_eq!(w.count(Count::NoRtt), 1);
    w.run(&segment(&back(&f), TCP_SYN | TCP_ACK, ISN + 5000, 0x100));
    w.run(&ack_of(&f, ISN + 5001));
    assert_eq!(w.samples()["203.0.113.0/24"].samples, 1);
}

/// What is not a TCP handshake is not looked at: UDP, a SYN alone, a later fragment that
/// looks like a SYN-ACK.
#[test]
fn what_is_not_a_handshake_is_not_looked_at() {
    let w = Watcher::new();
    let f = client_v4();
    w.run(&udp_frame(&f, b"not tcp"));
    w.run(&segment(&f, TCP_SYN, 0x100, 0));
    let l4 = tcp_segment_numbered(&back(&f), TCP_SYN | TCP_ACK, ISN, 0x100, &[], &[]);
    // Fragment offset 8 (in 8-byte units), more fragments: not a first fragment.
    w.run(&ip_frame_with(&back(&f), IPPROTO_TCP, &l4, &[], 0x2001));
    w.run(&ack_of(&f, ISN + 1));
    assert_eq!(w.count(Count::SynAcks), 0);
    assert!(w.samples().is_empty(), "{:?}", w.samples());
}
