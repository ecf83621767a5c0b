//! Lists the shipped graph files and prompts (`graphs/`, `prompts/`) for the
//! `stategraph` binary to embed (`src/bin/stategraph.rs`; the library embeds
//! none), so `stategraph serve` works from any directory. The list is
//! generated from the directories, so no source file names them.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()));
    let mut out =
        String::from("/// (graph id, file text).\npub(super) const GRAPHS: &[(&str, &str)] = &[\n");
    // Graph files are the directory's own; `graphs/tests/` holds test files.
    for path in files(&root.join("graphs"), &["yaml", "yml"], false) {
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    ({id:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    out.push_str(
        "];\n\n/// (prompt path, template text).\npub(super) const PROMPTS: &[(&str, &str)] = &[\n",
    );
    let prompts = root.join("prompts");
    for path in files(
        &prompts,
        &["md", "txt", "j2", "jinja", "tmpl", "prompt"],
        true,
    ) {
        let rel = path
            .strip_prefix(&prompts)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    ({rel:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into()))
        .join("embedded_files.rs");
    std::fs::write(dest, out)?;
    println!("cargo::rerun-if-changed=graphs");
    println!("cargo::rerun-if-changed=prompts");
    Ok(())
}

/// Files in `dir` (and its subdirectories when `recursive`) with one of
/// `exts`, sorted.
fn files(dir: &Path, exts: &[&str], recursive: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            println!("cargo::rerun-if-changed={}", p.display());
            if p.is_dir() {
                if recursive {
                    stack.push(p);
                }
            } else if p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| exts.contains(&x))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
