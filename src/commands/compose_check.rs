//! `dxdp compose-check`: one line per problem, a summary, and an exit status scripts can use.
use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::ComposeCheckArgs;
use crate::compose::{self, CheckOptions, Severity, one_line};

/// Worse than errors in the files: something was not checked at all.
const UNREADABLE: u8 = 2;

pub fn run(args: ComposeCheckArgs) -> Result<ExitCode> {
    let options = CheckOptions {
        allow_external: args.allow_external,
        project: args.project_name,
    };
    let (mut errors, mut warnings, mut unreadable) = (0usize, 0usize, false);
    // Locked once and written with `?`: `dxdp compose-check ... | head` must not panic.
    let mut out = io::stdout().lock();
    for path in &args.files {
        let shown = one_line(&path.display().to_string());
        match compose::read_file(path) {
            Err(err) => {
                unreadable = true;
                errors += 1;
                writeln!(out, "error: {shown}: {}", one_line(&err.to_string()))?;
            }
            Ok(file) => {
                for problem in compose::check(&file, &options) {
                    match problem.severity {
                        Severity::Error => errors += 1,
                        Severity::Warning => warnings += 1,
                    }
                    writeln!(out, "{}: {shown}: {problem}", problem.severity)?;
                }
            }
        }
    }
    writeln!(
        out,
        "{errors} error(s), {warnings} warning(s) in {} file(s)",
        args.files.len()
    )?;
    out.flush()?;
    Ok(if unreadable {
        ExitCode::from(UNREADABLE)
    } else if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
