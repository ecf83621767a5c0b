//! What commands share: configuration, graphs, models, the store, MCP.

use std::future::Future;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::config::Config;
use crate::engine::Graphs;
use crate::nodes::{Graph, Registries, Services};
use crate::runs::{NoObserver, Runs, RunsConfig};
use crate::store::Store;
use crate::tools::mcp::{McpManager, ServerState};

/// The configuration and registries a command works with.
pub(super) struct Ctx {
    pub(super) config: Config,
    pub(super) registries: Registries,
}

impl Ctx {
    /// Registers the configured tools and declares the MCP partitions (known
    /// without connecting), so graph files naming them validate.
    pub(super) fn new(config: Config, registries: Registries) -> anyhow::Result<Self> {
        config
            .tools
            .apply(&registries.tools)
            .map_err(anyhow::Error::msg)?;
        config.tools.mcp.declare(&registries.tools);
        Ok(Self { config, registries })
    }

    /// The graphs: the graph directory, or the built-in ones without it.
    pub(super) fn graphs(&self) -> Graphs {
        Graphs::load_or(
            &self.config.paths.graphs,
            &self.config.paths.prompts,
            self.config.paths.built_in,
            self.registries.clone(),
        )
    }

    /// A valid graph by id; its file's diagnostics go to stderr otherwise.
    pub(super) fn graph(&self, graphs: &Graphs, id: &str) -> anyhow::Result<Arc<Graph>> {
        if let Some(g) = graphs.get(id) {
            return Ok(g);
        }
        let catalog = graphs.catalog();
        for d in &catalog.diagnostics {
            eprintln!("{d}");
        }
        let known: Vec<&str> = catalog.graphs.keys().map(String::as_str).collect();
        bail!("no valid graph `{id}` (valid graphs: {})", known.join(", "))
    }

    /// Models and tools for running graphs.
    pub(super) fn services(&self) -> anyhow::Result<Services> {
        let models = self
            .config
            .llm
            .build_models()
            .context("model configuration")?;
        if models.any_offline() {
            eprintln!("note: no LLM endpoint configured; using the built-in offline model");
        }
        Ok(Services::new(models, Arc::clone(&self.registries.tools)))
    }

    /// The configured store.
    pub(super) async fn store(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(crate::store::config::open(&self.config.store).await?)
    }

    /// A run lifecycle for this process: it leases (and renews) the runs it
    /// starts, like a server, so a server sharing the database never takes
    /// them for orphans — but it claims no one else's.
    pub(super) fn runs(
        &self,
        store: Arc<dyn Store>,
        services: Services,
        graphs: Graphs,
    ) -> Arc<Runs> {
        let mut config = RunsConfig::from(&self.config.server);
        config.claim_orphans = false;
        let instance = format!(
            "cli-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        );
        Runs::new(
            store,
            Arc::new(services),
            Arc::new(graphs),
            instance,
            config,
            Arc::new(NoObserver),
        )
    }

    /// Runs `work` with the configured MCP servers connected (one still down
    /// after `[tools.mcp] startup_wait` is warned about), and closes them afterwards.
    pub(super) async fn with_mcp<T>(&self, work: impl Future<Output = T>) -> T {
        if self.config.tools.mcp.servers.is_empty() {
            return work.await;
        }
        let mcp = McpManager::start(&self.config.tools.mcp, Arc::clone(&self.registries.tools));
        if !mcp.wait_settled(self.config.tools.mcp.startup_wait).await {
            for s in mcp
                .status()
                .iter()
                .filter(|s| s.state != ServerState::Ready)
            {
                let why = s.last_error.as_deref().unwrap_or("no answer yet");
                eprintln!("warning: MCP server `{}` is not ready: {why}", s.name);
            }
        }
        let out = work.await;
        mcp.shutdown().await;
        out
    }
}

/// A multi-threaded async runtime for one command. Its workers hand their
/// free memory back as they park after a load ([`crate::memory`]).
pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::memory::idle_point)
        .build()
        .context("starting the async runtime")
}

/// `FIELD=JSON` pairs from `--set` arguments.
pub(super) fn field_values(args: &[String]) -> anyhow::Result<Vec<(String, Value)>> {
    args.iter()
        .map(|s| {
            let (field, value) = s
                .split_once('=')
                .ok_or_else(|| anyhow!("--set {s}: expected FIELD=VALUE"))?;
            // JSON, or else the text itself (`--set intent=billing`).
            let value =
                serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
            Ok((field.to_owned(), value))
        })
        .collect()
}
