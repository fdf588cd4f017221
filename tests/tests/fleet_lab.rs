//! The fleet harness itself: a three-member etcd cluster in a hub namespace survives the
//! loss of its leader, takes the member back, and an edge lab joined to the hub reaches it
//! until the hub cuts it off, and again once the hub restores it.
//!
//! Run as root: `cargo test -p director-tests --test fleet_lab -- --nocapture`.

use std::{
    thread::sleep,
    time::{Duration, Instant},
};

use director_tests::{
    fleet::{edge_v4, Etcd, Hub},
    netns::{describe, Lab},
};

/// etcdctl from an edge, bounded: a cut edge fails within about three seconds.
const BOUNDED: [&str; 4] = ["--dial-timeout", "1s", "--command-timeout", "2s"];

/// `key`'s value from `endpoints`, asked from the namespace `ns`.
fn get_at(etcd: &Etcd, ns: &str, endpoints: &str, key: &str) -> std::process::Output {
    let mut args = BOUNDED.to_vec();
    args.extend_from_slice(&["get", "--print-value-only", key]);
    etcd.ctl_at(ns, endpoints, &args)
}

/// `key`'s value from every member, asked from the namespace `ns`.
fn get_from(etcd: &Etcd, ns: &str, key: &str) -> std::process::Output {
    get_at(etcd, ns, &etcd.endpoints(), key)
}

fn value(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn etcd_cluster_survives_its_leader_and_edges_can_be_cut() {
    let hub = Hub::new();
    let t = Instant::now();
    let mut etcd = Etcd::start(&hub);
    eprintln!("etcd: three members healthy after {:?}", t.elapsed());

    etcd.ctl_ok(&["put", "/fleet/probe", "v1"]);
    assert_eq!(
        etcd.ctl_ok(&["get", "--print-value-only", "/fleet/probe"])
            .trim(),
        "v1"
    );

    // The leader goes; the other two elect one of them and still serve the key.
    let old = etcd.wait_leader(Duration::from_secs(10));
    let t = Instant::now();
    etcd.kill(old);
    let new = etcd.wait_leader(Duration::from_secs(15));
    eprintln!(
        "etcd: member {old} (leader) killed; member {new} leads after {:?}",
        t.elapsed()
    );
    assert_ne!(new, old);
    let out = get_at(&etcd, hub.ns(), &etcd.live_endpoints(), "/fleet/probe");
    assert!(
        out.status.success(),
        "get after the kill: {}",
        describe(&out)
    );
    assert_eq!(value(&out), "v1");
    etcd.ctl_ok(&["put", "/fleet/probe", "v2"]);

    // It comes back on its data directory and catches up.
    let t = Instant::now();
    etcd.restart(old);
    eprintln!("etcd: member {old} healthy again after {:?}", t.elapsed());
    let out = get_at(&etcd, hub.ns(), &Etcd::endpoint(old), "/fleet/probe");
    assert!(
        out.status.success(),
        "get from the restarted member: {}",
        describe(&out)
    );
    assert_eq!(value(&out), "v2");

    // An edge on the hub reaches the store, loses it when cut off, and gets it back.
    let lab = Lab::new();
    hub.join(&lab, 1);
    assert_eq!(edge_v4(1), "198.51.100.21");
    let out = get_from(&etcd, &lab.edge_ns, "/fleet/probe");
    assert!(
        out.status.success(),
        "get from the edge: {}",
        describe(&out)
    );
    assert_eq!(value(&out), "v2");

    hub.cut(1);
    let t = Instant::now();
    let out = get_from(&etcd, &lab.edge_ns, "/fleet/probe");
    assert!(
        !out.status.success(),
        "the edge still reaches the store after the cut: {}",
        describe(&out)
    );
    eprintln!("edge cut: etcdctl failed after {:?}", t.elapsed());
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "etcdctl took {:?}",
        t.elapsed()
    );

    hub.restore(1);
    // The first try may still meet the link coming up; bounded retries.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = get_from(&etcd, &lab.edge_ns, "/fleet/probe");
        if out.status.success() {
            assert_eq!(value(&out), "v2");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the edge does not reach the store 10 s after the restore: {}",
            describe(&out)
        );
        sleep(Duration::from_millis(100));
    }
    // Drops: lab, etcd (members killed), hub (namespace deleted).
}
