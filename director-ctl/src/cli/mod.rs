//! The command line: arguments ([`Cli`], the clap definitions in `args`), operator text
//! ([`text`]) and what each command prints ([`print`]: plain text; `--json` prints the
//! [`crate::api`] documents). Commands call `ops` for operator operations and `controller`
//! for `run`, `check` and `explain`.

mod args;
pub mod generate;
pub mod print;
pub mod text;
mod web;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use director_common::rrl::{DEFAULT_V4_PREFIX, DEFAULT_V6_PREFIX};

pub use args::Cli;
use args::{
    AddressCmd, Cmd, DecapCmd, DnssecCmd, ExemptCmd, FleetArgs, FleetCmd, FlowsCmd, Role, RouteCmd,
    RrlCmd, ServerCmd, ServiceCmd, ZoneCmd,
};

use crate::checked;
use crate::controller;
use crate::fleet;
use crate::kernel::{self, program, Maps, WriteLock};
use crate::ops;

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Prints `doc` as JSON, or as the operator's text.
fn zone(c: ZoneCmd) -> Result<()> {
    use crate::dns::file::{self, ZoneFile};
    match c {
        ZoneCmd::Export { config, origin } => {
            let f = ZoneFile::load(&config)?;
            let zones = f.build(&[])?;
            let wanted = origin.map(|o| crate::dns::zone::absolute(&o)).transpose()?;
            let mut n = 0;
            for z in zones.all() {
                if wanted.as_ref().is_none_or(|w| *w == z.origin) {
                    print!("{}", z.export());
                    n += 1;
                }
            }
            if n == 0 {
                anyhow::bail!("{} has no such zone", config.display());
            }
        }
        ZoneCmd::Add {
            zones,
            origin,
            ns,
            rname,
        } => {
            let ns = ns
                .iter()
                .map(|s| text::name_server(s))
                .collect::<Result<_>>()?;
            file::add(&zones, &crate::dns::ZoneConfig::new(origin, ns, rname))?;
        }
        ZoneCmd::Del { zones, origin } => file::del(&zones, &origin)?,
        ZoneCmd::List { config, json } => {
            let f = ZoneFile::load(&config)?;
            let list = crate::dns::zone_list(&f.build(&[])?);
            show(json, &list, print::zones)?;
        }
    }
    Ok(())
}

/// The zones of a config (signed as `run` signs them) or of a zones file (as `serve` does).
fn signed_zones(path: &std::path::Path) -> Result<crate::dns::Zones> {
    let f = crate::dns::file::ZoneFile::load(path)?;
    if f.services.is_empty() {
        return f.build_signed(&[]);
    }
    let cfg = controller::config::Config::load(path)?;
    cfg.build_zones(cfg.zone_serial())
}

fn dnssec(c: DnssecCmd) -> Result<()> {
    let pick = |zones: crate::dns::Zones, only: Option<String>, path: &std::path::Path| {
        let wanted = only.map(|o| crate::dns::zone::absolute(&o)).transpose()?;
        let list: Vec<crate::dns::zone::Zone> = zones
            .all()
            .iter()
            .filter(|z| z.signed.is_some() && wanted.as_ref().is_none_or(|w| *w == z.origin))
            .cloned()
            .collect();
        if list.is_empty() {
            anyhow::bail!(
                "{} has no such signed zone (one with `dnssec`)",
                path.display()
            );
        }
        anyhow::Ok(list)
    };
    match c {
        DnssecCmd::Keygen { zone, dir } => {
            let (private, public, ds) = crate::dns::keys::generate(&zone, &dir)?;
            println!("{}\n{}\n{ds}", private.display(), public.display());
        }
        DnssecCmd::Ds { config, zone } => {
            let zones = signed_zones(&config)?;
            for z in pick(zones, zone, &config)? {
                print!("{}", crate::dns::keys::ds_lines(&z)?);
            }
        }
        DnssecCmd::Dump { config, zone } => {
            let zones = signed_zones(&config)?;
            for z in pick(zones, zone, &config)? {
                print!("{}", crate::dns::keys::dump(&z));
            }
        }
    }
    Ok(())
}

/// A fleet member's default name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "director".into())
}

/// `run --store`: a publisher or an edge.
fn run_fleet(
    store: String,
    a: FleetArgs,
    config: Option<PathBuf>,
    pin_dir: PathBuf,
    poll_ms: u64,
    log: crate::api::Log,
) -> Result<()> {
    let name = a.name.unwrap_or_else(host_name);
    if name.is_empty() || name.contains('/') {
        anyhow::bail!("--name {name:?}: must be non-empty and without '/'");
    }
    if a.lease_seconds < 1 {
        anyhow::bail!("--lease-seconds {}: at least 1", a.lease_seconds);
    }
    if a.observers < 1 {
        anyhow::bail!("--observers {}: at least 1", a.observers);
    }
    if a.quorum == Some(0) {
        anyhow::bail!("--quorum 0: at least 1 vote must take a server out");
    }
    if a.keep_versions < 3 {
        anyhow::bail!("--keep-versions {}: at least 3", a.keep_versions);
    }
    let o = fleet::Options {
        store,
        fleet: a.common.fleet,
        name,
        lease_ttl: a.lease_seconds,
        observers: a.observers,
        quorum: a.quorum,
        log,
    };
    fleet::store::check_fleet(&o.fleet)?;
    fleet::store::parse_url(&o.store)?;
    match a.role {
        Some(Role::Publisher) => {
            if a.web_config.is_some() {
                anyhow::bail!(
                    "--web-config is for --role edge: a publisher takes [web] from its config"
                );
            }
            let Some(config) = config else {
                anyhow::bail!("--role publisher needs --config");
            };
            let sign_key = match (a.signing.sign_key, a.signing.insecure_unsigned) {
                (Some(k), _) => {
                    // Refused now, with the reason, rather than after the campaign.
                    fleet::keys::SignKey::load(&k)?;
                    Some(k)
                }
                (None, true) => None,
                (None, false) => anyhow::bail!(
                    "--role publisher needs --sign-key FILE: edges take only versions signed by a \
                     key of their --trust file (make one with `director-ctl fleet keygen --out \
                     FILE`; see docs/fleet.md), or --insecure-unsigned in a lab"
                ),
            };
            if a.signing.trust.is_some() {
                anyhow::bail!("--trust is an edge's: a publisher signs with --sign-key");
            }
            let p = fleet::publisher::Publisher {
                config,
                sign_key,
                keep: a.keep_versions,
                poll: Duration::from_millis(poll_ms),
            };
            fleet::block_on(fleet::publisher::run(&o, &p))
        }
        Some(Role::Edge) => {
            if config.is_some() {
                anyhow::bail!("--role edge takes its config from the fleet: no --config");
            }
            let web = match &a.web_config {
                Some(f) => crate::web::WebConfig::load(f).context("--web-config")?,
                None => crate::web::WebConfig::default(),
            };
            let trust = match (a.signing.trust, a.signing.insecure_unsigned) {
                (Some(t), _) => {
                    fleet::keys::TrustFile::load(Some(&t))?;
                    Some(t)
                }
                (None, true) => None,
                (None, false) => anyhow::bail!(
                    "--role edge needs --trust FILE: the publishers' public keys, one line each \
                     (`director-ctl fleet keygen --out FILE` makes a key and its line; see \
                     docs/fleet.md), or --insecure-unsigned in a lab"
                ),
            };
            if a.signing.sign_key.is_some() {
                anyhow::bail!("--sign-key is a publisher's: an edge checks with --trust");
            }
            let e = fleet::edge::Edge {
                pin_dir,
                trust,
                state_dir: a.state_dir,
                site: a.site,
                metrics: a.metrics_listen,
                web,
            };
            fleet::block_on(fleet::edge::run(&o, &e))
        }
        None => anyhow::bail!("--store needs --role publisher or --role edge"),
    }
}

fn show<T: serde::Serialize>(json: bool, doc: &T, text: impl FnOnce(&T) -> String) -> Result<()> {
    if json {
        print_json(doc)
    } else {
        print!("{}", text(doc));
        Ok(())
    }
}

/// The pin directory's write lock for a command that changes the maps (held until the
/// command is done: its reads and writes are one step for every other writer).
fn write_lock(dir: &std::path::Path, writes: bool) -> Result<Option<WriteLock>> {
    writes.then(|| WriteLock::take(dir)).transpose()
}

fn run(cli: Cli) -> Result<()> {
    let dir = cli.pin_dir;
    match cli.cmd {
        Cmd::Attach {
            iface,
            mode,
            log_level,
        } => {
            program::attach(&dir, &iface, mode.into(), log_level as u8)?;
            println!(
                "attached to {iface} ({mode:?}); maps pinned in {}",
                dir.display()
            );
        }
        Cmd::Upgrade { object, log_level } => {
            let u = kernel::upgrade::upgrade(&dir, object.as_deref(), log_level as u8)?;
            print!("{}", print::upgraded(&u));
        }
        Cmd::Detach { iface } => {
            let last = program::detach(&dir, &iface)?;
            let unpinned = if last {
                "; program and maps unpinned"
            } else {
                ""
            };
            println!("detached from {iface}{unpinned}");
        }
        Cmd::Status { json } => show(json, &ops::status(&dir)?, print::status)?,
        Cmd::Server(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, ServerCmd::List { .. }))?;
            match c {
                ServerCmd::Add { name, ipv4, ipv6 } => {
                    ops::server_add(&mut m, &name, ipv4, ipv6)?;
                }
                ServerCmd::Del { name } => ops::server_del(&mut m, &name)?,
                ServerCmd::Set { name, up, .. } => ops::server_set(&mut m, &name, up)?,
                ServerCmd::Drain { name } => ops::server_drain(&mut m, &name, true)?,
                ServerCmd::Undrain { name } => ops::server_drain(&mut m, &name, false)?,
                ServerCmd::List { json } => show(json, &ops::servers(&m)?, print::servers)?,
            }
        }
        Cmd::Service(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, ServiceCmd::List { .. }))?;
            match c {
                ServiceCmd::Add {
                    dnsname,
                    ttl,
                    answers,
                    select,
                    rrl_rate,
                    rrl_burst,
                    rrl_slip,
                    vips,
                    mode,
                    mss,
                    encap_source,
                    dns,
                } => {
                    let rrl = rrl_rate.map(|rate| ops::RrlSettings {
                        rate,
                        burst: rrl_burst,
                        slip: rrl_slip,
                        ipv4_prefix: DEFAULT_V4_PREFIX,
                        ipv6_prefix: DEFAULT_V6_PREFIX,
                    });
                    // Checked before the service is written.
                    if let Some(r) = &rrl {
                        r.limit()?;
                    }
                    let vips = if vips.is_empty() {
                        None
                    } else {
                        Some(ops::steer::VipSettings {
                            vips: vips
                                .iter()
                                .map(|v| checked::vip(v))
                                .collect::<Result<_>>()?,
                            mode,
                            mss,
                            sources: encap_source
                                .iter()
                                .map(|p| checked::prefix(p))
                                .collect::<Result<_>>()?,
                        })
                    };
                    ops::service_add_with(
                        &mut m,
                        &dnsname,
                        ttl,
                        answers,
                        select,
                        vips.as_ref(),
                        dns,
                    )?;
                    if let Some(r) = &rrl {
                        ops::rrl_set(&mut m, &dnsname, r)?;
                    }
                    if vips.is_some() {
                        for p in ops::steer::refresh_hops(&mut m)? {
                            eprintln!("director-ctl: warning: {p}");
                        }
                    }
                }
                ServiceCmd::Del { dnsname } => ops::service_del(&mut m, &dnsname)?,
                ServiceCmd::List { json } => show(json, &ops::services(&m)?, print::services)?,
            }
        }
        Cmd::Flows(c) => {
            let m = Maps::open(&dir)?;
            match c {
                FlowsCmd::List { service, json } => show(
                    json,
                    &ops::steer::flows(&m, service.as_deref())?,
                    print::flows,
                )?,
                FlowsCmd::Stats { json } => {
                    show(json, &ops::steer::flow_stats(&m)?, print::flow_stats)?;
                }
            }
        }
        Cmd::Route(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, RouteCmd::List { .. }))?;
            match c {
                RouteCmd::Set {
                    dnsname,
                    prefix,
                    servers,
                } => {
                    // Both arguments are checked before the service is looked up.
                    let prefix = checked::prefix(&prefix)?;
                    let servers = text::server_list(&servers)?;
                    ops::route_set(&mut m, &dnsname, prefix, &servers)?;
                }
                RouteCmd::Del { dnsname, prefix } => {
                    ops::route_del(&mut m, &dnsname, checked::prefix(&prefix)?)?;
                }
                RouteCmd::List { dnsname, json } => {
                    show(json, &ops::routes(&m, dnsname.as_deref())?, print::routes)?;
                }
            }
        }
        Cmd::Rrl(c) => {
            let mut m = Maps::open(&dir)?;
            let writes = !matches!(c, RrlCmd::Exempt(ExemptCmd::List { .. }));
            let _lock = write_lock(&dir, writes)?;
            match c {
                RrlCmd::Set {
                    dnsname,
                    rate,
                    burst,
                    slip,
                    ipv4_prefix,
                    ipv6_prefix,
                } => {
                    let r = ops::RrlSettings {
                        rate,
                        burst,
                        slip,
                        ipv4_prefix,
                        ipv6_prefix,
                    };
                    ops::rrl_set(&mut m, &dnsname, &r)?;
                }
                RrlCmd::Exempt(ExemptCmd::Add { prefix }) => {
                    ops::rrl_exempt(&mut m, checked::prefix(&prefix)?, true)?;
                }
                RrlCmd::Exempt(ExemptCmd::Del { prefix }) => {
                    ops::rrl_exempt(&mut m, checked::prefix(&prefix)?, false)?;
                }
                RrlCmd::Exempt(ExemptCmd::List { json }) => {
                    show(json, &ops::rrl_exempt_list(&m)?, print::rrl_exempt)?;
                }
            }
        }
        Cmd::Address(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, AddressCmd::List { .. }))?;
            match c {
                AddressCmd::Add { address } => {
                    ops::address_set(&mut m, checked::address(&address)?, true)?;
                }
                AddressCmd::Del { address } => {
                    ops::address_set(&mut m, checked::address(&address)?, false)?;
                }
                AddressCmd::Refresh => ops::address_refresh(&mut m)?,
                AddressCmd::List { json } => {
                    show(json, &ops::addresses(&m)?, print::addresses)?;
                }
            }
        }
        Cmd::Nexthop {
            address,
            wait_ms,
            json,
        } => {
            let hop = ops::steer::nexthop(address, Duration::from_millis(wait_ms))?;
            show(json, &hop, print::nexthop)?;
        }
        Cmd::Stats { json } => show(json, &ops::stats(&Maps::open(&dir)?)?, print::stats)?,
        Cmd::VethPeer { iface, detach } => {
            if detach {
                program::detach_pass(&dir, &iface)?;
            } else {
                program::attach_pass(&dir, &iface)?;
            }
        }
        Cmd::Ceiling { iface, detach } => {
            let helper = program::Helper::Turnaround;
            if detach {
                program::detach_helper(&dir, &iface, helper)?;
            } else {
                program::attach_helper(&dir, &iface, helper)?;
            }
        }
        Cmd::Decap(c) => {
            let helper = program::Helper::Decap;
            match c {
                DecapCmd::Attach { iface, mode } => {
                    program::attach_helper_mode(&dir, &iface, helper, mode.into())?;
                    println!("decapsulator attached to {iface} ({mode:?})");
                }
                DecapCmd::Detach { iface } => {
                    program::detach_helper(&dir, &iface, helper)?;
                    println!("decapsulator detached from {iface}");
                }
            }
        }
        Cmd::Log => kernel::log::follow(&dir)?,
        Cmd::Web(cmd) => web::run(cmd)?,
        Cmd::Run {
            config,
            fleet,
            iface,
            mode,
            poll_ms,
            json,
            settle_ms,
            max_removal_share,
            accept_removal,
        } => {
            if let Some(iface) = iface {
                if !program::attached(&dir)?.contains(&iface) {
                    program::attach(&dir, &iface, mode.into(), 0)?;
                }
            }
            let log = if json {
                crate::api::Log::Json
            } else {
                crate::api::Log::Text
            };
            let options = controller::run::Options {
                poll: Duration::from_millis(poll_ms),
                settle: Duration::from_millis(settle_ms),
                max_removal_share,
                accept_removal,
                log,
            };
            match fleet.store.clone() {
                Some(store) => run_fleet(store, fleet, config, dir, poll_ms, log)?,
                None => {
                    if fleet.web_config.is_some() {
                        anyhow::bail!(
                            "--web-config is for --role edge: run takes [web] from its config"
                        );
                    }
                    // clap requires --config without --store.
                    let config = config.unwrap_or_default();
                    controller::run::run(&config, &dir, &options)?;
                }
            }
        }
        Cmd::Fleet(FleetCmd::Status {
            store,
            common,
            json,
        }) => {
            let s = fleet::block_on(fleet::status::status(&store, &common.fleet))?;
            show(json, &s, print::fleet_status)?;
        }
        Cmd::Fleet(FleetCmd::Keygen { out, name }) => {
            let name = name.unwrap_or_else(|| fleet::keys::default_name(&out));
            let line = fleet::keys::keygen(&out, &name)?;
            eprintln!(
                "private key in {} (mode 0600: give it to one publisher, --sign-key); its line \
                 in {} (add it to every edge's --trust file):",
                out.display(),
                fleet::keys::public_path(&out).display()
            );
            println!("{line}");
        }
        Cmd::Fleet(FleetCmd::Pubkey { key, name }) => {
            let name = name.unwrap_or_else(|| fleet::keys::default_name(&key));
            println!("{}", fleet::keys::pubkey(&key, &name)?);
        }
        Cmd::Zone(c) => zone(c)?,
        Cmd::Dnssec(c) => dnssec(c)?,
        Cmd::Serve { zones } => crate::dns::serve(&dir, &zones)?,
        Cmd::Agent {
            site,
            cgroup,
            observe,
            max_pending,
            listen,
            window_s,
            drain_ms,
            min_samples,
            max_prefixes,
            retain_s,
            store,
            fleet,
            name,
            probe_rate,
            probe_timeout_ms,
            probe_allow,
            web_config,
        } => crate::agent::run(&crate::agent::Options {
            site,
            cgroup,
            observe,
            max_pending,
            listen,
            window_s,
            drain_ms,
            min_samples,
            max_prefixes,
            retain_s,
            store: store.map(|url| crate::agent::store::Target {
                url,
                fleet: fleet.fleet,
                name: name.unwrap_or_else(host_name),
            }),
            probe_rate,
            probe_timeout_ms,
            probe_allow,
            web: match &web_config {
                Some(f) => crate::web::WebConfig::load(f).context("--web-config")?,
                None => crate::web::WebConfig::default(),
            },
        })?,
        Cmd::Completions { shell } => {
            generate::completions(Cli::command(), shell, &mut std::io::stdout())?;
        }
        Cmd::Man { dir: out } => {
            let n = generate::man_pages(Cli::command(), &out)?;
            println!("{n} man pages written to {}", out.display());
        }
        Cmd::Check { config, json } => {
            let report = controller::check(&config)?;
            show(json, &report, |r| print::check(&config, r))?;
        }
        Cmd::Explain {
            config,
            run,
            web,
            service,
            client,
            json,
        } => {
            let e = match (config, run) {
                (Some(config), _) => controller::explain(&config, &service, client)?,
                (None, Some(addr)) => {
                    controller::live::agents::explain_from(&web.client()?, addr, &service, client)?
                }
                (None, None) => anyhow::bail!("give --config or --run"),
            };
            show(json, &e, print::explain)?;
        }
        Cmd::Demand {
            run,
            web,
            service,
            json,
        } => {
            let mut d: crate::api::Demand =
                controller::live::agents::ask_run(&web.client()?, run, "/demand")?;
            if let Some(s) = &service {
                let want = s.trim_end_matches('.');
                if !d
                    .services
                    .iter()
                    .any(|x| x.service.trim_end_matches('.') == want)
                {
                    anyhow::bail!("run at {run} has no service {s:?}");
                }
                d.services
                    .retain(|x| x.service.trim_end_matches('.') == want);
                d.prefixes
                    .retain(|x| x.service.trim_end_matches('.') == want);
                d.replicas
                    .retain(|x| x.service.trim_end_matches('.') == want);
            }
            show(json, &d, print::demand)?;
        }
        Cmd::Impact {
            config,
            run,
            web,
            top,
            json,
        } => {
            let text = controller::config::Config::candidate_text(&config)?;
            let i: crate::api::Impact = controller::live::agents::post_run(
                &web.client()?,
                run,
                &format!("/impact?top={top}"),
                text.as_bytes(),
            )?;
            show(json, &i, print::impact)?;
        }
    }
    Ok(())
}

/// The `director-ctl` binary: parse, run, and on failure print one line and exit non-zero.
pub fn main() {
    // Rust ignores SIGPIPE, so printing into a closed pipe (`director-ctl route list | head`)
    // fails, and println! panics. The default action ends the process quietly, as it does
    // for every other Unix filter.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // One line naming the problem, like every other refusal: clap's first
            // paragraph, whose later lines may be what it names (missing arguments).
            let text = e.to_string();
            let first: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!(
                "director-ctl: {}",
                first.join(" ").trim_start_matches("error: ")
            );
            std::process::exit(2);
        }
    };
    if matches!(cli.cmd, Cmd::Run { .. } | Cmd::Agent { .. }) {
        // `run` is a daemon: a reader of its log going away is no reason to die by signal.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    }
    if let Err(e) = run(cli) {
        eprintln!("director-ctl: {e:#}");
        std::process::exit(1);
    }
}
