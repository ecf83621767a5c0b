//! `stategraph check [PATHS…]`: validate graph files, print diagnostics.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::graph::catalog::is_graph_file;
use crate::graph::diagnostic::{Diagnostic, Diagnostics, Severity};
use crate::graph::loc::Loc;
use crate::nodes::Registries;

/// How `check` prints what it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckFormat {
    /// `file:line:col: severity[code]: message` lines and a summary.
    Text,
    /// One JSON document: counts and every diagnostic with its place.
    Json,
    /// GitHub Actions workflow commands (`::error file=…,line=…::…`), which
    /// become annotations on the pull request's lines.
    Github,
}

/// Checks graph files (or directories of them) against `prompts`; prints
/// each diagnostic and a summary to `out`. Returns whether there were no
/// errors (and at least one file).
///
/// # Errors
/// A directory could not be read, or writing to `out` failed.
pub fn check(
    paths: &[PathBuf],
    prompts: &Path,
    reg: &Registries,
    format: CheckFormat,
    out: &mut dyn Write,
) -> std::io::Result<bool> {
    let (files, mut diagnostics) = graph_files(paths)?;
    let catalog = reg.load_files(&files, prompts);
    diagnostics.extend(catalog.diagnostics.iter().cloned());
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = diagnostics.len() - errors;
    match format {
        CheckFormat::Text => {
            for d in &diagnostics {
                writeln!(out, "{d}")?;
            }
            writeln!(
                out,
                "checked {} graph file(s): {} valid, {errors} error(s), {warnings} warning(s)",
                files.len(),
                catalog.graphs.len()
            )?;
        }
        CheckFormat::Json => {
            let doc = json!({
                "files": files.len(),
                "valid": catalog.graphs.keys().collect::<Vec<_>>(),
                "errors": errors,
                "warnings": warnings,
                "diagnostics": diagnostics,
            });
            writeln!(out, "{doc:#}")?;
        }
        CheckFormat::Github => {
            for d in &diagnostics {
                writeln!(out, "{}", github_annotation(d))?;
            }
        }
    }
    Ok(errors == 0 && !files.is_empty())
}

/// The files named, with directories expanded to their `*.yaml`/`*.yml`
/// entries (whatever those are: the loader reports one that is not a
/// regular file). A named directory without any is a diagnostic, so the
/// command never fails without saying why.
fn graph_files(paths: &[PathBuf]) -> std::io::Result<(Vec<PathBuf>, Vec<Diagnostic>)> {
    let mut files = Vec::new();
    let mut diagnostics = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)?
                .flatten()
                .map(|e| e.path())
                .filter(|f| is_graph_file(f))
                .collect();
            if found.is_empty() {
                let mut d = Diagnostics::new(p.display().to_string());
                d.error(
                    Loc::new(1, 1),
                    "no-graph-files",
                    "directory holds no `*.yaml`/`*.yml` graph files",
                    None,
                );
                diagnostics.extend(d.into_vec());
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    Ok((files, diagnostics))
}

/// A GitHub Actions annotation (properties and message escaped as the
/// workflow-command format requires).
fn github_annotation(d: &Diagnostic) -> String {
    let level = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let escape_data = |s: &str| {
        s.replace('%', "%25")
            .replace('\r', "%0D")
            .replace('\n', "%0A")
    };
    let escape_prop = |s: &str| escape_data(s).replace(':', "%3A").replace(',', "%2C");
    let mut message = d.message.clone();
    if let Some(h) = &d.hint {
        message.push_str("\nhint: ");
        message.push_str(h);
    }
    format!(
        "::{level} file={},line={},col={},title={}::{}",
        escape_prop(&d.file),
        d.line,
        d.column,
        escape_prop(d.code),
        escape_data(&message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_annotations_escape_what_the_format_reserves() {
        let d = Diagnostic {
            severity: Severity::Error,
            file: "graphs/a,b.yaml".into(),
            line: 3,
            column: 7,
            code: "unknown-field",
            message: "100% wrong: no `x`".into(),
            hint: Some("write `y`".into()),
        };
        assert_eq!(
            github_annotation(&d),
            "::error file=graphs/a%2Cb.yaml,line=3,col=7,title=unknown-field::100%25 wrong: no `x`%0Ahint: write `y`"
        );
    }
}
