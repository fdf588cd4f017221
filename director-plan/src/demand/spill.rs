//! Capacity spill: a closed loop that keeps each site under a target share of its capacity,
//! the way Akamai's mapping keeps sites under a target and Cisco PfR moves the subset of
//! prefixes whose traffic covers the excess: when a site is over, just enough whole groups
//! ([`Group`]) move to their next site in DistributedDirector order; when it has been well
//! under for a while, they come back. Filling the next site only up to its own target and
//! walking on to the one after when it is full is Google's waterfall.
//!
//! The loop runs once per controller cycle on loads measured under the overrides it holds.
//! Two bands keep it from flapping: spill starts above `target`, return waits until the site
//! has been below `low` for `hold_s`, and a return never takes a site over `target`.

use std::collections::{BTreeMap, BTreeSet};

use director_common::maps::Decision;

use super::{
    clean_rate, decision_key, in_use, primaries, scope_cleared, share_at, site_shares, DecisionKey,
    Group,
};

/// The loop's knobs; shares are of a site's capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpillSettings {
    /// A site above `target` × capacity spills the excess.
    pub target: f64,
    /// Groups move back to a site only once it has been below `low` × capacity ...
    pub low: f64,
    /// ... for this many seconds without a break.
    pub hold_s: f64,
    /// The most of a site's load moved away in one cycle (share of its load), and how much
    /// is returned into a site in one cycle before returns stop (share of its target load;
    /// the group that crosses it still comes back): a wrong measurement moves a bounded
    /// amount.
    pub max_step: f64,
}

impl Default for SpillSettings {
    fn default() -> Self {
        SpillSettings {
            target: 0.85,
            low: 0.70,
            hold_s: 60.0,
            max_step: 0.25,
        }
    }
}

/// One site as measured this cycle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiteLoad {
    pub site: usize,
    /// Answers+flows per second the site can take. `None`: no known limit; the site never
    /// spills and takes any spill sent its way (an origin, a cloud site).
    pub capacity: Option<f64>,
    /// Answers+flows per second measured over the last window, under the overrides in force.
    pub load: f64,
}

/// A group moved (or moved back) this cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub service: u32,
    /// The group's identity: its planned decision, scope cleared.
    pub planned: Decision,
    /// The site the group's answers leave ...
    pub from: usize,
    /// ... and the site its new first candidate is at.
    pub to: usize,
    /// Answers+flows per second leaving `from` (the group's rate times its share there).
    pub rate: f64,
    /// The caller's `loss(group, from, to)` for a spill; a return carries the loss of the
    /// override it ends.
    pub loss: f64,
}

/// What one cycle did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cycle {
    pub moves: Vec<Move>,
    pub returns: Vec<Move>,
    /// Sites over target this cycle (measured), most over first.
    pub over: Vec<usize>,
    /// Every site was over target: there was nowhere to spill to, nothing moved (the
    /// controller logs it: only more capacity helps).
    pub all_over: bool,
}

/// One group's override: the sites it avoids and what that cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub service: u32,
    pub planned: Decision,
    /// The sites demoted, in the order they were: the over site, then any full site the
    /// waterfall walked past.
    pub away: Vec<usize>,
    /// What the kernel should hold for the group: see [`demote`].
    pub effective: Decision,
    /// The group's rate, as of the last cycle that saw it.
    pub rate: f64,
    /// The loss of the last move.
    pub loss: f64,
    /// When the group first moved.
    pub since: f64,
}

/// The loop's state across cycles.
#[derive(Clone, Debug, Default)]
pub struct Spill {
    overrides: BTreeMap<(u32, DecisionKey), Override>,
    /// Per site with a capacity, since when it has been below `low` × capacity.
    below_since: BTreeMap<usize, f64>,
}

/// `planned` with the candidates at the `away` sites moved to the end, each part in its
/// order, so they still answer when everything else is down. Candidates without a site are
/// never demoted. `None` when no candidate is left in front (nowhere to go).
///
/// The rule for `primary` keeps DistributedDirector's tiers where it can: the primaries that
/// stay in front stay the equals (their weights decide, as before); when every primary was
/// demoted, the new equals are the leading candidates at the new first candidate's site
/// (the decision does not say which of the next best were equal in the sort, and one site's
/// servers are the nearest thing). Weights travel with their servers.
pub fn demote(
    planned: &Decision,
    away: &[usize],
    site_of: &dyn Fn(u16) -> Option<usize>,
) -> Option<Decision> {
    let n = in_use(planned);
    let p = primaries(planned);
    let demoted = |i: usize| site_of(planned.servers[i]).is_some_and(|s| away.contains(&s));
    let keep: Vec<usize> = (0..n).filter(|&i| !demoted(i)).collect();
    let first = *keep.first()?;
    let kept_primaries = keep.iter().take_while(|&&i| i < p).count();
    let primary = if kept_primaries > 0 {
        kept_primaries
    } else {
        let site = site_of(planned.servers[first]);
        if site.is_none() {
            1
        } else {
            keep.iter()
                .take_while(|&&i| site_of(planned.servers[i]) == site)
                .count()
        }
    };
    let mut d = Decision {
        primary: primary as u8,
        ..scope_cleared(planned)
    };
    for (k, i) in keep
        .iter()
        .copied()
        .chain((0..n).filter(|&i| demoted(i)))
        .enumerate()
    {
        d.servers[k] = planned.servers[i];
        d.weights[k] = planned.weights[i];
    }
    Some(d)
}

/// The site of a decision's first candidate with a site.
fn first_site(d: &Decision, site_of: &dyn Fn(u16) -> Option<usize>) -> Option<usize> {
    d.servers[..in_use(d)].iter().find_map(|&s| site_of(s))
}

/// Per site, the change a new decision makes for a group at `rate`: new shares minus old.
fn delta(old: &[(usize, f64)], new: &[(usize, f64)], rate: f64) -> BTreeMap<usize, f64> {
    let mut m: BTreeMap<usize, f64> = BTreeMap::new();
    for &(s, v) in new {
        *m.entry(s).or_default() += v * rate;
    }
    for &(s, v) in old {
        *m.entry(s).or_default() -= v * rate;
    }
    m
}

/// Loads and limits during one cycle: measured loads plus what this cycle moved.
struct Board {
    projected: BTreeMap<usize, f64>,
    /// `None`: unlimited.
    limit: BTreeMap<usize, Option<f64>>,
}

impl Board {
    /// Whether `site` can take `more` and stay within its target. Sites the caller did not
    /// list have no known load: they take nothing.
    fn room(&self, site: usize, more: f64) -> bool {
        match self.limit.get(&site) {
            Some(None) => true,
            Some(Some(limit)) => self.projected.get(&site).copied().unwrap_or(0.0) + more <= *limit,
            None => false,
        }
    }

    fn apply(&mut self, d: &BTreeMap<usize, f64>) {
        for (&s, &v) in d {
            *self.projected.entry(s).or_default() += v;
        }
    }
}

/// Where a group goes when `from` is demoted on top of `away`: walks on past any site the
/// move would take over its target (the waterfall), demoting it too. Returns the new
/// `away`, the decision, and the load change per site; `None` when no site has room.
fn waterfall(
    planned: &Decision,
    away: &[usize],
    from: usize,
    current: &[(usize, f64)],
    rate: f64,
    board: &Board,
    site_of: &dyn Fn(u16) -> Option<usize>,
) -> Option<(Vec<usize>, Decision, BTreeMap<usize, f64>)> {
    let mut away = away.to_vec();
    away.push(from);
    // Each round demotes one more site, so this ends within the number of candidates.
    for _ in 0..=in_use(planned) {
        let d = demote(planned, &away, site_of)?;
        let shares = site_shares(&d, site_of);
        if shares.is_empty() {
            return None;
        }
        let change = delta(current, &shares, rate);
        // The sites gaining, in the new decision's candidate order (its first site first).
        let full = d.servers[..in_use(&d)]
            .iter()
            .filter_map(|&s| site_of(s))
            .find(|s| {
                change
                    .get(s)
                    .is_some_and(|&v| v > 0.0 && !board.room(*s, v))
            });
        match full {
            None => return Some((away, d, change)),
            Some(s) => away.push(s),
        }
    }
    None
}

impl Spill {
    pub fn new() -> Spill {
        Spill::default()
    }

    /// The decision the kernel should hold for `service`'s group `planned` (scope ignored),
    /// when it has an override.
    pub fn effective(&self, service: u32, planned: &Decision) -> Option<Decision> {
        self.overrides
            .get(&(service, decision_key(&scope_cleared(planned))))
            .map(|o| o.effective)
    }

    /// The overrides in force, by service then decision, for reports.
    pub fn overrides(&self) -> impl Iterator<Item = &Override> + '_ {
        self.overrides.values()
    }

    /// One cycle: `sites` as measured under the overrides in force; `groups`: every group of
    /// the current plan (rate 0 included: an override whose group is missing belongs to an
    /// older plan and is dropped); `loss(group, from, to)`: what moving the group costs its
    /// clients, in any unit the caller likes (the order is all that counts; an RTT increase
    /// is the obvious one).
    ///
    /// Spill: each site over target, most over first (load over capacity), sheds groups
    /// that have a share there, least hurt first (loss ascending, then larger rate, then
    /// service and decision), whole groups only, until the moved rate reaches the excess,
    /// never beyond 110 % of it nor `max_step` of the site's load. A group moves to its
    /// next site in DD order with room (see [`waterfall`]) and is skipped when none has;
    /// a group moves at most once per cycle. When every site is over (and none is
    /// unlimited), nothing moves.
    ///
    /// Return: an override with a demoted site that has been below `low` for `hold_s`
    /// drops that site, most hurt group first, while every site gaining stays within its
    /// target and has taken back less than `max_step` of its target load this cycle: the
    /// group that crosses that mark still comes back, so a group moved out whole (up to
    /// `max_step` of a load over target, more than the same share of the target load)
    /// comes back whole, in one cycle, once it fits under the target. A site that took
    /// groups back starts a new hold, so the next batch is judged on a load measured with
    /// this one.
    #[allow(clippy::too_many_arguments)]
    pub fn cycle(
        &mut self,
        now_s: f64,
        sites: &[SiteLoad],
        groups: &[Group],
        site_of: &dyn Fn(u16) -> Option<usize>,
        loss: &dyn Fn(&Group, usize, usize) -> f64,
        settings: &SpillSettings,
    ) -> Cycle {
        let mut out = Cycle::default();

        // Groups in a canonical order, one per key (a key given twice adds its rates).
        let mut by_key: BTreeMap<(u32, DecisionKey), Group> = BTreeMap::new();
        for g in groups {
            let planned = scope_cleared(&g.planned);
            let e = by_key
                .entry((g.service, decision_key(&planned)))
                .or_insert(Group {
                    service: g.service,
                    planned,
                    rate: 0.0,
                });
            e.rate += clean_rate(g.rate);
        }
        self.overrides.retain(|k, _| by_key.contains_key(k));
        for (k, o) in &mut self.overrides {
            if let Some(g) = by_key.get(k) {
                o.rate = g.rate;
            }
        }

        // Sites: the last entry for a site wins; loads cleaned like rates.
        let mut site_map: BTreeMap<usize, SiteLoad> = BTreeMap::new();
        for s in sites {
            site_map.insert(s.site, *s);
        }
        let mut board = Board {
            projected: BTreeMap::new(),
            limit: BTreeMap::new(),
        };
        for s in site_map.values() {
            board.projected.insert(s.site, clean_rate(s.load));
            board
                .limit
                .insert(s.site, s.capacity.map(|c| settings.target * c));
        }

        // Holds: a site with a capacity below `low` keeps its start time, others lose it.
        for s in site_map.values() {
            match s.capacity {
                Some(c) if clean_rate(s.load) < settings.low * c => {
                    self.below_since.entry(s.site).or_insert(now_s);
                }
                _ => {
                    self.below_since.remove(&s.site);
                }
            }
        }
        self.below_since.retain(|s, _| site_map.contains_key(s));

        // Over target, most over first (by load over capacity, then site index).
        let mut over: Vec<(f64, usize, f64)> = site_map
            .values()
            .filter_map(|s| {
                let c = s.capacity?;
                let load = clean_rate(s.load);
                (load > settings.target * c).then(|| {
                    let ratio = if c > 0.0 { load / c } else { f64::INFINITY };
                    (ratio, s.site, load - settings.target * c)
                })
            })
            .collect();
        over.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        out.over = over.iter().map(|&(_, s, _)| s).collect();
        let unlimited = site_map.values().any(|s| s.capacity.is_none());
        let limited = site_map.values().filter(|s| s.capacity.is_some()).count();
        out.all_over = !unlimited && limited > 0 && over.len() == limited;

        let mut touched: BTreeSet<(u32, DecisionKey)> = BTreeSet::new();
        if !out.all_over {
            for &(_, site, excess) in &over {
                self.shed(
                    now_s,
                    site,
                    excess,
                    &by_key,
                    &mut board,
                    &mut touched,
                    site_of,
                    loss,
                    settings,
                    &mut out,
                );
            }
        }
        self.bring_back(
            now_s, &by_key, &mut board, &touched, site_of, settings, &mut out,
        );
        out
    }

    /// Moves groups off the over `site` until `excess` is covered (see [`Spill::cycle`]).
    #[allow(clippy::too_many_arguments)]
    fn shed(
        &mut self,
        now_s: f64,
        site: usize,
        excess: f64,
        by_key: &BTreeMap<(u32, DecisionKey), Group>,
        board: &mut Board,
        touched: &mut BTreeSet<(u32, DecisionKey)>,
        site_of: &dyn Fn(u16) -> Option<usize>,
        loss: &dyn Fn(&Group, usize, usize) -> f64,
        settings: &SpillSettings,
        out: &mut Cycle,
    ) {
        let load = site_map_load(board, site);
        let cap_moved = (excess * 1.10).min(settings.max_step * load);
        // Candidates with their estimated destination and loss, from the loads before this
        // site's moves: the order is fixed up front so it cannot depend on input order.
        let mut cands: Vec<(f64, f64, (u32, DecisionKey))> = Vec::new();
        for (k, g) in by_key {
            if touched.contains(k) || g.rate <= 0.0 {
                continue;
            }
            let (away, current) = self.current(k, g);
            let shares = site_shares(&current, site_of);
            let amount = g.rate * share_at(&shares, site);
            if amount <= 0.0 {
                continue;
            }
            let Some((_, d, _)) =
                waterfall(&g.planned, &away, site, &shares, g.rate, board, site_of)
            else {
                continue;
            };
            let Some(to) = first_site(&d, site_of) else {
                continue;
            };
            cands.push((clean_loss(loss(g, site, to)), g.rate, *k));
        }
        cands.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(b.1.total_cmp(&a.1))
                .then(a.2.cmp(&b.2))
        });

        let mut moved = 0.0;
        for (_, _, k) in cands {
            if moved >= excess {
                break;
            }
            let Some(g) = by_key.get(&k) else { continue };
            let (away, current) = self.current(&k, g);
            let shares = site_shares(&current, site_of);
            let amount = g.rate * share_at(&shares, site);
            if moved + amount > cap_moved {
                continue;
            }
            // Again with the loads as they are now: earlier moves may have filled its
            // first choice.
            let Some((away, d, change)) =
                waterfall(&g.planned, &away, site, &shares, g.rate, board, site_of)
            else {
                continue;
            };
            let Some(to) = first_site(&d, site_of) else {
                continue;
            };
            let l = clean_loss(loss(g, site, to));
            board.apply(&change);
            moved += amount;
            touched.insert(k);
            let since = self.overrides.get(&k).map_or(now_s, |o| o.since);
            self.overrides.insert(
                k,
                Override {
                    service: g.service,
                    planned: g.planned,
                    away,
                    effective: d,
                    rate: g.rate,
                    loss: l,
                    since,
                },
            );
            out.moves.push(Move {
                service: g.service,
                planned: g.planned,
                from: site,
                to,
                rate: amount,
                loss: l,
            });
        }
    }

    /// Ends or shortens overrides whose demoted sites have been quiet (see [`Spill::cycle`]).
    #[allow(clippy::too_many_arguments)]
    fn bring_back(
        &mut self,
        now_s: f64,
        by_key: &BTreeMap<(u32, DecisionKey), Group>,
        board: &mut Board,
        touched: &BTreeSet<(u32, DecisionKey)>,
        site_of: &dyn Fn(u16) -> Option<usize>,
        settings: &SpillSettings,
        out: &mut Cycle,
    ) {
        let ready = |s: &usize| {
            self.below_since
                .get(s)
                .is_some_and(|&t| now_s - t >= settings.hold_s)
        };
        // Most hurt first, then by key.
        let mut order: Vec<(f64, (u32, DecisionKey))> = self
            .overrides
            .iter()
            .filter(|(k, o)| !touched.contains(*k) && o.away.iter().any(ready))
            .map(|(k, o)| (o.loss, *k))
            .collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        if order.is_empty() {
            return;
        }
        let mut returned: BTreeMap<usize, f64> = BTreeMap::new();
        let budget = |board: &Board, s: usize| -> Option<f64> {
            board
                .limit
                .get(&s)
                .copied()
                .flatten()
                .map(|l| settings.max_step * l)
        };
        let mut refilled: BTreeSet<usize> = BTreeSet::new();
        for (_, k) in order {
            let (Some(o), Some(g)) = (self.overrides.get(&k), by_key.get(&k)) else {
                continue;
            };
            let current_shares = site_shares(&o.effective, site_of);
            let mut chosen = None;
            for (i, back) in o.away.iter().enumerate() {
                if !ready(back) {
                    continue;
                }
                let mut away = o.away.clone();
                away.remove(i);
                let d = if away.is_empty() {
                    Some(g.planned)
                } else {
                    demote(&g.planned, &away, site_of)
                };
                let Some(d) = d else { continue };
                let shares = site_shares(&d, site_of);
                let change = delta(&current_shares, &shares, g.rate);
                // The budget counts what came back before this group, not with it: a group
                // can leave bigger than the budget and must come back, even behind smaller
                // ones; the overshoot is one group, and `room` keeps it under the target.
                let fits = change.iter().all(|(&s, &v)| {
                    v <= 0.0
                        || (board.room(s, v)
                            && budget(board, s)
                                .is_none_or(|b| returned.get(&s).copied().unwrap_or(0.0) < b))
                });
                if fits {
                    chosen = Some((away, d, change));
                    break;
                }
            }
            let Some((away, d, change)) = chosen else {
                continue;
            };
            let from = first_site(&o.effective, site_of);
            let to = first_site(&d, site_of);
            let gained: f64 = change.values().filter(|&&v| v > 0.0).sum();
            for (&s, &v) in &change {
                if v > 0.0 {
                    *returned.entry(s).or_default() += v;
                    refilled.insert(s);
                }
            }
            board.apply(&change);
            let l = o.loss;
            if let (Some(from), Some(to)) = (from, to) {
                if gained > 0.0 {
                    out.returns.push(Move {
                        service: g.service,
                        planned: g.planned,
                        from,
                        to,
                        rate: gained,
                        loss: l,
                    });
                }
            }
            if away.is_empty() {
                self.overrides.remove(&k);
            } else if let Some(o) = self.overrides.get_mut(&k) {
                o.away = away;
                o.effective = d;
            }
        }
        for s in refilled {
            if self.below_since.contains_key(&s) {
                self.below_since.insert(s, now_s);
            }
        }
    }

    /// A group's demoted sites and the decision in force for it.
    fn current(&self, k: &(u32, DecisionKey), g: &Group) -> (Vec<usize>, Decision) {
        match self.overrides.get(k) {
            Some(o) => (o.away.clone(), o.effective),
            None => (Vec::new(), g.planned),
        }
    }
}

fn site_map_load(board: &Board, site: usize) -> f64 {
    board.projected.get(&site).copied().unwrap_or(0.0)
}

/// A loss the caller could not compute (NaN) sorts last among equals rather than anywhere.
fn clean_loss(l: f64) -> f64 {
    if l.is_nan() {
        f64::INFINITY
    } else {
        l
    }
}

#[cfg(test)]
mod tests;
