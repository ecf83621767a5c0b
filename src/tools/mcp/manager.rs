//! The MCP servers of one runtime, each kept connected by its own task.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::super::{ToolError, ToolRegistry};
use super::remote;
use super::supervisor::{self, Shared};
use super::{McpConfig, McpHealth, Missing, ServerState, ServerStatus};

/// The MCP servers of one runtime, each kept connected by its own task.
///
/// Dropping the manager stops the tasks (child processes are then killed
/// when their handles drop); [`McpManager::shutdown`] does the same and
/// waits for every server to close cleanly.
pub struct McpManager {
    servers: Vec<Arc<Shared>>,
    registry: Arc<ToolRegistry>,
    stop: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("servers", &self.status())
            .finish()
    }
}

impl McpManager {
    /// Declares every server's partition in `registry` and starts
    /// connecting to each server in the background.
    ///
    /// Returns at once; call it before graph files are compiled (to only
    /// validate graph files, without starting servers, use
    /// [`McpConfig::declare`]).
    ///
    /// # Panics
    /// Outside a Tokio runtime (the servers' tasks are spawned on it).
    pub fn start(config: &McpConfig, registry: Arc<ToolRegistry>) -> Self {
        let stop = CancellationToken::new();
        let mut servers = Vec::new();
        let mut tasks = Vec::new();
        for (name, cfg) in &config.servers {
            registry.declare_partition(&cfg.partition);
            let shared = Arc::new(Shared::new(name, cfg.clone()));
            tasks.push(tokio::spawn(supervisor::run(
                Arc::clone(&shared),
                Arc::clone(&registry),
                stop.child_token(),
            )));
            servers.push(shared);
        }
        Self {
            servers,
            registry,
            stop,
            tasks: Mutex::new(tasks),
        }
    }

    /// Every server's status, in config order (by name).
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// One server's status.
    pub fn server(&self, name: &str) -> Option<ServerStatus> {
        self.find(name).map(|s| s.status())
    }

    fn find(&self, name: &str) -> Option<&Arc<Shared>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// Lists a server's tools now instead of at its next refresh; false if
    /// there is no such server.
    pub fn refresh(&self, name: &str) -> bool {
        self.find(name).map(|s| s.refresh_now()).is_some()
    }

    /// Waits until every server is ready or `limit` has passed; true if all
    /// are ready. For startup: give servers a moment before serving.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self
                .servers
                .iter()
                .all(|s| s.status().state == ServerState::Ready)
            {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until no server is still making its first connection (each
    /// is ready or has failed at least once) or `limit` has passed; true if
    /// all are ready. Startup uses it: a server that cannot start should
    /// not hold the others' users up for the whole limit.
    pub async fn wait_settled(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let all = self.status();
            let settled = all
                .iter()
                .all(|s| s.state == ServerState::Ready || s.last_error.is_some());
            if settled || tokio::time::Instant::now() >= deadline {
                return all.iter().all(|s| s.state == ServerState::Ready);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Calls a tool by its name on the server, bypassing the registry (no
    /// allow-list, schema check, cache or time limit): for diagnostics and
    /// tests. Graph nodes go through [`ToolRegistry::call`].
    ///
    /// # Errors
    /// `not_found` if there is no such server or the server does not know
    /// the tool; otherwise the server's failure, as for a registry call.
    pub async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        args: Value,
    ) -> Result<Value, ToolError> {
        let Some(s) = self.find(server) else {
            let names: Vec<&str> = self.servers.iter().map(|s| s.name()).collect();
            return Err(ToolError::NotFound {
                message: format!("no MCP server named `{server}`"),
                details: serde_json::json!({ "available": names }),
            });
        };
        remote::call(s, tool, args).await
    }

    /// Compares what graphs reference (tool and partition names) with what
    /// the registry provides right now.
    pub fn health(&self, referenced: &[String]) -> McpHealth {
        let servers = self.status();
        let mut missing = Vec::new();
        let mut seen = BTreeSet::new();
        for name in referenced {
            if !seen.insert(name.as_str()) {
                continue;
            }
            let provides = !self.registry.expand(std::slice::from_ref(name)).is_empty();
            if provides {
                continue;
            }
            let by_partition = servers.iter().find(|s| &s.partition == name);
            let by_prefix = self
                .servers
                .iter()
                .filter(|s| !s.cfg.prefix.is_empty() && name.starts_with(&s.cfg.prefix))
                .map(|s| s.status())
                .next();
            let (kind, server) = match (by_partition, by_prefix) {
                (Some(s), _) => ("partition", Some(s.clone())),
                (None, Some(s)) => ("tool", Some(s)),
                (None, None) if self.registry.knows(name) => ("partition", None),
                (None, None) => ("tool", None),
            };
            let reason = match &server {
                Some(s) if s.state != ServerState::Ready => match &s.last_error {
                    Some(e) => format!("MCP server `{}` is {}: {e}", s.name, state_word(s.state)),
                    None => format!("MCP server `{}` is {}", s.name, state_word(s.state)),
                },
                Some(s) if kind == "partition" => format!("MCP server `{}` lists no tools", s.name),
                Some(s) => format!("MCP server `{}` does not list this tool", s.name),
                None if kind == "partition" => "the partition has no tools".to_owned(),
                None => "no tool or partition has this name".to_owned(),
            };
            missing.push(Missing {
                name: name.clone(),
                kind,
                server: server.map(|s| s.name),
                reason,
            });
        }
        let servers_down = servers
            .iter()
            .filter(|s| s.state != ServerState::Ready)
            .map(|s| s.name.clone())
            .collect();
        McpHealth {
            ok: missing.is_empty(),
            missing,
            servers_down,
            servers,
        }
    }

    /// Stops every server: child processes get their stdin closed, then
    /// SIGTERM, then SIGKILL; HTTP sessions are closed. Waits at most a
    /// few seconds per server.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for task in tasks {
            // Closing a stdio child takes at most ~6s (rmcp's graceful
            // shutdown); past that the task is abandoned and the child
            // killed when its handle drops.
            if tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .is_err()
            {
                tracing::warn!("an MCP server did not shut down in time");
            }
        }
    }
}

fn state_word(state: ServerState) -> &'static str {
    match state {
        ServerState::Connecting => "starting",
        ServerState::Ready => "ready",
        ServerState::Down => "down",
    }
}

impl Drop for McpManager {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
