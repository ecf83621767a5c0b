//! The embedding API: one value that holds everything a graph needs to run
//! — the registries (state types, reducers, node kinds, tools), the served
//! graphs (reloadable) and the models — built by [`EngineBuilder`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use stategraph::{Engine, Kind};
//!
//! let engine = Engine::builder()
//!     .graphs_dir("graphs")
//!     .prompts_dir("prompts")
//!     .build()?;                       // every graph file checked; Err lists the diagnostics
//! let out = engine.run("triage", serde_json::json!({"ticket": "I was charged twice"})).await?;
//! println!("{}", out.state.to_json());
//! # Ok(()) }
//! ```
//!
//! The `stategraph` binary is built on this: `serve` hands an engine to the
//! server, `run` and `check` use one directly.

mod graphs;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

pub use graphs::Graphs;

use crate::graph::{Bundle, Diagnostic};
use crate::llm::{ChatModel, Models};
use crate::nodes::{Graph, Kind, Registries, Services};
use crate::runtime::{self, RunError, RunOptions, RunOutcome};
use crate::state::State;
use crate::tools::Tool;

/// Graphs, registries and models, ready to run.
#[derive(Debug, Clone)]
pub struct Engine {
    /// What graph files are checked against.
    pub registries: Registries,
    /// The graphs served (reloadable).
    pub graphs: Arc<Graphs>,
    /// Models and tools.
    pub services: Arc<Services>,
}

/// Why an engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Graph files have errors (all of them listed).
    #[error("graph files have errors:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Diagnostic>),
    /// No graph with that id is served.
    #[error("no graph `{0}`")]
    UnknownGraph(String),
    /// The run failed.
    #[error(transparent)]
    Run(#[from] Box<RunError>),
    /// A tool could not be registered.
    #[error(transparent)]
    Tool(#[from] crate::tools::RegistryError),
}

impl Engine {
    /// A builder with the built-in kinds and tools and the offline model.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// An engine from parts built elsewhere (tests, custom setups).
    pub fn from_parts(registries: Registries, graphs: Graphs, services: Services) -> Self {
        Self {
            registries,
            graphs: Arc::new(graphs),
            services: Arc::new(services),
        }
    }

    /// A graph by id.
    pub fn graph(&self, id: &str) -> Option<Arc<Graph>> {
        self.graphs.get(id)
    }

    /// Runs graph `id` on `input` to its end, in memory.
    ///
    /// # Errors
    /// No such graph, or the run failed.
    pub async fn run(&self, id: &str, input: Value) -> Result<RunOutcome, EngineError> {
        self.run_with(id, input, RunOptions::default()).await
    }

    /// Runs graph `id` with options (an event channel, a checkpointer, …).
    ///
    /// # Errors
    /// No such graph, or the run failed.
    pub async fn run_with(
        &self,
        id: &str,
        input: Value,
        opts: RunOptions,
    ) -> Result<RunOutcome, EngineError> {
        let graph = self
            .graph(id)
            .ok_or_else(|| EngineError::UnknownGraph(id.to_owned()))?;
        runtime::run(graph, Arc::clone(&self.services), input, opts)
            .await
            .map_err(|e| EngineError::Run(Box::new(e)))
    }
}

/// Builds an [`Engine`]: register what your graph files use, point it at
/// them, build.
#[derive(Default)]
pub struct EngineBuilder {
    registries: Registries,
    tools: Vec<Arc<dyn Tool>>,
    graphs_dir: Option<PathBuf>,
    prompts_dir: Option<PathBuf>,
    built_in: Option<&'static Bundle>,
    models: Option<Models>,
    allow_errors: bool,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("graphs_dir", &self.graphs_dir)
            .field("prompts_dir", &self.prompts_dir)
            .finish_non_exhaustive()
    }
}

impl EngineBuilder {
    /// Starts from these registries (instead of the defaults).
    pub fn registries(mut self, registries: Registries) -> Self {
        self.registries = registries;
        self
    }

    /// Registers a node kind (see [`Kind::new`]).
    pub fn kind(mut self, kind: Kind) -> Self {
        self.registries.kinds.register(kind);
        self
    }

    /// Registers a Rust state type graph files can name (`state: NAME`).
    pub fn state<S: State>(mut self) -> Self {
        self.registries.states.register::<S>();
        self
    }

    /// Registers a reducer declared fields can name (`reducer: NAME`).
    pub fn reducer(
        mut self,
        name: impl Into<String>,
        f: impl Fn(&Value, &Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        self.registries.reducers.register(name, f);
        self
    }

    /// Registers a tool (its spec names its partition).
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// The graph directory (default `graphs`; the [`EngineBuilder::built_in`]
    /// graphs when it does not exist).
    pub fn graphs_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.graphs_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// The prompt directory (default `prompts`).
    pub fn prompts_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.prompts_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Graphs and prompts served when the graph directory does not exist
    /// (a binary's own copies; `None`, the default, serves the directory
    /// only).
    pub fn built_in(mut self, bundle: Option<&'static Bundle>) -> Self {
        self.built_in = bundle;
        self
    }

    /// The models (default: the built-in offline model for every role).
    pub fn models(mut self, models: Models) -> Self {
        self.models = Some(models);
        self
    }

    /// One model for every role.
    pub fn model(self, model: Arc<dyn ChatModel>) -> Self {
        self.models(Models::single(model))
    }

    /// Builds even when some graph files have errors (they are not served;
    /// their diagnostics stay in [`Graphs::catalog`]). A server wants this:
    /// one broken file must not take the others down.
    pub fn allow_errors(mut self) -> Self {
        self.allow_errors = true;
        self
    }

    /// Loads and checks the graph files.
    ///
    /// # Errors
    /// A tool could not be registered, or a graph file has errors (unless
    /// [`EngineBuilder::allow_errors`]).
    pub fn build(self) -> Result<Engine, EngineError> {
        for tool in self.tools {
            self.registries.tools.register(tool)?;
        }
        let graphs_dir = self.graphs_dir.unwrap_or_else(|| "graphs".into());
        let prompts_dir = self.prompts_dir.unwrap_or_else(|| "prompts".into());
        let graphs = Graphs::load_or(
            &graphs_dir,
            &prompts_dir,
            self.built_in,
            self.registries.clone(),
        );
        let cat = graphs.catalog();
        if !self.allow_errors && cat.has_errors() {
            return Err(EngineError::Invalid(cat.diagnostics.clone()));
        }
        let models = self.models.unwrap_or_else(|| {
            Models::single(Arc::new(crate::llm::offline::OfflineModel::default()))
        });
        let services = Services::new(models, Arc::clone(&self.registries.tools));
        Ok(Engine {
            registries: self.registries,
            graphs: Arc::new(graphs),
            services: Arc::new(services),
        })
    }
}
