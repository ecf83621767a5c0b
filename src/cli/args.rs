//! The command line's grammar (clap).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "stategraph",
    version,
    about = "Explicit state-machine graph runtime for LLM applications"
)]
pub(super) struct Cli {
    /// Config file (default: stategraph.toml if present).
    #[arg(long, global = true, env = "STATEGRAPH_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of graph files (overrides the config).
    #[arg(long, global = true)]
    pub graphs: Option<PathBuf>,
    /// Directory of prompt templates (overrides the config).
    #[arg(long, global = true)]
    pub prompts: Option<PathBuf>,
    /// Answer every model call from this model script instead of an
    /// endpoint (`[llm] script`; docs/testing.md).
    #[arg(long, global = true, value_name = "FILE")]
    pub model_script: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// `stategraph tools …`.
#[derive(Subcommand)]
pub(super) enum ToolsAction {
    /// Start the configured MCP servers and write graphs/tools.lock.json.
    Lock {
        /// How long to wait for the servers.
        #[arg(long, default_value = "30s", value_parser = parse_wait)]
        timeout: std::time::Duration,
    },
}

fn parse_wait(s: &str) -> Result<std::time::Duration, String> {
    crate::units::Dur::parse(s).ok_or_else(|| format!("`{s}` is not a duration such as 30s or 2m"))
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Serve the chat API (POST /api/chat), the run and graph APIs.
    Serve {
        /// Listen address (overrides the config).
        #[arg(long)]
        bind: Option<SocketAddr>,
    },
    /// Validate graph files; exit 1 on any error.
    Check {
        /// Graph files or directories (default: the graph directory).
        paths: Vec<PathBuf>,
        /// Output: readable text, one JSON document, or GitHub Actions
        /// annotations.
        #[arg(long, value_enum, default_value = "text")]
        format: CheckFormatArg,
    },
    /// Draw a graph.
    Graph {
        /// Graph id.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "mermaid")]
        format: GraphFormatArg,
    },
    /// Run a graph once, print its events and its answer, and store the run
    /// (replay it with `stategraph replay RUN`).
    Run {
        /// Graph id.
        graph: String,
        /// The user's message (goes where the graph's `chat:` section puts
        /// a chat request's history and text).
        message: String,
        /// `FIELD=JSON` input fields (repeatable), e.g.
        /// `--set forced_intent='"DIRECT"'`.
        #[arg(long = "set")]
        set: Vec<String>,
        /// Print events as JSON lines (the run id goes to stderr).
        #[arg(long)]
        json: bool,
        /// Do not store the run.
        #[arg(long)]
        no_store: bool,
        /// Pause before a step that runs this node (repeatable); continue
        /// with `stategraph resume RUN`.
        #[arg(long = "break-before", value_name = "NODE")]
        break_before: Vec<String>,
        /// Pause after a step that ran this node (repeatable).
        #[arg(long = "break-after", value_name = "NODE")]
        break_after: Vec<String>,
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
        /// Print each model call: the messages it was sent (after
        /// templating), the tools offered, the settings and its answer.
        #[arg(long, conflicts_with_all = ["sse", "json", "reexecute"])]
        calls: bool,
    },
    /// Start a new run from a step of a stored run, with an edit after a
    /// node (what runs next is routed again) or before one (it runs again).
    Fork {
        /// Run id.
        run: uuid::Uuid,
        /// The step forked (the one the node ran in); optional with a node
        /// that ran once.
        #[arg(long)]
        at: Option<u32>,
        /// The edit comes after this node, as if it had written it (the
        /// default: the step's node).
        #[arg(long, conflicts_with = "before")]
        after: Option<String>,
        /// The edit comes before this node, which runs again on it.
        #[arg(long)]
        before: Option<String>,
        /// `FIELD=VALUE` edits (repeatable): JSON, or else a string, e.g.
        /// `--set intent=billing`, `--set count=3`.
        #[arg(long = "set")]
        set: Vec<String>,
        /// Attach the fork's answer to the parent's chat as an alternative
        /// of its assistant message.
        #[arg(long)]
        attach: bool,
    },
    /// Continue a run paused for a person (an approval, a client tool's
    /// output, a question) with the answer, and print its timeline.
    Resume {
        /// Run id.
        run: uuid::Uuid,
        /// The answer, as JSON, when the run waits at one interrupt: e.g.
        /// `'{"approved": true}'`, `'{"output": …}'`, `'"blue"'`.
        #[arg(long, conflicts_with = "answer")]
        value: Option<String>,
        /// `ID=JSON` answers by interrupt id (repeatable), when it waits
        /// at several.
        #[arg(long)]
        answer: Vec<String>,
        /// At a breakpoint: `FIELD=VALUE` edits of the paused state
        /// (repeatable; JSON, or else a string), checked as a fork's.
        #[arg(long = "set", conflicts_with_all = ["value", "answer"])]
        set: Vec<String>,
        /// At a breakpoint: run one step, then pause again.
        #[arg(long, conflicts_with_all = ["value", "answer"])]
        step: bool,
        /// End the paused run (`cancelled`) instead of continuing it.
        #[arg(long, conflicts_with_all = ["value", "answer", "set", "step"])]
        abort: bool,
        /// Replace the run's breakpoints: pause before this node
        /// (repeatable; with neither flag the run keeps its breakpoints).
        #[arg(long = "break-before", value_name = "NODE")]
        break_before: Vec<String>,
        /// Replace the run's breakpoints: pause after this node.
        #[arg(long = "break-after", value_name = "NODE")]
        break_after: Vec<String>,
    },
    /// Send one tiny request per configured model role and report whether
    /// it answers, streams, calls tools and returns structured output, and
    /// what the provider and family rules change in its requests.
    Doctor,
    /// Apply the store's schema migrations.
    Migrate,
    /// Tools: `lock` starts the configured MCP servers and writes what
    /// they list to graphs/tools.lock.json, which `check` reads.
    Tools {
        #[command(subcommand)]
        action: ToolsAction,
    },
    /// Delete old runs (with their events and checkpoints).
    Prune {
        /// Age, e.g. 30d, 12h.
        #[arg(long)]
        older_than: String,
        /// Also delete chats not updated since then.
        #[arg(long)]
        chats: bool,
    },
    /// Print the JSON Schema of graph files, or of test files (for YAML
    /// language servers: completion and checking in the editor).
    Schema {
        /// Which file format.
        #[arg(value_enum, default_value = "graph")]
        format: SchemaArg,
    },
    /// Run the test cases beside the graphs (`graphs/tests/*.yaml`); exit 1
    /// on any failure. `--from-run RUN` writes a case from a stored run.
    Test(super::test::TestArgs),
    /// Run the user inputs of stored chats again against the graphs as
    /// they are now (recorded model outputs where a node asks what it
    /// asked then) and report what changed: route, nodes, tool calls,
    /// answer, tokens, cost, latency.
    Eval(super::eval::EvalArgs),
    /// Write a minimal working graph and its prompt: `graphs/NAME.yaml`,
    /// `prompts/NAME/answer.md` (under the configured directories).
    New {
        /// Graph id (ASCII letters, digits, `_`, `-`).
        name: String,
        /// Replace files that exist.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum SchemaArg {
    /// Graph files (`graphs/*.yaml`).
    Graph,
    /// Test files (`graphs/tests/*.yaml`).
    Test,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum GraphFormatArg {
    Mermaid,
    Dot,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum CheckFormatArg {
    Text,
    Json,
    Github,
}
