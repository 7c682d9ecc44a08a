//! Commands bounded in time, and processes left running in the background: each runs in a process
//! group of its own, killed whole when it overruns or its guard drops.

use std::{
    fmt,
    io::Read,
    os::unix::process::CommandExt,
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

const CMD_TIMEOUT: Duration = Duration::from_secs(20);

/// What a finished command did.
#[derive(Debug)]
pub struct Run {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// The exit code; `None` when a signal ended the process.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics with everything the command printed unless it succeeded.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "command failed: {self}");
        self
    }

    /// Panics unless the command exited on its own with a non-zero code.
    #[track_caller]
    pub fn assert_failure(&self) -> &Self {
        assert!(
            matches!(self.code(), Some(c) if c != 0),
            "command should have failed with an exit code: {self}"
        );
        self
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ({})\n--- stdout\n{}--- stderr\n{}---",
            self.command, self.status, self.stdout, self.stderr
        )
    }
}

fn shown(argv: &[impl AsRef<str>]) -> String {
    argv.iter()
        .map(|a| a.as_ref())
        .collect::<Vec<_>>()
        .join(" ")
}

fn command(argv: &[impl AsRef<str>]) -> Command {
    let mut cmd = Command::new(argv[0].as_ref());
    cmd.args(argv[1..].iter().map(|a| a.as_ref()))
        .stdin(Stdio::null())
        // A group of its own, so that a timeout kills whatever the command started too.
        .process_group(0);
    cmd
}

/// Sends SIGKILL to the process group of a child started by [`command`] (its pid is the pgid).
fn kill_group(child: &Child) {
    // SAFETY: kill(2) has no memory effects; the negative pid names the group this harness
    // created for its own child.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
}

/// Runs `argv` to completion, killing it (and its process group) after `timeout`.
pub fn try_run(argv: &[impl AsRef<str>], timeout: Duration) -> Result<Run, String> {
    let command_line = shown(argv);
    let mut child = command(argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{command_line}`: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                kill_group(&child);
                let _ = child.wait();
                return Err(format!(
                    "`{command_line}` did not finish within {timeout:?}; killed it"
                ));
            }
            Err(e) => return Err(format!("cannot wait for `{command_line}`: {e}")),
        }
    };
    Ok(Run {
        command: command_line,
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Runs `argv` to completion within `timeout`; panics if it cannot start or overruns.
#[track_caller]
pub fn run_for(argv: &[impl AsRef<str>], timeout: Duration) -> Run {
    try_run(argv, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `argv` (within 20 s) whatever its exit code.
#[track_caller]
pub fn run(argv: &[impl AsRef<str>]) -> Run {
    run_for(argv, CMD_TIMEOUT)
}

/// Runs `argv` (within 20 s), panics unless it succeeds, returns its stdout.
#[track_caller]
pub fn must(argv: &[impl AsRef<str>]) -> String {
    let run = run(argv);
    run.assert_success();
    run.stdout
}

/// Runs `argv` from a guard's drop: failures are reported, never panicked on.
pub fn quietly(argv: &[impl AsRef<str>]) {
    match try_run(argv, CMD_TIMEOUT) {
        Ok(run) if run.success() => {}
        Ok(run) => eprintln!("cleanup: {run}"),
        Err(e) => eprintln!("cleanup: {e}"),
    }
}

/// `argv` run inside the named network namespace.
pub fn in_ns(ns: &str, argv: &[impl AsRef<str>]) -> Vec<String> {
    ["ip", "netns", "exec", ns]
        .into_iter()
        .map(str::to_owned)
        .chain(argv.iter().map(|a| a.as_ref().to_owned()))
        .collect()
}

/// A process left running while the test goes on, killed with its process group on drop.
pub struct Background {
    child: Option<Child>,
    command: String,
}

impl Background {
    /// Starts `argv` with its output discarded.
    #[track_caller]
    pub fn spawn(argv: &[impl AsRef<str>]) -> Self {
        let command_line = shown(argv);
        let child = command(argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{command_line}`: {e}"));
        Self {
            child: Some(child),
            command: command_line,
        }
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => return None,
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && let Ok(None) = child.try_wait()
        {
            kill_group(&child);
            if let Err(e) = child.wait() {
                eprintln!("cleanup: cannot reap `{}`: {e}", self.command);
            }
        }
    }
}

/// Polls `check` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}
