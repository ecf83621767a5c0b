//! What the MCP layer reports: each server's state, and a health snapshot
//! comparing what graphs reference with what servers provide.
//!
//! These are plain serde data so the server's health endpoint and the CLI
//! can print them as they are.

use serde::Serialize;

/// Where a server's connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Starting, connecting or listing its tools for the first time.
    Connecting,
    /// Connected; its tools are in the registry.
    Ready,
    /// Not available (failed to start, died, unreachable); retried with
    /// backoff. Its partition is empty meanwhile.
    Down,
}

/// One server, as last seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    /// Its name in the config.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The partition its tools form.
    pub partition: String,
    /// Connection state.
    pub state: ServerState,
    /// How many of its tools are registered.
    pub tools: usize,
    /// Why it was last down or why its last listing failed.
    pub last_error: Option<String>,
    /// When its tools were last listed (RFC 3339, UTC).
    pub last_refresh: Option<String>,
    /// The child process, for stdio servers while one runs.
    pub pid: Option<u32>,
    /// The server's own name and version, from the handshake.
    pub server_info: Option<String>,
    /// Successful connections so far (more than one: it was restarted).
    pub connects: u32,
}

/// A referenced tool or partition that nothing provides right now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg(any(feature = "mcp", feature = "server"))]
pub struct Missing {
    /// The name as graphs reference it.
    pub name: String,
    /// `partition` or `tool`.
    pub kind: &'static str,
    /// The MCP server expected to provide it, if one is.
    pub server: Option<String>,
    /// Why it is missing.
    pub reason: String,
}

/// Referenced tools against provided tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg(any(feature = "mcp", feature = "server"))]
pub struct McpHealth {
    /// Every referenced name resolves to at least one tool.
    pub ok: bool,
    /// Referenced names that resolve to nothing.
    pub missing: Vec<Missing>,
    /// Servers that are not ready (referenced or not).
    pub servers_down: Vec<String>,
    /// Every server's status.
    pub servers: Vec<ServerStatus>,
}
