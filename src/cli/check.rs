//! `stategraph check [PATHS…]`: validate graph files, print diagnostics.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::graph::catalog::is_graph_file;
use crate::graph::diagnostic::{Diagnostic, Diagnostics, Severity};
use crate::graph::loc::Loc;
use crate::nodes::Registries;
use crate::testing::is_test_file;

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
    let (graph_paths, test_paths): (Vec<PathBuf>, Vec<PathBuf>) =
        paths.iter().cloned().partition(|p| !is_test_file(p));
    let (files, mut diagnostics) = graph_files(&graph_paths)?;
    let catalog = reg.load_files(&files, prompts);
    diagnostics.extend(catalog.diagnostics.iter().cloned());
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = diagnostics.len() - errors;
    let tests = test_files(&graph_paths, test_paths);
    let test_diagnostics = check_tests(&tests, &graph_paths, &catalog, prompts, reg);
    let test_errors = test_diagnostics.iter().filter(|d| d.is_error()).count();
    let test_warnings = test_diagnostics.len() - test_errors;
    match format {
        CheckFormat::Text => {
            for d in diagnostics.iter().chain(&test_diagnostics) {
                writeln!(out, "{d}")?;
            }
            if !files.is_empty() || tests.is_empty() {
                writeln!(
                    out,
                    "checked {} graph file(s): {} valid, {errors} error(s), {warnings} warning(s)",
                    files.len(),
                    catalog.graphs.len()
                )?;
            }
            if !tests.is_empty() {
                writeln!(
                    out,
                    "checked {} test file(s): {test_errors} error(s), {test_warnings} warning(s)",
                    tests.len()
                )?;
            }
        }
        CheckFormat::Json => {
            let all: Vec<&Diagnostic> = diagnostics.iter().chain(&test_diagnostics).collect();
            let doc = json!({
                "files": files.len(),
                "test_files": tests.len(),
                "valid": catalog.graphs.keys().collect::<Vec<_>>(),
                "errors": errors + test_errors,
                "warnings": warnings + test_warnings,
                "diagnostics": all,
            });
            writeln!(out, "{doc:#}")?;
        }
        CheckFormat::Github => {
            for d in diagnostics.iter().chain(&test_diagnostics) {
                writeln!(out, "{}", github_annotation(d))?;
            }
        }
    }
    Ok(errors + test_errors == 0 && (!files.is_empty() || !tests.is_empty()))
}

/// The test files to check: those named, and each checked directory's
/// `tests/*.yaml`.
fn test_files(dirs: &[PathBuf], named: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out = named;
    for d in dirs.iter().filter(|d| d.is_dir()) {
        let tests = d.join(crate::testing::TESTS_DIR);
        if tests.is_dir() {
            out.extend(crate::testing::find_test_files(&tests));
        }
    }
    out
}

/// Test files checked against the graphs they run: those of a checked
/// directory against its catalog, others against their own directory's.
fn check_tests(
    tests: &[PathBuf],
    dirs: &[PathBuf],
    catalog: &crate::nodes::GraphCatalog,
    prompts: &Path,
    reg: &Registries,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for t in tests {
        let file = match crate::testing::load_test_file(t) {
            Ok(f) => f,
            Err(d) => {
                out.extend(d);
                continue;
            }
        };
        let dir = crate::testing::graphs_dir_of(
            t,
            dirs.first().map_or(Path::new("graphs"), |d| d.as_path()),
        );
        let checked = dirs.iter().any(|d| same_dir(d, &dir));
        let own;
        let cat = if checked {
            catalog
        } else {
            own = reg.load(&dir, &crate::testing::prompts_dir_of(&dir, prompts));
            &own
        };
        out.extend(crate::testing::check_test_file(&file, cat, &reg.tools));
    }
    out
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
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
