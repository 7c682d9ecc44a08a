//! Completions and the man page, generated from the same clap definitions as `--help`.
use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::Cli;

pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    clap_complete::generate(shell, &mut Cli::command(), "dxdp", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

pub fn man() -> Result<ExitCode> {
    clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
    Ok(ExitCode::SUCCESS)
}
