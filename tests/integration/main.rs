//! Integration tests: one binary, one module per area.

mod chat_graph;
mod executor;
mod openai_client;
mod support;
mod validation;
