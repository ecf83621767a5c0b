//! The human-in-the-loop fixture: an in-process server with graphs that
//! pause for an approval (`approval`, with a counted `delete_record` tool and
//! a client tool), a question (`ask`) and a question that lapses (`hurry`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use stategraph::internals::engine::{Engine, Graphs};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::Models;
use stategraph::internals::llm::offline::OfflineModel;
use stategraph::internals::runtime::Services;
use stategraph::internals::server::AppState;
use stategraph::internals::store::Store;
use stategraph::internals::store::memory::MemoryStore;
use stategraph::internals::tools::{Tool, ToolError, ToolPolicy, ToolSpec};

use super::root;
use super::server::TestServer;

/// An agent that must get approval before `delete_record`, and may ask
/// the front end to pick a record (`pick_record`, a client-side tool).
const APPROVAL: &str = r#"
state: chat
entry: assistant
nodes:
  - id: assistant
    kind: agent
    prompt: chat/direct.md
    history: messages
    input: query
    output: answer
    surface: answer
    tools: [delete_record]
    approve: [delete_record]
    client_tools:
      pick_record:
        description: Let the user pick a record.
        parameters:
          type: object
          properties: { count: { type: integer } }
          required: [count]
edges: [assistant -> END]
"#;

/// A question whose answer is an integer field, then a node using it.
const ASK: &str = r#"
state:
  fields:
    messages: { type: messages }
    query:    { type: string }
    copies:   { type: integer }
    answer:   { type: string }
entry: ask
nodes:
  - id: ask
    kind: interrupt
    question: "How many copies of {{ query }}?"
    output: copies
    options: [1, 2, 3]
  - id: done
    kind: set
    set:
      answer: "Printing {{ copies }} copies."
edges: [ask -> done, done -> END]
"#;

/// The same question, lapsing at once.
const HURRY: &str = r#"
state:
  fields:
    messages: { type: messages }
    query:    { type: string }
    answer:   { type: string }
entry: ask
nodes:
  - id: ask
    kind: interrupt
    question: "Quick?"
    output: answer
    expires_after: 1ms
edges: [ask -> END]
"#;

/// `delete_record`, counting its calls.
struct Deletes {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

impl Tool for Deletes {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(json!({ "deleted": args["id"] }))
        })
    }
}

pub struct Fixture {
    pub server: TestServer,
    pub deletes: Arc<AtomicUsize>,
    pub client: reqwest::Client,
}

pub async fn fixture() -> Fixture {
    fixture_with(Arc::new(MemoryStore::new()), |_| {}).await
}

/// The fixture on `store`, its configuration changed by `tweak`.
pub async fn fixture_with(
    store: Arc<dyn Store>,
    tweak: impl FnOnce(&mut stategraph::internals::config::Config),
) -> Fixture {
    let deletes = Arc::new(AtomicUsize::new(0));
    let reg = crate::support::registries();
    reg.tools
        .register(Arc::new(Deletes {
            spec: ToolSpec {
                name: "delete_record".into(),
                description: "Delete a record".into(),
                input_schema: Arc::new(json!({
                    "type": "object",
                    "properties": {"id": {"type": "integer"}},
                    "required": ["id"]
                })),
                output_schema: None,
                partition: "records".into(),
                policy: ToolPolicy::default(),
            },
            calls: Arc::clone(&deletes),
        }))
        .unwrap();
    let prompts = Prompts::load(&root().join("prompts"));
    let cat = reg.from_sources(
        &[("approval", APPROVAL), ("ask", ASK), ("hurry", HURRY)],
        prompts,
    );
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    let graphs = Graphs::from_catalog(cat, reg.clone());
    let services = Services::new(
        Models::single(Arc::new(OfflineModel::default())),
        Arc::clone(&reg.tools),
    );
    let mut config = stategraph::internals::config::Config::default();
    config.server.keep_alive.0 = std::time::Duration::from_secs(5);
    // Upkeep (which fails lapsed waits) only when a test calls it: 0 is
    // never (any other interval also runs a pass as the server starts,
    // which on a loaded machine can come after a test's run paused).
    config.server.recover_interval.0 = std::time::Duration::ZERO;
    tweak(&mut config);
    let state = AppState::new(config, store, &Engine::from_parts(reg, graphs, services));
    Fixture {
        server: TestServer::serve(state).await,
        deletes,
        client: reqwest::Client::new(),
    }
}

impl Fixture {
    pub async fn post(&self, path: &str, body: &Value) -> (u16, String) {
        let r = self
            .client
            .post(self.server.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    pub async fn get(&self, path: &str) -> Value {
        let r = self.client.get(self.server.url(path)).send().await.unwrap();
        assert!(r.status().is_success(), "GET {path}: {}", r.status());
        r.json().await.unwrap()
    }

    pub async fn newest_run(&self, chat: &str) -> Value {
        let runs = self.get(&format!("/api/runs?chat={chat}")).await;
        let id = runs["runs"][0]["id"].as_str().expect("a run").to_owned();
        self.get(&format!("/api/runs/{id}")).await
    }
}
