//! Integration tests: one binary, one module per area.

mod chat_graph;
mod executor;
mod support;
