//! Demand benchmark (part of `cargo xtask bench`, `--only demand`), at the controller
//! bench's full scale (the full IPv4 table as every site's view, GeoLite2 City, five sites,
//! three services):
//!
//! - `impact`: the candidate's compile (here: the first PoP's server drained) and the
//!   comparison of the two tables weighted by one demand item per table entry;
//! - one demand cycle of `run` over that table in the kernel: the counters read
//!   (`DIR_DEMAND`, every decision id on every CPU), the stored decisions' owners, the
//!   groups and site loads, capacity spill and replicas.
//!
//! The counting's cost per answer is in the testrun section (its demand rows).

use std::time::Instant;

use anyhow::Result;
use director_ctl::api::Log;
use director_ctl::controller::{self, config::Config, demand::Demand};
use director_ctl::kernel;
use director_plan::data::Data;
use director_plan::decide::{self, Ids, Unavailable};
use director_plan::demand::impact::impact;
use director_plan::demand::spill::SiteLoad;
use director_plan::demand::PrefixDemand;
use director_tests::bench::scale::write_config;
use director_tests::bench::sys;
use director_tests::bench::table::{print_pairs, Pair};
use director_tests::netns;
use director_tests::pins::PinDir;

fn peak_rss_mb() -> f64 {
    sys::proc_kb("/proc/self/status", "VmHWM").map_or(0.0, |kb| kb as f64 / 1024.0)
}

fn main() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("director-bench-demand-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let r = run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    print_pairs(
        "demand: impact and the control loop at full scale (5 sites, 3 services; RouteViews, GeoLite2 City)",
        &r?,
    );
    Ok(())
}

fn run(dir: &std::path::Path) -> Result<Vec<Pair>> {
    let config = write_config(dir)?;
    let cfg = Config::load(&config)?;
    let data = Data::load(&cfg.plan)?;
    let ids = Ids::positional(&cfg.plan);
    let current = decide::compute(&cfg.plan, &data, &ids, &Unavailable::default())?;
    let entries: usize = current.tables.iter().map(|t| t.2.entries.len()).sum();

    // The candidate: the first PoP's server drained.
    let t = Instant::now();
    let mut down = Unavailable::default();
    down.servers.insert(ids.servers[0]);
    let candidate = decide::compute(&cfg.plan, &data, &ids, &down)?;
    let compile_s = t.elapsed().as_secs_f64();
    // One demand item per entry, at the entry's prefix, rates 1 to 7.
    let demand = PrefixDemand::from_rates(current.tables.iter().flat_map(|(id, _, t)| {
        t.entries
            .iter()
            .enumerate()
            .map(move |(i, (p, _))| (*id, *p, 1.0 + (i % 7) as f64))
    }));
    let site_of = |id: u16| -> Option<usize> {
        let i = ids.servers.iter().position(|&s| s == id)?;
        let site = &cfg.servers[i].site;
        cfg.plan.sites.iter().position(|s| &s.name == site)
    };
    let sites: Vec<SiteLoad> = (0..cfg.plan.sites.len())
        .map(|i| SiteLoad {
            site: i,
            capacity: None,
            load: 0.0,
        })
        .collect();
    let now: Vec<(u32, &[_])> = current
        .tables
        .iter()
        .map(|(id, _, t)| (*id, &t.entries[..]))
        .collect();
    let next: Vec<(u32, &[_])> = candidate
        .tables
        .iter()
        .map(|(id, _, t)| (*id, &t.entries[..]))
        .collect();
    let t = Instant::now();
    let i = impact(&now, &next, &demand, &site_of, &sites, 20);
    let compare_s = t.elapsed().as_secs_f64();
    let total: f64 = demand
        .services()
        .flat_map(|(_, v)| v.iter().map(|(_, r)| *r))
        .sum();

    // One cycle of `run`'s demand loop over the table in the kernel.
    let pins = PinDir::new(netns::PREFIX, "demand");
    let _ebpf = kernel::program::load(pins.path(), 0)?;
    let mut m = kernel::Maps::open(pins.path())?;
    controller::apply::sync(&mut m, &cfg, &current, &ids)?;
    let mut d = Demand::new(pins.path(), &cfg.demand, Log::Text);
    let verdict = |_: u32, _: u16| None;
    let ctx = controller::demand::Ctx {
        cfg: &cfg,
        data: &data,
        computed: &current,
        ids: &ids,
        verdict: &verdict,
        log: Log::Text,
    };
    d.cycle(&mut m, &ctx)?;
    let mut cycles = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        d.cycle(&mut m, &ctx)?;
        cycles.push(t.elapsed().as_secs_f64() * 1e3);
    }
    cycles.sort_by(f64::total_cmp);
    let groups: usize = d.report().services.iter().map(|s| s.decisions.len()).sum();
    let stored = m.choice_owners()?.len();
    Ok(vec![
        Pair(
            "table",
            format!(
                "{entries} entries, {} services, {stored} stored decisions",
                current.tables.len()
            ),
        ),
        Pair(
            "impact: candidate compile",
            format!("{compile_s:.2} s (the first PoP's server drained)"),
        ),
        Pair(
            "impact: comparison",
            format!(
                "{compare_s:.2} s for {} demand items over {entries} + {} entries; {:.0} % of \
                 the demand moves, {} prefixes answered differently",
                demand.len(),
                next.iter().map(|t| t.1.len()).sum::<usize>(),
                100.0 * i.moved_rate / total.max(1e-9),
                i.changed_ranges
            ),
        ),
        Pair(
            "impact: total",
            format!("{:.2} s (aim <= 10 s)", compile_s + compare_s),
        ),
        Pair(
            "demand cycle",
            format!(
                "{:.0} ms median ({:.0} .. {:.0} ms over 5; counters of {} decision ids on {} \
                 CPUs read, {groups} groups with demand)",
                cycles[2],
                cycles[0],
                cycles[4],
                2 * director_common::maps::MAX_CHOICES,
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            ),
        ),
        Pair("peak memory", format!("{:.0} MB", peak_rss_mb())),
    ])
}
