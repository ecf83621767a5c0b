//! The `stategraph` command: parses arguments and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use stategraph::cli::{self, GraphFormat, RunArgs};
use stategraph::graph::catalog::{Catalog, Registries};
use stategraph::llm::Models;
use stategraph::llm::offline::OfflineModel;
use stategraph::config::Config;
use stategraph::runtime::Services;
use stategraph::server;

/// mimalloc: the runtime allocates many small, short-lived objects (events,
/// tokens, patches); glibc malloc spent a third of a run's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "stategraph", version, about = "Explicit state-machine graph runtime for LLM applications")]
struct Cli {
    /// Directory of graph files.
    #[arg(long, global = true, env = "STATEGRAPH_GRAPHS", default_value = "graphs")]
    graphs: PathBuf,
    /// Directory of prompt templates.
    #[arg(long, global = true, env = "STATEGRAPH_PROMPTS", default_value = "prompts")]
    prompts: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the chat API (POST /api/chat) and the graph API.
    Serve {
        /// Config file (default: stategraph.toml if present).
        #[arg(long, env = "STATEGRAPH_CONFIG")]
        config: Option<PathBuf>,
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
    /// Run a graph once and stream its events.
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
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Mermaid,
    Dot,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let reg = Registries::default();
    match cli.command {
        Command::Serve { config, bind } => serve(config, bind, &cli.graphs, &cli.prompts),
        Command::Check { paths } => {
            let paths = if paths.is_empty() { vec![cli.graphs.clone()] } else { paths };
            match cli::check(&paths, &cli.prompts, &reg, &mut std::io::stdout()) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Graph { name, format } => {
            let catalog = Catalog::load(&cli.graphs, &cli.prompts, &reg);
            let Some(g) = catalog.get(&name) else {
                return not_found(&catalog, &name);
            };
            let format = match format {
                Format::Mermaid => GraphFormat::Mermaid,
                Format::Dot => GraphFormat::Dot,
            };
            print!("{}", cli::graph(g, format));
            ExitCode::SUCCESS
        }
        Command::Run { graph, message, intent, json } => {
            let catalog = Catalog::load(&cli.graphs, &cli.prompts, &reg);
            let Some(g) = catalog.get(&graph).cloned() else {
                return not_found(&catalog, &graph);
            };
            let models = Models::single(Arc::new(OfflineModel::default()));
            eprintln!("note: no LLM endpoint configured; using the built-in offline model");
            let services = Arc::new(Services::new(models, Arc::clone(&reg.tools)));
            let rt = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let args = RunArgs { message, forced_intent: intent, json };
            match rt.block_on(cli::run(g, services, args, &mut std::io::stdout())) {
                Ok(true) => ExitCode::SUCCESS,
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// `stategraph serve`.
fn serve(config: Option<PathBuf>, bind: Option<std::net::SocketAddr>, graphs: &std::path::Path, prompts: &std::path::Path) -> ExitCode {
    let mut config = match Config::load(config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(b) = bind {
        config.server.bind = b;
    }
    // Flags win over the file for the directories only when given explicitly.
    if graphs != std::path::Path::new("graphs") {
        config.paths.graphs = graphs.to_owned();
    }
    if prompts != std::path::Path::new("prompts") {
        config.paths.prompts = prompts.to_owned();
    }
    let _telemetry = match stategraph::telemetry::init(&config.telemetry) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: telemetry: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: anyhow::Result<()> = rt.block_on(async move {
        let bind = config.server.bind;
        let state = server::build_state(config).await.map_err(anyhow::Error::msg)?;
        let listener = listen(bind).map_err(|e| anyhow::anyhow!("cannot listen on {bind}: {e}"))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "listening");
        println!("stategraph is serving on http://{addr}");
        println!("  point a useChat front end (DefaultChatTransport) at http://{addr}/api/chat");
        println!("  try it: curl -N http://{addr}/api/chat -H 'content-type: application/json' \\");
        println!("            -d '{{\"id\":\"demo\",\"messages\":[{{\"id\":\"m1\",\"role\":\"user\",\"parts\":[{{\"type\":\"text\",\"text\":\"hello\"}}]}}]}}'");
        server::serve(state, listener, shutdown_signal()).await?;
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A listener with a deep accept backlog: many clients connect at once.
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
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

fn not_found(catalog: &Catalog, name: &str) -> ExitCode {
    for d in &catalog.diagnostics {
        eprintln!("{d}");
    }
    let known: Vec<&str> = catalog.graphs.keys().map(String::as_str).collect();
    eprintln!("error: no valid graph `{name}` (valid graphs: {})", known.join(", "));
    ExitCode::FAILURE
}
