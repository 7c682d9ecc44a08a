use std::process::ExitCode;

use clap::Parser;
// The library's modules, under the paths the commands use (`crate::datapath`, ...).
use dxdp::{
    bench, choice, compose, datapath, docker, endpoint, engine, exposure, family, firewall,
    metrics, netlink, netns, overlay, plan, ports, rcu, runtime, sd_notify,
};

use cli::{Cli, LogFormat};

mod cli;
mod commands;

fn main() -> ExitCode {
    // `dxdp status | head` should end quietly, as other command-line tools do, rather than
    // panic on a closed stdout.
    // SAFETY: restoring the default disposition of one signal before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // A one-shot command prints its outcome itself; the daemon reports through its log.
    let default_level = if cli.command.is_daemon() {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("DXDP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match cli.log_format {
        // One object per line: {"timestamp":…,"level":"WARN","message":…, and the event's fields}.
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("dxdp: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
