//! Graph files: spec → validate → compile.
//!
//! [`load`] parses a file into [`spec`] types with source locations;
//! [`compile()`] resolves and checks every name and structural rule, returning
//! all problems at once as [`Diagnostic`]s, or a [`CompiledGraph`] — the only
//! form the executor ever sees. [`catalog`] does this for a whole directory
//! (subgraphs first) and [`mermaid`] draws a compiled graph.

pub mod catalog;
mod compile;
mod compiled;
pub mod diagnostic;
pub mod embedded;
pub mod load;
pub mod loc;
pub mod mermaid;
pub mod prompts;
mod rules;
mod settings;
pub mod spec;

pub use catalog::Catalog;
pub use compile::{CompileEnv, DEFAULT_RECURSION_LIMIT, compile};
pub use compiled::{
    CompiledGraph, CompiledNode, EdgeKind, Join, NodeIdx, RetryPolicy, Route, Slot, Target,
    Topology, Transition,
};
pub use diagnostic::{Diagnostic, Severity};
