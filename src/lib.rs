//! stategraph
#![allow(missing_docs)]
pub mod engine;
pub mod events;
pub mod graph;
pub mod llm;
pub mod nodes;
pub mod otlp;
pub mod replay;
pub mod runs;
pub mod runtime;
pub mod server;
pub mod sse;
pub mod state;
pub mod telemetry;
pub mod tools;
pub mod units;
#[doc(hidden)]
pub mod __private {
    pub use minijinja;
    pub use serde_json;
}
pub mod cli;
pub mod config;
pub mod store;
