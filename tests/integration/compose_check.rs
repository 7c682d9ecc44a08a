//! `dxdp compose-check` as users run it: the binary on files, its lines and its exit status.
//! No Docker and no privileges: the command only reads files.
//!
//! Every example under compose-examples/ must pass; each fixture under tests/fixtures/compose/
//! shows one kind of problem.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
}

impl Run {
    fn lines(&self, prefix: &str) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }

    fn summary(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs from the repository root, so that relative paths print as given.
fn compose_check(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_dxdp"))
        .arg("compose-check")
        .args(args)
        .current_dir(root())
        // Read by --project-name; the caller's shell must not change the verdicts.
        .env_remove("COMPOSE_PROJECT_NAME")
        .output()
        .expect("run dxdp");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "stderr: {stderr}\nstdout: {stdout}");
    Run {
        code: out.status.code().expect("exited"),
        stdout,
    }
}

fn fixture(name: &str) -> String {
    format!("tests/fixtures/compose/{name}")
}

/// The fixture yields exactly one error line, which names the place `at` (`LINE:COLUMN`) in the
/// file and contains `needle`, and exit status 1.
#[track_caller]
fn assert_single_error(name: &str, at: &str, needle: &str) {
    let path = fixture(name);
    let run = compose_check(&[&path]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let errors = run.lines("error:");
    assert_eq!(errors.len(), 1, "{}", run.stdout);
    assert!(
        errors[0].starts_with(&format!("error: {path}:{at}: service ")),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains(needle),
        "{}\nwanted: {needle}",
        errors[0]
    );
    assert!(
        run.summary().starts_with("1 error(s), ") && run.summary().ends_with(" in 1 file(s)"),
        "{}",
        run.stdout
    );
}

fn examples() -> Vec<PathBuf> {
    let dir = root().join("compose-examples");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("compose-examples/")
        .map(|e| e.expect("dir entry").path().join("docker-compose.yml"))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_passes_clean() {
    let files = examples();
    assert!(files.len() >= 3, "{files:?}");
    for file in &files {
        let run = compose_check(&[file.to_str().expect("UTF-8 path")]);
        assert_eq!(run.code, 0, "{}: {}", file.display(), run.stdout);
        assert_eq!(
            run.stdout,
            "0 error(s), 0 warning(s) in 1 file(s)\n",
            "{}",
            file.display()
        );
    }
    for name in ["iperf3-pair", "mesh", "two-networks"] {
        assert!(
            files.contains(
                &root()
                    .join("compose-examples")
                    .join(name)
                    .join("docker-compose.yml")
            ),
            "missing example {name}"
        );
    }
}

#[test]
fn all_examples_at_once() {
    let files = examples();
    let args: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    let run = compose_check(&args);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(
        run.stdout,
        format!("0 error(s), 0 warning(s) in {} file(s)\n", files.len())
    );
}

#[test]
fn unknown_key() {
    assert_single_error(
        "unknown-key.yml",
        "8:7",
        "service web: label dxdp.enabel: unknown dxdp label key; valid keys are dxdp.enable,",
    );
}

#[test]
fn bad_value() {
    let path = fixture("bad-value.yml");
    let run = compose_check(&[&path]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stdout,
        format!(
            "error: {path}:6:51: service web: label dxdp.datapath: unknown datapath in \"fast\"; write \
             dxdp.datapath=auto, tc or xdp\n1 error(s), 0 warning(s) in 1 file(s)\n"
        )
    );
}

#[test]
fn unknown_peer_is_an_error_unless_external_peers_are_allowed() {
    // `db` is a service and `the-db` its container_name; only `cache` matches nothing.
    assert_single_error(
        "unknown-peer.yml",
        "8:7",
        "service web: label dxdp.peers: names cache, which is neither a service nor a \
         container_name in this file; name a service of this file, or pass --allow-external",
    );
    let path = fixture("unknown-peer.yml");
    let run = compose_check(&["--allow-external", &path]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.lines("error:"), Vec::<&str>::new());
    let warnings = run.lines("warning:");
    assert_eq!(warnings.len(), 1, "{}", run.stdout);
    assert!(
        warnings[0].contains("label dxdp.peers: names cache, which is neither"),
        "{}",
        warnings[0]
    );
    assert_eq!(run.summary(), "0 error(s), 1 warning(s) in 1 file(s)");
}

#[test]
fn group_with_one_member() {
    assert_single_error(
        "lonely-group.yml",
        "8:7",
        "service api: label dxdp.group: group backend has only service api",
    );
    // The would-be second member lacks dxdp.enable=true, which is the warning that explains it.
    let run = compose_check(&[&fixture("lonely-group.yml")]);
    let warnings = run.lines("warning:");
    assert_eq!(warnings.len(), 1, "{}", run.stdout);
    assert!(warnings[0].contains(
        "service worker: label dxdp.group: ignored because the service has no dxdp.enable=true"
    ));
}

#[test]
fn labels_on_a_host_network_service() {
    assert_single_error(
        "host-network.yml",
        "6:3",
        "service probe: network_mode host puts it in the host's network stack",
    );
}

#[test]
fn network_label_for_a_network_the_service_is_not_on() {
    assert_single_error(
        "network-not-joined.yml",
        "10:7",
        "service web: label dxdp.network: names network backnet, which service web is not on; \
         its networks: front (Docker name frontnet)",
    );
}

#[test]
fn network_label_with_the_compose_key_instead_of_the_docker_name() {
    assert_single_error(
        "network-compose-key.yml",
        "10:7",
        "label dxdp.network: names compose network front, but dxdp.network takes the Docker name, \
         which is PROJECT_front (compose prefixes the project name)",
    );
    // With the project known, the fix is spelled out.
    let path = fixture("network-compose-key.yml");
    let run = compose_check(&["--project-name", "shop", &path]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains("or write dxdp.network=shop_front"),
        "{}",
        run.stdout
    );
}

#[test]
fn project_name_from_the_environment() {
    let path = fixture("network-compose-key.yml");
    let out = Command::new(env!("CARGO_BIN_EXE_dxdp"))
        .args(["compose-check", &path])
        .current_dir(root())
        .env("COMPOSE_PROJECT_NAME", "Shop")
        .output()
        .expect("run dxdp");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("dxdp.network=shop_front"), "{stdout}");
}

#[test]
fn peers_without_a_shared_network() {
    assert_single_error(
        "no-shared-network.yml",
        "9:7",
        "service web: label dxdp.peers: no link between web and db: they share no network",
    );
}

#[test]
fn repeated_list_label() {
    // The last of the repeated items: the value docker-compose keeps.
    assert_single_error(
        "repeated-label.yml",
        "10:9",
        "service web: label dxdp.datapath: label is given more than once",
    );
}

#[test]
fn labels_without_opt_in_are_only_warnings() {
    let path = fixture("not-enabled.yml");
    let run = compose_check(&[&path]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(
        run.stdout,
        format!(
            "warning: {path}:7:7: service web: label dxdp.peers: ignored because the service has no \
             dxdp.enable=true; add dxdp.enable=true to opt in\n0 error(s), 1 warning(s) in 1 \
             file(s)\n"
        )
    );
}

#[test]
fn syntax_error_exits_1_with_the_line() {
    let path = fixture("syntax-error.yml");
    let run = compose_check(&[&path]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let errors = run.lines("error:");
    assert_eq!(errors.len(), 1, "{}", run.stdout);
    // Where the parser stopped, first as FILE:LINE:COLUMN, and in its own words.
    assert!(
        errors[0].starts_with(&format!("error: {path}:7:")),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains(": not YAML dxdp can read: "),
        "{}",
        errors[0]
    );
    assert!(errors[0].contains("at line 7, column"), "{}", errors[0]);
}

#[test]
fn yaml_without_services_exits_1() {
    let run = compose_check(&[&fixture("no-services.yml")]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stdout.contains("no services section"), "{}", run.stdout);
}

#[test]
fn missing_file_exits_1() {
    let run = compose_check(&["tests/fixtures/compose/does-not-exist.yml"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.starts_with(
            "error: tests/fixtures/compose/does-not-exist.yml: cannot read: No such file"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn oversized_file_exits_1_unread() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("compose-check-oversized.yml");
    // Valid YAML all the way: only the size is wrong.
    let mut text = String::from("services: {}\n");
    while text.len() <= 1 << 20 {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    fs::write(&path, text).expect("write");
    let run = compose_check(&[path.to_str().unwrap()]);
    fs::remove_file(&path).ok();
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("over the 1048576-byte limit"),
        "{}",
        run.stdout
    );
}

#[test]
fn every_file_is_reported_and_the_worst_status_wins() {
    let good = "compose-examples/mesh/docker-compose.yml".to_owned();
    let bad = fixture("unknown-key.yml");
    let warn = fixture("not-enabled.yml");
    let run = compose_check(&[&good, &bad, &warn]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(run.summary(), "1 error(s), 1 warning(s) in 3 file(s)");
    assert_eq!(run.lines(&format!("error: {bad}:")).len(), 1);
    assert_eq!(run.lines(&format!("warning: {warn}:")).len(), 1);

    // An unparseable file is one more error; the others are still all reported.
    let broken = fixture("syntax-error.yml");
    let run = compose_check(&[&bad, &broken]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(run.lines("error:").len(), 2, "{}", run.stdout);
    assert_eq!(run.summary(), "2 error(s), 0 warning(s) in 2 file(s)");
}

/// A known bad label, read by the binary: the line starts with the file, the line and the
/// column of the label's key, as compilers print them (editors and CI annotations jump there),
/// and `--json` gives the same place as fields.
#[test]
fn a_bad_label_is_named_by_file_line_and_column() {
    let path = fixture("unknown-key.yml");
    let text = fs::read_to_string(root().join(&path)).expect("fixture");
    // Found in the file rather than written down, so an edit of the fixture cannot fool it.
    let (line, column) = text
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find("dxdp.enabel:").map(|c| (i + 1, c + 1)))
        .expect("the misspelt key in the fixture");
    let run = compose_check(&[&path]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(
        run.lines("error:"),
        [format!(
            "error: {path}:{line}:{column}: service web: label dxdp.enabel: unknown dxdp label \
             key; valid keys are dxdp.enable, dxdp.peers, dxdp.group, dxdp.datapath, \
             dxdp.network, dxdp.firewall, dxdp.ingress, dxdp.egress"
        )
        .as_str()],
        "{}",
        run.stdout
    );
    let json = compose_check(&["--json", &path]);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    let problem = &report["problems"][0];
    assert_eq!(
        (&problem["file"], &problem["line"], &problem["column"]),
        (
            &serde_json::json!(path),
            &serde_json::json!(line),
            &serde_json::json!(column)
        ),
        "{report:#}"
    );
}

/// `-f base -f override` is one project, merged as Compose merges it: the override's peer is
/// checked as the merged service's, and the error names the override file at the label's place.
/// As two FILES, each is a project of its own, and the override's label is only ignored.
#[test]
fn merged_files_name_the_file_that_wrote_the_label() {
    let base = fixture("override-base.yml");
    let over = fixture("override-bad-label.yml");
    let run = compose_check(&["-f", &base, "-f", &over]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(
        run.stdout,
        format!(
            "error: {over}:6:7: service web: label dxdp.peers: names cache, which is neither a \
             service nor a container_name in this file; name a service of this file, or pass \
             --allow-external if cache is a container started elsewhere\n1 error(s), 0 \
             warning(s) in 2 file(s)\n"
        )
    );
    // The same files through COMPOSE_FILE: one project too.
    let out = Command::new(env!("CARGO_BIN_EXE_dxdp"))
        .arg("compose-check")
        .current_dir(root())
        .env("COMPOSE_FILE", format!("{base}:{over}"))
        .env_remove("COMPOSE_PROJECT_NAME")
        .output()
        .expect("run dxdp");
    assert_eq!(String::from_utf8_lossy(&out.stdout), run.stdout);
    let apart = compose_check(&[&base, &over]);
    assert_eq!(apart.code, 0, "{}", apart.stdout);
    assert_eq!(apart.lines("warning:").len(), 1, "{}", apart.stdout);
    assert!(
        apart.lines("warning:")[0].starts_with(&format!(
            "warning: {over}:6:7: service web: label dxdp.peers: ignored"
        )),
        "{}",
        apart.stdout
    );
}

#[test]
fn fixtures_each_show_one_problem_kind() {
    // A new fixture needs a test above; this keeps the list and the directory in step.
    let mut names: Vec<String> = fs::read_dir(root().join("tests/fixtures/compose"))
        .expect("fixtures")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "bad-value.yml",
            "host-network.yml",
            "lonely-group.yml",
            "network-compose-key.yml",
            "network-not-joined.yml",
            "no-services.yml",
            "no-shared-network.yml",
            "not-enabled.yml",
            "override-bad-label.yml",
            "override-base.yml",
            "repeated-label.yml",
            "syntax-error.yml",
            "unknown-key.yml",
            "unknown-peer.yml",
        ]
    );
}

#[test]
fn without_files_compose_finds_the_default_file_or_says_how_to_name_one() {
    let run = |dir: &Path, env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dxdp"));
        cmd.arg("compose-check")
            .current_dir(dir)
            .env_remove("COMPOSE_FILE")
            .env_remove("COMPOSE_PROJECT_NAME");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run dxdp")
    };
    // The repository root has no compose file.
    let out = run(root(), &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no compose file to check")
            && stderr.contains("docker compose config | dxdp compose-check -"),
        "{stderr}"
    );
    let example = root().join("compose-examples/mesh");
    let out = run(&example, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.ends_with("0 error(s), 0 warning(s) in 1 file(s)\n"),
        "{stdout}"
    );
    let out = run(
        root(),
        &[("COMPOSE_FILE", "tests/fixtures/compose/unknown-key.yml")],
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn stdin_is_read_for_a_dash() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_dxdp"))
        .args(["compose-check", "-"])
        .current_dir(root())
        .env_remove("COMPOSE_PROJECT_NAME")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run dxdp");
    let text = fs::read_to_string(root().join(fixture("unknown-key.yml"))).expect("fixture");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.starts_with("error: <stdin>:8:7: service web: label dxdp.enabel"),
        "{stdout}"
    );
}

/// `--json`: the documented `dxdp.compose-check/1` shape (docs/json.md), the same problems and
/// the same exit status as the lines.
#[test]
fn json_output_has_the_schema_the_problems_and_the_exit_status() {
    let path = fixture("no-shared-network.yml");
    let missing = "tests/fixtures/compose/there-is-no-such-file.yml";
    let run = compose_check(&["--json", &path, missing]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("one JSON document");
    assert_eq!(report["schema"], "dxdp.compose-check/1");
    assert_eq!(report["files"], serde_json::json!([path, missing]));
    assert_eq!(report["errors"], 2, "{report:#}");
    assert_eq!(report["warnings"], 0);
    let problems = report["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 2, "{report:#}");
    assert_eq!(problems[0]["file"], path.as_str());
    // Where web's dxdp.peers label is written.
    assert_eq!(
        (&problems[0]["line"], &problems[0]["column"]),
        (&serde_json::json!(9), &serde_json::json!(7)),
        "{report:#}"
    );
    assert_eq!(problems[0]["severity"], "error");
    assert_eq!(problems[0]["service"], "web");
    assert_eq!(problems[0]["label"], "dxdp.peers");
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("no link between web and db: they share no network"),
        "{report:#}"
    );
    // The unreadable file is a problem of the file as a whole.
    assert_eq!(problems[1]["file"], missing);
    assert!(problems[1]["service"].is_null() && problems[1]["label"].is_null());
    assert!(problems[1]["line"].is_null() && problems[1]["column"].is_null());
    // A clean example: exit 0, no problems.
    let clean = compose_check(&["--json", "compose-examples/iperf3-pair/docker-compose.yml"]);
    let report: serde_json::Value = serde_json::from_str(&clean.stdout).expect("JSON");
    assert_eq!(
        (clean.code, &report["errors"]),
        (0, &serde_json::json!(0)),
        "{report:#}"
    );
}
