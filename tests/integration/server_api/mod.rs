//! The server and its API: the HTTP surface, hostile input, limits, failed turns, memory, the binary and the LangGraph Agent Server API.

mod binary;
mod failed_turns;
mod hostile;
mod langgraph_api;
mod langgraph_send;
mod langgraph_wire;
mod limits;
mod memory;
mod server;
