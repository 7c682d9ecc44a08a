//! `dxdp doctor`: every precondition, checked, with what to do about a failure.
use std::{fmt, path::Path, process::ExitCode};

use anyhow::Result;
use aya::util::KernelVersion;
use serde::Serialize;

use super::{
    mtu,
    privileges::missing_capabilities,
    published::{self, PortPath},
};
use crate::cli::DoctorArgs;
use crate::docker::userland_proxy::UserlandProxy;
use crate::{
    choice::{Kind, Origin},
    datapath::{
        Attachment, Capacity, ConnectionTables, Datapath, LinkRecord, TC_SINCE, TablePressure,
        XDP_SINCE, kernel_has,
    },
    docker::{BridgeNetwork, ConnectError},
    family::Families,
    firewall::{self, Ruleset, RulesetCache},
    netlink::{self, Interface},
    netns::NetnsPath,
    ports, rcu,
    runtime::{self, CgroupLayout, OciRuntime},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Ok => " ok ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        })
    }
}

#[derive(Serialize)]
struct Check {
    verdict: Verdict,
    what: String,
    fix: Option<String>,
}

fn check(verdict: Verdict, what: impl Into<String>, fix: Option<&str>) -> Check {
    Check {
        verdict,
        what: what.into(),
        fix: fix.map(str::to_owned),
    }
}

/// `dxdp doctor --json`: the shape docs/json.md documents.
#[derive(Serialize)]
struct Report<'c> {
    schema: &'static str,
    /// The worst verdict: what the exit status says (fail: 1).
    verdict: Verdict,
    checks: &'c [Check],
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: DoctorArgs) -> Result<ExitCode> {
    let mut checks = vec![
        kernel(),
        capabilities(),
        bpffs(pin_dir),
        rcu(&rcu::Switch::host()),
    ];
    let (docker, networks, ports) = docker();
    checks.extend(docker);
    checks.extend(firewall(&networks, &ports));
    checks.extend(programs(pin_dir, capacity));
    checks.extend(overlay_sites(pin_dir, capacity));
    let worst = checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    if args.json {
        let report = Report {
            schema: "dxdp.doctor/1",
            verdict: worst,
            checks: &checks,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for c in &checks {
            println!("[{}] {}", c.verdict, c.what);
            if let Some(fix) = &c.fix {
                println!("       fix: {fix}");
            }
        }
    }
    Ok(if worst == Verdict::Fail {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn kernel() -> Check {
    match KernelVersion::current() {
        Ok(v) if kernel_has(v, TC_SINCE) => check(
            Verdict::Ok,
            format!("kernel {v}: TCX, bpf_redirect_peer, native XDP on veth"),
            None,
        ),
        Ok(v) if kernel_has(v, XDP_SINCE) => check(
            Verdict::Warn,
            format!("kernel {v}: no TCX (6.6), so only the xdp datapath can be pinned"),
            Some("use --datapath xdp, or upgrade to Linux 6.6 or later"),
        ),
        Ok(v) => check(
            Verdict::Fail,
            format!("kernel {v} is too old for dxdp"),
            Some("Linux 5.10 at least, 6.6 or later for the tc datapath"),
        ),
        Err(e) => check(
            Verdict::Fail,
            format!("cannot read the kernel version: {e}"),
            None,
        ),
    }
}

fn capabilities() -> Check {
    let missing = missing_capabilities();
    if missing.is_empty() {
        check(
            Verdict::Ok,
            "capabilities: CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN",
            None,
        )
    } else {
        check(
            Verdict::Fail,
            format!("missing capabilities: {}", missing.join(", ")),
            Some("run as root, or grant them (the systemd unit in packaging/ does)"),
        )
    }
}

/// The kernel's RCU expedite switch, which decides how long a veth's first attachment waits,
/// and whether a dxdp that turned it on (`watch --expedite-rcu`) died before putting it back.
fn rcu(switch: &rcu::Switch) -> Check {
    let knob = switch.knob().display();
    let value = match switch.read() {
        Ok(value) => value,
        Err(e) => {
            return check(
                Verdict::Warn,
                format!("RCU grace periods: {e:#}"),
                Some("watch --expedite-rcu cannot be used here"),
            );
        }
    };
    match (value, switch.holder()) {
        (0, _) => check(
            Verdict::Ok,
            format!(
                "RCU grace periods normal ({knob} = 0): a veth's first attachment waits one \
                 (about 12 ms); `watch --expedite-rcu` expedites them while it attaches"
            ),
            None,
        ),
        (_, Some(holder)) if holder.alive() => check(
            Verdict::Ok,
            format!(
                "RCU grace periods expedited for now: dxdp pid {} is attaching \
                 (watch --expedite-rcu) and puts {knob} back to {} after",
                holder.pid, holder.previous
            ),
            None,
        ),
        (_, Some(holder)) => check(
            Verdict::Warn,
            format!(
                "{knob} = {value}, left on by dxdp pid {} that died while attaching \
                 (watch --expedite-rcu); every grace period on the host interrupts every CPU",
                holder.pid
            ),
            Some(&format!(
                "start `dxdp watch` (it puts the value back), or `echo {} > {knob}` and remove {}",
                holder.previous,
                switch.marker().display()
            )),
        ),
        (_, None) => check(
            Verdict::Ok,
            format!(
                "RCU grace periods expedited ({knob} = {value}, the host's setting): first \
                 attachments are fast; dxdp leaves it as it is"
            ),
            None,
        ),
    }
}

fn bpffs(pin_dir: &Path) -> Check {
    let probe = pin_dir.parent().unwrap_or(Path::new("/sys/fs/bpf"));
    if crate::datapath::on_bpffs(probe) {
        check(
            Verdict::Ok,
            format!("bpffs mounted at {}", probe.display()),
            None,
        )
    } else {
        check(
            Verdict::Fail,
            format!("{} is not a bpffs mount", probe.display()),
            Some("mount -t bpf bpf /sys/fs/bpf"),
        )
    }
}

/// Per Docker bridge network, the firewall rules that keep pairs on it from being linked; per
/// published port, whether the rules would let a fast path from the NIC take it.
fn firewall(networks: &[BridgeNetwork], ports: &Result<Vec<PortPath>>) -> Vec<Check> {
    let rules = match Ruleset::read() {
        Ok(rules) => rules,
        Err(e) => {
            return vec![check(
                Verdict::Fail,
                format!("cannot read the firewall rules, so no pair can be linked: {e:#}"),
                Some("install what the message names, or link with --bypass-firewall"),
            )];
        }
    };
    let mut out = vec![check(
        Verdict::Ok,
        format!(
            "firewall: {}; every link is checked against these rules",
            rules.summary()
        ),
        None,
    )];
    for net in networks {
        // Docker's own addresses for the network's containers: a rule naming one of them
        // blocks that container's links.
        let v4 = net.addrs.iter().any(|a| a.is_ipv4());
        let v6 = net.addrs.iter().any(|a| a.is_ipv6());
        if net.addrs.is_empty() {
            continue;
        }
        let verdict = rules.on_bridge(&net.bridge, &net.addrs, v4, v6);
        let kept = verdict.carried().and(verdict.closed());
        let open = verdict.open();
        if kept.is_empty() {
            out.push(check(
                Verdict::Ok,
                format!(
                    "firewall: no rule keeps containers on network {} ({}) from being linked",
                    net.name, net.bridge
                ),
                None,
            ));
        } else if !open.is_empty() {
            let list: Vec<String> = verdict
                .closing(kept)
                .iter()
                .map(|b| format!("[{b}]"))
                .collect();
            out.push(check(
                Verdict::Warn,
                format!(
                    "firewall: on network {} ({}), links carry {open} only; {kept} stays on the \
                     bridge, where these rules may drop or alter it: {}",
                    net.name,
                    net.bridge,
                    list.join(" ")
                ),
                Some(
                    "remove the rules to link that family too, or opt in with --bypass-firewall \
                     (link) or the label dxdp.firewall=bypass on both containers (watch)",
                ),
            ));
        } else {
            let list: Vec<String> = verdict
                .blockers()
                .iter()
                .map(|b| format!("[{b}]"))
                .collect();
            out.push(check(
                Verdict::Warn,
                format!(
                    "firewall: on network {} ({}), links are refused where these rules may drop \
                     or alter traffic: {}",
                    net.name,
                    net.bridge,
                    list.join(" ")
                ),
                Some(
                    "remove the rules, or opt in with --bypass-firewall (link) or the label \
                     dxdp.firewall=bypass on both containers (watch)",
                ),
            ));
        }
    }
    out.extend(published_ports(&rules, networks, ports));
    out
}

/// One line per published port (a sum beyond twenty).
fn published_ports(
    rules: &Ruleset,
    networks: &[BridgeNetwork],
    ports: &Result<Vec<PortPath>>,
) -> Vec<Check> {
    let verdicts = match ports {
        Ok(ports) => published::verdicts(rules, networks, ports),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    match verdicts {
        Ok(lines) => lines
            .into_iter()
            .map(|line| match line {
                Ok(line) => check(Verdict::Ok, line, None),
                Err(line) => check(Verdict::Warn, line, None),
            })
            .collect(),
        Err(e) => vec![check(
            Verdict::Warn,
            format!("published ports: cannot check them against the rules: {e:#}"),
            None,
        )],
    }
}

/// The engine, and whether its OCI runtime can start containers on this host.
fn docker() -> (Vec<Check>, Vec<BridgeNetwork>, Result<Vec<PortPath>>) {
    let probe = async {
        let docker = crate::docker::Docker::connect().await?;
        docker.ping().await?;
        let networks = docker.bridge_networks().await.unwrap_or_default();
        let runtime = docker.oci_runtime().await;
        let publishing = if docker.is_podman() {
            None
        } else {
            docker.publishing_containers().await.ok()
        };
        let ports = published::gather(&docker).await;
        Ok::<_, ConnectError>((docker.describe(), networks, runtime, publishing, ports))
    };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ConnectError::Unreachable(e.into()))
        .and_then(|rt| rt.block_on(probe));
    match result {
        Ok((engine, networks, runtime, publishing, ports)) => {
            let mut checks = vec![
                check(Verdict::Ok, format!("{engine} reachable"), None),
                oci_runtime(runtime, &CgroupLayout::host()),
            ];
            if let Some(publishing) = publishing {
                checks.push(userland_proxy(
                    crate::docker::userland_proxy::of_running_daemon(),
                    &publishing,
                ));
            }
            (checks, networks, ports)
        }
        Err(ConnectError::Rootless(e)) => (
            vec![check(
                Verdict::Fail,
                format!("{e:#}"),
                Some("link containers of rootful Podman or dockerd"),
            )],
            Vec::new(),
            Ok(Vec::new()),
        ),
        Err(e) => (
            vec![check(
                Verdict::Warn,
                format!("dockerd not reachable: {e:#}"),
                Some("start dockerd (watch and container names need it; netns: endpoints do not)"),
            )],
            Vec::new(),
            Ok(Vec::new()),
        ),
    }
}

/// dockerd's `userland-proxy`: while it is on, clients on the host itself reach published ports
/// through a docker-proxy process per port, which dxdp does not accelerate.
fn userland_proxy(setting: Option<UserlandProxy>, publishing: &[String]) -> Check {
    let Some(setting) = setting else {
        return check(
            Verdict::Ok,
            "dockerd's userland-proxy: the daemon runs elsewhere (not a process of this host), \
             so its setting cannot be read",
            None,
        );
    };
    let source = &setting.source;
    if !setting.on {
        return check(
            Verdict::Ok,
            format!(
                "dockerd's userland-proxy is off ({source}): clients on this host reach \
                 published ports through Docker's DNAT, with no docker-proxy in the way"
            ),
            None,
        );
    }
    if publishing.is_empty() {
        return check(
            Verdict::Ok,
            format!(
                "dockerd's userland-proxy is on ({source}); no running container publishes a \
                 port, so no docker-proxy runs"
            ),
            None,
        );
    }
    let mut names = publishing
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if publishing.len() > 3 {
        names.push_str(&format!(" and {} more", publishing.len() - 3));
    }
    check(
        Verdict::Warn,
        format!(
            "dockerd's userland-proxy is on ({source}) and {} publish ports ({names}): clients \
             on this host reach them through docker-proxy, one process per port, at about half \
             the rate of the container's own address (redis GET, 20 clients: 40 k against 84 k \
             requests/s on this project's test machine); dxdp does not accelerate that path",
            publishing.len()
        ),
        Some(
            "set \"userland-proxy\": false in /etc/docker/daemon.json and restart dockerd: Docker \
             then forwards the host's own connections with iptables DNAT (hairpin mode on the \
             bridge ports, route_localnet=1 on its bridges for 127.0.0.1) instead of \
             docker-proxy (measured 0.89x of the direct rate); kernels or setups without \
             hairpin NAT need the proxy",
        ),
    )
}

/// The engine's OCI runtime: a runtime that cannot start a container here means no container
/// to link, whatever dxdp does.
fn oci_runtime(runtime: Result<OciRuntime>, layout: &CgroupLayout) -> Check {
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            return check(
                Verdict::Warn,
                format!("cannot ask the engine for its OCI runtime: {e:#}"),
                None,
            );
        }
    };
    let named = if runtime.version.is_empty() {
        runtime.name.clone()
    } else {
        format!("{} ({})", runtime.name, runtime.version)
    };
    match runtime::refusal(&runtime, layout) {
        None => check(Verdict::Ok, format!("OCI runtime {named}"), None),
        Some(why) => check(
            Verdict::Fail,
            format!("OCI runtime {named} cannot start containers here: {why}"),
            Some(
                "use runc: printf '[engine]\\nruntime = \"runc\"\\n' > \
                 /etc/containers/containers.conf.d/dxdp-runtime.conf (Podman; apt-get install \
                 runc first if it is missing), then restart the API service (systemctl restart \
                 podman.service); scripts/setup.sh does both",
            ),
        ),
    }
}

/// The pinned state opens, and no other tool's program sits on a managed veth.
/// Once per network that carries links, its MTU (the smallest of its linked veths'), and for the
/// default what a larger one would change: information, not a warning.
fn mtus(host: &[Interface], links: &[LinkRecord]) -> Vec<Check> {
    let mut by_network: std::collections::BTreeMap<&str, (usize, Option<u32>)> = Default::default();
    for link in links {
        let mtu = [link.low_ifindex, link.high_ifindex]
            .iter()
            .filter_map(|i| host.iter().find(|h| h.index == *i))
            .filter_map(|veth| mtu::of(&veth.name))
            .min();
        let entry = by_network.entry(&link.network).or_insert((0, None));
        entry.0 += 1;
        entry.1 = match (entry.1, mtu) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
    }
    by_network
        .into_iter()
        .filter_map(|(network, (links, mtu))| {
            Some(check(
                Verdict::Ok,
                format!(
                    "network {network}: {links} link(s) at {}",
                    mtu::advice(mtu?)
                ),
                None,
            ))
        })
        .collect()
}

/// Pinned links a rule added after them covers: each bypasses that rule until it goes, which a
/// running watch does within a second; without one, nothing takes them away. `rules` is `None`
/// when they cannot be read (the firewall check above says why).
fn covered_links(
    datapath: &mut Datapath,
    rules: Option<&mut RulesetCache>,
    host: &[Interface],
    links: &[LinkRecord],
) -> Vec<Check> {
    let Some(rules) = rules else {
        return vec![];
    };
    let covered = firewall::covered(
        rules,
        &mut |ifindex| datapath.recorded_addresses(ifindex),
        host,
        links,
        "unlink them (a running `dxdp watch` removes such a link within a second), or \
         link them again with --bypass-firewall",
    );
    let Ok(covered) = covered else {
        return vec![];
    };
    let mut out: Vec<Check> = covered
        .iter()
        .map(|c| {
            let fix = if c.families.is_empty() {
                format!("dxdp unlink {} {}", c.link.low_name, c.link.high_name)
            } else {
                // Linking again writes the families the rules leave open.
                format!("dxdp link {} {}", c.link.low_name, c.link.high_name)
            };
            check(
                Verdict::Fail,
                format!(
                    "link {} - {} (made {}) bypasses a rule that came after it: {}",
                    c.link.low_name,
                    c.link.high_name,
                    match c.link.origin {
                        Origin::Manual => "by hand",
                        Origin::Watch => "by the watch",
                    },
                    c.message
                ),
                Some(&fix),
            )
        })
        .collect();
    // The links that carry only some families, each with what keeps the others on the bridge.
    let narrowed = links.iter().filter(|l| {
        l.families != Families::ALL
            && !covered.iter().any(|c| {
                (c.link.low_ifindex, c.link.high_ifindex) == (l.low_ifindex, l.high_ifindex)
            })
    });
    for link in narrowed {
        let kept = link.families.others();
        let judged = firewall::judged(
            rules,
            &mut |ifindex| datapath.recorded_addresses(ifindex),
            host,
            link,
        );
        let why = match judged {
            Ok(Some((_, verdict))) if !verdict.closing(kept).is_empty() => {
                format!(
                    "where {} may drop or alter it",
                    firewall::listed(&verdict.closing(kept))
                )
            }
            Ok(Some((_, verdict))) if verdict.carried().and(kept).is_empty() => {
                "as neither end has an address of it".to_owned()
            }
            // The watch widens its own links at its next pass; one made by hand stays.
            Ok(Some(_)) => "though no rule closes it now (`dxdp link` again carries it)".to_owned(),
            _ => "its veths are gone or unreadable".to_owned(),
        };
        out.push(check(
            Verdict::Ok,
            format!(
                "link {} - {} carries {} only; {kept} stays on the bridge, {why}",
                link.low_name, link.high_name, link.families
            ),
            None,
        ));
    }
    out
}

/// The exposed published ports: how many, and each container whose ports a rule added after
/// the exposure now keeps on Docker's path (the fast path bypasses that rule until a running
/// watch takes it away at its next resync; without one, nothing does).
fn exposures(
    datapath: &mut Datapath,
    rules: Option<&mut RulesetCache>,
    host: &[Interface],
) -> Vec<Check> {
    let exposed = match datapath.exposed() {
        Ok(e) => e,
        Err(e) => {
            return vec![check(
                Verdict::Warn,
                format!("cannot read the exposed ports: {e:#}"),
                None,
            )];
        }
    };
    if exposed.is_empty() {
        return vec![];
    }
    let mut out = vec![];
    if let Some(rules) = rules {
        let outside = ports::host_addresses()
            .map(|addrs| ports::container_prefixes(host, &addrs))
            .unwrap_or_default();
        // A walk fails only on rules never read, and these were: such a port names no rule.
        let marks = ports::ArrivingMarks::default();
        for (p, why) in ports::covered_exposures(rules, &exposed, host, &outside, &marks).flatten()
        {
            out.push(check(
                Verdict::Fail,
                format!(
                    "exposed container {} bypasses a rule that came after its exposure: {why}",
                    p.container
                ),
                Some(&format!("dxdp unexpose {}", p.container)),
            ));
        }
    }
    let containers: std::collections::BTreeSet<&str> =
        exposed.iter().map(|p| p.container.as_str()).collect();
    out.push(check(
        Verdict::Ok,
        format!(
            "{} published port(s) of {} container(s) exposed from the NIC (dxdp status lists them)",
            exposed.len(),
            containers.len()
        ),
        None,
    ));
    out
}

/// The tables of connections through exposed ports: a warning where one is nearly full,
/// nothing while all are empty.
fn connection_tables(t: &ConnectionTables) -> Option<Check> {
    let (e, o) = (&t.established, &t.opening);
    match t.pressure() {
        Some(TablePressure::Forgetting) => Some(check(
            Verdict::Warn,
            format!(
                "connections through exposed ports: {} of {} established: the least recently \
                 used are being forgotten, and one whose container speaks next breaks",
                e.entries, e.capacity
            ),
            Some(
                "raise --max-connections (DXDP_MAX_CONNECTIONS) on a fresh pin directory: \
                 dxdp cleanup, then expose again",
            ),
        )),
        Some(TablePressure::UnansweredHandshakes) => Some(check(
            Verdict::Warn,
            format!(
                "connections through exposed ports: {} of {} being opened whose clients never \
                 completed the handshake (a SYN flood?); established connections keep their \
                 place",
                o.entries, o.capacity
            ),
            None,
        )),
        None => (e.entries + o.entries + t.udp.entries > 0).then(|| {
            check(
                Verdict::Ok,
                format!(
                    "connections through exposed ports: {} established (of {}), {} being \
                     opened, {} UDP flows",
                    e.entries, e.capacity, o.entries, t.udp.entries
                ),
                None,
            )
        }),
    }
}

fn programs(pin_dir: &Path, capacity: Capacity) -> Vec<Check> {
    if !pin_dir.exists() {
        return vec![check(
            Verdict::Ok,
            format!("no pinned state at {} yet", pin_dir.display()),
            None,
        )];
    }
    let mut datapath = match Datapath::open(pin_dir, capacity) {
        Ok(d) => d,
        Err(e) => {
            return vec![check(
                Verdict::Fail,
                format!("pinned state at {}: {e:#}", pin_dir.display()),
                Some("dxdp cleanup, then link again"),
            )];
        }
    };
    let host = netlink::interfaces(&NetnsPath::host()).unwrap_or_default();
    let mut out = vec![];
    let managed = datapath.interfaces().unwrap_or_default();
    let foreign = datapath.foreign_programs(&host).unwrap_or_default();
    for (ifname, description) in &foreign {
        out.push(check(
            Verdict::Warn,
            format!("{ifname}: another tool's program is attached: {description}"),
            Some("check that it does not conflict with dxdp's redirect"),
        ));
    }
    let records = datapath.links().unwrap_or_default();
    out.extend(attachments(&mut datapath, &host, &records, None));
    // One read of the rules serves the links and the exposed ports.
    let mut rules = RulesetCache::default();
    let mut readable = rules.refresh().is_ok().then_some(&mut rules);
    out.extend(covered_links(
        &mut datapath,
        readable.as_deref_mut(),
        &host,
        &records,
    ));
    out.extend(exposures(&mut datapath, readable, &host));
    if let Ok(tables) = datapath.connection_tables() {
        out.extend(connection_tables(&tables));
    }
    out.extend(mtus(&host, &records));
    let links = records.len();
    let xdp = managed.iter().filter(|(_, k)| *k == Kind::Xdp).count();
    out.push(check(
        Verdict::Ok,
        format!(
            "pinned state at {}: {links} link(s), {} managed veth(s) ({xdp} xdp)",
            pin_dir.display(),
            managed.len()
        ),
        None,
    ));
    out
}

/// Each link whose veths do not both carry dxdp's program with its attachment pinned, with
/// what to do. `sandbox` names the overlay sandbox the links are in (`None`: the host).
fn attachments(
    datapath: &mut Datapath,
    here: &[Interface],
    links: &[LinkRecord],
    sandbox: Option<&str>,
) -> Vec<Check> {
    let states = match datapath.attachments(here) {
        Ok(states) => states,
        Err(e) => {
            return vec![check(
                Verdict::Warn,
                format!("cannot check the programs' attachments: {e:#}"),
                None,
            )];
        }
    };
    attachment_checks(&states, here, links, sandbox)
}

/// [`attachments`] of the states found.
fn attachment_checks(
    states: &[(u32, Attachment)],
    here: &[Interface],
    links: &[LinkRecord],
    sandbox: Option<&str>,
) -> Vec<Check> {
    let place = sandbox.map_or(String::new(), |s| format!(" in overlay sandbox {s}"));
    let mut out = Vec::new();
    for link in links {
        let ends = [
            (link.low_ifindex, &link.low_name),
            (link.high_ifindex, &link.high_name),
        ];
        let mut problems = Vec::new();
        let mut fix = format!(
            "dxdp link {} {} (it attaches again)",
            link.low_name, link.high_name
        );
        for (ifindex, name) in ends {
            let veth = here
                .iter()
                .find(|i| i.index == ifindex)
                .map_or_else(|| format!("ifindex {ifindex}"), |i| i.name.clone());
            match states.iter().find(|(i, _)| *i == ifindex).map(|s| s.1) {
                Some(Attachment::Attached) | None => {}
                Some(Attachment::VethGone) => {
                    problems.push(format!("{name}'s veth is gone (its container stopped)"));
                    fix = format!(
                        "dxdp unlink {} {} (a running watch removes its own links at once)",
                        link.low_name, link.high_name
                    );
                }
                Some(Attachment::Detached) => problems.push(format!(
                    "dxdp's {} program is not attached to {name}'s veth {veth}, whose frames \
                     take the bridge",
                    link.datapath
                )),
                Some(Attachment::Unpinned) => {
                    problems.push(format!(
                        "dxdp's {} program is attached to {name}'s veth {veth} without its \
                         pin: another process holds that attachment",
                        link.datapath
                    ));
                    fix = "stop the process that holds it, or restart the container (a new \
                           veth), then dxdp link again"
                        .to_owned();
                }
            }
        }
        if !problems.is_empty() {
            out.push(check(
                Verdict::Warn,
                format!(
                    "link {} - {}{place}: {}",
                    link.low_name,
                    link.high_name,
                    problems.join("; ")
                ),
                Some(&fix),
            ));
        }
    }
    out
}

/// Each overlay network's sandbox with pinned state on this node: a live one's datapath,
/// checked from inside it (its veths and rules are its own); a gone one's state, left behind.
fn overlay_sites(pin_dir: &Path, capacity: Capacity) -> Vec<Check> {
    let mut out = Vec::new();
    for site in crate::overlay::sites(pin_dir) {
        let Some(sandbox) = &site.sandbox else {
            out.push(gone_site(&site.name, &site.pin_dir));
            continue;
        };
        match sandbox.run(|| Ok(site_checks(&site.pin_dir, &site.name, capacity))) {
            Ok(checks) => out.extend(checks),
            Err(e) => out.push(check(
                Verdict::Warn,
                format!("overlay sandbox {}: {e:#}", site.name),
                None,
            )),
        }
    }
    out
}

/// The pinned state of an overlay sandbox that is gone: its veths went with it, so its
/// programs redirect nothing, but its pins hold the programs and maps until removed.
fn gone_site(name: &str, dir: &Path) -> Check {
    check(
        Verdict::Warn,
        format!(
            "overlay sandbox {name} is gone (its network removed, or its last task on this node \
             stopped), and its pinned state is left at {}",
            dir.display()
        ),
        Some(
            "dxdp cleanup removes it (and every link); a running watch removes it at its next \
             resync, as does the next dxdp link or unlink",
        ),
    )
}

/// One live sandbox's datapath, read on a thread inside the sandbox.
fn site_checks(dir: &Path, name: &str, capacity: Capacity) -> Vec<Check> {
    let mut datapath = match Datapath::open(dir, capacity) {
        Ok(d) => d,
        Err(e) => {
            return vec![check(
                Verdict::Fail,
                format!(
                    "overlay sandbox {name}: pinned state at {}: {e:#}",
                    dir.display()
                ),
                Some("dxdp cleanup, then link again"),
            )];
        }
    };
    let here = netlink::interfaces(&NetnsPath::host()).unwrap_or_default();
    let mut out = Vec::new();
    for (ifname, description) in datapath.foreign_programs(&here).unwrap_or_default() {
        out.push(check(
            Verdict::Warn,
            format!(
                "{ifname} in overlay sandbox {name}: another tool's program is attached: \
                 {description}"
            ),
            Some("check that it does not conflict with dxdp's redirect"),
        ));
    }
    let records = datapath.links().unwrap_or_default();
    out.extend(attachments(&mut datapath, &here, &records, Some(name)));
    // The sandbox's own rules, read from inside it.
    let mut rules = RulesetCache::default();
    let readable = rules.refresh().is_ok().then_some(&mut rules);
    out.extend(covered_links(&mut datapath, readable, &here, &records));
    let managed = datapath.interfaces().unwrap_or_default();
    let xdp = managed.iter().filter(|(_, k)| *k == Kind::Xdp).count();
    let network = records
        .first()
        .map_or(String::new(), |l| format!("network {}, ", l.network));
    out.push(check(
        Verdict::Ok,
        format!(
            "overlay sandbox {name} ({network}pinned at {}): {} link(s), {} managed veth(s) \
             ({xdp} xdp)",
            dir.display(),
            records.len(),
            managed.len()
        ),
        None,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::TableFill;

    fn tables(established: usize, opening: usize, udp: usize) -> ConnectionTables {
        let fill = |entries, capacity| TableFill { entries, capacity };
        ConnectionTables {
            established: fill(established, 1000),
            opening: fill(opening, 250),
            udp: fill(udp, 250),
        }
    }

    fn link(low: (u32, &str), high: (u32, &str)) -> LinkRecord {
        LinkRecord {
            low_ifindex: low.0,
            high_ifindex: high.0,
            low_name: low.1.into(),
            high_name: high.1.into(),
            network: "backend".into(),
            datapath: Kind::Tc,
            origin: Origin::Watch,
            bypasses_firewall: false,
            families: Families::ALL,
            created_unix_secs: 0,
            low_to_high: Default::default(),
            high_to_low: Default::default(),
        }
    }

    fn veth(index: u32, name: &str) -> Interface {
        Interface {
            index,
            name: name.into(),
            mac: None,
            kind: Some("veth".into()),
            peer_index: None,
            peer_netnsid: None,
            master: None,
            xdp_prog_id: None,
            up: true,
        }
    }

    /// A link whose veths carry dxdp's attached, pinned program says nothing; one with a veth
    /// gone, detached or unpinned is a warning naming the end, the sandbox and the way out.
    #[test]
    fn attachments_warn_per_link_naming_the_sandbox_and_the_fix() {
        let here = [veth(3, "veth0"), veth(5, "veth1"), veth(7, "veth2")];
        let links = [
            link((3, "api.1"), (5, "db.1")),
            link((7, "web.1"), (9, "cache.1")),
        ];
        let fine = [(3, Attachment::Attached), (5, Attachment::Attached)];
        assert!(attachment_checks(&fine, &here, &links[..1], Some("1-qqxh7f1pd1")).is_empty());

        let detached = [(3, Attachment::Attached), (5, Attachment::Detached)];
        let checks = attachment_checks(&detached, &here, &links[..1], Some("1-qqxh7f1pd1"));
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].verdict, Verdict::Warn);
        assert!(
            checks[0]
                .what
                .contains("api.1 - db.1 in overlay sandbox 1-qqxh7f1pd1")
                && checks[0].what.contains("not attached to db.1's veth veth1"),
            "{}",
            checks[0].what
        );
        assert_eq!(
            checks[0].fix.as_deref(),
            Some("dxdp link api.1 db.1 (it attaches again)")
        );

        let gone = [(7, Attachment::Unpinned), (9, Attachment::VethGone)];
        let checks = attachment_checks(&gone, &here, &links[1..], None);
        assert_eq!(checks.len(), 1);
        assert!(
            checks[0].what.starts_with("link web.1 - cache.1: ")
                && checks[0].what.contains("cache.1's veth is gone")
                && checks[0].what.contains("without its pin"),
            "{}",
            checks[0].what
        );
    }

    #[test]
    fn a_gone_sandboxs_state_is_a_warning_with_the_way_out() {
        let c = gone_site(
            "1-qqxh7f1pd1",
            Path::new("/sys/fs/bpf/dxdp/overlay/1-qqxh7f1pd1@4026532001"),
        );
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(
            c.what.contains("1-qqxh7f1pd1 is gone") && c.what.contains("@4026532001"),
            "{}",
            c.what
        );
        assert!(c.fix.is_some_and(|f| f.starts_with("dxdp cleanup")));
    }

    #[test]
    fn connection_tables_warn_when_nearly_full_and_stay_quiet_when_empty() {
        assert!(connection_tables(&tables(0, 0, 0)).is_none());
        let calm = connection_tables(&tables(10, 2, 3)).expect("a line");
        assert_eq!(calm.verdict, Verdict::Ok);
        let flood = connection_tables(&tables(10, 240, 3)).expect("a line");
        assert_eq!(flood.verdict, Verdict::Warn);
        assert!(flood.what.contains("SYN flood"), "{}", flood.what);
        let crowded = connection_tables(&tables(950, 240, 3)).expect("a line");
        assert_eq!(crowded.verdict, Verdict::Warn);
        assert!(
            crowded
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("--max-connections")),
            "{:?}",
            crowded.fix
        );
    }
}
