//! `dxdp top` on a real link: the netns fixture (a bridge with two "containers"), a tc link,
//! one-way UDP traffic from iperf3, and what `top` shows.
//!
//! - `--once --interval 1` prints the link's row with both veth names and a high rate in the busy
//!   direction only, in columns aligned under their headers;
//! - `--json --count 2` prints two lines of the `dxdp.top/1` shape, each with a positive
//!   bits_per_sec in the busy direction;
//! - under a real pseudo-terminal (a tmux server of this test's own), the screen shows the table,
//!   `q`, Ctrl-C and SIGTERM each end it with exit status 0 and the terminal back in canonical
//!   mode on the main screen;
//! - piped without --once or --count, it prints plain tables, a blank line apart, until stopped.
//!
//! Needs root, bpffs, iperf3 (and tmux for the screen); without them the tests print
//! "skipping: …", or fail when CI=true.

use std::time::Duration;

use crate::support::{
    Background, DXDP, IPERF_PORT, Node, Topology, can_run, in_ns, missing_tools, must, quietly,
    require_privileges, run, run_for, wait_until,
};

/// Sending rate of the one-way UDP flow.
const FLOW_BITS_PER_SEC: f64 = 50e6;

/// A one-way UDP flow `from` → `to` for `secs` seconds: an iperf3 server in `to`'s namespace and
/// a client in `from`'s, both killed on drop.
struct Flow {
    _server: Background,
    _client: Background,
}

impl Flow {
    #[track_caller]
    fn start(from: &Node, to: &Node, secs: u32) -> Self {
        let port = IPERF_PORT.to_string();
        let server = Background::spawn(&in_ns(&to.netns, &["iperf3", "-s", "-1", "-p", &port]));
        let filter = format!("sport = :{port}");
        assert!(
            wait_until(Duration::from_secs(5), || {
                !must(&in_ns(&to.netns, &["ss", "-Hltn", &filter]))
                    .trim()
                    .is_empty()
            }),
            "iperf3 server in {} did not listen",
            to.netns
        );
        let (rate, secs) = (format!("{FLOW_BITS_PER_SEC}"), secs.to_string());
        let client = Background::spawn(&in_ns(
            &from.netns,
            &[
                "iperf3", "-c", &to.ipv4, "-p", &port, "-u", "-b", &rate, "-t", &secs,
            ],
        ));
        Self {
            _server: server,
            _client: client,
        }
    }
}

/// A linked pair (tc) with a one-way flow node 0 → node 1 running for `secs` seconds.
#[track_caller]
fn busy_pair(secs: u32) -> (Topology, Node, Node, Flow) {
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0).clone(), topo.node(1).clone());
    topo.dxdp.link(&a, &b, "tc");
    let flow = Flow::start(&a, &b, secs);
    // Let the flow reach its rate before sampling.
    std::thread::sleep(Duration::from_millis(700));
    (topo, a, b, flow)
}

/// `12.3M` → 12.3e6.
fn parse_si(s: &str) -> f64 {
    let (digits, scale) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        Some('G') => (&s[..s.len() - 1], 1e9),
        Some('T') => (&s[..s.len() - 1], 1e12),
        _ => (s, 1.0),
    };
    digits
        .parse::<f64>()
        .unwrap_or_else(|e| panic!("{s:?} is not a rate: {e}"))
        * scale
}

#[test]
fn once_shows_the_link_both_veths_and_the_busy_direction() {
    if !require_privileges() {
        return;
    }
    let (topo, a, b, _flow) = busy_pair(6);
    let run = topo.dxdp.run(&["top", "--once", "--interval", "1"]);
    run.assert_success();
    let out = &run.stdout;
    eprintln!("{out}");
    assert!(
        out.starts_with("dxdp top  ") && out.contains(" 1 links, 2 veths "),
        "{out}"
    );
    assert!(
        !out.contains('\x1b'),
        "no ANSI codes when stdout is a pipe: {out:?}"
    );
    let lines: Vec<&str> = out.lines().collect();
    let header = lines
        .iter()
        .find(|l| l.starts_with("A  "))
        .unwrap_or_else(|| panic!("no links table: {out}"));
    let row = lines
        .iter()
        .find(|l| l.contains(&a.host_veth) && l.contains(&b.host_veth))
        .unwrap_or_else(|| {
            panic!(
                "no row names both veths {} and {}: {out}",
                a.host_veth, b.host_veth
            )
        });
    // Columns are aligned: each value starts where its header does.
    let cell = |title: &str| -> &str {
        let at = header
            .find(title)
            .unwrap_or_else(|| panic!("no {title} column: {out}"));
        row[at..].split_whitespace().next().unwrap_or_default()
    };
    // A is the link's low end: the flow runs A→B if node 0's veth has the lower ifindex.
    let a_is_sender = a.host_ifindex() < b.host_ifindex();
    assert_eq!(
        cell("VETH A"),
        if a_is_sender {
            &a.host_veth
        } else {
            &b.host_veth
        },
        "{out}"
    );
    let (busy, quiet) = if a_is_sender {
        ("A->B BIT/S", "B->A BIT/S")
    } else {
        ("B->A BIT/S", "A->B BIT/S")
    };
    let (busy, quiet) = (parse_si(cell(busy)), parse_si(cell(quiet)));
    assert!(
        busy > FLOW_BITS_PER_SEC / 10.0,
        "the sending direction shows {busy} bit/s: {out}"
    );
    assert!(
        busy > 20.0 * quiet,
        "the quiet direction shows {quiet} bit/s: {out}"
    );
    assert!(
        out.contains("REDIRECTED/S") && out.contains("FALLBACK/S"),
        "{out}"
    );
}

#[test]
fn json_count_two_gives_two_samples_with_the_busy_direction() {
    if !require_privileges() {
        return;
    }
    let (topo, a, b, _flow) = busy_pair(6);
    let run = topo
        .dxdp
        .run(&["top", "--json", "--count", "2", "--interval", "0.7"]);
    run.assert_success();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{run}");
    let sender_is_a = a.host_ifindex() < b.host_ifindex();
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["schema"], "dxdp.top/1", "{line}");
        assert!(
            v["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{line}"
        );
        let secs = v["interval_secs"].as_f64().unwrap_or_default();
        assert!((0.6..5.0).contains(&secs), "{line}");
        let links = v["links"].as_array().expect("links");
        assert_eq!(links.len(), 1, "{line}");
        let link = &links[0];
        assert_eq!(link["datapath"], "tc", "{line}");
        let (a_veth, b_veth) = if sender_is_a {
            (&a.host_veth, &b.host_veth)
        } else {
            (&b.host_veth, &a.host_veth)
        };
        assert_eq!(link["a_veth"], a_veth.as_str(), "{line}");
        assert_eq!(link["b_veth"], b_veth.as_str(), "{line}");
        let (busy, quiet) = if sender_is_a {
            (&link["a_to_b"], &link["b_to_a"])
        } else {
            (&link["b_to_a"], &link["a_to_b"])
        };
        let bits = |r: &serde_json::Value| r["bits_per_sec"].as_f64().expect("bits_per_sec");
        assert!(bits(busy) > FLOW_BITS_PER_SEC / 10.0, "{line}");
        assert!(bits(busy) > 20.0 * bits(quiet), "{line}");
        assert!(busy["packets_per_sec"].as_f64().expect("packets_per_sec") > 0.0);
        let interfaces = v["interfaces"].as_array().expect("interfaces");
        assert_eq!(interfaces.len(), 2, "{line}");
        for i in interfaces {
            for field in [
                "ifname",
                "ifindex",
                "datapath",
                "redirected_packets_per_sec",
                "passed_packets_per_sec",
                "fallback_packets_per_sec",
                "spoofed_packets_per_sec",
            ] {
                assert!(i.get(field).is_some(), "{field} missing: {line}");
            }
        }
        let sender = interfaces
            .iter()
            .find(|i| i["ifname"] == a.host_veth.as_str())
            .unwrap_or_else(|| panic!("no interface {}: {line}", a.host_veth));
        assert!(
            sender["redirected_packets_per_sec"]
                .as_f64()
                .unwrap_or_default()
                > 0.0,
            "{line}"
        );
    }
}

#[test]
fn an_empty_pin_directory_is_a_no_links_view() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(1);
    let dir = topo.pin_dir().display().to_string();
    let run = topo.dxdp.run(&["top", "--once", "--interval", "0.2"]);
    run.assert_success();
    assert!(
        run.stdout
            .contains(&format!("no links (pin directory {dir})")),
        "{run}"
    );
    let run = topo
        .dxdp
        .run(&["top", "--json", "--once", "--interval", "0.2"]);
    run.assert_success();
    let v: serde_json::Value = serde_json::from_str(run.stdout.trim()).expect("one JSON line");
    assert_eq!(v["links"], serde_json::json!([]), "{run}");
}

#[test]
fn piped_without_once_prints_plain_tables_until_stopped() {
    if !require_privileges() || !can_run(missing_tools(&["timeout"])) {
        return;
    }
    let (topo, a, _b, _flow) = busy_pair(6);
    let dir = topo.pin_dir().display().to_string();
    // Stopped by SIGINT after about three samples; what it printed until then is checked.
    let run = run_for(
        &[
            "timeout",
            "-s",
            "INT",
            "1.9",
            DXDP,
            "--pin-dir",
            &dir,
            "top",
            "--interval",
            "0.5",
        ],
        Duration::from_secs(10),
    );
    let out = &run.stdout;
    assert!(
        !out.contains('\x1b'),
        "no ANSI codes when stdout is a pipe: {out:?}"
    );
    let samples: Vec<&str> = out.split("\n\ndxdp top  ").collect();
    assert!(
        out.starts_with("dxdp top  ") && samples.len() >= 2,
        "expected several tables a blank line apart: {run}"
    );
    for sample in samples {
        assert!(sample.contains(&a.host_veth), "{run}");
    }
}

/// A tmux server of this test's own (`tmux -L NAME`), killed with its sessions on drop, and the
/// script it runs, removed.
struct Tmux {
    socket: String,
    script: std::path::PathBuf,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> crate::support::Run {
        let mut argv = vec!["tmux", "-L", &self.socket];
        argv.extend_from_slice(args);
        run(&argv)
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"]).stdout
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        quietly(&["tmux", "-L", &self.socket, "kill-server"]);
        let _ = std::fs::remove_file(&self.script);
    }
}

#[test]
fn interactive_screen_under_a_pseudo_terminal_quits_on_q_ctrl_c_and_sigterm() {
    if !require_privileges() || !can_run(missing_tools(&["tmux", "stty"])) {
        return;
    }
    let (topo, a, b, _flow) = busy_pair(30);
    let tmux = Tmux {
        socket: format!("dxt-top-{}", std::process::id()),
        script: std::env::temp_dir().join(format!("dxt-top-{}.sh", std::process::id())),
    };
    let dir = topo.pin_dir().display().to_string();
    // Three runs one after the other, each followed by its exit status and the terminal's mode,
    // and the next one waiting for a line.
    let mut script = String::from("#!/bin/bash\n");
    for run in ["first", "second", "third"] {
        script.push_str(&format!(
            "{DXDP} --pin-dir {dir} top --interval 0.5\n\
             echo \"{run} exit=$?\"; stty -a | grep -o -- '-\\?icanon'; read -r _\n"
        ));
    }
    std::fs::write(&tmux.script, script).expect("write the script");
    let script = tmux.script.display().to_string();
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "50",
        "bash",
        &script,
    ])
    .assert_success();

    for (key, done) in [
        ("q", "first exit="),
        ("C-c", "second exit="),
        ("SIGTERM", "third exit="),
    ] {
        let mut screen = String::new();
        let drawn = wait_until(Duration::from_secs(10), || {
            screen = tmux.screen();
            screen.contains("q or Ctrl-C quits")
                && screen.contains(&a.host_veth)
                && screen.contains(&b.host_veth)
                && screen.contains("A->B BIT/S")
        });
        assert!(
            drawn,
            "the screen never showed the table before {key}:\n{screen}"
        );
        eprintln!("{}", screen.trim_end());
        if key == "SIGTERM" {
            sigterm_child_of_pane(&tmux);
        } else {
            tmux.run(&["send-keys", "-t", "top", key]).assert_success();
        }
        // Wait for the script's two lines after the run: its exit status, then stty's verdict
        // (printed a moment later; reading before it would race).
        let exited = wait_until(Duration::from_secs(5), || {
            screen = tmux.screen();
            let mut after = screen.lines().skip_while(|l| !l.contains(done)).skip(1);
            after.next().is_some_and(|l| l.contains("icanon"))
        });
        assert!(exited, "dxdp top did not exit on {key}:\n{screen}");
        let after: Vec<&str> = screen.lines().skip_while(|l| !l.contains(done)).collect();
        assert_eq!(
            after.first().map(|l| l.trim()),
            Some(format!("{done}0").as_str()),
            "{screen}"
        );
        assert_eq!(
            after.get(1).map(|l| l.trim()),
            Some("icanon"),
            "the terminal was left in non-canonical mode after {key}:\n{screen}"
        );
        // The main screen is back: the table is not on it.
        assert!(!screen.contains("q or Ctrl-C quits"), "{screen}");
        // The script waits for a line before the next run.
        tmux.run(&["send-keys", "-t", "top", "Enter"])
            .assert_success();
    }
}

/// Sends SIGTERM to the process the pane's shell runs (the `dxdp top` of this test's script).
#[track_caller]
fn sigterm_child_of_pane(tmux: &Tmux) {
    let shell: u32 = tmux
        .run(&["list-panes", "-t", "top", "-F", "#{pane_pid}"])
        .stdout
        .trim()
        .parse()
        .expect("the pane's pid");
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
        .expect("the shell's children");
    let pids: Vec<i32> = children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(pids.len(), 1, "the pane's shell runs {children:?}");
    let exe = std::fs::read_link(format!("/proc/{}/exe", pids[0])).expect("its executable");
    let dxdp = std::fs::canonicalize(DXDP).expect("the binary under test");
    assert_eq!(exe, dxdp, "the pane's shell runs {exe:?}");
    // SAFETY: kill(2) on the dxdp process this test's script started.
    assert_eq!(unsafe { libc::kill(pids[0], libc::SIGTERM) }, 0);
}
