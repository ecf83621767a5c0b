//! Node kinds: one file per kind, one entry in the kind table.
//!
//! A kind has two halves. Its `build` reads the node's settings through
//! [`BuildCx`] (which resolves every field, prompt, tool and expression they
//! name against the graph, reporting problems as diagnostics) and returns the
//! compiled [`Node`]. `run` executes it against a state snapshot and returns
//! a [`Patch`]. A new kind is one file exporting `kind()` plus one entry in
//! the table ([`kinds`]); an embedding application registers its own kinds
//! the same way ([`Kinds::register`]).
//!
//! | kind | does |
//! |---|---|
//! | `llm` | one prompt, one model call; text into a field, or JSON matching the fields it writes |
//! | `router` | intent classification with overrides, forced intents and a fallback |
//! | `agent` | a model with tools in a loop; extracts values from tool results; tool calls may wait for approval, client-side tools for the front end |
//! | `tool` | one tool call with arguments from the state; its result into fields |
//! | `http` | POSTs a slice of the state to an endpoint, applies the JSON it returns |
//! | `set` | computes fields from expressions |
//! | `summarizer`, `followup` | rolling summary; suggested follow-up questions |
//! | `subgraph` | runs another graph file |
//! | `noop` | passes control on (joins, fan-out points) |
//! | `interrupt` | asks a person a question; the run waits for the answer |

mod agent;
mod bind;
pub(crate) mod bounds;
mod context;
mod convo;
mod extract;
mod fill;
mod followup;
mod http;
mod interrupt;
pub(crate) mod kinds;
mod llm;
mod model;
mod noop;
mod passthrough;
pub(crate) mod pauses;
mod registries;
mod router;
mod set;
mod structured;
mod subgraph;
mod summarizer;
mod tool;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::graph::{Catalog, CompiledGraph};
use crate::llm::LlmError;
use crate::state::Patch;
use crate::tools::ToolError;

pub(crate) use agent::BUDGET_NOTE;
pub(crate) use bounds::{Failure, Recovery};
pub use context::{NodeContext, Services};
pub(crate) use context::{Playback, Roles, SubgraphRunner};
pub use kinds::{Kind, Kinds};
pub use registries::Registries;

/// A compiled graph whose nodes are this module's [`Node`]s: what the
/// executor runs.
pub type Graph = CompiledGraph<Arc<dyn Node>>;

/// A directory of compiled graphs.
pub type GraphCatalog = Catalog<Arc<dyn Node>>;

/// What a kind's `build` sees.
pub type BuildCx<'a> = crate::graph::BuildCx<'a, Arc<dyn Node>>;

/// A compiled node's behaviour.
pub trait Node: Send + Sync + fmt::Debug {
    /// Runs the node once against `cx.state`; returns its writes.
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>>;

    /// How the node ends when its last attempt failed, instead of failing
    /// the run (its `on_error`, see `bounds`); `None` fails the run.
    fn recover<'a>(
        &'a self,
        _cx: NodeContext<'a>,
        _failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async { None })
    }
}

/// Why a node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A model call failed.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// A prompt failed to render.
    #[error("prompt `{prompt}` failed to render: {message}")]
    Prompt {
        /// The template.
        prompt: String,
        /// Why.
        message: String,
    },
    /// An expression failed.
    #[error(transparent)]
    Expr(#[from] crate::graph::expr::ExprError),
    /// The attempt exceeded the node's timeout.
    #[error("node timed out after {0:?}")]
    Timeout(Duration),
    /// A subgraph run failed.
    #[error("subgraph `{graph}` failed: {message}")]
    Subgraph {
        /// The subgraph.
        graph: String,
        /// Its error.
        message: String,
    },
    /// The model's structured answer stayed invalid after the retries.
    #[error("the model's answer did not match the schema after {attempts} attempts: {message}")]
    Structured {
        /// Model calls made.
        attempts: u32,
        /// The last problem.
        message: String,
    },
    /// An HTTP call of an `http` node failed.
    #[error("HTTP call to {url} failed: {message}")]
    Http {
        /// The endpoint.
        url: String,
        /// Why.
        message: String,
        /// Whether repeating it may succeed (timeouts, 5xx, 429).
        transient: bool,
    },
    /// The node's own failure.
    #[error("{0}")]
    Failed(String),
    /// A tool the node calls itself (kind `tool`) failed.
    #[error("tool `{tool}` failed: {error}")]
    Tool {
        /// The tool.
        tool: String,
        /// Its structured failure (boxed: errors stay small to move).
        error: Box<ToolError>,
    },
    /// The node waits for a person: not a failure — the run pauses at
    /// these interrupts and the node runs again once they are answered
    /// (what it did before the pause is served from the log, not repeated).
    #[error("waiting for {} answer(s) from a person", .0.len())]
    Interrupted(Vec<crate::events::Interrupt>),
}

impl NodeError {
    /// Whether a retry may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            NodeError::Llm(e) => e.is_transient(),
            NodeError::Timeout(_) => true,
            NodeError::Http { transient, .. } => *transient,
            NodeError::Tool { error, .. } => tool::is_transient(error),
            NodeError::Prompt { .. }
            | NodeError::Expr(_)
            | NodeError::Subgraph { .. }
            | NodeError::Structured { .. }
            | NodeError::Failed(_)
            | NodeError::Interrupted(_) => false,
        }
    }
}
