//! `dxdp compose-check`: one line per problem, a summary, and an exit status scripts can use.
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use serde::Serialize;

use crate::cli::ComposeCheckArgs;
use crate::compose::{self, CheckOptions, Severity, one_line};

/// The files Compose looks for in the working directory, in its order.
const DEFAULT_FILES: [&str; 4] = [
    "compose.yaml",
    "compose.yml",
    "docker-compose.yaml",
    "docker-compose.yml",
];

/// The files to check: those named (FILES, then each -f), else COMPOSE_FILE, else the first
/// default file in `dir`, as Compose finds them.
fn files_to_check(
    args: &ComposeCheckArgs,
    compose_file: Option<&str>,
    separator: Option<&str>,
    dir: &Path,
) -> Result<Vec<PathBuf>> {
    let named: Vec<PathBuf> = args.files.iter().chain(&args.file).cloned().collect();
    if !named.is_empty() {
        return Ok(named);
    }
    if let Some(list) = compose_file.filter(|l| !l.is_empty()) {
        let separator = separator.filter(|s| !s.is_empty()).unwrap_or(":");
        return Ok(list.split(separator).map(PathBuf::from).collect());
    }
    match DEFAULT_FILES.iter().find(|f| dir.join(f).is_file()) {
        Some(found) => Ok(vec![PathBuf::from(found)]),
        None => bail!(
            "no compose file to check: none named, COMPOSE_FILE unset, and no {} in {}; name one \
             (dxdp compose-check FILE), or check what Compose will run: docker compose config | \
             dxdp compose-check -",
            DEFAULT_FILES.join(", "),
            dir.display()
        ),
    }
}

pub fn run(args: ComposeCheckArgs) -> Result<ExitCode> {
    let files = files_to_check(
        &args,
        std::env::var("COMPOSE_FILE").ok().as_deref(),
        std::env::var("COMPOSE_PATH_SEPARATOR").ok().as_deref(),
        &std::env::current_dir()?,
    )?;
    let options = CheckOptions {
        allow_external: args.allow_external,
        project: args.project_name,
    };
    let mut found = Vec::new();
    let mut unreadable = false;
    for path in &files {
        let stdin = path.as_os_str() == "-";
        let shown = if stdin {
            "<stdin>".to_owned()
        } else {
            one_line(&path.display().to_string())
        };
        let read = if stdin {
            compose::read_from(io::stdin().lock())
        } else {
            compose::read_file(path)
        };
        match read {
            Err(err) => {
                unreadable = true;
                found.push(Found {
                    file: shown,
                    severity: Severity::Error,
                    service: None,
                    label: None,
                    message: err.to_string(),
                    line: None,
                });
            }
            Ok(file) => {
                for problem in compose::check(&file, &options) {
                    let line = problem.to_string();
                    found.push(Found {
                        file: shown.clone(),
                        severity: problem.severity,
                        service: problem.service,
                        label: problem.key,
                        message: problem.message,
                        line: Some(line),
                    });
                }
            }
        }
    }
    let errors = found
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = found.len() - errors;
    // Locked once and written with `?`: `dxdp compose-check ... | head` must not panic.
    let mut out = io::stdout().lock();
    if args.json {
        let report = Report {
            schema: "dxdp.compose-check/1",
            files: files.iter().map(|f| f.display().to_string()).collect(),
            errors,
            warnings,
            problems: &found,
        };
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        for f in &found {
            match &f.line {
                Some(line) => writeln!(out, "{}: {}: {line}", f.severity, f.file)?,
                None => writeln!(out, "error: {}: {}", f.file, one_line(&f.message))?,
            }
        }
        writeln!(
            out,
            "{errors} error(s), {warnings} warning(s) in {} file(s)",
            files.len()
        )?;
    }
    out.flush()?;
    // An unreadable file counts as an error (its line says so); 2 stays clap's usage error.
    Ok(if unreadable || errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One problem found, in a file or with it.
#[derive(Serialize)]
struct Found {
    file: String,
    severity: Severity,
    /// `null` for a problem with the file as a whole (it cannot be read or parsed).
    service: Option<String>,
    label: Option<String>,
    message: String,
    /// The text form's line; not in the JSON.
    #[serde(skip)]
    line: Option<String>,
}

/// `dxdp compose-check --json`: the shape docs/json.md documents.
#[derive(Serialize)]
struct Report<'f> {
    schema: &'static str,
    files: Vec<String>,
    errors: usize,
    warnings: usize,
    problems: &'f [Found],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(files: &[&str], file: &[&str]) -> ComposeCheckArgs {
        ComposeCheckArgs {
            files: files.iter().map(PathBuf::from).collect(),
            file: file.iter().map(PathBuf::from).collect(),
            allow_external: false,
            project_name: None,
            json: false,
        }
    }

    #[test]
    fn files_are_found_as_compose_finds_them() {
        let dir = std::env::temp_dir().join(format!("dxdp-compose-lookup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let find = |a: &ComposeCheckArgs, env: Option<&str>, sep: Option<&str>| {
            files_to_check(a, env, sep, &dir).map(|v| {
                v.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
            })
        };
        let none = args(&[], &[]);
        let err = find(&none, None, None).unwrap_err().to_string();
        assert!(
            err.contains("docker compose config | dxdp compose-check -"),
            "{err}"
        );
        std::fs::write(dir.join("docker-compose.yml"), "services: {}\n").unwrap();
        assert_eq!(find(&none, None, None).unwrap(), ["docker-compose.yml"]);
        std::fs::write(dir.join("compose.yaml"), "services: {}\n").unwrap();
        assert_eq!(find(&none, None, None).unwrap(), ["compose.yaml"]);
        assert_eq!(
            find(&none, Some("a.yml:b.yml"), None).unwrap(),
            ["a.yml", "b.yml"]
        );
        assert_eq!(
            find(&none, Some("a.yml;b.yml"), Some(";")).unwrap(),
            ["a.yml", "b.yml"]
        );
        let named = args(&["x.yml"], &["y.yml", "-"]);
        assert_eq!(
            find(&named, Some("a.yml"), None).unwrap(),
            ["x.yml", "y.yml", "-"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
