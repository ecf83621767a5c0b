//! Integration tests: one binary, one module per area.

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
mod broken_streams;
mod calls;
mod card_shapes;
mod chat_graph;
mod conversation;
mod crash;
mod data360;
mod data_tools;
mod degrade;
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
mod studio_judge;
mod support;
mod tool_check;
mod tutorial;
mod validation;
