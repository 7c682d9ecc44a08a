//! The servers the bench runs in the container's namespace.
use std::{
    fs::File,
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::{NEEDS, Service, last_lines};
use crate::bench::measure::{KillOnDrop, Placement, check_interrupted, in_netns, on_cpu};
use crate::netns::NetnsPath;

/// The servers, running in the container's namespace until dropped; their scratch directory
/// (nginx's configuration, redis's working directory, their logs) goes with them.
pub struct Servers {
    children: Vec<(Service, KillOnDrop)>,
    dir: PathBuf,
}

/// How long a server may take to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(10);

impl Servers {
    /// Starts redis, nginx and sockperf on their [`NEEDS`] ports in `container` (iperf3 runs one
    /// server per test) and waits until each listens.
    /// With `placement`, every server runs on its server CPU.
    pub fn start(container: &NetnsPath, placement: Option<Placement>) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("dxdp-bench-ingress-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut servers = Self {
            children: Vec::new(),
            dir,
        };
        let conf = servers.dir.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&servers.dir, port_of(Service::Nginx)))
            .with_context(|| format!("cannot write {}", conf.display()))?;
        let dir = servers.dir.display().to_string();
        let redis_port = port_of(Service::Redis).to_string();
        let sockperf_port = port_of(Service::Sockperf).to_string();
        let conf = conf.display().to_string();
        let commands: [(Service, &str, Vec<&str>); 3] = [
            (
                Service::Redis,
                "redis-server",
                vec![
                    "--port",
                    &redis_port,
                    "--bind",
                    "0.0.0.0",
                    "--protected-mode",
                    "no",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    &dir,
                ],
            ),
            (
                Service::Nginx,
                "nginx",
                vec!["-e", "stderr", "-p", &dir, "-c", &conf],
            ),
            (
                Service::Sockperf,
                "sockperf",
                vec!["sr", "--tcp", "-i", "0.0.0.0", "-p", &sockperf_port],
            ),
        ];
        for (service, program, args) in commands {
            let log = servers.log(service);
            let out = File::create(&log).with_context(|| format!("cannot create {log:?}"))?;
            let mut cmd = in_netns(container.path(), program);
            if let Some(p) = placement {
                on_cpu(&mut cmd, p.server_cpu)?;
            }
            cmd.args(args)
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out);
            let child = KillOnDrop::spawn(&mut cmd, program)?;
            servers.children.push((service, child));
        }
        for i in 0..servers.children.len() {
            servers.wait_listening(container, i)?;
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

    fn wait_listening(&mut self, container: &NetnsPath, i: usize) -> Result<()> {
        let service = self.children[i].0;
        let port = port_of(service);
        let started = Instant::now();
        loop {
            check_interrupted()?;
            if let Some(status) = self.children[i].1.exited() {
                let log = std::fs::read_to_string(self.log(service)).unwrap_or_default();
                bail!(
                    "the {} server exited ({status}) in the container's namespace: {}",
                    service.name(),
                    last_lines(&log, 5)
                );
            }
            let listening = container.run(move || {
                let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
                Ok(TcpStream::connect_timeout(&local, Duration::from_millis(200)).is_ok())
            })?;
            if listening {
                return Ok(());
            }
            if started.elapsed() > LISTEN_WAIT {
                bail!(
                    "the {} server did not listen on port {port} within {}s",
                    service.name(),
                    LISTEN_WAIT.as_secs()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
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
