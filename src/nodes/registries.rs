//! What graph files are checked against, in one value: the Rust state types
//! and reducers an application registers, the node kinds (built in and
//! registered) and the tools.

use std::path::Path;
use std::sync::Arc;

use super::{GraphCatalog, Kinds};
use crate::graph::{Bundle, Catalog, CatalogEnv};
use crate::state::{Reducers, StateTypes};
use crate::tools::ToolRegistry;

/// State types, reducers, node kinds and tools.
#[derive(Clone, Debug)]
pub struct Registries {
    /// Registered Rust state types (graph files may also declare their own).
    pub states: StateTypes,
    /// Registered reducers (besides `last`, `append`, `merge_by_id`).
    pub reducers: Reducers,
    /// Node kinds.
    pub kinds: Kinds,
    /// Tools.
    pub tools: Arc<ToolRegistry>,
}

impl Default for Registries {
    /// No Rust states or reducers, the built-in kinds and tools.
    fn default() -> Self {
        Self {
            states: StateTypes::default(),
            reducers: Reducers::default(),
            kinds: Kinds::default(),
            tools: Arc::new(ToolRegistry::with_builtins()),
        }
    }
}

impl Registries {
    /// The view compilation needs.
    pub fn env(&self) -> CatalogEnv<'_, Kinds> {
        CatalogEnv {
            states: &self.states,
            reducers: &self.reducers,
            kinds: &self.kinds,
            tools: &self.tools,
        }
    }

    /// Loads and compiles a graph directory with its prompts.
    pub fn load(&self, graphs_dir: &Path, prompts_dir: &Path) -> GraphCatalog {
        Catalog::load(graphs_dir, prompts_dir, self.env())
    }

    /// Loads and compiles the given graph files with a prompt directory.
    pub fn load_files(&self, files: &[std::path::PathBuf], prompts_dir: &Path) -> GraphCatalog {
        Catalog::load_files(files, prompts_dir, self.env())
    }

    /// Compiles graphs given as `(id, yaml)` with these prompts (tests,
    /// embedding).
    pub fn from_sources(
        &self,
        graphs: &[(&str, &str)],
        prompts: crate::graph::prompts::Prompts,
    ) -> GraphCatalog {
        Catalog::from_sources(graphs, prompts, self.env())
    }

    /// Compiles graphs and prompts carried in memory (a binary's built-in
    /// copies).
    pub fn bundled(&self, bundle: &Bundle) -> GraphCatalog {
        bundle.catalog(self.env())
    }
}
