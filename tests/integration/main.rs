//! Integration tests: one binary, one module per capability, and the
//! fixtures they share in `support` (database, server, scripted models).
//! docs/testing.md ("The repository's own tests") has the map:
//!
//! - graph files: validation, rejected_graphs, state_parity, executor,
//!   fanout, conversation, bound_args, tool_check, offline_routing,
//!   tutorial, langgraph_examples, python_tools
//! - models and tools: openai_client, providers, degrade, mcp, data_tools
//! - the AI SDK stream: sse_stream, sse_ids, broken_streams, shown_stays,
//!   card_shapes, assistant_ui
//! - the server and its API: server, hostile, limits, failed_turns, memory,
//!   binary, langgraph_api, langgraph_wire
//! - the store and surviving failures: store_conformance, durability, crash,
//!   faults
//! - human in the loop: interrupts, hitl_client, hitl_crash
//! - replay and forks: replay, exact_replay, forks
//! - graph tests and eval: graph_tests, graph_recorded, graph_eval,
//!   graph_verdicts
//! - the studio: studio, studio_judge
//! - the shipped apps end to end: chat_graph, data360, research, assistant,
//!   apps

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod apps;
mod assistant;
mod assistant_ui;
mod binary;
mod bound_args;
mod breakpoints;
mod broken_streams;
mod calls;
mod card_shapes;
mod chat_graph;
mod conversation;
mod crash;
mod data360;
mod data360_contract;
mod data_tools;
mod degrade;
mod durability;
mod exact_replay;
mod executor;
mod failed_turns;
mod fanout;
mod faults;
mod forks;
mod graph_eval;
mod graph_recorded;
mod graph_tests;
mod graph_verdicts;
mod hitl_client;
mod hitl_crash;
mod hostile;
mod interrupts;
mod langgraph_api;
mod langgraph_examples;
mod langgraph_wire;
mod limits;
mod mcp;
mod memory;
mod offline_routing;
mod openai_client;
mod providers;
mod python_tools;
mod rejected_graphs;
mod replay;
mod research;
mod server;
mod shown_stays;
mod sse_ids;
mod sse_stream;
mod state_parity;
mod store_conformance;
mod studio;
mod studio_calls;
mod studio_debug;
mod studio_judge;
mod support;
mod tool_check;
mod tutorial;
mod validation;
