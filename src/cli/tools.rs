//! `stategraph tools lock`: starts the configured MCP servers and writes
//! what they list to `graphs/tools.lock.json`, the file `check` reads to
//! know MCP tools (see [`crate::tools::lock`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::setup::Ctx;
use crate::tools::lock::{LOCK_FILE, LockedServer, ToolLock, live};
use crate::tools::mcp::{McpManager, ServerState};

/// Writes the lock file; fails (writing nothing) when a server does not
/// come up within `wait`.
///
/// # Errors
/// No server is configured, one is not ready, or the file cannot be written.
pub(super) async fn lock(
    ctx: &Ctx,
    wait: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let config = &ctx.config.tools.mcp;
    if config.servers.is_empty() {
        bail!(
            "no MCP server is configured ([tools.mcp.servers.NAME] in stategraph.toml): nothing to lock"
        );
    }
    let mcp = McpManager::start(config, Arc::clone(&ctx.registries.tools));
    mcp.wait_settled(wait).await;
    let statuses = mcp.status();
    let down: Vec<String> = statuses
        .iter()
        .filter(|s| s.state != ServerState::Ready)
        .map(|s| {
            let why = s.last_error.as_deref().unwrap_or("no answer yet");
            format!("`{}`: {why}", s.name)
        })
        .collect();
    let servers: BTreeMap<String, LockedServer> = statuses
        .iter()
        .map(|s| {
            let server = LockedServer {
                partition: s.partition.clone(),
                tools: live(&ctx.registries.tools, &s.partition),
            };
            (s.name.clone(), server)
        })
        .collect();
    mcp.shutdown().await;
    if !down.is_empty() {
        bail!(
            "not every MCP server came up within {wait:?}, so {LOCK_FILE} was not written: {}",
            down.join("; ")
        );
    }
    let lock = ToolLock::new(servers);
    let path = ctx.config.paths.graphs.join(LOCK_FILE);
    std::fs::write(&path, lock.to_text()).with_context(|| format!("writing {}", path.display()))?;
    for (name, s) in &lock.servers {
        writeln!(out, "{name} ({}): {} tool(s)", s.partition, s.tools.len())?;
    }
    writeln!(
        out,
        "wrote {} — commit it beside the graphs",
        path.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
