//! Command-line definitions; the doc comments are the help text.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::endpoint::EndpointSpec;

/// Accelerate container-to-container links on one host: frames between linked containers skip
/// the Linux bridge through eBPF (TC redirect_peer or XDP devmap redirect).
#[derive(Debug, Parser)]
#[command(name = "dxdp", version, propagate_version = true)]
pub struct Cli {
    /// bpffs directory holding dxdp's pinned maps, programs and links.
    #[arg(long, global = true, env = "DXDP_PIN_DIR", default_value = crate::datapath::DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Link two endpoints so their frames bypass the bridge in both directions.
    Link(LinkArgs),
    /// Remove the link between two endpoints; traffic goes back through the bridge.
    Unlink(UnlinkArgs),
    /// Show installed links and their counters.
    Status(StatusArgs),
    /// Remove every link, program, fix-up and pin dxdp made.
    Cleanup,
    /// Follow Docker and keep the links that container labels ask for.
    Watch(WatchArgs),
    /// Check that this host can run dxdp, with a fix for each problem.
    Doctor,
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum DatapathArg {
    /// tc where the kernel has bpf_redirect_peer, else xdp.
    #[default]
    Auto,
    /// TCX ingress + bpf_redirect_peer (keeps GSO and checksum offload).
    Tc,
    /// Native XDP + devmap redirect (turns GRO on and tx checksum offload off in the containers).
    Xdp,
}

/// Endpoints: netns:NAME[:IFACE] (a namespace under /run/netns), pid:PID[:IFACE], or a
/// container name, ID prefix or compose service.
#[derive(Debug, Args)]
pub struct LinkArgs {
    pub a: EndpointSpec,
    pub b: EndpointSpec,
    #[arg(long, value_enum, default_value_t)]
    pub datapath: DatapathArg,
}

#[derive(Debug, Args)]
pub struct UnlinkArgs {
    pub a: EndpointSpec,
    pub b: EndpointSpec,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON for scripts instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Labels: dxdp.enable=true opts a container in; dxdp.peers=NAME[,NAME...] and
/// dxdp.group=NAME link it; dxdp.datapath=auto|tc|xdp and dxdp.network=NAME refine the link.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Seconds between full resyncs, which heal any missed event.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub resync: u64,
    /// On exit, remove the links this watch made (by default they stay and keep working).
    #[arg(long)]
    pub cleanup: bool,
    /// Reconcile once and exit.
    #[arg(long)]
    pub once: bool,
}

impl Command {
    pub fn is_daemon(&self) -> bool {
        matches!(self, Command::Watch(_))
    }
}
