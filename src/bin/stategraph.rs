//! The `stategraph` command: parses arguments and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use clap::{Parser, Subcommand, ValueEnum};
use stategraph::cli::{self, GraphFormat, RunArgs};
use stategraph::config::Config;
use stategraph::nodes::{GraphCatalog as Catalog, Registries};
use stategraph::runtime::{RunOptions, Services};
use stategraph::store::Store;
use stategraph::tools::mcp::{McpManager, ServerState};
use stategraph::units::Dur;
use stategraph::{replay, server};

/// mimalloc: the runtime allocates many small, short-lived objects (events,
/// tokens, patches); glibc malloc spent a third of a run's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "stategraph",
    version,
    about = "Explicit state-machine graph runtime for LLM applications"
)]
struct Cli {
    /// Config file (default: stategraph.toml if present).
    #[arg(long, global = true, env = "STATEGRAPH_CONFIG")]
    config: Option<PathBuf>,
    /// Directory of graph files (overrides the config).
    #[arg(long, global = true)]
    graphs: Option<PathBuf>,
    /// Directory of prompt templates (overrides the config).
    #[arg(long, global = true)]
    prompts: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the chat API (POST /api/chat), the run and graph APIs.
    Serve {
        /// Listen address (overrides the config).
        #[arg(long)]
        bind: Option<std::net::SocketAddr>,
    },
    /// Validate graph files; exit 1 on any error.
    Check {
        /// Graph files or directories (default: the graph directory).
        paths: Vec<PathBuf>,
    },
    /// Draw a graph.
    Graph {
        /// Graph id.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "mermaid")]
        format: Format,
    },
    /// Run a graph once and stream its events (against the configured model).
    Run {
        /// Graph id.
        graph: String,
        /// The user's message.
        message: String,
        /// Force an intent (chat graph).
        #[arg(long)]
        intent: Option<String>,
        /// Print events as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Show a stored run: its timeline, the SSE bytes its client received,
    /// its events, or re-execute it from the recording.
    Replay {
        /// Run id.
        run: uuid::Uuid,
        /// Print the exact SSE bytes the client received.
        #[arg(long, conflicts_with_all = ["json", "reexecute"])]
        sse: bool,
        /// Print the events as JSON lines.
        #[arg(long, conflicts_with = "reexecute")]
        json: bool,
        /// Run the graph again with every model and tool result served from
        /// the recording; report the first event that differs.
        #[arg(long)]
        reexecute: bool,
    },
    /// Start a new run from a checkpoint of a stored run, with edited state.
    Fork {
        /// Run id.
        run: uuid::Uuid,
        /// The step whose checkpoint to start from.
        #[arg(long)]
        at: u32,
        /// `FIELD=JSON` replacements (repeatable), e.g. `--set intent='"DIRECT"'`.
        #[arg(long = "set")]
        set: Vec<String>,
    },
    /// Apply the store's schema migrations.
    Migrate,
    /// Delete old runs (with their events and checkpoints).
    Prune {
        /// Age, e.g. 30d, 12h.
        #[arg(long)]
        older_than: String,
        /// Also delete chats not updated since then.
        #[arg(long)]
        chats: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Mermaid,
    Dot,
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let mut config = Config::load(cli.config.as_deref())?;
    if let Some(g) = &cli.graphs {
        config.paths.graphs = g.clone();
    }
    if let Some(p) = &cli.prompts {
        config.paths.prompts = p.clone();
    }
    let registries = Registries::default();
    config
        .tools
        .apply(&registries.tools)
        .map_err(anyhow::Error::msg)?;
    // MCP partitions are known without connecting, so graph files naming
    // them validate; commands that execute graphs connect (`with_mcp`).
    config.tools.mcp.declare(&registries.tools);
    match cli.command {
        Command::Serve { bind } => serve(config, bind),
        Command::Check { paths } => {
            let paths = if paths.is_empty() {
                vec![config.paths.graphs.clone()]
            } else {
                paths
            };
            let ok = cli::check(
                &paths,
                &config.paths.prompts,
                &registries,
                &mut std::io::stdout(),
            )?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Graph { name, format } => {
            let catalog = registries.load(&config.paths.graphs, &config.paths.prompts);
            let g = graph(&catalog, &name)?;
            let format = match format {
                Format::Mermaid => GraphFormat::Mermaid,
                Format::Dot => GraphFormat::Dot,
            };
            print!("{}", cli::graph(&g, format));
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            graph: id,
            message,
            intent,
            json,
        } => {
            let catalog = registries.load(&config.paths.graphs, &config.paths.prompts);
            let g = graph(&catalog, &id)?;
            let services = Arc::new(services(&config, &registries)?);
            let args = RunArgs {
                message,
                forced_intent: intent,
                json,
            };
            let ok = runtime()?.block_on(with_mcp(&config, &registries, async {
                cli::run(g, services, args, &mut std::io::stdout()).await
            }))?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Replay {
            run,
            sse,
            json,
            reexecute,
        } => runtime()?.block_on(async move {
            let store = open_store(&config).await?;
            let (record, events) = replay::load(&*store, run).await?;
            if sse {
                print!("{}", replay::sse(&events)?);
            } else if json {
                for e in &events {
                    println!("{}", serde_json::to_string(e)?);
                }
            } else if reexecute {
                let catalog = registries.load(&config.paths.graphs, &config.paths.prompts);
                let g = graph(&catalog, &record.graph)?;
                let services = services(&config, &registries)?;
                let r = replay::reexecute(g, services, &events).await?;
                println!("{}", r.report());
                return Ok(if r.divergence.is_none() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            } else {
                print!("{}", replay::timeline(&record, &events));
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::Fork { run, at, set } => {
            runtime()?.block_on(with_mcp(&config, &registries, async {
                let store = open_store(&config).await?;
                let parent = store
                    .get_run(run)
                    .await?
                    .ok_or_else(|| anyhow!("no run {run}"))?;
                let catalog = registries.load(&config.paths.graphs, &config.paths.prompts);
                let g = graph(&catalog, &parent.graph)?;
                let mut edits = Vec::new();
                for s in &set {
                    let (field, value) = s
                        .split_once('=')
                        .ok_or_else(|| anyhow!("--set {s}: expected FIELD=JSON"))?;
                    let value = serde_json::from_str(value)
                        .with_context(|| format!("--set {field}: the value must be JSON"))?;
                    edits.push((field.to_owned(), value));
                }
                let from = replay::fork_point(&*store, &g, run, at, &edits).await?;
                let id = uuid::Uuid::now_v7();
                // Leased like a server's run (and renewed while it runs), so a
                // server sharing the database does not take it for an orphan.
                let owner = format!("cli-fork-{}-{id}", std::process::id());
                let lease = config.server.lease.0;
                let until = move || stategraph::events::now_micros() + lease.as_micros() as u64;
                store
                    .create_leased_run(
                        stategraph::store::RunRecord {
                            id,
                            chat_id: None,
                            user_id: parent.user_id.clone(),
                            graph: g.id.to_string(),
                            graph_version: g.version.clone(),
                            status: stategraph::runtime::RunStatus::Running,
                            input: from.state.to_json(),
                            created_at: stategraph::events::now_micros(),
                            finished_at: None,
                            error: None,
                            usage: Default::default(),
                            parent: Some(replay::origin(run, at)),
                            request_id: None,
                            message_id: None,
                            last_seq: 0,
                            last_step: at,
                        },
                        &owner,
                        until(),
                    )
                    .await?;
                let renew = tokio::spawn({
                    let (store, owner) = (Arc::clone(&store), owner.clone());
                    async move {
                        loop {
                            tokio::time::sleep(lease / 3).await;
                            if let Err(e) = store.renew_leases(&owner, until()).await {
                                tracing::warn!(error = %e, "could not renew the fork's lease");
                            }
                        }
                    }
                });
                let opts = RunOptions {
                    run_id: id,
                    checkpointer: Some(Arc::new(stategraph::store::LogCheckpointer::new(
                        Arc::clone(&store),
                    ))),
                    forked_from: Some(replay::origin(run, at)),
                    ..Default::default()
                };
                let services = Arc::new(services(&config, &registries)?);
                let result = stategraph::runtime::resume(g, services, from, opts).await;
                renew.abort();
                let (status, error, usage) = match &result {
                    Ok(o) => (stategraph::runtime::RunStatus::Finished, None, o.usage),
                    Err(e) => (
                        stategraph::runtime::RunStatus::Failed,
                        Some(e.info()),
                        Default::default(),
                    ),
                };
                store.finish_run(id, status, error, usage).await?;
                let (record, events) = replay::load(&*store, id).await?;
                print!("{}", replay::timeline(&record, &events));
                println!("fork {id} of run {run} at step {at}");
                Ok(if result.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }))
        }
        Command::Migrate => runtime()?.block_on(async move {
            let report = stategraph::store::config::migrate(&config.store).await?;
            println!(
                "schema version {} → {} (applied {:?})",
                report.from, report.to, report.applied
            );
            Ok(ExitCode::SUCCESS)
        }),
        Command::Prune { older_than, chats } => runtime()?.block_on(async move {
            let age = Dur::parse(&older_than)
                .ok_or_else(|| anyhow!("--older-than {older_than}: write e.g. 30d or 12h"))?;
            let before = stategraph::events::now_micros().saturating_sub(age.as_micros() as u64);
            let store = open_store(&config).await?;
            let report = store.prune(before, chats).await?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(ExitCode::SUCCESS)
        }),
    }
}

/// Runs `work` with the configured MCP servers connected (given up to
/// ten seconds to come up; one still down makes its tools fail as data),
/// and closes them afterwards.
async fn with_mcp<T>(
    config: &Config,
    registries: &Registries,
    work: impl std::future::Future<Output = T>,
) -> T {
    if config.tools.mcp.servers.is_empty() {
        return work.await;
    }
    let mcp = McpManager::start(&config.tools.mcp, Arc::clone(&registries.tools));
    if !mcp.wait_settled(std::time::Duration::from_secs(10)).await {
        for s in mcp
            .status()
            .iter()
            .filter(|s| s.state != ServerState::Ready)
        {
            eprintln!(
                "warning: MCP server `{}` is not ready{}",
                s.name,
                s.last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            );
        }
    }
    let out = work.await;
    mcp.shutdown().await;
    out
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Runtime::new().context("starting the async runtime")
}

async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    Ok(stategraph::store::config::open(&config.store).await?)
}

fn graph(catalog: &Catalog, name: &str) -> anyhow::Result<Arc<stategraph::nodes::Graph>> {
    if let Some(g) = catalog.get(name) {
        return Ok(Arc::clone(g));
    }
    for d in &catalog.diagnostics {
        eprintln!("{d}");
    }
    let known: Vec<&str> = catalog.graphs.keys().map(String::as_str).collect();
    bail!(
        "no valid graph `{name}` (valid graphs: {})",
        known.join(", ")
    )
}

fn services(config: &Config, registries: &Registries) -> anyhow::Result<Services> {
    let models = config.llm.build_models().context("model configuration")?;
    if models.any_offline() {
        eprintln!("note: no LLM endpoint configured; using the built-in offline model");
    }
    Ok(Services::new(models, Arc::clone(&registries.tools)))
}

/// `stategraph serve`.
fn serve(mut config: Config, bind: Option<std::net::SocketAddr>) -> anyhow::Result<ExitCode> {
    if let Some(b) = bind {
        config.server.bind = b;
    }
    let _telemetry =
        stategraph::telemetry::init(&config.telemetry).map_err(|e| anyhow!("telemetry: {e}"))?;
    runtime()?.block_on(async move {
        let bind = config.server.bind;
        let state = server::build_state(config, Registries::default()).await.map_err(anyhow::Error::msg)?;
        let listener = listen(bind).map_err(|e| anyhow!("cannot listen on {bind}: {e}"))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "listening");
        println!("stategraph is serving on http://{addr}");
        println!("  point a useChat front end (DefaultChatTransport) at http://{addr}/api/chat");
        println!("  try it: curl -N http://{addr}/api/chat -H 'content-type: application/json' \\");
        println!(
            "            -d '{{\"id\":\"demo\",\"messages\":[{{\"id\":\"m1\",\"role\":\"user\",\"parts\":[{{\"type\":\"text\",\"text\":\"hello\"}}]}}]}}'"
        );
        server::serve(state, listener, shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// A listener with a deep accept backlog: many clients connect at once.
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
