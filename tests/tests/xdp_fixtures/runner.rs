//! Running frames through the program: answers checked, passes counted by reason, and
//! tables of frames to pass run row by row.

use std::collections::{BTreeMap, BTreeSet};

use director_common::counters::Reason;
use director_tests::fixture::{Fixture, XDP_DROP, XDP_PASS, XDP_TX};
use director_tests::packets::*;
use hickory_proto::op::Message;

use crate::check::{check_answer, Answer};
use crate::setup::{a_query, hex};

/// The counters that moved between two snapshots, by name.
pub(crate) fn moved(
    before: &BTreeMap<&'static str, u64>,
    after: &BTreeMap<&'static str, u64>,
) -> Vec<(&'static str, u64)> {
    after
        .iter()
        .filter(|(k, v)| before[*k] != **v)
        .map(|(k, v)| (*k, v - before[k]))
        .collect()
}

/// Runs a frame that must be answered; the checked answer, or what is wrong.
pub(crate) fn try_answer(fx: &Fixture, frame: &[u8]) -> Result<Answer, String> {
    let before = fx.counters();
    let (verdict, out) = fx.try_run(frame).map_err(|e| format!("{e:#}"))?;
    let moved = moved(&before, &fx.counters());
    ensure!(
        verdict == XDP_TX,
        "expected an answer, got verdict {verdict}; counters moved: {moved:?}\nquery {}",
        hex(frame)
    );
    ensure!(
        moved == vec![(Reason::Answered.name(), 1)],
        "counters moved: {moved:?}, expected the answered counter only"
    );
    check_answer(frame, &out)
        .map_err(|e| format!("{e}\nquery  {}\nanswer {}", hex(frame), hex(&out)))
}

/// Runs a frame that must be answered; returns the checked answer.
pub(crate) fn expect_answer(fx: &Fixture, frame: &[u8]) -> Answer {
    try_answer(fx, frame).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a frame that must be passed to the host untouched (or dropped, for a reason that
/// drops), counted under `reason` only; what is wrong if it is not.
fn check_pass(fx: &Fixture, frame: &[u8], reason: Reason) -> Result<(), String> {
    let before = fx.counters();
    let (verdict, out) = fx.try_run(frame).map_err(|e| format!("{e:#}"))?;
    let moved = moved(&before, &fx.counters());
    let (want, want_name) = if reason.drops() {
        (XDP_DROP, "XDP_DROP")
    } else {
        (XDP_PASS, "XDP_PASS")
    };
    ensure!(
        verdict == want,
        "verdict {verdict}, expected {want_name}; counters moved: {moved:?}"
    );
    ensure!(
        reason.drops() || out == frame,
        "a passed frame changed:\n  in  {}\n  out {}",
        hex(frame),
        hex(&out)
    );
    ensure!(
        moved == vec![(reason.name(), 1)],
        "counters moved: {moved:?}, expected {} only",
        reason.name()
    );
    Ok(())
}

/// `check_pass` for one frame, panicking with what is wrong.
pub(crate) fn expect_pass(fx: &Fixture, frame: &[u8], reason: Reason) {
    check_pass(fx, frame, reason).unwrap_or_else(|e| {
        panic!(
            "expected XDP_PASS for {}: {e}\nframe {}",
            reason.name(),
            hex(frame)
        )
    });
}

/// One frame the program must pass to the host untouched, counted under `reason` alone.
pub(crate) struct PassCase {
    /// What the frame is; unique within its table, so a failure names one row.
    pub(crate) name: String,
    pub(crate) frame: Vec<u8>,
    pub(crate) reason: Reason,
}

pub(crate) fn pass_case(name: impl Into<String>, frame: Vec<u8>, reason: Reason) -> PassCase {
    PassCase {
        name: name.into(),
        frame,
        reason,
    }
}

/// How a flow shows in a case name: family, VLAN tag, and the port if it is not 53.
pub(crate) fn flow_name(flow: &Flow) -> String {
    let mut name = String::from(if flow.is_v6() { "IPv6" } else { "IPv4" });
    if let Some(id) = flow.vlan {
        name += &format!(" VLAN {id}");
    }
    if flow.server.port() != DNS_PORT {
        name += &format!(" to port {}", flow.server.port());
    }
    name
}

/// `a_query()` with one change made to it.
pub(crate) fn a_query_with(change: impl FnOnce(&mut Message)) -> Message {
    let mut m = a_query();
    change(&mut m);
    m
}

/// Runs `table` and returns one line per row that was not passed untouched under its
/// reason alone, naming the row.
pub(crate) fn pass_table_failures(fx: &Fixture, table: &[PassCase]) -> Vec<String> {
    let names: BTreeSet<&str> = table.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), table.len(), "two rows share a name");
    table
        .iter()
        .filter_map(|c| {
            check_pass(fx, &c.frame, c.reason).err().map(|e| {
                format!(
                    "{} ({}): {e}\n  frame {}",
                    c.name,
                    c.reason.name(),
                    hex(&c.frame)
                )
            })
        })
        .collect()
}

/// Fails naming every failed row of a table at once.
pub(crate) fn assert_no_failed_rows(failures: &[String], rows: usize) {
    assert!(
        failures.is_empty(),
        "{} of {rows} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

pub(crate) fn expect_pass_table(fx: &Fixture, table: &[PassCase]) {
    let failures = pass_table_failures(fx, table);
    assert_no_failed_rows(&failures, table.len());
}
