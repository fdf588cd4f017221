use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use director_common::{maps::PIN_DIR, select::Mode};
use director_ctl::{
    config::Config,
    control,
    controller::{self, data::Data},
    kernel::{program, Maps},
};

/// director: answers DNS for the names it owns from an XDP program, with the best server
/// for each client prefix.
#[derive(Parser)]
#[command(name = "director-ctl", version)]
struct Cli {
    /// bpffs directory where the program, its links and its maps are pinned.
    #[arg(long, global = true, env = "DIRECTOR_PIN_DIR", default_value = PIN_DIR)]
    pin_dir: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load (first time), pin and attach the XDP program to an interface.
    Attach {
        #[arg(long)]
        iface: String,
        #[arg(long, value_enum, default_value = "native")]
        mode: program::Mode,
        /// Kernel-side log level compiled in at load (see `director-ctl log`).
        #[arg(long, value_enum, default_value = "off")]
        log_level: LogLevel,
    },
    /// Detach from an interface; the last detach unpins the program and its maps.
    Detach {
        #[arg(long)]
        iface: String,
    },
    /// Interfaces, program and map fill.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Servers that answers point to.
    #[command(subcommand)]
    Server(ServerCmd),
    /// DNS names director answers for.
    #[command(subcommand)]
    Service(ServiceCmd),
    /// Which servers each client prefix gets, per service.
    #[command(subcommand)]
    Route(RouteCmd),
    /// Answered and passed packets, by reason and by service.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Attach (or with --detach remove) a pass-through XDP program on the client end of a
    /// veth pair, so the frames director sends back with XDP_TX are delivered at once.
    VethPeer {
        #[arg(long)]
        iface: String,
        #[arg(long)]
        detach: bool,
    },
    /// Compute decisions from a config (BGP, GeoIP, RTT, preferences), write them to the
    /// kernel, and keep them equal to the inputs: a changed file or SIGHUP recomputes and
    /// rewrites what changed.
    Run {
        #[arg(long)]
        config: PathBuf,
        /// Attach to this interface first if director is not attached to it.
        #[arg(long)]
        iface: Option<String>,
        #[arg(long, value_enum, default_value = "native")]
        mode: program::Mode,
        /// How often to look at the input files, in milliseconds.
        #[arg(long, default_value_t = 500)]
        poll_ms: u64,
        /// Log events as JSON objects (one per line, on stderr).
        #[arg(long)]
        json: bool,
    },
    /// Validate a config and everything it reads; print what it would write. Touches nothing.
    Check {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Every server's metrics for a client, the sort's levels, and why the winners won.
    Explain {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        service: String,
        #[arg(long)]
        client: std::net::IpAddr,
        #[arg(long)]
        json: bool,
    },
    /// Print the XDP program's log (needs `attach --log-level debug|info`) until Ctrl-C.
    Log,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
}

#[derive(Subcommand)]
enum ServerCmd {
    /// Add a server (or change an existing one's addresses).
    Add {
        name: String,
        #[arg(long)]
        ipv4: Option<std::net::Ipv4Addr>,
        #[arg(long)]
        ipv6: Option<std::net::Ipv6Addr>,
    },
    /// Delete a server no route uses.
    Del { name: String },
    List {
        #[arg(long)]
        json: bool,
    },
    /// Mark a server up or down; the kernel never answers with a down server.
    Set {
        name: String,
        #[arg(long, conflicts_with = "down", required_unless_present = "down")]
        up: bool,
        #[arg(long)]
        down: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SelectArg {
    Random,
    Client,
    Name,
}

#[derive(Subcommand)]
enum ServiceCmd {
    /// Own a DNS name (or change an owned name's settings).
    Add {
        dnsname: String,
        #[arg(long, default_value_t = 30)]
        ttl: u32,
        /// Addresses per answer.
        #[arg(long, default_value_t = 1)]
        answers: u8,
        /// How to pick among equally good servers.
        #[arg(long, value_enum, default_value = "random")]
        select: SelectArg,
    },
    Del {
        dnsname: String,
    },
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RouteCmd {
    /// Give clients in PREFIX these servers: SERVER[=WEIGHT],... share answers by weight;
    /// servers after a '|' are fallbacks, in order (e.g. "fra-1=2,ams-1|nyc-1").
    Set {
        dnsname: String,
        prefix: String,
        servers: String,
    },
    Del {
        dnsname: String,
        prefix: String,
    },
    List {
        dnsname: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    let dir = cli.pin_dir;
    match cli.cmd {
        Cmd::Attach {
            iface,
            mode,
            log_level,
        } => {
            program::attach(&dir, &iface, mode, log_level as u8)?;
            println!(
                "attached to {iface} ({mode:?}); maps pinned in {}",
                dir.display()
            );
        }
        Cmd::Detach { iface } => {
            let last = program::detach(&dir, &iface)?;
            println!(
                "detached from {iface}{}",
                if last {
                    "; program and maps unpinned"
                } else {
                    ""
                }
            );
        }
        Cmd::Status { json } => status(&dir, json)?,
        Cmd::Server(c) => {
            let mut m = Maps::open(&dir)?;
            match c {
                ServerCmd::Add { name, ipv4, ipv6 } => {
                    control::server_add(&mut m, &name, ipv4, ipv6)?;
                }
                ServerCmd::Del { name } => control::server_del(&mut m, &name)?,
                ServerCmd::Set { name, up, .. } => control::server_set(&mut m, &name, up)?,
                ServerCmd::List { json } => {
                    let l = control::servers(&m)?;
                    if json {
                        print_json(&l)?;
                    } else {
                        for s in l {
                            let v4 = s.ipv4.map_or("-".into(), |a| a.to_string());
                            let v6 = s.ipv6.map_or("-".into(), |a| a.to_string());
                            println!(
                                "{:<20} {:<16} {:<40} {}",
                                s.name,
                                v4,
                                v6,
                                if s.up { "up" } else { "down" }
                            );
                        }
                    }
                }
            }
        }
        Cmd::Service(c) => {
            let mut m = Maps::open(&dir)?;
            match c {
                ServiceCmd::Add {
                    dnsname,
                    ttl,
                    answers,
                    select,
                } => {
                    let mode = match select {
                        SelectArg::Random => Mode::Random,
                        SelectArg::Client => Mode::Client,
                        SelectArg::Name => Mode::Name,
                    };
                    control::service_add(&mut m, &dnsname, ttl, answers, mode)?;
                }
                ServiceCmd::Del { dnsname } => control::service_del(&mut m, &dnsname)?,
                ServiceCmd::List { json } => {
                    let l = control::services(&m)?;
                    if json {
                        print_json(&l)?;
                    } else {
                        for s in l {
                            println!(
                                "{:<40} ttl={:<6} answers={} select={}",
                                s.name, s.ttl, s.answers, s.select
                            );
                        }
                    }
                }
            }
        }
        Cmd::Route(c) => {
            let mut m = Maps::open(&dir)?;
            match c {
                RouteCmd::Set {
                    dnsname,
                    prefix,
                    servers,
                } => control::route_set(&mut m, &dnsname, &prefix, &servers)?,
                RouteCmd::Del { dnsname, prefix } => control::route_del(&mut m, &dnsname, &prefix)?,
                RouteCmd::List { dnsname, json } => {
                    let l = control::routes(&m, dnsname.as_deref())?;
                    if json {
                        print_json(&l)?;
                    } else {
                        for r in l {
                            let s: Vec<String> =
                                r.servers.iter().map(|(n, w)| format!("{n}={w}")).collect();
                            let (first, rest) = s.split_at(r.primary.min(s.len()));
                            let list = if rest.is_empty() {
                                first.join(",")
                            } else {
                                format!("{}|{}", first.join(","), rest.join(","))
                            };
                            println!("{:<40} {:<44} {list}", r.service, r.prefix);
                        }
                    }
                }
            }
        }
        Cmd::Stats { json } => {
            let m = Maps::open(&dir)?;
            let s = control::stats(&m)?;
            if json {
                print_json(&s)?;
            } else {
                for (k, v) in &s.counters {
                    println!("{k:<32} {v}");
                }
                for (k, v) in &s.services {
                    println!("service {k:<24} {v}");
                }
            }
        }
        Cmd::VethPeer { iface, detach } => {
            if detach {
                program::detach_pass(&dir, &iface)?;
            } else {
                program::attach_pass(&dir, &iface)?;
            }
        }
        Cmd::Log => follow_log(&dir)?,
        Cmd::Run {
            config,
            iface,
            mode,
            poll_ms,
            json,
        } => {
            controller::apply::JSON_LOG.store(json, std::sync::atomic::Ordering::Relaxed);
            if let Some(iface) = iface {
                if !program::attached(&dir)?.contains(&iface) {
                    program::attach(&dir, &iface, mode, 0)?;
                }
            }
            controller::apply::run(&config, &dir, std::time::Duration::from_millis(poll_ms))?;
        }
        Cmd::Check { config, json } => check(&config, json)?,
        Cmd::Explain {
            config,
            service,
            client,
            json,
        } => {
            let cfg = Config::load(&config)?;
            let data = Data::load(&cfg)?;
            let e = controller::compute::explain(&cfg, &data, &service, client)?;
            if json {
                print_json(&e)?;
            } else {
                print!("{e}");
            }
        }
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct Status {
    pin_dir: PathBuf,
    interfaces: Vec<String>,
    program_id: Option<u32>,
    verified_instructions: Option<u32>,
    servers: usize,
    services: usize,
    routes_v4: usize,
    routes_v6: usize,
    active_table: Option<usize>,
}

fn status(dir: &std::path::Path, json: bool) -> Result<()> {
    let info = program::program_info(dir)?;
    let mut st = Status {
        pin_dir: dir.to_path_buf(),
        interfaces: program::attached(dir)?,
        program_id: info.as_ref().map(|i| i.id()),
        verified_instructions: info.as_ref().and_then(|i| i.verified_instruction_count()),
        servers: 0,
        services: 0,
        routes_v4: 0,
        routes_v6: 0,
        active_table: None,
    };
    if let Ok(m) = Maps::open(dir) {
        st.servers = control::servers(&m)?.len();
        st.services = control::services(&m)?.len();
        let routes = m.decisions()?;
        st.routes_v4 = routes.iter().filter(|r| r.1.is_ipv4()).count();
        st.routes_v6 = routes.iter().filter(|r| r.1.is_ipv6()).count();
        st.active_table = Some(m.active_table()?);
    }
    if json {
        return print_json(&st);
    }
    if st.interfaces.is_empty() {
        println!("not attached (pin directory {})", dir.display());
    } else {
        println!("attached to: {}", st.interfaces.join(", "));
    }
    if let Some(id) = st.program_id {
        println!(
            "program id {id}, {} instructions verified",
            st.verified_instructions.unwrap_or(0)
        );
    }
    println!(
        "servers {}, services {}, routes {} IPv4 + {} IPv6",
        st.servers, st.services, st.routes_v4, st.routes_v6
    );
    Ok(())
}

#[derive(serde::Serialize)]
struct CheckSummary {
    sites: usize,
    servers: usize,
    services: usize,
    prefixes: usize,
    entries: usize,
    saved: usize,
    tables: Vec<controller::compute::TableSummary>,
    inputs: controller::data::Summary,
    load_seconds: f64,
    compute_seconds: f64,
}

fn check(path: &std::path::Path, json: bool) -> Result<()> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let c = controller::compute::compute(&cfg, &data, &controller::compute::Ids::positional(&cfg))?;
    c.fits()?;
    let tables = c.summary();
    let s = CheckSummary {
        sites: cfg.sites.len(),
        servers: cfg.servers.len(),
        services: cfg.services.len(),
        prefixes: c.prefixes,
        entries: tables.iter().map(|t| t.entries).sum(),
        saved: tables.iter().map(|t| t.saved).sum(),
        tables,
        load_seconds: data.summary.load_time.as_secs_f64(),
        inputs: data.summary,
        compute_seconds: c.seconds,
    };
    if json {
        return print_json(&s);
    }
    println!("{}: OK", path.display());
    println!(
        "sites {}, servers {}, services {}",
        s.sites, s.servers, s.services
    );
    for (site, n) in &s.inputs.bgp_routes {
        println!("  site {site:<12} {n} BGP routes");
    }
    if s.inputs.bgp_damaged_skipped > 0 {
        println!(
            "  {} damaged MRT records skipped",
            s.inputs.bgp_damaged_skipped
        );
    }
    println!(
        "  geo: {} networks ({} without a location), {} own locations; {} RTT measurements",
        s.inputs.geo_networks,
        s.inputs.geo_without_location,
        s.inputs.own_locations,
        s.inputs.rtt_measurements
    );
    println!(
        "client prefixes {}, kernel entries {} ({} saved by compression)",
        s.prefixes, s.entries, s.saved
    );
    for t in &s.tables {
        println!(
            "  {:<40} {} entries, {} saved",
            t.service, t.entries, t.saved
        );
    }
    println!(
        "read inputs in {:.2} s, computed in {:.2} s",
        s.load_seconds, s.compute_seconds
    );
    Ok(())
}

fn follow_log(dir: &std::path::Path) -> Result<()> {
    let info = program::program_info(dir)?.context("nothing is attached")?;
    // Only what the XDP program logs, not aya's own chatter.
    env_logger::Builder::new()
        .filter_module("director", log::LevelFilter::Trace)
        .init();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let logger = aya_log::EbpfLogger::init_from_id(info.id())
            .context("the program has no log buffer")?;
        // The logger owns its ring buffer fd and keeps it open while registered.
        #[allow(deprecated)]
        let mut fd =
            tokio::io::unix::AsyncFd::with_interest(logger, tokio::io::Interest::READABLE)?;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok(()),
                guard = fd.readable_mut() => {
                    let mut guard = guard?;
                    guard.get_inner_mut().flush();
                    guard.clear_ready();
                }
            }
        }
    })
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // One line naming the problem, like every other refusal.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("director-ctl: {}", first.trim_start_matches("error: "));
            std::process::exit(2);
        }
    };
    if let Err(e) = run(cli) {
        eprintln!("director-ctl: {e:#}");
        std::process::exit(1);
    }
}
