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
pub(crate) mod diagnostic;
mod edges;
pub(crate) mod expr;
#[cfg(feature = "server")]
pub(crate) mod file_schema;
pub(crate) mod kinds;
pub(crate) mod load;
pub(crate) mod loc;
#[cfg(feature = "server")]
pub(crate) mod mermaid;
pub(crate) mod prompts;
mod rules;
mod settings;
pub(crate) mod source;
pub(crate) mod spec;
mod state_decl;
pub(crate) mod typecheck;
pub(crate) mod value;

pub(crate) use build::{BuildCx, PromptRef, Reported};
pub use bundle::Bundle;
pub(crate) use catalog::{Catalog, CatalogEnv};
pub use compile::{CompileEnv, compile};
#[cfg(feature = "server")]
pub(crate) use compiled::ChatIo;
pub(crate) use compiled::{CompiledGraph, CompiledNode, NodeIdx, Target, Transition};
pub use diagnostic::Diagnostic;
pub use kinds::SettingDoc;
pub(crate) use kinds::{KindInfo, NodeKinds};
