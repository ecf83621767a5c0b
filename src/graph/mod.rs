//! Graph files: spec → validate → compile.
//!
//! [`load`] parses a file into [`spec`] types with source locations (node
//! settings as located [`value::SpValue`]s); [`compile()`] resolves and checks
//! the state declaration, every name, expression and structural rule,
//! returning all problems at once as [`Diagnostic`]s, or a [`CompiledGraph`]
//! — the only form the executor ever sees. Node kinds build through
//! [`BuildCx`] and are supplied by the caller ([`NodeKinds`]), so this module
//! never depends on them. [`Catalog`] does this for a whole directory
//! (subgraphs first), reading each file through `source` (regular files
//! only, size-capped), [`mermaid`] draws a compiled graph and [`file_schema`]
//! describes the file format as JSON Schema.

mod build;
mod bundle;
pub(crate) mod catalog;
mod compile;
mod compiled;
pub mod diagnostic;
mod edges;
pub mod expr;
pub mod file_schema;
pub mod kinds;
pub mod load;
pub mod loc;
pub mod mermaid;
pub mod prompts;
mod rules;
mod settings;
pub(crate) mod source;
pub mod spec;
mod state_decl;
pub(crate) mod typecheck;
pub mod value;

pub use build::{BuildCx, PromptRef, Reported};
pub use bundle::Bundle;
pub use catalog::{Catalog, CatalogEnv};
pub use compile::{CompileEnv, Compiled, DEFAULT_RECURSION_LIMIT, compile};
pub use compiled::{
    ChatIo, CompiledGraph, CompiledNode, EdgeKind, Join, NodeIdx, RetryPolicy, Route, Selector,
    Slot, Target, Topology, Transition,
};
pub use diagnostic::{Diagnostic, Severity};
pub use kinds::{KindInfo, NodeKinds, SettingDoc};
