//! Servers for health tests: a third namespace on its own link from the edge, holding one
//! address per server and real nginx processes on them, each one stoppable, startable and
//! blackholable by the test.
//!
//! ```text
//!   edge netns                               servers netns
//!   <edge side> 203.0.113.1/24  <--veth-->   <srv side> 203.0.113.10, .20, .30 /24
//!   director-ctl run (checks)                nginx per (server, port), master_process off
//! ```
//!
//! Drop stops every nginx it started, by pid, and deletes the namespace (and so the link).

use std::{collections::BTreeMap, fs, process::Command};

use crate::netns::Lab;
use crate::nginx::Nginx;

pub const EDGE_SIDE_V4: &str = "203.0.113.1";

pub struct Farm {
    pub ns: String,
    srv_if: String,
    /// Server name → address.
    pub servers: BTreeMap<String, String>,
    nginx: BTreeMap<(String, u16), Nginx>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Farm {
    /// The namespace, the link to the lab's edge, and an address per server (`name`,
    /// last octet). No nginx runs yet.
    pub fn new(lab: &Lab, servers: &[(&str, u8)]) -> Farm {
        let ns = format!("{}-srv", lab.id);
        let tag = lab.edge_if.trim_start_matches("de");
        let farm = Farm {
            ns: ns.clone(),
            srv_if: format!("ds{tag}"),
            servers: servers
                .iter()
                .map(|(n, o)| (n.to_string(), format!("203.0.113.{o}")))
                .collect(),
            nginx: BTreeMap::new(),
        };
        let edge_side = format!("dh{tag}");
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&[
            "link",
            "add",
            &edge_side,
            "netns",
            &lab.edge_ns,
            "type",
            "veth",
            "peer",
            "name",
            &farm.srv_if,
            "netns",
            &ns,
        ]);
        ip(&[
            "-n",
            &lab.edge_ns,
            "addr",
            "add",
            &format!("{EDGE_SIDE_V4}/24"),
            "dev",
            &edge_side,
        ]);
        ip(&["-n", &lab.edge_ns, "link", "set", &edge_side, "up"]);
        // Host addresses (/32) with a route for the link: removing one never takes the
        // others along (deleting a /24's primary address deletes its secondaries).
        for a in farm.servers.values() {
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{a}/32"),
                "dev",
                &farm.srv_if,
            ]);
        }
        ip(&["-n", &ns, "link", "set", &farm.srv_if, "up"]);
        ip(&[
            "-n",
            &ns,
            "route",
            "add",
            "203.0.113.0/24",
            "dev",
            &farm.srv_if,
        ]);
        farm
    }

    pub fn addr(&self, server: &str) -> &str {
        &self.servers[server]
    }

    /// Starts nginx for `server` on `port`: `/health` answers "<server> ok", everything
    /// else "<server>". Waits until it accepts connections.
    pub fn start(&mut self, server: &str, port: u16) {
        let addr = self.addr(server).to_string();
        self.start_on(server, &addr, port);
    }

    /// Like [`Farm::start`], listening on `addr` (`[::]` for every IPv6 address).
    pub fn start_on(&mut self, server: &str, addr: &str, port: u16) {
        // A stopped one's directory goes first: it is the same directory.
        self.nginx.remove(&(server.to_string(), port));
        let dir = std::env::temp_dir().join(format!("{}-nginx-{server}-{port}", self.ns));
        let d = dir.display().to_string();
        let http = format!(
            "  server {{\n    listen {addr}:{port};\n\
               location = /health {{ return 200 \"{server} ok\\n\"; }}\n\
               location = /load {{ default_type text/plain; alias {d}/load.txt; }}\n\
               location / {{ return 200 \"{server}\\n\"; }}\n  }}\n"
        );
        let probe = if addr == "[::]" { "::1" } else { addr };
        let nginx = Nginx::start(
            &self.ns,
            dir,
            &http,
            (probe, port),
            &format!("for {server} on port {port}"),
        );
        self.nginx.insert((server.to_string(), port), nginx);
    }

    /// What the nginx for `server` on `port` answers at `/load`.
    pub fn set_load(&self, server: &str, port: u16, text: &str) {
        let n = &self.nginx[&(server.to_string(), port)];
        let tmp = n.dir().join("load.tmp");
        fs::write(&tmp, text).expect("load.tmp");
        fs::rename(&tmp, n.dir().join("load.txt")).expect("load.txt");
    }

    /// Stops the nginx for `server` on `port` (connections are then refused).
    pub fn stop(&mut self, server: &str, port: u16) {
        if let Some(n) = self.nginx.get_mut(&(server.to_string(), port)) {
            n.stop();
        }
    }

    /// Adds `n` IPv6 addresses (2001:db8:5::1, ::2, ...) in the namespace, routed from the
    /// edge through one neighbour (2001:db8:4::2), for checks at scale. Returns them.
    pub fn add_v6_hosts(&self, lab: &Lab, n: usize) -> Vec<String> {
        let tag = lab.edge_if.trim_start_matches("de");
        let edge_side = format!("dh{tag}");
        ip(&[
            "-n",
            &lab.edge_ns,
            "addr",
            "add",
            "2001:db8:4::1/64",
            "dev",
            &edge_side,
            "nodad",
        ]);
        ip(&[
            "-n",
            &self.ns,
            "addr",
            "add",
            "2001:db8:4::2/64",
            "dev",
            &self.srv_if,
            "nodad",
        ]);
        ip(&[
            "-n",
            &lab.edge_ns,
            "-6",
            "route",
            "add",
            "2001:db8:5::/64",
            "via",
            "2001:db8:4::2",
        ]);
        let addrs: Vec<String> = (1..=n).map(|i| format!("2001:db8:5::{i:x}")).collect();
        let batch: String = addrs
            .iter()
            .map(|a| format!("addr add {a}/128 dev lo nodad\n"))
            .collect();
        let file = std::env::temp_dir().join(format!("{}-addrs", self.ns));
        fs::write(&file, batch).expect("address batch");
        ip(&["-n", &self.ns, "-batch", &file.to_string_lossy()]);
        let _ = fs::remove_file(&file);
        addrs
    }

    /// Takes the server's address away: connections to it time out (nothing answers, not
    /// even with a refusal). `restore` gives it back.
    pub fn blackhole(&self, server: &str) {
        let a = format!("{}/32", self.addr(server));
        ip(&["-n", &self.ns, "addr", "del", &a, "dev", &self.srv_if]);
    }

    pub fn restore(&self, server: &str) {
        let a = format!("{}/32", self.addr(server));
        ip(&["-n", &self.ns, "addr", "add", &a, "dev", &self.srv_if]);
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        self.nginx.clear();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}
