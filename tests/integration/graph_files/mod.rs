//! Graph files: what a graph file may say, what is refused, and how the executor runs what it says.

mod bound_args;
mod conversation;
mod executor;
mod fanout;
mod langgraph_examples;
mod offline_routing;
mod python_tools;
mod rejected_graphs;
mod state_parity;
mod tool_check;
mod tutorial;
mod validation;
