//! A reload applies every section of the config, not only servers and services: `run`
//! follows its config file, and after each change that touches one section alone, the
//! kernel (read back with the CLI's `--json`) or the listeners hold what the file says.
//! Sections that cannot change without a restart (listen addresses) say so in the log.
//!
//! Run as root: `cargo test -p director-tests --test reload -- --test-threads=1`.

use std::fs;
use std::path::Path;
use std::time::Duration;

use director_common::select::Mode;
use director_ctl::api;
use director_tests::netns::{Controller, Lab, Reply};
use director_tests::tempdir::{replace_file, TempDir};
use ipnet::IpNet;

const ZONE: &str = "gslb.example.com";
const NS1: &str = "192.0.2.53";
const NS2: &str = "192.0.2.54";
const X_V4: &str = "203.0.113.10";
const Y_V4: &str = "203.0.113.20";
const VIP: &str = "198.51.100.80:80";
const METRICS: &str = "127.0.0.1:9154";

/// What one config of the test sets, section by section.
#[derive(Clone)]
struct Knobs {
    default_priority: &'static str,
    rrl_rate: u32,
    rrl_exempt: &'static str,
    encap_source4: &'static str,
    mail: &'static str,
    metrics: &'static str,
}

const START: Knobs = Knobs {
    default_priority: "{ admin = 1 }",
    rrl_rate: 100,
    rrl_exempt: "",
    encap_source4: "198.51.100.128/28",
    mail: "192.0.2.25",
    metrics: METRICS,
};

fn config(k: &Knobs) -> String {
    format!(
        "default_priority = {}\n\n\
         [[site]]\nname = \"a\"\n[[site]]\nname = \"b\"\n\n\
         [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"{X_V4}\"\npreference = 1\n\
         [[server]]\nname = \"y\"\nsite = \"b\"\nipv4 = \"{Y_V4}\"\npreference = 2\n\n\
         [[service]]\nname = \"www.{ZONE}\"\nservers = [\"x\", \"y\"]\nttl = 30\n\
         vip = [\"{VIP}\"]\nmode = \"ipip\"\n\n\
         [rrl]\nrate = {}\nexempt = [{}]\n\n\
         [steer]\nencap_source4 = \"{}\"\n\n\
         [metrics]\nlisten = \"{}\"\n\n\
         [[zone]]\norigin = \"{ZONE}\"\n\
         ns = [ {{ name = \"ns1.{ZONE}\", addresses = [\"{NS1}\"] }},\n\
         \x20      {{ name = \"ns2.{ZONE}\", addresses = [\"{NS2}\"] }} ]\n\
         records = [ {{ name = \"mail\", type = \"A\", data = \"{}\" }} ]\n",
        k.default_priority, k.rrl_rate, k.rrl_exempt, k.encap_source4, k.metrics, k.mail,
    )
}

fn service(lab: &Lab) -> api::ListedService {
    let list: api::ServiceList =
        serde_json::from_str(&lab.ctl_ok(&["service", "list", "--json"])).unwrap();
    list.services
        .into_iter()
        .find(|s| s.name == format!("www.{ZONE}"))
        .expect("www is listed")
}

fn exempt(lab: &Lab) -> Vec<IpNet> {
    let list: api::RrlExemptList =
        serde_json::from_str(&lab.ctl_ok(&["rrl", "exempt", "list", "--json"])).unwrap();
    list.exempt
}

fn mail(lab: &Lab) -> Vec<String> {
    Reply::parse(&lab.dig(&[&format!("@{NS1}"), &format!("mail.{ZONE}"), "A"])).data("A")
}

/// One reload: writes `k`, waits until `run` says it is up to date again, and checks it
/// refused nothing it should have taken.
fn reload(run: &mut Controller, path: &Path, k: &Knobs) {
    let done = run.count("up to date again");
    replace_file(path, &config(k));
    run.wait_for("up to date again", done + 1, Duration::from_secs(20));
    let log = run.log();
    assert!(
        !log.contains("keeping the last good"),
        "a good config was refused:\n{log}"
    );
}

#[test]
fn a_reload_applies_each_section_on_its_own() {
    let lab = Lab::new();
    lab.add_edge_address(&format!("{NS1}/24"));
    lab.add_edge_address(&format!("{NS2}/24"));
    lab.attach();
    let dir = TempDir::new("reload", "config");
    let path = dir.path("director.toml");
    let mut k = START.clone();
    fs::write(&path, config(&k)).unwrap();
    let mut run = Controller::start(&lab, &path, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(60));

    let s = service(&lab);
    assert_eq!(s.rrl.as_ref().map(|l| l.rate), Some(100), "{s:?}");
    assert_eq!(s.select, Mode::Client, "admin alone ties deterministically");
    assert_eq!(
        s.vips.first().and_then(|v| v.encap_source),
        Some("198.51.100.128/28".parse().unwrap())
    );
    assert!(exempt(&lab).is_empty());
    assert_eq!(mail(&lab), ["192.0.2.25"]);

    // [rrl] alone: the rate (the defect: logged as applied, the kernel kept 100).
    k.rrl_rate = 50;
    reload(&mut run, &path, &k);
    let s = service(&lab);
    assert_eq!(s.rrl.as_ref().map(|l| l.rate), Some(50), "{s:?}");

    // [rrl] alone: the exemptions.
    k.rrl_exempt = "\"203.0.113.0/24\"";
    reload(&mut run, &path, &k);
    assert_eq!(exempt(&lab), ["203.0.113.0/24".parse::<IpNet>().unwrap()]);

    // [steer] alone: the VIP's outer sources.
    k.encap_source4 = "198.51.100.144/28";
    reload(&mut run, &path, &k);
    let s = service(&lab);
    assert_eq!(
        s.vips.first().and_then(|v| v.encap_source),
        Some("198.51.100.144/28".parse().unwrap()),
        "{s:?}"
    );

    // The top-level default_priority alone: ending in random makes the service draw.
    k.default_priority = "{ admin = 1, random = 2 }";
    reload(&mut run, &path, &k);
    assert_eq!(service(&lab).select, Mode::Random);

    // [[zone]] alone: the record is answered as the file now says.
    k.mail = "192.0.2.26";
    reload(&mut run, &path, &k);
    assert_eq!(mail(&lab), ["192.0.2.26"]);

    // [metrics] listen cannot move without a restart: the log says so rather than
    // seeming applied, and everything else stays as it was.
    k.metrics = "127.0.0.1:9155";
    reload(&mut run, &path, &k);
    assert!(
        run.log().contains("[metrics] listen changed"),
        "{}",
        run.log()
    );
    let s = service(&lab);
    assert_eq!(s.rrl.as_ref().map(|l| l.rate), Some(50));
    assert_eq!(s.select, Mode::Random);
    run.assert_alive();
    run.stop();
}
