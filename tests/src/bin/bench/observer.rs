//! Section 1e: what `agent --observe` adds to each packet of the interfaces it watches
//! (`director_rtt_tc`, BPF_PROG_TEST_RUN on skbs): every TCP packet has its headers read,
//! every ACK one hash lookup, and a handshake's two packets a record and a sample.

use std::net::Ipv4Addr;

use anyhow::{ensure, Context, Result};
use aya::programs::{SchedClassifier, TestRun, TestRunOptions};
use aya::Ebpf;
use director_common::rtt::{MAX_PENDING_HANDSHAKES, MAX_RTT_PREFIXES, PROGRAM_RTT_TC};
use director_tests::bench::table::{thousands, Spread, Table};
use director_tests::bench::testrun as tr;
use director_tests::packets::{ip_frame, tcp_segment_numbered, Flow, IPPROTO_TCP};

/// TC_ACT_UNSPEC, the program's only verdict.
const CARRY_ON: u32 = u32::MAX;
const SYN_ACK: u8 = 0x12;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;
const ISN: u32 = 0x7000_0000;

fn program(ebpf: &Ebpf) -> Result<&SchedClassifier> {
    Ok(ebpf
        .program(PROGRAM_RTT_TC)
        .context("no director_rtt_tc in the object")?
        .try_into()?)
}

/// One run of `frame`: the kernel's ns.
fn once(p: &SchedClassifier, frame: &[u8], repeat: u32) -> Result<f64> {
    let r = p.test_run(TestRunOptions {
        data_in: Some(frame),
        repeat,
        ..TestRunOptions::new()
    })?;
    ensure!(r.return_value == CARRY_ON, "verdict {}", r.return_value);
    Ok(r.duration.as_nanos() as f64)
}

/// Client `i`'s connection: a port and a /24 of its own (65,536 of them, then around
/// again), so that a sample mostly makes a new histogram entry, the dearer case. Only
/// BPF_PROG_TEST_RUN sees these addresses.
fn flow(i: u32) -> Flow {
    let c = Ipv4Addr::new(10, (i >> 8) as u8, i as u8, 1);
    let mut f = Flow::v4(c).to_port(443);
    f.client.set_port(10_000 + (i % 50_000) as u16);
    f
}

fn frame(f: &Flow, flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    ip_frame(
        f,
        IPPROTO_TCP,
        &tcp_segment_numbered(f, flags, seq, ack, &[], payload),
    )
}

fn syn_ack(i: u32) -> Vec<u8> {
    let f = flow(i);
    let back = Flow {
        client: f.server,
        server: f.client,
        vlan: None,
    };
    frame(&back, SYN_ACK, ISN, 0x100, &[])
}

fn ack(i: u32) -> Vec<u8> {
    frame(&flow(i), ACK, 0x100, ISN + 1, &[])
}

pub fn run(packets: u32, runs: usize) -> Result<Table> {
    tr::on_cpu(1, move || measure(packets, runs))
}

fn measure(packets: u32, runs: usize) -> Result<Table> {
    let mut ebpf = director_ctl::kernel::rtt::load(MAX_RTT_PREFIXES, MAX_PENDING_HANDSHAKES)?;
    let p: &mut SchedClassifier = ebpf
        .program_mut(PROGRAM_RTT_TC)
        .context("no director_rtt_tc in the object")?
        .try_into()?;
    p.load().context("loading director_rtt_tc")?;
    let insns = p.info()?.verified_instruction_count();
    let p = program(&ebpf)?;
    let calls = packets.min(50_000);
    let data = frame(&flow(0), PSH_ACK, 0x100, ISN + 1, &[0u8; 512]);
    let udp = director_tests::packets::udp_frame(&flow(0), &[0u8; 64]);
    let mut rows: Vec<(&str, String, Spread)> = Vec::new();
    // Passed packets take the same path every run: one call of N runs, the kernel's mean.
    rows.push((
        "UDP (not TCP)",
        format!("repeat {}", thousands(packets as u64)),
        tr::spread(runs, || once(p, &udp, packets))?,
    ));
    rows.push((
        "data ACK, no handshake waiting (lookup misses)",
        format!("repeat {}", thousands(packets as u64)),
        tr::spread(runs, || once(p, &data, packets))?,
    ));
    // A handshake's two packets change the map: a fresh connection per call, the median
    // call (its timer reads included).
    let mut next = 0u32;
    let mut median = |f: &mut dyn FnMut(u32) -> Result<f64>| -> Result<f64> {
        let mut each = Vec::with_capacity(calls as usize);
        for _ in 0..calls {
            each.push(f(next)?);
            next = next.wrapping_add(1);
        }
        Ok(Spread::of(&each).median)
    };
    let syn_acks = tr::spread(runs, || median(&mut |i| once(p, &syn_ack(i), 1)))?;
    let acks = tr::spread(runs, || {
        median(&mut |i| {
            once(p, &syn_ack(i), 1)?;
            once(p, &ack(i), 1)
        })
    })?;
    let one_call = format!("repeat 1, {} calls", thousands(calls as u64));
    rows.push(("SYN-ACK (a handshake recorded)", one_call.clone(), syn_acks));
    rows.push(("the ACK of it (a sample, new prefix)", one_call, acks));
    let insns = insns.map_or("unknown".into(), |i| thousands(i as u64));
    let mut t = Table::new(
        format!(
            "1e. The RTT observer (agent --observe: director_rtt_tc on tc ingress and \
             egress), per packet from BPF_PROG_TEST_RUN, {runs} measurements each, on CPU 1. \
             Verifier: {insns} instructions processed."
        ),
        &["packet", "method", "ns median", "min", "max"],
    );
    let ns = |v: f64| format!("{v:.1}");
    for (packet, method, s) in rows {
        let [med, min, max] = s.cells(ns);
        t.row(vec![packet.into(), method, med, min, max]);
    }
    t.note(
        "repeat N: the kernel's mean over N runs of one buffer (the packet takes the same \
         path each run). repeat 1: a fresh connection per call, the median call, the timer's \
         own reads included (no floor subtracted), so an upper bound.",
    );
    t.note(
        "A handshake costs its SYN-ACK and its ACK once each; every other TCP packet passing \
         costs the data ACK's row, and every other packet the UDP row's.",
    );
    Ok(t)
}
