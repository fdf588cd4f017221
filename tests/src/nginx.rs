//! A real nginx in a network namespace, for the tests' servers: one process (no master,
//! one worker) in a directory of its own, stopped by its pid and its directory removed on
//! drop.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use crate::netns::{nsenter, run, stop_child};

pub struct Nginx {
    child: Option<Child>,
    dir: PathBuf,
}

impl Nginx {
    /// Starts nginx in `ns` with `dir` (emptied first) for its files; `http` goes into its
    /// `http {}` block (settings, then `server {}` blocks; `{dir}` is this directory), and
    /// waits until `probe` (an address, then a port) accepts connections. `what` names it
    /// in the failure.
    pub fn start(ns: &str, dir: PathBuf, http: &str, probe: (&str, u16), what: &str) -> Nginx {
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("nginx dir");
        let d = dir.display();
        let conf = format!(
            "master_process off;\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log;\nevents {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n\
               proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
               uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{http}}}\n"
        );
        fs::write(dir.join("nginx.conf"), conf).expect("nginx.conf");
        let child = nsenter(ns, "nginx")
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-p")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting nginx");
        let nginx = Nginx {
            child: Some(child),
            dir,
        };
        let (addr, port) = probe;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok =
                run(nsenter(ns, "bash").args(["-c", &format!("exec 3<>/dev/tcp/{addr}/{port}")]))
                    .status
                    .success();
            if ok {
                return nginx;
            }
            assert!(
                Instant::now() < deadline,
                "nginx {what} not listening after 10 s: {}",
                fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default()
            );
            sleep(Duration::from_millis(50));
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops it (SIGTERM, then SIGKILL after 3 s); its port then refuses connections.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_child(&mut c, Duration::from_secs(3));
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
