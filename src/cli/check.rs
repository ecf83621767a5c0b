//! `stategraph check [PATHS…]`: validate graph files, print diagnostics.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::nodes::Registries;

/// Checks graph files (or directories of them) against `prompts`; prints
/// each diagnostic and a summary to `out`. Returns whether there were no
/// errors.
pub fn check(
    paths: &[PathBuf],
    prompts: &Path,
    reg: &Registries,
    out: &mut dyn Write,
) -> std::io::Result<bool> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)?
                .flatten()
                .map(|e| e.path())
                .filter(|f| matches!(f.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    let catalog = crate::graph::Catalog::load_files(&files, prompts, reg.env());
    for d in &catalog.diagnostics {
        writeln!(out, "{d}")?;
    }
    let errors = catalog.diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = catalog.diagnostics.len() - errors;
    writeln!(
        out,
        "checked {} graph file(s): {} valid, {errors} error(s), {warnings} warning(s)",
        files.len(),
        catalog.graphs.len()
    )?;
    Ok(errors == 0 && !files.is_empty())
}
