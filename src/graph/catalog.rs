//! A directory of graph files and prompts, compiled together.
//!
//! Subgraphs are compiled before the graphs that run them; a file that fails
//! leaves its diagnostics and is absent from the catalog, while every other
//! graph still compiles. The server swaps whole catalogs on reload and keeps
//! serving the previous version of a graph that no longer validates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::compile::{CompileEnv, compile};
use super::compiled::CompiledGraph;
use super::diagnostic::{Diagnostic, Diagnostics};
use super::kinds::NodeKinds;
use super::load::{GraphFile, load_file};
use super::prompts::Prompts;
use super::value::SpValue;
use crate::state::{Reducers, StateTypes};
use crate::tools::ToolRegistry;

/// What graph files are checked against: state types, reducers, node
/// kinds, tools.
#[derive(Clone, Copy)]
pub struct CatalogEnv<'a, K: NodeKinds> {
    /// Registered Rust state types.
    pub states: &'a StateTypes,
    /// Reducers declared fields may name.
    pub reducers: &'a Reducers,
    /// Node kinds.
    pub kinds: &'a K,
    /// Tools.
    pub tools: &'a ToolRegistry,
}

/// Compiled graphs by id, with the diagnostics of every file.
#[derive(Debug)]
pub struct Catalog<N> {
    /// Graphs that compiled.
    pub graphs: BTreeMap<String, Arc<CompiledGraph<N>>>,
    /// Errors and warnings of all files (prompt files included).
    pub diagnostics: Vec<Diagnostic>,
    /// Graph ids whose files have errors.
    pub failed: BTreeSet<String>,
    /// The prompts.
    pub prompts: Arc<Prompts>,
}

impl<N> Catalog<N> {
    /// Loads and compiles every `*.yaml` / `*.yml` entry in `graphs_dir`.
    /// An entry so named that is not a regular file (a directory, a FIFO, a
    /// device, also through a symlink) is an error naming it, not skipped.
    pub fn load<K: NodeKinds<Node = N>>(
        graphs_dir: &Path,
        prompts_dir: &Path,
        reg: CatalogEnv<'_, K>,
    ) -> Self {
        let mut files: Vec<PathBuf> = std::fs::read_dir(graphs_dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| is_graph_file(p))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let mut cat = Self::load_files(&files, prompts_dir, reg);
        if !graphs_dir.is_dir() {
            cat.diagnostics
                .push(missing(graphs_dir, "graph directory does not exist"));
        }
        cat
    }

    /// Loads and compiles the given files.
    pub fn load_files<K: NodeKinds<Node = N>>(
        files: &[PathBuf],
        prompts_dir: &Path,
        reg: CatalogEnv<'_, K>,
    ) -> Self {
        let prompts = Arc::new(Prompts::load(prompts_dir));
        // The tool lock beside the graphs tells `check` what MCP servers
        // list (see `crate::tools::lock`).
        let mut lock_errors = Vec::new();
        let dirs: BTreeSet<&Path> = files.iter().filter_map(|f| f.parent()).collect();
        for dir in dirs {
            match crate::tools::lock::ToolLock::read_in(dir) {
                Ok(Some(lock)) => {
                    reg.tools.add_locked(&lock);
                    let path = dir.join(crate::tools::lock::LOCK_FILE);
                    for why in lock.ambiguities() {
                        lock_errors.push(lock_warning(&path, &why));
                    }
                }
                Ok(None) => {}
                Err(why) => {
                    lock_errors.push(lock_error(&dir.join(crate::tools::lock::LOCK_FILE), &why))
                }
            }
        }
        let loaded = files.iter().map(|p| (p.clone(), load_file(p))).collect();
        let mut cat = Self::compile_all(loaded, prompts, reg);
        cat.diagnostics.extend(lock_errors);
        cat
    }

    /// Compiles graphs given as text (`(id, yaml)`), for tests and embedding.
    pub fn from_sources<K: NodeKinds<Node = N>>(
        graphs: &[(&str, &str)],
        prompts: Prompts,
        reg: CatalogEnv<'_, K>,
    ) -> Self {
        let loaded = graphs
            .iter()
            .map(|(id, yaml)| {
                let path = PathBuf::from(format!("{id}.yaml"));
                (path.clone(), super::load::parse(&path, id, yaml.as_bytes()))
            })
            .collect();
        Self::compile_all(loaded, Arc::new(prompts), reg)
    }

    fn compile_all<K: NodeKinds<Node = N>>(
        loaded: Vec<(PathBuf, Result<GraphFile, Vec<Diagnostic>>)>,
        prompts: Arc<Prompts>,
        reg: CatalogEnv<'_, K>,
    ) -> Self {
        let mut diagnostics = Vec::new();
        let mut failed = BTreeSet::new();
        let parsed = unique_files(loaded, &mut diagnostics, &mut failed);
        let mut graphs: BTreeMap<String, Arc<CompiledGraph<N>>> = BTreeMap::new();
        // Compile in dependency order: a graph waits for the subgraphs it runs.
        let deps: BTreeMap<String, BTreeSet<String>> = parsed
            .iter()
            .map(|(id, f)| {
                let d = f
                    .spec
                    .nodes
                    .iter()
                    .filter_map(|n| subgraph_of(&n.value).map(|g| g.value))
                    .collect();
                (id.clone(), d)
            })
            .collect();
        let mut pending: BTreeSet<String> = parsed.keys().cloned().collect();
        while !pending.is_empty() {
            let ready: Vec<String> = pending
                .iter()
                .filter(|id| deps[*id].iter().all(|d| !pending.contains(d)))
                .cloned()
                .collect();
            if ready.is_empty() {
                // Every graph left waits for another one left, so some run
                // themselves (directly or through others). Those fail here;
                // a graph that only runs one of them compiles next round and
                // reports the subgraph as missing.
                let cyclic: Vec<String> = pending
                    .iter()
                    .filter(|id| runs_itself(id, &deps, &pending))
                    .cloned()
                    .collect();
                if cyclic.is_empty() {
                    break;
                }
                for id in &cyclic {
                    diagnostics.extend(cycle_diagnostics(&parsed[id], id, &deps, &pending));
                }
                for id in cyclic {
                    pending.remove(&id);
                    failed.insert(id);
                }
                continue;
            }
            for id in ready {
                pending.remove(&id);
                let file = &parsed[&id];
                let env = CompileEnv {
                    states: reg.states,
                    reducers: reg.reducers,
                    kinds: reg.kinds,
                    tools: reg.tools,
                    prompts: &prompts,
                    graphs: &graphs,
                };
                match compile(file, &env) {
                    Ok((graph, warnings)) => {
                        diagnostics.extend(warnings);
                        graphs.insert(id, Arc::new(graph));
                    }
                    Err(d) => {
                        diagnostics.extend(d);
                        failed.insert(id);
                    }
                }
            }
        }
        diagnostics.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        diagnostics.dedup();
        Self {
            graphs,
            diagnostics,
            failed,
            prompts,
        }
    }

    /// A graph by id.
    pub fn get(&self, id: &str) -> Option<&Arc<CompiledGraph<N>>> {
        self.graphs.get(id)
    }

    /// Whether any file has an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Whether `id` runs itself through graphs still in `pending`.
fn runs_itself(
    id: &str,
    deps: &BTreeMap<String, BTreeSet<String>>,
    pending: &BTreeSet<String>,
) -> bool {
    deps[id]
        .iter()
        .any(|d| pending.contains(d) && reaches(d, id, deps, pending))
}

/// Whether `from` runs `to`, directly or through graphs in `pending`.
fn reaches(
    from: &str,
    to: &str,
    deps: &BTreeMap<String, BTreeSet<String>>,
    pending: &BTreeSet<String>,
) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(x) = stack.pop() {
        if x == to {
            return true;
        }
        if seen.insert(x) {
            stack.extend(
                deps.get(x)
                    .into_iter()
                    .flatten()
                    .map(String::as_str)
                    .filter(|d| pending.contains(*d)),
            );
        }
    }
    false
}

/// Whether the name says graph file; what the entry really is, is for
/// [`load_file`] to check (and report).
pub(crate) fn is_graph_file(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

/// A tool lock file that cannot be used.
fn lock_error(path: &Path, message: &str) -> Diagnostic {
    let mut d = Diagnostics::new(path.display().to_string());
    d.error(super::loc::Loc::new(1, 1), "tool-lock", message, None);
    d.into_vec().remove(0)
}

fn lock_warning(path: &Path, message: &str) -> Diagnostic {
    let mut d = Diagnostics::new(path.display().to_string());
    d.warning(super::loc::Loc::new(1, 1), "tool-lock", message, None);
    d.into_vec().remove(0)
}

fn missing(path: &Path, message: &str) -> Diagnostic {
    let mut d = Diagnostics::new(path.display().to_string());
    d.error(super::loc::Loc::new(1, 1), "io", message, None);
    d.into_vec().remove(0)
}

/// The graph a node runs: its `graph:` setting (a subgraph node).
fn subgraph_of(node: &super::spec::NodeSpec) -> Option<super::loc::Sp<String>> {
    node.settings
        .iter()
        .find(|(k, _)| k.value == "graph")
        .and_then(|(_, v)| match &v.value {
            SpValue::Str(s) => Some(super::loc::Sp::new(s.clone(), v.loc)),
            _ => None,
        })
}

/// The parsed graph files by id; a second file with an id already taken,
/// or a file that did not parse, is reported and its id marked failed.
fn unique_files(
    loaded: Vec<(PathBuf, Result<GraphFile, Vec<Diagnostic>>)>,
    diagnostics: &mut Vec<Diagnostic>,
    failed: &mut BTreeSet<String>,
) -> BTreeMap<String, GraphFile> {
    let mut parsed: BTreeMap<String, GraphFile> = BTreeMap::new();
    for (path, result) in loaded {
        match result {
            Ok(file) => {
                if let Some(other) = parsed.get(&file.id) {
                    let mut d = Diagnostics::new(Arc::clone(&file.display));
                    d.error(
                        super::loc::Loc::new(1, 1),
                        "duplicate-graph",
                        format!(
                            "graph id `{}` is also defined by {}",
                            file.id, other.display
                        ),
                        Some("graph ids are file stems and must be unique".into()),
                    );
                    diagnostics.extend(d.into_vec());
                    failed.insert(file.id.clone());
                } else {
                    parsed.insert(file.id.clone(), file);
                }
            }
            Err(d) => {
                let id = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                failed.insert(id);
                diagnostics.extend(d);
            }
        }
    }
    parsed
}

/// Where graph `id` (in `file`) runs itself, directly or through the
/// pending graphs it runs.
fn cycle_diagnostics(
    file: &GraphFile,
    id: &str,
    deps: &BTreeMap<String, BTreeSet<String>>,
    pending: &BTreeSet<String>,
) -> Vec<Diagnostic> {
    let mut d = Diagnostics::new(Arc::clone(&file.display));
    for g in file.spec.nodes.iter().filter_map(|n| subgraph_of(&n.value)) {
        if g.value == id {
            d.error(
                g.loc,
                "subgraph-cycle",
                format!("graph `{id}` runs itself"),
                None,
            );
        } else if pending.contains(&g.value) && reaches(&g.value, id, deps, pending) {
            d.error(
                g.loc,
                "subgraph-cycle",
                format!(
                    "graph `{id}` runs `{}`, which (indirectly) runs `{id}` again",
                    g.value
                ),
                None,
            );
        }
    }
    d.into_vec()
}
