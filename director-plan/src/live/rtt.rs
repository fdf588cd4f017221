//! RTT measured at the sites by agents (`director-ctl agent`), merged into one table per
//! site for the `rtt` metric.
//!
//! An agent reports, per client /24 (/48) it saw handshakes from, the last complete window:
//! the minimum, the median and how many samples. The merge
//! - ignores windows with fewer than `min_samples` handshakes (one slow phone is not a path),
//! - smooths the window minima (the minimum is the path, the rest is queueing): a window
//!   within [`step`] of the smoothed value moves it by a quarter of the difference, one
//!   beyond it replaces it (a path change is taken at once, not over minutes),
//! - publishes a value only when it moved beyond max(1 ms, 5 %) from what was published, so
//!   jitter does not rewrite the table,
//! - forgets a measurement after `expire` without a usable window (then a file's value, or
//!   the next metric, applies),
//! - and rolls the /24s up to the BGP prefix that covers them: a client network's path is
//!   the route's, so the sample-weighted median of its /24s speaks for the whole prefix,
//!   unmeasured /24s included.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::Rtt;
use crate::model::IpNet;
use crate::prefix::order::{sort_key, sorted};

/// One agent's record for one client prefix: its last complete window (`director-ctl
/// agent`'s `GET /rtt` serves these).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The client /24 (IPv4) or /48 (IPv6).
    pub prefix: IpNet,
    pub min_ms: f64,
    /// From a log histogram: within 4.5 % of the true median (exact when min = max).
    pub median_ms: f64,
    /// Handshakes in the window (0 in a probed record).
    pub samples: u64,
    /// [start, end) in Unix ms. The first window after the agent starts begins when it did.
    pub window_start_ms: u64,
    pub window_end_ms: u64,
    /// Active probes' RTTs the window holds instead of handshakes (the agent probes only
    /// prefixes the controller asked about, and reports a probed window only for a prefix
    /// without enough handshakes). Absent in older agents' reports: 0, handshakes; and an
    /// older controller, reading `samples` 0, ignores probed records.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub probes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What an operator set in `[rtt]`.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub min_samples: u64,
    pub expire_ms: u64,
}

/// Where a published value came from, for `explain`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The agent's URL, or `store:<site>/<agent>` for one read from a fleet's store.
    pub agent: String,
    /// The /24s (/48s) it stands for, and their handshakes in the last windows taken.
    pub measured: Vec<IpNet>,
    pub samples: u64,
    /// Active probes' RTTs among them (prefixes without handshakes that were probed).
    #[serde(default)]
    pub probes: u64,
    /// When the newest window it took ended (the agent's clock, ms since the epoch).
    pub window_end_ms: u64,
    /// When the merge last took a window for it (this host's clock).
    pub taken_ms: u64,
}

#[derive(Clone, Debug)]
struct Track {
    smoothed_ns: f64,
    published: Option<Rtt>,
    samples: u64,
    /// The last window taken was a probed one (`samples` then counts probes).
    probed: bool,
    window_end_ms: u64,
    taken_ms: u64,
    agent: String,
}

/// A prefix's place in table order ([`sort_key`]).
type Key = (u8, u128, u8);

/// The live RTT of every (site, measured prefix).
#[derive(Clone, Debug)]
pub struct Merge {
    settings: Settings,
    tracks: Vec<BTreeMap<Key, (IpNet, Track)>>,
}

/// A smoothed value beyond this of a new window minimum is a path change: max(2 ms, 10 %),
/// twice the publishing threshold, so that jitter the threshold absorbs never counts as one.
fn step(ns: f64) -> f64 {
    (2.0 * Rtt::NS_PER_MS as f64).max(ns * 0.10)
}

/// Publish again only beyond max(1 ms, 5 %) of what was published.
fn moved(published: Rtt, now: Rtt) -> bool {
    let (a, b) = (published.0 as f64, now.0 as f64);
    (a - b).abs() > (Rtt::NS_PER_MS as f64).max(a * 0.05)
}

impl Merge {
    pub fn new(sites: usize, settings: Settings) -> Merge {
        Merge {
            settings,
            tracks: vec![BTreeMap::new(); sites],
        }
    }

    /// Takes one poll of `agent`, which measures from `site`, at `now_ms`. Returns whether a
    /// published value changed (appeared, moved beyond the threshold).
    pub fn take(&mut self, site: usize, agent: &str, records: &[Record], now_ms: u64) -> bool {
        let Some(tracks) = self.tracks.get_mut(site) else {
            return false;
        };
        let mut changed = false;
        for r in records {
            let probed = r.samples == 0 && r.probes > 0;
            let enough = probed || r.samples >= self.settings.min_samples;
            let usable = enough && r.min_ms.is_finite() && r.min_ms > 0.0 && r.min_ms < 100_000.0;
            if !usable {
                continue;
            }
            let ns = r.min_ms * Rtt::NS_PER_MS as f64;
            let prefix = r.prefix.trunc();
            let t = tracks
                .entry(sort_key(&prefix))
                .or_insert_with(|| {
                    (
                        prefix,
                        Track {
                            smoothed_ns: ns,
                            published: None,
                            samples: 0,
                            probed,
                            window_end_ms: 0,
                            taken_ms: now_ms,
                            agent: agent.to_string(),
                        },
                    )
                })
                .1
                .clone();
            // The same window polled twice counts once.
            if t.window_end_ms == r.window_end_ms && t.agent == agent {
                continue;
            }
            // A handshake measurement wins over a probe's while it lasts (until `expire`):
            // it is the clients' own traffic, the probe a stand-in host of their network.
            if probed && !t.probed && t.published.is_some() {
                continue;
            }
            let mut t = t;
            if (ns - t.smoothed_ns).abs() > step(t.smoothed_ns) {
                t.smoothed_ns = ns;
            } else {
                t.smoothed_ns += (ns - t.smoothed_ns) / 4.0;
            }
            t.samples = if probed { r.probes } else { r.samples };
            t.probed = probed;
            t.window_end_ms = r.window_end_ms;
            t.taken_ms = now_ms;
            t.agent = agent.to_string();
            let now = Rtt(t.smoothed_ns.round() as u64);
            if t.published.is_none_or(|p| moved(p, now)) {
                t.published = Some(now);
                changed = true;
            }
            tracks.insert(sort_key(&prefix), (prefix, t));
        }
        changed
    }

    /// Forgets measurements without a usable window for `expire`; returns whether any
    /// published value went.
    pub fn expire(&mut self, now_ms: u64) -> bool {
        let limit = self.settings.expire_ms;
        let mut gone = false;
        for tracks in &mut self.tracks {
            let before = tracks.len();
            tracks.retain(|_, (_, t)| now_ms.saturating_sub(t.taken_ms) <= limit);
            gone |= tracks.len() != before;
        }
        gone
    }

    /// Whether `site` has a measurement of `prefix` (a /24 or /48 as agents report them)
    /// and, if so, whether it is a probe's and when it was taken (this host's ms): what
    /// the controller's choice of prefixes to probe goes by.
    pub fn state(&self, site: usize, prefix: &IpNet) -> Option<(bool, u64)> {
        let (_, t) = self.tracks.get(site)?.get(&sort_key(&prefix.trunc()))?;
        Some((t.probed, t.taken_ms))
    }

    /// Every measured prefix (any site), for callers that watch what changed.
    pub fn measured(&self) -> usize {
        self.tracks.iter().map(BTreeMap::len).sum()
    }

    /// A site's published values rolled up to the BGP prefixes covering them (`route_of`:
    /// the most specific route prefix holding a prefix, if any), sorted, with their
    /// sources. A measured prefix no route covers stands for itself.
    pub fn table(
        &self,
        site: usize,
        route_of: impl Fn(&IpNet) -> Option<IpNet>,
    ) -> Vec<(IpNet, Rtt, Source)> {
        let Some(tracks) = self.tracks.get(site) else {
            return Vec::new();
        };
        let mut groups: BTreeMap<Key, Group<'_>> = BTreeMap::new();
        for (p, t) in tracks.values() {
            if t.published.is_none() {
                continue;
            }
            let at = route_of(p).filter(|r| r.contains(p)).unwrap_or(*p);
            groups
                .entry(sort_key(&at))
                .or_insert_with(|| (at, Vec::new()))
                .1
                .push((p, t));
        }
        let out = groups
            .into_values()
            .filter_map(|(at, members)| {
                let rtt = weighted_median(&members)?;
                let newest = members.iter().max_by_key(|m| m.1.window_end_ms)?.1;
                Some((
                    at,
                    (
                        rtt,
                        Source {
                            agent: newest.agent.clone(),
                            measured: members.iter().map(|m| *m.0).collect(),
                            samples: members
                                .iter()
                                .filter(|m| !m.1.probed)
                                .map(|m| m.1.samples)
                                .sum(),
                            probes: members
                                .iter()
                                .filter(|m| m.1.probed)
                                .map(|m| m.1.samples)
                                .sum(),
                            window_end_ms: newest.window_end_ms,
                            taken_ms: members.iter().map(|m| m.1.taken_ms).max().unwrap_or(0),
                        },
                    ),
                ))
            })
            .collect();
        sorted(out)
            .into_iter()
            .map(|(p, (r, s))| (p, r, s))
            .collect()
    }
}

/// The published value at which half the samples are reached: a /24 counts by how many
/// handshakes it saw, so a busy network outweighs one odd client in a quiet one.
/// A route prefix and the measured prefixes it holds.
type Group<'a> = (IpNet, Vec<(&'a IpNet, &'a Track)>);

fn weighted_median(members: &[(&IpNet, &Track)]) -> Option<Rtt> {
    let mut v: Vec<(Rtt, u64)> = members
        .iter()
        .filter_map(|(_, t)| t.published.map(|p| (p, t.samples.max(1))))
        .collect();
    v.sort_unstable();
    let total: u64 = v.iter().map(|e| e.1).sum();
    let mut seen = 0;
    for (r, n) in &v {
        seen += n;
        if seen * 2 >= total {
            return Some(*r);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(prefix: &str, ms: f64, samples: u64, end: u64) -> Record {
        Record {
            prefix: prefix.parse().unwrap(),
            min_ms: ms,
            median_ms: ms * 1.1,
            samples,
            window_start_ms: end - 10_000,
            window_end_ms: end,
            probes: 0,
        }
    }

    fn probed(prefix: &str, ms: f64, probes: u64, end: u64) -> Record {
        Record {
            samples: 0,
            probes,
            ..rec(prefix, ms, 0, end)
        }
    }

    fn merge() -> Merge {
        Merge::new(
            2,
            Settings {
                min_samples: 5,
                expire_ms: 60_000,
            },
        )
    }

    fn ms(t: &[(IpNet, Rtt, Source)], p: &str) -> Option<f64> {
        let p: IpNet = p.parse().unwrap();
        t.iter().find(|e| e.0 == p).map(|e| e.1.ms())
    }

    #[test]
    fn thin_windows_are_ignored_and_repeats_count_once() {
        let mut m = merge();
        assert!(!m.take(0, "a", &[rec("198.51.100.0/24", 40.0, 4, 10_000)], 1));
        assert!(m.table(0, |_| None).is_empty());
        assert!(m.take(0, "a", &[rec("198.51.100.0/24", 40.0, 5, 10_000)], 2));
        // The same window again (a poll faster than the window) changes nothing.
        assert!(!m.take(0, "a", &[rec("198.51.100.0/24", 80.0, 5, 10_000)], 3));
        assert_eq!(ms(&m.table(0, |_| None), "198.51.100.0/24"), Some(40.0));
        assert!(m.table(1, |_| None).is_empty());
    }

    #[test]
    fn jitter_is_smoothed_and_not_published_but_a_step_is_taken_at_once() {
        let mut m = merge();
        let p = "198.51.100.0/24";
        m.take(0, "a", &[rec(p, 40.0, 50, 10_000)], 0);
        // ±5 % jitter of the window minimum, 200 windows: never published again.
        for i in 1..200u64 {
            let j = if i % 2 == 0 { 42.0 } else { 38.0 };
            assert!(
                !m.take(0, "a", &[rec(p, j, 50, 10_000 + i * 10_000)], i),
                "{i}"
            );
        }
        assert_eq!(ms(&m.table(0, |_| None), p), Some(40.0));
        // A path change to 80 ms: the next window publishes it.
        assert!(m.take(0, "a", &[rec(p, 80.0, 50, 3_000_000)], 300));
        assert_eq!(ms(&m.table(0, |_| None), p), Some(80.0));
    }

    #[test]
    fn silence_expires_a_measurement() {
        let mut m = merge();
        m.take(0, "a", &[rec("198.51.100.0/24", 40.0, 50, 10_000)], 1_000);
        assert!(!m.expire(61_000));
        assert!(m.expire(61_001));
        assert!(m.table(0, |_| None).is_empty());
    }

    #[test]
    fn slash24s_roll_up_to_their_route_by_weighted_median() {
        let mut m = merge();
        let route: IpNet = "203.0.112.0/22".parse().unwrap();
        m.take(
            0,
            "a",
            &[
                rec("203.0.112.0/24", 30.0, 10, 10_000),
                rec("203.0.113.0/24", 50.0, 100, 10_000),
                rec("203.0.114.0/24", 20.0, 10, 10_000),
                rec("192.0.2.0/24", 70.0, 10, 10_000),
            ],
            5,
        );
        let t = m.table(0, |p| route.contains(p).then_some(route));
        assert_eq!(t.len(), 2);
        assert_eq!(ms(&t, "203.0.112.0/22"), Some(50.0));
        assert_eq!(ms(&t, "192.0.2.0/24"), Some(70.0));
        let src = &t.iter().find(|e| e.0 == route).unwrap().2;
        assert_eq!(src.samples, 120);
        assert_eq!(src.measured.len(), 3);
        assert_eq!(src.agent, "a");
        // Sorted for the sweep.
        assert!(t.windows(2).all(|w| sort_key(&w[0].0) < sort_key(&w[1].0)));
    }

    #[test]
    fn a_probe_counts_alone_but_handshakes_win_over_it() {
        let mut m = merge();
        let p = "198.51.100.0/24";
        // One probe is enough (min_samples is for handshakes).
        assert!(m.take(0, "a", &[probed(p, 40.0, 1, 10_000)], 1));
        let t = m.table(0, |_| None);
        assert_eq!(ms(&t, p), Some(40.0));
        assert_eq!((t[0].2.samples, t[0].2.probes), (0, 1));
        assert_eq!(m.state(0, &p.parse().unwrap()), Some((true, 1)));
        // Handshakes replace it (a path change beyond the step is taken at once) ...
        assert!(m.take(0, "a", &[rec(p, 60.0, 5, 20_000)], 2));
        let t = m.table(0, |_| None);
        assert_eq!(ms(&t, p), Some(60.0));
        assert_eq!((t[0].2.samples, t[0].2.probes), (5, 0));
        // ... and a probe after them changes nothing while they last.
        assert!(!m.take(0, "a", &[probed(p, 20.0, 3, 30_000)], 3));
        assert_eq!(ms(&m.table(0, |_| None), p), Some(60.0));
        assert_eq!(m.state(0, &p.parse().unwrap()), Some((false, 2)));
        // Once they expired, a probe counts again.
        assert!(m.expire(70_000));
        assert!(m.take(0, "a", &[probed(p, 20.0, 3, 80_000)], 70_001));
        assert_eq!(ms(&m.table(0, |_| None), p), Some(20.0));
    }

    #[test]
    fn older_reports_without_probes_parse_as_handshakes() {
        let r: Record = serde_json::from_str(
            r#"{"prefix":"192.0.2.0/24","min_ms":40.0,"median_ms":41.0,"samples":7,
                "window_start_ms":1,"window_end_ms":2}"#,
        )
        .unwrap();
        assert_eq!((r.samples, r.probes), (7, 0));
        // A handshake record is written as before (no `probes` key).
        assert!(!serde_json::to_string(&r).unwrap().contains("probes"));
    }
}
