//! Whether dockerd forwards connections from the host itself to published ports through
//! `docker-proxy` (its `userland-proxy` setting, on by default) or through iptables DNAT.
//! Neither the API's `/info` nor `docker info` says; the daemon's command line and its
//! daemon.json do. A flag on the command line wins over daemon.json (dockerd refuses to start
//! when both set it, so at most one does).
use std::path::{Path, PathBuf};

const DEFAULT_CONFIG: &str = "/etc/docker/daemon.json";
/// Where a dockerd started without `-H` listens, as DOCKER_HOST would name it.
const DEFAULT_HOSTS: [&str; 3] = [
    "unix:///var/run/docker.sock",
    "unix:///run/docker.sock",
    "fd://",
];

/// The setting of one dockerd and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserlandProxy {
    pub on: bool,
    /// "the command line", "/etc/docker/daemon.json", or "the default".
    pub source: String,
}

/// What a dockerd's command line says: where it listens, the flag, its daemon.json.
#[derive(Debug, Default, PartialEq, Eq)]
struct Cmdline {
    hosts: Vec<String>,
    flag: Option<bool>,
    config_file: Option<PathBuf>,
}

fn parse_cmdline(args: &[String]) -> Cmdline {
    let mut out = Cmdline::default();
    let mut it = args.iter().skip(1).peekable();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match name {
            "-H" | "--host" => out.hosts.extend(value()),
            "--config-file" => out.config_file = value().map(PathBuf::from),
            // A Go boolean flag: `--userland-proxy` alone means true, false needs `=false`.
            "--userland-proxy" => out.flag = Some(inline.as_deref().is_none_or(|v| v == "true")),
            _ => {}
        }
    }
    out
}

/// `userland-proxy` in a daemon.json text, if it sets it.
fn from_daemon_json(text: &str) -> Option<bool> {
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    json.get("userland-proxy")?.as_bool()
}

fn resolve(cmdline: &Cmdline, read: impl Fn(&Path) -> Option<String>) -> UserlandProxy {
    if let Some(on) = cmdline.flag {
        return UserlandProxy {
            on,
            source: "the command line".to_owned(),
        };
    }
    let config = cmdline
        .config_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    match read(&config).as_deref().and_then(from_daemon_json) {
        Some(on) => UserlandProxy {
            on,
            source: config.display().to_string(),
        },
        None => UserlandProxy {
            on: true,
            source: "the default".to_owned(),
        },
    }
}

/// Whether a dockerd with these hosts is the one `docker_host` (DOCKER_HOST) reaches.
fn serves(hosts: &[String], docker_host: Option<&str>) -> bool {
    match docker_host.filter(|h| !h.is_empty()) {
        None => hosts.is_empty() || hosts.iter().any(|h| DEFAULT_HOSTS.contains(&h.as_str())),
        Some(wanted) => hosts.iter().any(|h| h == wanted),
    }
}

/// The setting of the running dockerd that DOCKER_HOST (or the default socket) reaches, found
/// among the host's processes; `None` when no such dockerd runs here (a remote engine, Podman).
pub fn of_running_daemon() -> Option<UserlandProxy> {
    let docker_host = std::env::var("DOCKER_HOST").ok();
    let procs = std::fs::read_dir("/proc").ok()?;
    for entry in procs.flatten() {
        let dir = entry.path();
        let is_dockerd =
            std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == "dockerd");
        if !is_dockerd {
            continue;
        }
        let Ok(raw) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let cmdline = parse_cmdline(&args);
        if serves(&cmdline.hosts, docker_host.as_deref()) {
            return Some(resolve(&cmdline, |p| std::fs::read_to_string(p).ok()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_command_line_wins_then_daemon_json_then_the_default() {
        let none = |_: &Path| None;
        let off_json = |_: &Path| Some(r#"{"userland-proxy": false}"#.to_owned());
        let cl = parse_cmdline(&args("dockerd --userland-proxy=false"));
        assert_eq!(
            resolve(&cl, off_json),
            UserlandProxy {
                on: false,
                source: "the command line".into()
            }
        );
        let cl = parse_cmdline(&args("dockerd --userland-proxy"));
        assert!(resolve(&cl, off_json).on, "a bare boolean flag is true");
        let cl = parse_cmdline(&args("dockerd --config-file /etc/x.json"));
        assert_eq!(
            resolve(&cl, off_json),
            UserlandProxy {
                on: false,
                source: "/etc/x.json".into()
            }
        );
        let cl = parse_cmdline(&args("dockerd -H fd:// --containerd=/run/containerd.sock"));
        assert_eq!(
            resolve(&cl, none),
            UserlandProxy {
                on: true,
                source: "the default".into()
            }
        );
        let other = |_: &Path| Some(r#"{"live-restore": true}"#.to_owned());
        assert!(resolve(&cl, other).on);
    }

    #[test]
    fn the_daemon_is_told_by_where_it_listens() {
        let default = parse_cmdline(&args("dockerd -H fd:// --containerd=/x"));
        assert!(serves(&default.hosts, None));
        let bare = parse_cmdline(&args("dockerd"));
        assert!(serves(&bare.hosts, None));
        assert!(!serves(&bare.hosts, Some("unix:///run/other.sock")));
        let private = parse_cmdline(&args(
            "dockerd --config-file=/run/t/daemon.json --host=unix:///run/t/docker.sock",
        ));
        assert!(!serves(&private.hosts, None));
        assert!(serves(&private.hosts, Some("unix:///run/t/docker.sock")));
        assert_eq!(
            private.config_file.as_deref(),
            Some(Path::new("/run/t/daemon.json"))
        );
    }
}
