//! Models and tools: the providers' wire formats, degraded models, MCP and data tools, and the model calls stored for reading.

mod calls;
mod data_tools;
mod degrade;
mod h2c;
mod mcp;
mod openai_client;
mod providers;
