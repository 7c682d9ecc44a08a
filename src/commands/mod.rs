//! One module per subcommand.
mod bench;
mod cleanup;
mod compose_check;
mod docs;
mod doctor;
mod link;
mod resolve;
mod status;
mod unlink;
mod watch;

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{Cli, Command};

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Link(args) => link::run(&cli.pin_dir, args),
        Command::Unlink(args) => unlink::run(&cli.pin_dir, args),
        Command::Status(args) => status::run(&cli.pin_dir, args),
        Command::Cleanup => cleanup::run(&cli.pin_dir),
        Command::Watch(args) => watch::run(&cli.pin_dir, args),
        Command::Bench(args) => bench::run(&cli.pin_dir, args),
        Command::ComposeCheck(args) => compose_check::run(args),
        Command::Doctor => doctor::run(&cli.pin_dir),
        Command::Completions { shell } => docs::completions(shell),
        Command::Man => docs::man(),
    }
}
