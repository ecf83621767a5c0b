//! The shipped apps end to end: the chat graph, Data360 and its contract, research, the assistant and the example apps.

mod apps;
mod assistant;
mod chat_graph;
mod data360;
mod data360_contract;
mod research;
