//! One module per subcommand.
mod bench;
mod bench_egress;
mod bench_ingress;
mod bench_nic;
mod cleanup;
mod compose_check;
mod docs;
mod doctor;
mod egress;
mod expose;
mod link;
mod mtu;
mod privileges;
mod published;
mod resolve;
mod status;
mod top;
mod unlink;
mod watch;

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::cli::{Cli, Command};

pub fn run(cli: Cli) -> Result<ExitCode> {
    if let Some(name) = privileged(&cli.command) {
        check_privileges(name)?;
    }
    let capacity = cli.capacity();
    match cli.command {
        Command::Link(args) => link::run(&cli.pin_dir, capacity, args),
        Command::Unlink(args) => unlink::run(&cli.pin_dir, capacity, args),
        Command::Expose(args) => expose::run(&cli.pin_dir, capacity, args),
        Command::Unexpose(args) => expose::unexpose(&cli.pin_dir, capacity, args),
        Command::Egress(args) => egress::run(&cli.pin_dir, capacity, args),
        Command::Status(args) => status::run(&cli.pin_dir, capacity, args),
        Command::Top(args) => top::run(&cli.pin_dir, capacity, args),
        Command::Cleanup => cleanup::run(&cli.pin_dir, capacity),
        Command::Watch(args) => watch::run(&cli.pin_dir, capacity, args),
        Command::Bench(args) => bench::run(&cli.pin_dir, capacity, args),
        Command::BenchIngress(args) => bench_ingress::run(&cli.pin_dir, capacity, args),
        Command::BenchEgress(args) => bench_egress::run(&cli.pin_dir, capacity, args),
        Command::ComposeCheck(args) => compose_check::run(args),
        Command::Doctor(args) => doctor::run(&cli.pin_dir, capacity, args),
        Command::Completions { shell } => docs::completions(shell),
        Command::Man => docs::man(),
    }
}

/// Name of a command that touches eBPF objects or enters network namespaces. `doctor` is not
/// one: it reports missing privileges among its checks.
fn privileged(command: &Command) -> Option<&'static str> {
    match command {
        Command::Link(_) => Some("link"),
        Command::Unlink(_) => Some("unlink"),
        Command::Expose(_) => Some("expose"),
        Command::Unexpose(_) => Some("unexpose"),
        Command::Egress(_) => Some("egress"),
        Command::Status(_) => Some("status"),
        Command::Top(_) => Some("top"),
        Command::Cleanup => Some("cleanup"),
        Command::Watch(_) => Some("watch"),
        Command::Bench(_) => Some("bench"),
        Command::BenchIngress(_) => Some("bench-ingress"),
        Command::BenchEgress(_) => Some("bench-egress"),
        Command::ComposeCheck(_)
        | Command::Doctor(_)
        | Command::Completions { .. }
        | Command::Man => None,
    }
}

/// Refuses up front, saying what is needed, instead of failing later on the first EPERM or
/// EACCES from bpf(2), setns(2) or a pinned file.
fn check_privileges(command: &str) -> Result<()> {
    let missing = privileges::missing_capabilities();
    if missing.is_empty() {
        return Ok(());
    }
    bail!(
        "`dxdp {command}` needs root, or the capabilities CAP_BPF, CAP_NET_ADMIN and \
         CAP_SYS_ADMIN (this process lacks {}); run it with sudo",
        missing.join(", ")
    )
}

/// The runtime of the commands that talk to dockerd; two workers are plenty for one client.
fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
