//! The agent's windows: each drain's per-prefix samples add to the window being filled;
//! when it ends, every prefix with enough samples gets its record replaced by this
//! window's. Windows start at multiples of their length in Unix time, so records of the
//! same window from every site cover the same span. Pure: the clock ([`now_ms`]) is passed in.

use std::collections::{BTreeMap, HashMap};

use director_common::rtt::Hist;
use ipnet::IpNet;

use crate::api::RttRecord;

/// What one window held, for the agent's log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    pub start_ms: u64,
    pub end_ms: u64,
    pub samples: u64,
    pub prefixes: usize,
    /// Prefixes with at least the minimum of samples (their records were replaced).
    pub reported: usize,
    /// Prefixes reported from active probes (without handshakes enough).
    pub probed: usize,
}

pub struct Windows {
    len_ms: u64,
    start_ms: u64,
    end_ms: u64,
    min_samples: u64,
    /// A prefix's record is dropped once its window ended this long ago.
    retain_ms: u64,
    current: HashMap<IpNet, Hist>,
    /// Active probes' RTTs in the window being filled (`probe`).
    probed: HashMap<IpNet, Hist>,
    last: BTreeMap<IpNet, RttRecord>,
}

/// Unix time in ms: the clock the agent passes in (and stamps its reports with).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn aligned(t: u64, len: u64) -> u64 {
    t - t % len
}

/// µs to ms, rounded to the µs.
fn ms(us: f64) -> f64 {
    (us).round() / 1000.0
}

impl Windows {
    /// The first window runs from `now_ms` to the next multiple of `len_ms`.
    pub fn new(len_ms: u64, now_ms: u64, min_samples: u64, retain_ms: u64) -> Windows {
        let len_ms = len_ms.max(1);
        Windows {
            len_ms,
            start_ms: now_ms,
            end_ms: aligned(now_ms, len_ms) + len_ms,
            min_samples: min_samples.max(1),
            retain_ms,
            current: HashMap::new(),
            probed: HashMap::new(),
            last: BTreeMap::new(),
        }
    }

    /// When the window being filled ends (the agent drains then, and closes it).
    pub fn end_ms(&self) -> u64 {
        self.end_ms
    }

    pub fn add(&mut self, prefix: IpNet, h: &Hist) {
        self.current.entry(prefix).or_default().merge(h);
    }

    /// An active probe's RTT: reported for its prefix only when the window has not enough
    /// handshakes for it (`close`).
    pub fn add_probe(&mut self, prefix: IpNet, rtt_us: u32) {
        let mut s = director_common::rtt::RttStats::default();
        director_common::rtt::record(&mut s, rtt_us);
        self.probed.entry(prefix).or_default().add_stats(&s);
    }

    /// Ends the window being filled and starts the next: the one after it, or, when the
    /// agent was held up past that one too, the one `now_ms` is in (the gap had no
    /// drain, so its samples are in the window that just ended).
    pub fn close(&mut self, now_ms: u64) -> Closed {
        let mut c = Closed {
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            samples: 0,
            prefixes: self.current.len(),
            reported: 0,
            probed: 0,
        };
        for (prefix, h) in self.current.drain() {
            c.samples += h.samples;
            if h.samples < self.min_samples {
                continue;
            }
            let Some(median) = h.median_us() else {
                continue;
            };
            c.reported += 1;
            let r = RttRecord {
                prefix,
                min_ms: ms(f64::from(h.min_us)),
                median_ms: ms(median),
                samples: h.samples,
                window_start_ms: c.start_ms,
                window_end_ms: c.end_ms,
                probes: 0,
            };
            self.probed.remove(&prefix);
            self.last.insert(prefix, r);
        }
        for (prefix, h) in self.probed.drain() {
            // Handshakes win: a probe does not replace the last window's (or this one's).
            let passive = self.last.get(&prefix).is_some_and(|r| {
                r.probes == 0 && r.window_end_ms.saturating_add(self.len_ms) >= c.start_ms
            });
            let Some(median) = h.median_us().filter(|_| !passive) else {
                continue;
            };
            c.probed += 1;
            self.last.insert(
                prefix,
                RttRecord {
                    prefix,
                    min_ms: ms(f64::from(h.min_us)),
                    median_ms: ms(median),
                    samples: 0,
                    window_start_ms: c.start_ms,
                    window_end_ms: c.end_ms,
                    probes: h.samples,
                },
            );
        }
        let retain = self.retain_ms;
        self.last
            .retain(|_, r| r.window_end_ms.saturating_add(retain) >= now_ms);
        self.start_ms = self.end_ms.max(aligned(now_ms, self.len_ms));
        self.end_ms = self.start_ms + self.len_ms;
        c
    }

    /// Every prefix's last complete window, sorted by prefix.
    pub fn records(&self) -> Vec<RttRecord> {
        self.last.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use director_common::rtt::{record, RttStats};

    fn hist(values: &[u32]) -> Hist {
        let mut s = RttStats::default();
        for &v in values {
            record(&mut s, v);
        }
        let mut h = Hist::default();
        h.add_stats(&s);
        h
    }

    fn net(s: &str) -> IpNet {
        s.parse().expect("a prefix")
    }

    #[test]
    fn windows_align_to_their_length_and_the_first_starts_at_the_start() {
        let mut w = Windows::new(10_000, 123_456, 1, 60_000);
        assert_eq!(w.end_ms(), 130_000);
        w.add(net("192.0.2.0/24"), &hist(&[40_000, 41_000, 40_500]));
        let c = w.close(130_001);
        assert_eq!(
            (c.start_ms, c.end_ms, c.samples, c.prefixes),
            (123_456, 130_000, 3, 1)
        );
        assert_eq!(w.end_ms(), 140_000);
        let r = &w.records()[0];
        assert_eq!((r.window_start_ms, r.window_end_ms), (123_456, 130_000));
        assert_eq!(r.min_ms, 40.0);
        assert!((r.median_ms - 40.5).abs() / 40.5 < 0.05, "{}", r.median_ms);
        assert_eq!(r.samples, 3);
    }

    #[test]
    fn drains_add_up_and_a_new_window_replaces_the_record() {
        let mut w = Windows::new(10_000, 0, 1, 60_000);
        let p = net("198.51.100.0/24");
        w.add(p, &hist(&[40_000]));
        w.add(p, &hist(&[42_000, 44_000]));
        w.close(10_000);
        assert_eq!(w.records()[0].samples, 3);
        w.add(p, &hist(&[80_000; 4]));
        w.close(20_000);
        let r = &w.records()[0];
        assert_eq!((r.samples, r.min_ms, r.median_ms), (4, 80.0, 80.0));
        assert_eq!((r.window_start_ms, r.window_end_ms), (10_000, 20_000));
    }

    #[test]
    fn quiet_prefixes_keep_their_record_until_retention_and_thin_ones_are_not_reported() {
        let mut w = Windows::new(10_000, 0, 3, 25_000);
        w.add(net("192.0.2.0/24"), &hist(&[40_000; 3]));
        w.add(net("203.0.113.0/24"), &hist(&[40_000; 2]));
        let c = w.close(10_000);
        assert_eq!((c.prefixes, c.reported), (2, 1));
        let kept: Vec<String> = w.records().iter().map(|r| r.prefix.to_string()).collect();
        assert_eq!(kept, ["192.0.2.0/24"]);
        w.close(20_000);
        w.close(30_000);
        assert_eq!(w.records().len(), 1, "ended 20 s ago, kept 25 s");
        w.close(40_000);
        assert!(w.records().is_empty());
    }

    #[test]
    fn a_late_close_skips_to_the_window_of_now() {
        let mut w = Windows::new(10_000, 0, 1, 60_000);
        let c = w.close(37_000);
        assert_eq!((c.start_ms, c.end_ms), (0, 10_000));
        assert_eq!(w.end_ms(), 40_000);
    }

    #[test]
    fn records_are_sorted_by_prefix() {
        let mut w = Windows::new(1_000, 0, 1, 60_000);
        for p in [
            "203.0.113.0/24",
            "192.0.2.0/24",
            "2001:db8:1::/48",
            "198.51.100.0/24",
        ] {
            w.add(net(p), &hist(&[1_000]));
        }
        w.close(1_000);
        let got: Vec<String> = w.records().iter().map(|r| r.prefix.to_string()).collect();
        assert_eq!(
            got,
            [
                "192.0.2.0/24",
                "198.51.100.0/24",
                "203.0.113.0/24",
                "2001:db8:1::/48"
            ]
        );
    }

    #[test]
    fn probes_report_a_prefix_without_handshakes_and_handshakes_win() {
        let mut w = Windows::new(10_000, 0, 2, 60_000);
        let quiet = net("203.0.113.0/24");
        let busy = net("192.0.2.0/24");
        w.add_probe(quiet, 41_000);
        w.add_probe(quiet, 40_000);
        w.add_probe(busy, 5_000);
        w.add(busy, &hist(&[30_000, 31_000]));
        let c = w.close(10_000);
        assert_eq!((c.reported, c.probed), (1, 1));
        let r = w.records();
        let b = r.iter().find(|r| r.prefix == busy).unwrap();
        assert_eq!((b.samples, b.probes, b.min_ms), (2, 0, 30.0));
        let q = r.iter().find(|r| r.prefix == quiet).unwrap();
        assert_eq!((q.samples, q.probes, q.min_ms), (0, 2, 40.0));
        // The next window: only a probe for the busy prefix, whose handshakes are one
        // window old: they stand.
        w.add_probe(busy, 5_000);
        let c = w.close(20_000);
        assert_eq!(c.probed, 0);
        let b = w.records().into_iter().find(|r| r.prefix == busy).unwrap();
        assert_eq!((b.samples, b.min_ms), (2, 30.0));
        // Two windows on, a probe replaces them.
        w.close(30_000);
        w.add_probe(busy, 5_000);
        assert_eq!(w.close(40_000).probed, 1);
        let b = w.records().into_iter().find(|r| r.prefix == busy).unwrap();
        assert_eq!((b.samples, b.probes, b.min_ms), (0, 1, 5.0));
    }
}
