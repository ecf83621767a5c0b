//! Building the server from its configuration.

use std::sync::Arc;

use super::AppState;
use crate::config::Config;
use crate::engine::Engine;
use crate::nodes::Registries;
use crate::store::Store;
use crate::tools::mcp::{McpManager, ServerState};

/// Everything `serve` sets up before listening, or why it could not;
/// graph files are checked against `registries` (the built-in kinds and
/// tools, plus whatever an embedding application registered).
pub async fn build_state(config: Config, registries: Registries) -> Result<Arc<AppState>, String> {
    config.tools.apply(&registries.tools)?;
    let state_tools = Arc::clone(&registries.tools);
    // Before the graphs compile: it declares the MCP partitions they name.
    let mcp = (!config.tools.mcp.servers.is_empty())
        .then(|| McpManager::start(&config.tools.mcp, Arc::clone(&registries.tools)));
    let models = config
        .llm
        .build_models()
        .map_err(|e| format!("model configuration: {e}"))?;
    if models.any_offline() {
        tracing::warn!(
            "no LLM endpoint configured: answering with the built-in OFFLINE model (deterministic, not a real LLM); \
             set OPENAI_API_KEY / OPENAI_BASE_URL or [llm] in stategraph.toml"
        );
    }
    let store: Arc<dyn Store> = open_store(&config).await?;
    tracing::info!(backend = store.backend(), "store ready");
    let (graphs_dir, prompts_dir) = (config.paths.graphs.clone(), config.paths.prompts.clone());
    let built_in = config.paths.built_in;
    let engine = tokio::task::spawn_blocking(move || {
        Engine::builder()
            .registries(registries)
            .graphs_dir(graphs_dir)
            .prompts_dir(prompts_dir)
            .built_in(built_in)
            .models(models)
            .allow_errors()
            .build()
    })
    .await
    .map_err(|e| format!("loading graphs: {e}"))?
    .map_err(|e| e.to_string())?;
    let graphs = &engine.graphs;
    let cat = graphs.catalog();
    for d in &cat.diagnostics {
        if d.is_error() {
            tracing::error!(diagnostic = %d, "graph file rejected");
        } else {
            tracing::warn!(diagnostic = %d, "graph file warning");
        }
    }
    if graphs.embedded {
        tracing::info!(dir = %config.paths.graphs.display(), "no graph directory; serving the graphs built into the binary");
    }
    tracing::info!(graphs = ?cat.graphs.keys().collect::<Vec<_>>(), "graphs loaded");
    if let Some(m) = &mcp {
        // Give servers a moment so the first chats see their tools; one
        // that is slow or down keeps connecting in the background.
        if !m.wait_settled(config.tools.mcp.startup_wait).await {
            for s in m.status().iter().filter(|s| s.state != ServerState::Ready) {
                tracing::warn!(server = %s.name, error = ?s.last_error, "MCP server not ready yet; retrying in the background");
            }
        }
        // The lock `check` used must still say what the servers list.
        let ready: Vec<(String, String)> = m
            .status()
            .into_iter()
            .filter(|s| s.state == ServerState::Ready)
            .map(|s| (s.name, s.partition))
            .collect();
        crate::tools::lock::warn_if_stale(&state_tools, &config.paths.graphs, &ready);
    }
    Ok(AppState::with_mcp(config, store, &engine, mcp))
}

async fn open_store(config: &Config) -> Result<Arc<dyn Store>, String> {
    crate::store::config::open(&config.store)
        .await
        .map_err(|e| format!("store: {e}"))
}
