//! Shared helpers for integration tests.

use std::path::PathBuf;
use std::sync::Arc;

use stategraph::internals::llm::{ChatModel, Models};
use stategraph::internals::nodes::Registries;
use stategraph::internals::runtime::Services;

stategraph::state! {
    /// The chat pipeline's state as a Rust type (the shipped graphs declare
    /// it in YAML; tests that write `state: chat` use this registered type,
    /// and the parity test compares the two).
    pub struct ChatState as "chat" {
        /// The conversation so far, including the newest user message.
        messages: Vec<stategraph::state::Message> => merge_by_id,
        /// The newest user message's text.
        query: String => last,
        /// Rolling summary of older history, written by the summarizer.
        summary: String => last,
        /// How many messages the summary covers.
        summarized_count: u32 => last,
        /// An intent forced by the caller, bypassing classification.
        forced_intent: Option<String> => last,
        /// The classified intent the router routes on.
        intent: String => last,
        /// The router's details: reasoning, missing slots, language, source.
        routing: serde_json::Value => last,
        /// The user's language as detected by the router.
        language: String => last,
        /// Findings from the research, quick-answer or explain agent.
        findings: String => last,
        /// Tool calls made and their results, in order.
        tool_results: Vec<serde_json::Value> => append,
        /// The answer shown to the user.
        answer: String => last,
        /// Suggested follow-up questions.
        followups: Vec<String> => last,
        /// The quick answer's card.
        quick_answer_card: Option<serde_json::Value> => last,
    }
}

pub mod browser;
pub mod data360;
pub mod db;
pub mod delegate;
pub mod hitl;
pub mod model;
pub mod process;
pub mod talk;

mod data_tool;
pub use data_tool::IndicatorValue;

/// Registries with the test `chat` state and the test data tool
/// registered.
pub fn registries() -> Registries {
    let mut reg = Registries::default();
    reg.states.register::<ChatState>();
    reg.tools
        .register(Arc::new(IndicatorValue::new()))
        .expect("test data tool");
    reg
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped graphs and prompts, compiled.
pub fn shipped_catalog() -> stategraph::internals::nodes::GraphCatalog {
    let cat = crate::support::registries().load(&root().join("graphs"), &root().join("prompts"));
    assert!(
        !cat.has_errors(),
        "shipped graphs must be valid: {:#?}",
        cat.diagnostics
    );
    cat
}

/// Services with one model for every role and the built-in tools.
pub fn services(model: Arc<dyn ChatModel>) -> Arc<Services> {
    Arc::new(Services::new(
        Models::single(model),
        Arc::clone(&crate::support::registries().tools),
    ))
}

/// Runs the AI SDK's own parser (tests/tools/aisdk-validate) over an SSE
/// capture; returns (passed, report).
pub fn aisdk_validate(sse: &str) -> (bool, String) {
    let tool = root().join("tests/tools/aisdk-validate");
    assert!(
        tool.join("node_modules/ai").is_dir(),
        "the AI SDK validator is not installed: run `npm ci` in {} (tests/run.sh does)",
        tool.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("capture.sse");
    std::fs::write(&file, sse).expect("write capture");
    validate_args(&[file.to_string_lossy().as_ref(), "--json"])
}

/// The validator's `--json` report from its output.
pub fn report_json(report: &str) -> serde_json::Value {
    report
        .find('{')
        .and_then(|i| serde_json::from_str(&report[i..]).ok())
        .unwrap_or_default()
}

/// Runs the validator with arguments (a URL or file, flags).
pub fn validate_args(args: &[&str]) -> (bool, String) {
    let tool = root().join("tests/tools/aisdk-validate");
    let out = std::process::Command::new("node")
        .arg(tool.join("validate.mjs"))
        .args(args)
        .output()
        .expect("node runs");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    (out.status.success(), report)
}

pub mod server {
    //! A real server on a real socket, for HTTP tests.

    use std::net::SocketAddr;
    use std::sync::Arc;

    use stategraph::internals::config::Config;
    use stategraph::internals::engine::{Engine, Graphs};
    use stategraph::internals::graph::prompts::Prompts;
    use stategraph::internals::llm::{ChatModel, Models};
    use stategraph::internals::runtime::Services;
    use stategraph::internals::server::AppState;
    use stategraph::internals::store::Store;
    use stategraph::internals::store::memory::MemoryStore;

    use super::root;

    /// A graph whose answer node calls tools (the chat graph's tools run on
    /// thinking nodes).
    pub const TOOLS_GRAPH: &str = r#"
state: chat
entry: helper
nodes:
  - id: helper
    kind: agent
    prompt: chat/direct.md
    surface: answer
    tools: [basic]
    input: query
    max_iterations: 3
    output: answer
edges: [helper -> END]
"#;

    /// A running server.
    pub struct TestServer {
        /// Its address.
        pub addr: SocketAddr,
        /// Its state.
        pub state: Arc<AppState>,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    }

    impl TestServer {
        /// Starts a server on 127.0.0.1:0 with `model`, the shipped graphs
        /// (plus `tools`), a memory store and `tweak`ed config.
        pub async fn start(model: Arc<dyn ChatModel>, tweak: impl FnOnce(&mut Config)) -> Self {
            Self::start_with_store(model, Arc::new(MemoryStore::new()), tweak).await
        }

        /// As [`TestServer::start`] with a given store.
        pub async fn start_with_store(
            model: Arc<dyn ChatModel>,
            store: Arc<dyn Store>,
            tweak: impl FnOnce(&mut Config),
        ) -> Self {
            Self::start_with_models(Models::single(model), store, tweak).await
        }

        /// As [`TestServer::start_with_store`] with the models of every
        /// role (e.g. built from an `[llm]` configuration).
        pub async fn start_with_models(
            models: Models,
            store: Arc<dyn Store>,
            tweak: impl FnOnce(&mut Config),
        ) -> Self {
            let mut config = Config::default();
            config.server.keep_alive.0 = std::time::Duration::from_secs(5);
            tweak(&mut config);
            let reg = crate::support::registries();
            let graphs = if config.paths.graphs.is_absolute() {
                // A test that edits files serves them from its own directories.
                Graphs::load(&config.paths.graphs, &config.paths.prompts, reg.clone())
            } else {
                let chat =
                    std::fs::read_to_string(root().join("graphs/chat.yaml")).expect("chat graph");
                let prompts = Prompts::load(&root().join("prompts"));
                let cat = reg.from_sources(&[("chat", &chat), ("tools", TOOLS_GRAPH)], prompts);
                assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
                Graphs::from_catalog(cat, reg.clone())
            };
            let services = Services::new(models, Arc::clone(&reg.tools));
            Self::serve(AppState::new(
                config,
                store,
                &Engine::from_parts(reg.clone(), graphs, services),
            ))
            .await
        }

        /// Serves a state built elsewhere (e.g. by `build_state`).
        pub async fn serve(state: Arc<AppState>) -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(stategraph::internals::server::serve(
                Arc::clone(&state),
                listener,
                async move {
                    let _ = stopped.await;
                },
            ));
            Self {
                addr,
                state,
                stop: Some(stop),
                task: Some(task),
            }
        }

        /// `http://addr{path}`.
        pub fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.addr)
        }

        /// Stops the server and waits for it (graceful shutdown).
        pub async fn shutdown(mut self) {
            if let Some(s) = self.stop.take() {
                let _ = s.send(());
            }
            if let Some(t) = self.task.take() {
                let _ = t.await;
            }
        }
    }
}

/// A one-message chat request body.
pub fn chat_body(chat: &str, text: &str) -> serde_json::Value {
    serde_json::json!({
        "id": chat,
        "messages": [{"id": format!("u-{chat}"), "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message"
    })
}

/// POSTs JSON, returning the response.
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request")
}

/// A `stategraph`-style binary serving on a free port: the child and the
/// base URL it announced (`stategraph is serving on URL`).
pub async fn spawn_serving(mut cmd: tokio::process::Command) -> (tokio::process::Child, String) {
    cmd.stderr(std::process::Stdio::null());
    let (child, base, _) = serving(cmd, false).await;
    (child, base.expect("the server announces its address"))
}

/// The one way tests start a server process: `cmd` (its stderr set by the
/// caller) on 127.0.0.1:0 with no model, database or configuration taken
/// from the environment; returns the child, the base URL it announced
/// (`None`: it announced none within a minute) and, with `studio`, the
/// studio URL it prints next.
pub async fn serving(
    mut cmd: tokio::process::Command,
    studio: bool,
) -> (tokio::process::Child, Option<String>, Option<String>) {
    use tokio::io::AsyncBufReadExt;
    let mut child = cmd
        .env("STATEGRAPH_BIND", "127.0.0.1:0")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("STATEGRAPH_CONFIG")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let deadline = std::time::Duration::from_secs(60);
    let (mut base, mut studio_url) = (None, None);
    while let Ok(Ok(Some(line))) = tokio::time::timeout(deadline, lines.next_line()).await {
        if let Some(url) = line.strip_prefix("stategraph is serving on ") {
            base = Some(url.trim().to_owned());
            if !studio {
                break;
            }
        } else if let Some(url) = line.trim().strip_prefix("studio: ") {
            studio_url = Some(url.to_owned());
            break;
        }
    }
    // Keep draining stdout so the server never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, base, studio_url)
}

/// Re-executes a run stored by `server` the way `stategraph replay
/// --reexecute` does on a machine with nothing running: the graph as
/// served, only the built-in tools (no MCP server, no SQL, no web), and a
/// model that fails every call — so whatever the re-execution needs must
/// come from the recording. Panics on the first divergence.
pub async fn assert_reexecutes(state: &stategraph::internals::server::AppState, run: uuid::Uuid) {
    use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
    let events = state.store.events(run, 0, 100_000).await.expect("events");
    let record = state.store.get_run(run).await.expect("store").expect("run");
    let graph = state.graphs.get(&record.graph).expect("graph served");
    let offline = ScriptedModel::from_fn(|_| {
        Turn::Fail(stategraph::internals::llm::LlmError::Http {
            status: 599,
            message: "a re-execution must not call a model".into(),
        })
    });
    let services = Services::new(
        Models::single(Arc::new(offline)),
        Arc::new(stategraph::internals::tools::ToolRegistry::with_builtins()),
    );
    let r = stategraph::internals::replay::reexecute(graph, services, &events)
        .await
        .expect("re-execution");
    assert!(r.divergence.is_none(), "run {run}: {}", r.report());
}

/// [`assert_reexecutes`] for every finished run `state`'s store holds.
pub async fn assert_all_reexecute(state: &stategraph::internals::server::AppState) -> usize {
    let runs = state
        .store
        .list_runs(&stategraph::internals::store::RunQuery::newest(10_000))
        .await
        .expect("runs");
    let finished: Vec<_> = runs
        .iter()
        .filter(|r| r.status == stategraph::internals::runtime::RunStatus::Finished)
        .collect();
    for r in &finished {
        assert_reexecutes(state, r.id).await;
    }
    finished.len()
}

/// A response's body as JSON, panicking with the body when it is not.
pub(crate) trait JsonBody {
    /// The body, parsed.
    async fn json_value(self) -> serde_json::Value;
}

impl JsonBody for reqwest::Response {
    async fn json_value(self) -> serde_json::Value {
        let text = self.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }
}

/// The text of a UI message's text parts.
pub fn text_of_parts(parts: &serde_json::Value) -> String {
    parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect()
}
