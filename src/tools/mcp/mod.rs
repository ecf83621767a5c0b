//! The MCP client: tools from Model Context Protocol servers, as registry
//! partitions.
//!
//! Each configured server ([`McpConfig`]) becomes one partition of the
//! [`ToolRegistry`](super::ToolRegistry). The partition is declared the moment the manager
//! starts, so graph files that name it validate while the server is still
//! starting — or down. A background task per server (see `supervisor`)
//! starts the child process (stdio) or connects (streamable HTTP), lists the
//! tools and registers them, with the server's own input schemas, as tools
//! whose calls go to the server. Servers fail in ordinary ways (a command
//! missing, a process dying, a host unreachable); none of that may take the
//! runtime down, so a failing server is reported ([`ServerStatus`], a
//! `warn` log), its partition is emptied, calls to its tools fail at once
//! with a structured `execution_error`, and it is retried with backoff.
//!
//! Layout: `config` (the `[tools.mcp]` section) → `supervisor` (connection
//! lifecycle) → `connect` (stdio child or HTTP endpoint, handshake) →
//! `remote` (the [`crate::tools::Tool`] that forwards a call, and the
//! mapping of MCP results and errors) → `status` (what is reported).

mod config;
#[cfg(feature = "mcp")]
mod connect;
#[cfg(feature = "mcp")]
mod manager;
#[cfg(feature = "mcp")]
mod remote;
mod status;
#[cfg(feature = "mcp")]
mod supervisor;

pub use config::McpConfig;
#[cfg(feature = "mcp")]
pub use manager::McpManager;
#[cfg(any(feature = "mcp", feature = "server"))]
pub(crate) use status::{McpHealth, Missing};
pub use status::{ServerState, ServerStatus};
