//! A `dxdp watch` running in the background, with its log kept in a file for the failure
//! messages, and its Prometheus endpoint (`--metrics`) read back.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    dxdp::{Dxdp, dxdp_bin},
    names::next_id,
    process::wait_until,
};

/// A `dxdp watch` process, killed on drop; its log goes to a file read back for messages.
pub struct Watch {
    child: Option<Child>,
    pub log: PathBuf,
    dxdp: Dxdp,
    extra: Vec<String>,
    /// Extra environment of the watch process (e.g. DOCKER_HOST of a private dockerd).
    env: Vec<(String, String)>,
}

impl Watch {
    pub fn start(dxdp: &Dxdp, extra: &[&str]) -> Self {
        Self::start_with_env(dxdp, extra, &[])
    }

    /// Like [`Watch::start`], with extra environment variables for the watch process.
    pub fn start_with_env(dxdp: &Dxdp, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let log = std::env::temp_dir().join(format!(
            "dxdp-watch-{}-{}.log",
            std::process::id(),
            next_id()
        ));
        let mut watch = Self {
            child: None,
            log,
            dxdp: dxdp.clone(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        watch.spawn();
        watch
    }

    /// Whether the watch process is still running (it has not exited or crashed).
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Resident memory of the watch process in KiB (VmRSS).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_else(|e| panic!("watch pid {}: {e}", self.pid()));
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    fn spawn(&mut self) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("watch log");
        // The build `DXDP_BIN` names, as for one-shot commands: an older commit's, to see a test
        // fail without the change it checks.
        let child = Command::new(dxdp_bin())
            .arg("--pin-dir")
            .arg(&self.dxdp.pin_dir)
            .arg("watch")
            .args(&self.extra)
            .env("DXDP_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .spawn()
            .expect("start dxdp watch");
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let child = self.child.as_mut()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the watch again after [`Watch::kill9`] or [`Watch::terminate`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "watch still running");
        self.spawn();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `dxdp status` shows exactly `n` links; panics with the log if it does not.
    #[track_caller]
    pub fn expect_links(&self, n: usize, within: Duration) {
        let mut last = usize::MAX;
        let ok = wait_until(within, || {
            last = self.dxdp.status().links.len();
            last == n
        });
        assert!(
            ok,
            "expected {n} link(s) within {within:?}, have {last}\n--- watch log\n{}",
            self.log_text()
        );
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// One scrape of the Prometheus endpoint a watch serves with `--metrics ADDR`: the value of
/// every sample by its name and labels as printed (`dxdp_reconciles_total`,
/// `dxdp_map_entries{map="links"}`); `None` if the endpoint does not answer.
pub fn scrape_metrics(addr: &str) -> Option<std::collections::HashMap<String, f64>> {
    Some(
        metrics_text(addr)?
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (key, value) = line.rsplit_once(' ')?;
                Some((key.to_owned(), value.trim().parse().ok()?))
            })
            .collect(),
    )
}

/// The text of one scrape of `/metrics` at `addr`; `None` if the endpoint does not answer.
pub fn metrics_text(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // HTTP/1.0: a plain body, never chunked, and the server closes the connection.
    write!(conn, "GET /metrics HTTP/1.0\r\nHost: dxdp\r\n\r\n").ok()?;
    let mut response = String::new();
    conn.read_to_string(&mut response).ok()?;
    let (_, body) = response.split_once("\r\n\r\n")?;
    Some(body.to_owned())
}

/// `exposition` passes `promtool check metrics` (Prometheus's lint of the text format).
#[track_caller]
pub fn assert_promtool_accepts(exposition: &str) {
    use std::{
        io::Write,
        process::{Command, Stdio},
    };
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    lint.stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let lint = lint.wait_with_output().unwrap();
    assert!(
        lint.status.success(),
        "promtool check metrics: {}{}\n{exposition}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
}
