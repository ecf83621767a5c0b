//! # stategraph
//!
//! An explicit state-machine graph runtime for LLM applications: a typed
//! state flows through nodes wired as a graph with conditional edges; every
//! node execution emits events; the events stream to an AI SDK front end and
//! are stored, so every run can be replayed.
//!
//! ## Layout, in data-flow order
//!
//! Graph files become compiled graphs, which the executor runs; its events
//! go to the SSE bridge and to the store; replay reads them back; the run
//! lifecycle and the server sit on top. Dependencies point one way, down
//! this list (each module imports only modules above it):
//!
//! | module | what it holds |
//! |---|---|
//! | [`state`](mod@state) (public) | the state model: declared and Rust states, field types, reducers, patches |
//! | `events` | the event enum and the other persisted contracts (step batches, run status) |
//! | `units` | durations and byte sizes as files write them |
//! | [`memory`] (public) | handing free memory back to the OS when the process goes idle |
//! | `llm` | the `ChatModel` trait, the OpenAI-compatible and Anthropic clients, provider profiles and family rules, offline and scripted models |
//! | `tools` | the `Tool` trait, the registry, built-in tools, MCP servers |
//! | `graph` | graph files: spec → validate → compile; expressions; the file format's JSON Schema |
//! | `nodes` | node kinds (one file each) and what a running node may call |
//! | `runtime` | the executor: supersteps, routing, fan-out, retries, interrupts, checkpoints |
//! | `engine` | the embedding API: registries, served graphs, models — run a graph |
//! | `sse` | events → AI SDK UI message stream chunks (a pure function) |
//! | `store` | chats, runs, the event log, checkpoints: memory, SQLite, PostgreSQL |
//! | `replay` | re-stream, re-execute from the recording, state at a step, fork points |
//! | `config` | the server's configuration file and environment |
//! | `runs` | the run lifecycle: chat turns, forks, pauses for a person and their resumes, recovery, live streams, checkpoints into the store through outages |
//! | `testing` | graph tests: test files, scripted replies and stubs, expectations, reports |
//! | `telemetry`, `otlp` | logs and traces (with the `server` feature) |
//! | `server` | the HTTP API and the studio (with the `server` feature) |
//! | `cli` (public) | what the `stategraph` binary's commands do (with the `cli` feature) |
//!
//! ```text
//! graphs/*.yaml ──load──▶ graph::spec ──compile──▶ nodes::Graph ──runtime::run──▶ events ─┬─▶ sse ──▶ client
//!                                                                                         └─▶ store ──▶ replay
//! ```
//!
//! ## The API
//!
//! The modules are private except three, and the API is what this root
//! re-exports plus those three (the list, with the reasons, is
//! docs/public-api.md): build an [`Engine`] (registering [`Kind`]s,
//! [`State`] types, reducers and [`Tool`]s your graph files use), then run a
//! graph, or serve it with the `server` feature. A node kind is a type
//! implementing [`Node`] plus a [`Kind`] entry that builds it from its
//! settings ([`BuildCx`], [`SettingDoc`], [`schema`], [`Surface`]). Model
//! calls are recorded into a [`Store`] by a [`StoreRecorder`] set as
//! [`Services::calls`], with your own [`Redact`] rules.
//!
//! - [`state`](mod@state) is public because a Rust state type is written
//!   against it: the [`state!`] macro expands to its paths.
//! - [`memory`] is public because a binary with its own allocator installs
//!   the release hooks (as `stategraph` does with mimalloc's).
//! - `cli` (with the `cli` feature) is public because the `stategraph`
//!   binary is built from it, and so can an application's own binary with
//!   its node kinds and tools (`examples/custom_kind`, `examples/approval`).
//!
//! ## Features
//!
//! `default-features = false` gives the engine alone — graph files, state,
//! expressions, the executor, models, the built-in tools, the memory store,
//! replay and the run lifecycle — with no HTTP server, SQL driver or MCP
//! client. `server`, `sqlite`, `postgres` and `mcp` add those; `cli` (the
//! default) is all of them plus the `stategraph` binary.

#![doc(html_no_source)]

pub mod state;

mod events;

mod units;

pub mod memory;

mod llm;

mod tools;

mod graph;

mod nodes;

mod runtime;

mod engine;

mod sse;

mod store;

mod replay;

mod config;

#[cfg(feature = "server")]
mod runs;

#[cfg(feature = "server")]
mod testing;

#[cfg(feature = "server")]
mod otlp;
#[cfg(feature = "server")]
mod telemetry;

#[cfg(feature = "server")]
mod server;

#[cfg(feature = "cli")]
pub mod cli;

/// What tests and benches use beyond the API (generated; not part of it).
#[doc(hidden)]
pub mod internals;

#[doc(hidden)]
pub mod __private {
    pub use minijinja;
    pub use serde_json;
}

pub use engine::{Engine, EngineBuilder, EngineError};
pub use events::{Event, EventKind};
pub use graph::kinds::schema;
pub use graph::spec::Surface;
pub use graph::{Bundle, Diagnostic, SettingDoc};
pub use llm::{ChatModel, Models, Redact};
pub use nodes::{BuildCx, Graph, Kind, Kinds, Node, NodeContext, NodeError, Registries, Services};
#[cfg(feature = "server")]
pub use runs::calls::StoreRecorder;
pub use runtime::{RunError, RunOptions, RunOutcome};
pub use state::{DynState, FieldId, Patch, Reducers, State, StateType, StateTypes, TypeSpec};
pub use store::{Store, StoreConfig, open as open_store};
pub use tools::{Tool, ToolError, ToolPolicy, ToolRegistry, ToolSpec};
