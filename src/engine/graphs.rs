//! The graphs being served, and reloading them without a restart.
//!
//! A reload compiles every file again. Graphs that compile replace their
//! previous version; a graph whose file no longer validates keeps serving
//! its previous version, and its diagnostics are reported (API, log,
//! `/readyz`). Runs in flight keep the version they started with.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use crate::graph::Bundle;
use crate::graph::diagnostic::Diagnostic;
use crate::nodes::{Graph, GraphCatalog as Catalog, Registries};

/// The catalog in use and where it comes from.
#[derive(Debug)]
pub struct Graphs {
    current: RwLock<Arc<Catalog>>,
    graphs_dir: PathBuf,
    prompts_dir: PathBuf,
    registries: Registries,
    /// Serving the built-in copies a binary carries (no graph directory).
    pub embedded: bool,
    fingerprint: RwLock<u64>,
}

/// What a reload did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReloadReport {
    /// Graphs now served in a new version.
    pub updated: Vec<String>,
    /// Graphs whose files failed; their previous version (if any) still serves.
    pub rejected: Vec<String>,
    /// Every diagnostic of the new files.
    pub diagnostics: Vec<Diagnostic>,
}

impl Graphs {
    /// Loads the graph directory.
    pub fn load(graphs_dir: &Path, prompts_dir: &Path, registries: Registries) -> Self {
        Self::load_or(graphs_dir, prompts_dir, None, registries)
    }

    /// Loads the graph directory, or `built_in` (a binary's own copies)
    /// when there is one and the directory does not exist.
    pub fn load_or(
        graphs_dir: &Path,
        prompts_dir: &Path,
        built_in: Option<&Bundle>,
        registries: Registries,
    ) -> Self {
        let built_in = built_in.filter(|_| !graphs_dir.is_dir());
        let embedded = built_in.is_some();
        let catalog = match built_in {
            Some(bundle) => registries.bundled(bundle),
            None => registries.load(graphs_dir, prompts_dir),
        };
        Self {
            current: RwLock::new(Arc::new(catalog)),
            graphs_dir: graphs_dir.to_owned(),
            prompts_dir: prompts_dir.to_owned(),
            registries,
            embedded,
            fingerprint: RwLock::new(fingerprint(graphs_dir, prompts_dir)),
        }
    }

    /// Serves a fixed catalog (tests, embedding); reloading does nothing.
    pub fn from_catalog(catalog: Catalog, registries: Registries) -> Self {
        Self {
            current: RwLock::new(Arc::new(catalog)),
            graphs_dir: PathBuf::new(),
            prompts_dir: PathBuf::new(),
            registries,
            embedded: true,
            fingerprint: RwLock::new(0),
        }
    }

    /// The catalog now.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// A graph by id.
    pub fn get(&self, id: &str) -> Option<Arc<Graph>> {
        self.catalog().get(id).cloned()
    }

    /// Why no graph `id` is served, for people: the diagnostics of its
    /// file when it was rejected, else the graphs there are (and the files
    /// that were rejected, when none is served at all).
    pub fn why_missing(&self, id: &str) -> String {
        let catalog = self.catalog();
        if catalog.failed.contains(id) {
            let errors: Vec<String> = catalog
                .diagnostics
                .iter()
                .filter(|d| d.is_error() && file_id(&d.file) == id)
                .map(ToString::to_string)
                .collect();
            return format!(
                "graph `{id}` was rejected: its file has {} error(s): {}",
                errors.len(),
                errors.join("; ")
            );
        }
        let known: Vec<&str> = catalog.graphs.keys().map(String::as_str).collect();
        let rejected: Vec<&str> = catalog.failed.iter().map(String::as_str).collect();
        match (known.is_empty(), rejected.is_empty()) {
            (false, _) => format!("no graph `{id}` (available: {})", known.join(", ")),
            (true, true) => format!("no graph `{id}`: no graph is loaded"),
            (true, false) => format!(
                "no graph `{id}`: no graph is loaded; rejected: {} (see `stategraph check`)",
                rejected.join(", ")
            ),
        }
    }

    /// The registries graphs are checked against.
    pub fn registries(&self) -> &Registries {
        &self.registries
    }

    /// Compiles the files again and swaps in what compiled.
    pub fn reload(&self) -> ReloadReport {
        if self.embedded {
            return ReloadReport {
                updated: Vec::new(),
                rejected: Vec::new(),
                diagnostics: Vec::new(),
            };
        }
        let mut fresh = self.registries.load(&self.graphs_dir, &self.prompts_dir);
        let old = self.catalog();
        let updated: Vec<String> = fresh
            .graphs
            .iter()
            .filter(|(id, g)| old.get(id).is_none_or(|o| o.version != g.version))
            .map(|(id, _)| id.clone())
            .collect();
        let rejected: Vec<String> = fresh.failed.iter().cloned().collect();
        for id in &rejected {
            if let Some(previous) = old.get(id) {
                fresh.graphs.insert(id.clone(), Arc::clone(previous));
            }
        }
        for d in fresh.diagnostics.iter().filter(|d| d.is_error()) {
            tracing::warn!(diagnostic = %d, "graph file rejected; its previous version keeps serving");
        }
        if !updated.is_empty() {
            tracing::info!(graphs = ?updated, "graphs reloaded");
        }
        let report = ReloadReport {
            updated,
            rejected,
            diagnostics: fresh.diagnostics.clone(),
        };
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        *self
            .fingerprint
            .write()
            .unwrap_or_else(PoisonError::into_inner) =
            fingerprint(&self.graphs_dir, &self.prompts_dir);
        report
    }

    /// Reloads if any graph or prompt file changed since the last load.
    pub fn reload_if_changed(&self) -> Option<ReloadReport> {
        if self.embedded {
            return None;
        }
        let now = fingerprint(&self.graphs_dir, &self.prompts_dir);
        let before = *self
            .fingerprint
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        (now != before).then(|| self.reload())
    }
}

/// A hash of the names, sizes and modification times of every file under
/// the two directories.
fn fingerprint(graphs: &Path, prompts: &Path) -> u64 {
    let mut entries = Vec::new();
    for dir in [graphs, prompts] {
        walk(dir, &mut entries, 0);
    }
    entries.sort();
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for (path, len, modified) in entries {
        h.update(path.as_os_str().as_encoded_bytes());
        h.update(&len.to_le_bytes());
        h.update(&modified.to_le_bytes());
    }
    h.digest()
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64, u128)>, depth: u32) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let path = e.path();
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            if depth < 8 {
                walk(&path, out, depth + 1);
            }
        } else {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            out.push((path, meta.len(), modified));
        }
    }
}

/// The graph id a diagnostic's file stands for: its stem (`graphs/chat.yaml`
/// is `chat`; a source given by id is that id).
fn file_id(file: &str) -> &str {
    Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(file)
}
