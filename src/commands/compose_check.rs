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

/// The compose projects to check, each a list of files merged as Compose merges them: each of
/// FILES alone, then every -f together (one project, as `docker compose -f a -f b` reads it);
/// without any, the files of COMPOSE_FILE together, else the first default file in `dir`, as
/// Compose finds them.
fn projects_to_check(
    args: &ComposeCheckArgs,
    compose_file: Option<&str>,
    separator: Option<&str>,
    dir: &Path,
) -> Result<Vec<Vec<PathBuf>>> {
    let mut projects: Vec<Vec<PathBuf>> = args.files.iter().map(|f| vec![f.clone()]).collect();
    if !args.file.is_empty() {
        projects.push(args.file.clone());
    }
    if !projects.is_empty() {
        return Ok(projects);
    }
    if let Some(list) = compose_file.filter(|l| !l.is_empty()) {
        let separator = separator.filter(|s| !s.is_empty()).unwrap_or(":");
        return Ok(vec![list.split(separator).map(PathBuf::from).collect()]);
    }
    match DEFAULT_FILES.iter().find(|f| dir.join(f).is_file()) {
        Some(found) => Ok(vec![vec![PathBuf::from(found)]]),
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
    let projects = projects_to_check(
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
    for project in &projects {
        check_project(project, &options, &mut found);
    }
    let files: Vec<&PathBuf> = projects.iter().flatten().collect();
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
            writeln!(out, "{}: {}: {}", f.severity, f.place(), f.text)?;
        }
        writeln!(
            out,
            "{errors} error(s), {warnings} warning(s) in {} file(s)",
            files.len()
        )?;
    }
    out.flush()?;
    // An unreadable file counts as an error (its line says so); 2 stays clap's usage error.
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Reads the files of one project and checks them merged. A file that cannot be read is one
/// problem, and the project is not checked: without that file it is not what Compose would run.
fn check_project(paths: &[PathBuf], options: &CheckOptions, found: &mut Vec<Found>) {
    let shown: Vec<String> = paths
        .iter()
        .map(|path| {
            if path.as_os_str() == "-" {
                "<stdin>".to_owned()
            } else {
                one_line(&path.display().to_string())
            }
        })
        .collect();
    let mut parts = Vec::new();
    for (path, shown) in paths.iter().zip(&shown) {
        let read = if path.as_os_str() == "-" {
            compose::read_from(io::stdin().lock())
        } else {
            compose::read_file(path)
        };
        match read {
            Ok(part) => parts.push(part),
            Err(err) => found.push(Found::unreadable(shown, &err)),
        }
    }
    if parts.len() < paths.len() {
        return;
    }
    let file = match compose::project(parts) {
        Ok(file) => file,
        // No services in any of the files: the first one stands for the project.
        Err(err) => return found.push(Found::unreadable(&shown[0], &err)),
    };
    for problem in compose::check(&file, options) {
        let at = problem.at;
        found.push(Found {
            // The file that wrote the label (or first defined the service).
            file: at.map_or(&shown[0], |at| &shown[at.source]).clone(),
            line: at.map(|at| at.line),
            column: at.map(|at| at.column),
            severity: problem.severity,
            text: problem.to_string(),
            service: problem.service,
            label: problem.key,
            message: problem.message,
        });
    }
}

/// One problem found, in a file or with it.
#[derive(Serialize)]
struct Found {
    file: String,
    /// Where in `file` (1-based; the column counts characters): the label's key or list item,
    /// else the service's name, else where the parser stopped; `null` when nowhere in particular.
    line: Option<u64>,
    column: Option<u64>,
    severity: Severity,
    /// `null` for a problem with the file as a whole (it cannot be read or parsed).
    service: Option<String>,
    label: Option<String>,
    message: String,
    /// The text form's line after `SEVERITY: PLACE: `; not in the JSON.
    #[serde(skip)]
    text: String,
}

impl Found {
    fn unreadable(file: &str, err: &compose::LoadError) -> Self {
        let at = err.at();
        Self {
            file: file.to_owned(),
            line: at.map(|at| at.line),
            column: at.map(|at| at.column),
            severity: Severity::Error,
            service: None,
            label: None,
            message: err.to_string(),
            text: one_line(&err.to_string()),
        }
    }

    /// `FILE:LINE:COLUMN`, written as compilers write a place (editors jump there), or `FILE`.
    fn place(&self) -> String {
        match (self.line, self.column) {
            (Some(line), Some(column)) => format!("{}:{line}:{column}", self.file),
            _ => self.file.clone(),
        }
    }
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
    fn projects_are_found_as_compose_finds_them() {
        let dir = std::env::temp_dir().join(format!("dxdp-compose-lookup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let find = |a: &ComposeCheckArgs, env: Option<&str>, sep: Option<&str>| {
            projects_to_check(a, env, sep, &dir).map(|projects| {
                projects
                    .iter()
                    .map(|files| {
                        files
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                    })
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
        assert_eq!(find(&none, None, None).unwrap(), [["docker-compose.yml"]]);
        std::fs::write(dir.join("compose.yaml"), "services: {}\n").unwrap();
        assert_eq!(find(&none, None, None).unwrap(), [["compose.yaml"]]);
        // COMPOSE_FILE names one project, as for Compose.
        assert_eq!(
            find(&none, Some("a.yml:b.yml"), None).unwrap(),
            [["a.yml", "b.yml"]]
        );
        assert_eq!(
            find(&none, Some("a.yml;b.yml"), Some(";")).unwrap(),
            [["a.yml", "b.yml"]]
        );
        // Each FILE alone, then every -f as one project; COMPOSE_FILE is not read then.
        let named = args(&["x.yml", "z.yml"], &["y.yml", "-"]);
        assert_eq!(
            find(&named, Some("a.yml"), None).unwrap(),
            vec![vec!["x.yml"], vec!["z.yml"], vec!["y.yml", "-"]]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
