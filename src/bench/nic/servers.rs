//! The servers the bench runs in the server namespace: the container's for `bench-ingress`, the
//! one behind the NIC for `bench-egress`.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{NEEDS, Service};
use crate::bench::measure::{KillOnDrop, Placement};
use crate::bench::workloads::{
    redis_server_args, sockperf_server_args, spawn_server, wait_listening,
};
use crate::netns::NetnsPath;

/// The servers, running in their namespace until dropped; their scratch directory
/// (nginx's configuration, redis's working directory, their logs) goes with them.
pub struct Servers {
    children: Vec<(Service, KillOnDrop)>,
    dir: PathBuf,
}

impl Servers {
    /// Starts redis, nginx and sockperf on their [`NEEDS`] ports in `netns` (iperf3 runs one
    /// server per test) and waits until each listens.
    /// With `placement`, every server runs on its server CPU.
    pub fn start(netns: &NetnsPath, placement: Option<Placement>) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("dxdp-bench-nic-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut servers = Self {
            children: Vec::new(),
            dir,
        };
        let conf = servers.dir.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&servers.dir, port_of(Service::Nginx)))
            .with_context(|| format!("cannot write {}", conf.display()))?;
        let nginx_args = ["-e", "stderr", "-p", &servers.dir.display().to_string()]
            .into_iter()
            .chain(["-c", &conf.display().to_string()])
            .map(str::to_owned)
            .collect();
        let commands: [(Service, &str, Vec<String>); 3] = [
            (
                Service::Redis,
                "redis-server",
                redis_server_args(port_of(Service::Redis), &servers.dir),
            ),
            (Service::Nginx, "nginx", nginx_args),
            (
                Service::Sockperf,
                "sockperf",
                sockperf_server_args(port_of(Service::Sockperf)),
            ),
        ];
        for (service, program, args) in commands {
            let log = servers.log(service);
            let child = spawn_server(netns.path(), program, &args, &log, placement)?;
            servers.children.push((service, child));
        }
        for i in 0..servers.children.len() {
            let service = servers.children[i].0;
            let log = servers.log(service);
            let (_, child) = &mut servers.children[i];
            wait_listening(child, service.name(), port_of(service), &log)
                .context("in the servers' namespace")?;
        }
        Ok(servers)
    }

    /// The process of a server (nsenter execs it in place, so its pid is the server's).
    pub fn pid(&self, service: Service) -> Option<u32> {
        self.children
            .iter()
            .find(|(s, _)| *s == service)
            .map(|(_, child)| child.id())
    }

    fn log(&self, service: Service) -> PathBuf {
        self.dir.join(format!("{}.log", service.name()))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // Killed and reaped before their directory goes.
        self.children.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn port_of(service: Service) -> u16 {
    NEEDS
        .iter()
        .find(|n| n.service == service)
        .map_or(0, |n| n.port)
}

/// One nginx process (no master, no daemon: the child the bench holds is the server) answering
/// every request with a short 200, its paths all in `dir`.
fn nginx_conf(dir: &Path, port: u16) -> String {
    let dir = dir.display();
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\n\
         error_log stderr warn;\nevents {{ worker_connections 1024; }}\nhttp {{\n\
         access_log off;\nclient_body_temp_path {dir}/body;\nproxy_temp_path {dir}/proxy;\n\
         fastcgi_temp_path {dir}/fastcgi;\nuwsgi_temp_path {dir}/uwsgi;\nscgi_temp_path {dir}/scgi;\n\
         server {{ listen {port}; location / {{ default_type text/plain; return 200 \"ok\\n\"; }} }}\n}}\n"
    )
}
