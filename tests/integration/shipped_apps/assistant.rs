//! graphs/assistant.yaml end to end: the real HTTP server on a socket with
//! a SQLite store, the business MCP server (tests/mcp/business_server.py,
//! stdio, started through `McpManager`) and a scripted model. Turn by turn,
//! as a `useChat` client would send them: the customer found in one turn is
//! in the next turn's prompt, a display-ready table goes straight to the
//! answer, a repeated lookup comes from the cache, and a regenerated turn
//! continues from the turn before the answer it replaces.
//!
//! Also: graphs/chat.yaml carries its rolling summary from turn to turn.
//!
//! Needs the test venv (tests/run.sh; `STATEGRAPH_TEST_PYTHON`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use stategraph::internals::config::Config;
use stategraph::internals::engine::{Engine, Graphs};
use stategraph::internals::events::{EventKind, ToolReturn};
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, Models};
use stategraph::internals::runtime::Services;
use stategraph::internals::server::AppState;
use stategraph::internals::tools::mcp::{McpConfig, McpManager};
use uuid::Uuid;

use crate::support::db::SqliteDb;
use crate::support::server::TestServer;
use crate::support::{aisdk_validate, post_json, root};

/// Every test's upper bound.
const TEST_LIMIT: Duration = Duration::from_secs(120);

/// The venv's Python (tests/run.sh), with a message saying how to get it.
fn python() -> PathBuf {
    let python = std::env::var_os("STATEGRAPH_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
                });
            cache.join("stategraph-tests/venv/bin/python")
        });
    assert!(
        python.exists(),
        "the MCP test venv is missing ({}): run `bash tests/run.sh` or set STATEGRAPH_TEST_PYTHON",
        python.display()
    );
    python
}

/// `[tools.mcp]` for the business server, with the policies the graph
/// comments recommend.
fn business_config() -> McpConfig {
    let lit = |p: PathBuf| serde_json::to_string(&p.to_string_lossy()).unwrap();
    let text = format!(
        r#"
[servers.business]
command = [{}, {}]
health_check = 0
[servers.business.tools.find_customer]
cache_ttl = "5m"
[servers.business.tools.get_customer]
cache_ttl = "5m"
[servers.business.tools.invoice_table]
pass_through = true
"#,
        lit(python()),
        lit(root().join("tests/mcp/business_server.py"))
    );
    toml::from_str(&text).unwrap()
}

/// What one POST /api/chat streamed.
struct Streamed {
    sse: String,
    chunks: Vec<Value>,
    run_id: Uuid,
    message_id: String,
    /// The response's correlation id (`x-request-id`).
    request_id: String,
}

impl Streamed {
    /// The answer text (all text deltas).
    fn text(&self) -> String {
        self.chunks
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .filter_map(|c| c["delta"].as_str())
            .collect()
    }

    /// The output of the (answer-surface) tool call of `tool`.
    fn tool_output(&self, tool: &str) -> Option<&Value> {
        self.tool_chunk(tool, "tool-output-available")
            .map(|c| &c["output"])
    }

    /// The `kind` chunk of the first call of `tool`.
    fn tool_chunk(&self, tool: &str, kind: &str) -> Option<&Value> {
        let id = self.chunks.iter().find_map(|c| {
            (c["type"] == "tool-input-available" && c["toolName"] == tool)
                .then(|| c["toolCallId"].clone())
        })?;
        self.chunks
            .iter()
            .find(|c| c["type"] == kind && c["toolCallId"] == id)
    }
}

/// A UI message.
fn msg(id: &str, role: &str, text: &str) -> Value {
    json!({"id": id, "role": role, "parts": [{"type": "text", "text": text}]})
}

async fn chat(
    client: &reqwest::Client,
    server: &TestServer,
    chat: &str,
    graph: &str,
    messages: &[Value],
    trigger: &str,
) -> Streamed {
    let body = json!({"id": chat, "graph": graph, "messages": messages, "trigger": trigger});
    // Straight after the previous turn's `[DONE]`: the server ends a stream
    // only once its run is recorded, so the chat is free again.
    let resp = post_json(client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200, "POST /api/chat");
    let request_id = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let sse = resp.text().await.unwrap();
    let chunks: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let start = chunks
        .iter()
        .find(|c| c["type"] == "start")
        .unwrap_or_else(|| panic!("no start chunk in {sse}"));
    assert!(
        chunks.iter().any(|c| c["type"] == "finish"),
        "the run did not finish: {sse}"
    );
    Streamed {
        run_id: start["messageMetadata"]["runId"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
        message_id: start["messageId"].as_str().unwrap().to_owned(),
        request_id,
        chunks,
        sse,
    }
}

/// The system prompt of a captured model request.
fn system(req: &ChatRequest) -> &str {
    match req.messages.first() {
        Some(ChatMessage::System { content }) => content,
        other => panic!("no system prompt: {other:?}"),
    }
}

/// The run's record; its stream has ended, so its end is recorded.
async fn recorded(server: &TestServer, run: Uuid) -> stategraph::internals::store::RunRecord {
    let record = server
        .state
        .store
        .get_run(run)
        .await
        .unwrap()
        .expect("run stored");
    assert_ne!(
        record.status,
        stategraph::internals::runtime::RunStatus::Running,
        "a run whose stream ended is recorded as over"
    );
    record
}

/// The final state of a run, from its checkpoints in the store.
async fn final_state(server: &TestServer, run: Uuid) -> Value {
    let state = &server.state;
    let record = recorded(server, run).await;
    assert_eq!(
        record.status,
        stategraph::internals::runtime::RunStatus::Finished
    );
    let graph = state.graphs.get(&record.graph).expect("graph served");
    stategraph::internals::replay::state_at(&*state.store, &graph, run, record.last_step)
        .await
        .unwrap()
        .to_json()
}

/// The `tool_result` events of a run: (tool, output, cached, display).
async fn tool_results(server: &TestServer, run: Uuid) -> Vec<(String, Value, bool, bool)> {
    recorded(server, run).await;
    let events = server.state.store.events(run, 0, 10_000).await.unwrap();
    events
        .into_iter()
        .filter_map(|e| match e.event {
            EventKind::ToolResult(tool_return) => {
                let ToolReturn {
                    tool,
                    output,
                    cached,
                    display,
                    ..
                } = *tool_return;
                Some((tool, output, cached, display))
            }
            _ => None,
        })
        .collect()
}

fn customer(id: &str, name: &str) -> Value {
    json!([{"kind": "customer", "id": id, "name": name, "source": "find_customer"}])
}

#[tokio::test]
async fn assistant_remembers_the_customer_across_turns_caches_lookups_and_passes_tables_through() {
    tokio::time::timeout(TEST_LIMIT, async {
        let model = ScriptedModel::new([
            // chat "acme", turn 1: find the customer.
            Turn::tool("find_customer", json!({"name": "Acme"})),
            Turn::text("Acme Corporation (C-1001), Rotterdam."),
            // turn 2: "their" invoices, then the table.
            Turn::tool("list_invoices", json!({"customer_id": "C-1001"})),
            Turn::tool("invoice_table", json!({"customer_id": "C-1001"})),
            // turn 3: the same lookup again.
            Turn::tool("find_customer", json!({"name": "Acme"})),
            Turn::text("Yes, Acme Corporation."),
            // chat "regen": Globex, then Initech, then turn 2 regenerated.
            Turn::tool("find_customer", json!({"name": "Globex"})),
            Turn::text("Globex Industries (C-1002)."),
            Turn::tool("find_customer", json!({"name": "Initech"})),
            Turn::text("Initech (C-1003)."),
            Turn::text("Regenerated."),
        ])
        .shared();
        let s = Session::start(business_config(), model).await;
        // Turn 1: the model finds Acme; the customer becomes the active entity.
        let mut history = vec![msg("u1", "user", "find customer Acme")];
        let (t1, r1) = acme_is_found_and_made_active(&s, &history).await;
        // Turn 2: "their" resolves through the carried entity.
        history.push(msg(&t1.message_id, "assistant", &t1.text()));
        history.push(msg("u2", "user", "show their invoices"));
        let t2 = their_invoices_pass_through_as_a_table(&s, &history).await;
        // Turn 3: the repeated lookup is served from the cache; the server
        // is not called again.
        history.push(msg(&t2.message_id, "assistant", &t2.text()));
        history.push(msg("u3", "user", "is that Acme Corporation?"));
        the_repeated_lookup_comes_from_the_cache(&s, &history, &t1, &r1).await;
        a_regenerated_turn_starts_from_the_turn_before(&s).await;
        assert_eq!(s.model.remaining(), 0);
        // Every turn re-executes from its recording alone: no MCP server,
        // no model (cache hits and pass-through included).
        assert!(crate::support::assert_all_reexecute(&s.server.state).await >= 5);
        s.server.shutdown().await;
    })
    .await
    .expect("the test took longer than its time limit");
}

/// The assistant graph served with the business MCP server (`mcp`) and
/// `model`, storing in SQLite.
struct Session {
    server: TestServer,
    model: Arc<ScriptedModel>,
    client: reqwest::Client,
    _db: SqliteDb,
}

impl Session {
    async fn start(mcp: McpConfig, model: Arc<ScriptedModel>) -> Self {
        let reg = crate::support::registries();
        let mcp = McpManager::start(&mcp, Arc::clone(&reg.tools));
        // The shipped files, compiled against a registry in which the MCP
        // partition is declared (the server may still be starting).
        let graphs = Graphs::load(&root().join("graphs"), &root().join("prompts"), reg.clone());
        assert!(
            graphs.get("assistant").is_some(),
            "{:#?}",
            graphs.catalog().diagnostics
        );
        assert!(
            mcp.wait_ready(Duration::from_secs(60)).await,
            "the business MCP server did not start: {:?}",
            mcp.status()
        );
        let db = SqliteDb::new();
        let services = Services::new(Models::single(model.clone()), Arc::clone(&reg.tools));
        let state = AppState::with_mcp(
            Config::default(),
            db.open().await,
            &Engine::from_parts(reg.clone(), graphs, services),
            Some(mcp),
        );
        Self {
            server: TestServer::serve(state).await,
            model,
            client: reqwest::Client::new(),
            _db: db,
        }
    }
}

/// Turn 1 of chat "acme": the customer found, streamed and made active.
async fn acme_is_found_and_made_active(
    s: &Session,
    history: &[Value],
) -> (Streamed, Vec<(String, Value, bool, bool)>) {
    let t1 = chat(
        &s.client,
        &s.server,
        "acme",
        "assistant",
        history,
        "submit-message",
    )
    .await;
    assert!(
        !system(&s.model.requests()[0]).contains("C-1001"),
        "no customer is known before the first lookup"
    );
    let found = t1
        .tool_output("find_customer")
        .expect("find_customer streamed");
    assert_eq!(
        (found["id"].as_str(), found["name"].as_str()),
        (Some("C-1001"), Some("Acme Corporation"))
    );
    assert_eq!(
        found["other_matches"][0]["id"], "C-1004",
        "the MCP server's own answer"
    );
    let s1 = final_state(&s.server, t1.run_id).await;
    assert_eq!(s1["entities"], customer("C-1001", "Acme Corporation"));
    assert!(
        t1.chunks
            .iter()
            .any(|c| c["type"] == "data-entities" && c["data"][0]["id"] == "C-1001"),
        "the UI hears of the active entity: {}",
        t1.sse
    );
    let (ok, report) = aisdk_validate(&t1.sse);
    assert!(ok, "{report}");
    let r1 = tool_results(&s.server, t1.run_id).await;
    assert_eq!(
        (r1.len(), r1[0].2),
        (1, false),
        "the first lookup is not cached"
    );

    (t1, r1)
}

/// Turn 2: "their" invoices of the active customer, and the table passed
/// through as the answer.
async fn their_invoices_pass_through_as_a_table(s: &Session, history: &[Value]) -> Streamed {
    let t2 = chat(
        &s.client,
        &s.server,
        "acme",
        "assistant",
        history,
        "submit-message",
    )
    .await;
    let requests = s.model.requests();
    let prompt = system(&requests[2]);
    assert!(
        prompt.contains("- customer: Acme Corporation (id C-1001)"),
        "the second turn's prompt names the active customer:\n{prompt}"
    );
    let run2 = s
        .server
        .state
        .store
        .get_run(t2.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        run2.input["entities"],
        customer("C-1001", "Acme Corporation"),
        "carried into the stored input"
    );
    assert_eq!(run2.input["query"], "show their invoices");
    let listed = t2
        .tool_output("list_invoices")
        .expect("list_invoices streamed");
    assert_eq!(listed["customer_id"], "C-1001");
    let ids: Vec<&str> = listed["invoices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(ids, ["INV-2024-0107", "INV-2024-0311", "INV-2024-0518"]);
    // Pass-through: the table is the answer, verbatim, and the model is
    // not asked to restate it.
    let table = t2
        .tool_output("invoice_table")
        .and_then(Value::as_str)
        .expect("the table")
        .to_owned();
    assert!(
        table.contains("| INV-2024-0311 | 2024-03-20 | 2024-04-19 | 8,420.50 EUR | overdue |"),
        "{table}"
    );
    assert_eq!(t2.text(), table, "the streamed answer is the table");
    assert_eq!(
        s.model.requests().len(),
        4,
        "no model call after a pass-through result"
    );
    let r2 = tool_results(&s.server, t2.run_id).await;
    let flags: Vec<(&str, bool, bool)> =
        r2.iter().map(|(t, _, c, d)| (t.as_str(), *c, *d)).collect();
    assert_eq!(
        flags,
        [
            ("list_invoices", false, false),
            ("invoice_table", false, true)
        ]
    );
    let s2 = final_state(&s.server, t2.run_id).await;
    assert_eq!(s2["answer"], table);
    assert_eq!(
        s2["entities"],
        customer("C-1001", "Acme Corporation"),
        "kept through a turn that names no customer"
    );
    let (ok, report) = aisdk_validate(&t2.sse);
    assert!(ok, "{report}");
    recorded(&s.server, t2.run_id).await;
    let stored = s.server.state.store.messages("acme").await.unwrap();
    assert!(
        stored
            .last()
            .unwrap()
            .parts
            .to_string()
            .contains("INV-2024-0518"),
        "the stored answer holds the table"
    );

    t2
}

/// Turn 3: the same lookup again, served from the cache.
async fn the_repeated_lookup_comes_from_the_cache(
    s: &Session,
    history: &[Value],
    t1: &Streamed,
    r1: &[(String, Value, bool, bool)],
) {
    let t3 = chat(
        &s.client,
        &s.server,
        "acme",
        "assistant",
        history,
        "submit-message",
    )
    .await;
    assert!(
        system(&s.model.requests()[4]).contains("(id C-1001)"),
        "still active two turns later"
    );
    let r3 = tool_results(&s.server, t3.run_id).await;
    assert_eq!(
        (r3[0].0.as_str(), r3[0].2),
        ("find_customer", true),
        "served from the cache: {r3:?}"
    );
    assert_eq!(r3[0].1, r1[0].1, "the cached result is the first one");
    assert_eq!(
        t3.tool_chunk("find_customer", "tool-output-available")
            .map(|c| c["providerMetadata"].clone()),
        Some(json!({"stategraph": {"cached": true}})),
        "the stream says the result came from the cache: {}",
        t3.sse
    );
    assert!(
        t1.tool_chunk("find_customer", "tool-output-available")
            .is_some_and(|c| c.get("providerMetadata").is_none()),
        "a fresh result carries no cache metadata"
    );
    let (ok, report) = aisdk_validate(&t3.sse);
    assert!(ok, "{report}");
    let mcp = s.server.state.mcp.as_ref().unwrap();
    let counts = mcp
        .call_tool("business", "call_counts", json!({}))
        .await
        .unwrap();
    assert_eq!(
        counts,
        json!({"find_customer": 1, "list_invoices": 1, "invoice_table": 1})
    );
}

/// Another chat: Globex, then Initech; regenerating the Initech turn
/// continues from the Globex turn, not from the answer it replaces.
async fn a_regenerated_turn_starts_from_the_turn_before(s: &Session) {
    let mut other = vec![msg("g1", "user", "find Globex")];
    let g1 = chat(
        &s.client,
        &s.server,
        "regen",
        "assistant",
        &other,
        "submit-message",
    )
    .await;
    other.push(msg(&g1.message_id, "assistant", &g1.text()));
    other.push(msg("g2", "user", "and Initech?"));
    let g2 = chat(
        &s.client,
        &s.server,
        "regen",
        "assistant",
        &other,
        "submit-message",
    )
    .await;
    assert!(system(&s.model.requests()[8]).contains("(id C-1002)"));
    assert_eq!(
        final_state(&s.server, g2.run_id).await["entities"],
        customer("C-1003", "Initech")
    );
    let g2b = chat(
        &s.client,
        &s.server,
        "regen",
        "assistant",
        &other,
        "regenerate-message",
    )
    .await;
    let prompt = system(&s.model.requests()[10]).to_owned();
    assert!(
        prompt.contains("Globex Industries (id C-1002)") && !prompt.contains("C-1003"),
        "the regenerated turn starts from the turn before it:\n{prompt}"
    );
    assert_eq!(
        final_state(&s.server, g2b.run_id).await["entities"],
        customer("C-1002", "Globex Industries")
    );
}

/// The text of the last user message of a request, and the content of the
/// tool results after it (what a model sees of this turn).
fn turn_of(req: &ChatRequest) -> (String, Vec<String>) {
    let at = req
        .messages
        .iter()
        .rposition(|m| matches!(m, ChatMessage::User { .. }))
        .unwrap_or(0);
    let user = match &req.messages[at] {
        ChatMessage::User { content } => content.clone(),
        _ => String::new(),
    };
    let results = req.messages[at..]
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect();
    (user, results)
}

/// A log collector for the process's JSON log lines.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// The JSON lines whose `request_id` is `id`.
    fn of_request(&self, id: &str) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["request_id"] == id)
            .collect()
    }
}

#[tokio::test]
async fn assistant_shows_tagged_results_verbatim_fills_the_active_customer_and_logs_each_tool_step()
{
    use tracing_subscriber::layer::SubscriberExt;
    // This test's process logs as `log_format = "json"` does, into `logs`.
    let logs = Logs::default();
    let sink = logs.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::INFO)
            .with(stategraph::internals::telemetry::json_layer(move || {
                sink.clone()
            })),
    )
    .expect("no other subscriber in this test's process");
    tokio::time::timeout(TEST_LIMIT, async {
        let mut config = business_config();
        config.servers.get_mut("business").unwrap().tools.insert(
            "search_customer_list".into(),
            toml::from_str("cache_ttl = \"5m\"").unwrap(),
        );
        // Decides only from what the request carries: the user's words, the
        // prompt (the active customer) and this turn's tool results.
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let model = ScriptedModel::from_fn(move |req: &ChatRequest| {
            counted.fetch_add(1, Ordering::SeqCst);
            let (user, results) = turn_of(req);
            let last = results.last().map(String::as_str).unwrap_or("");
            if user.starts_with("remind") {
                return match results.len() {
                    0 => Turn::tool("send_invoice_reminder", json!({"invoice_id": "INV-0000"})),
                    // Corrects itself from the failure, which names the invoices.
                    _ if last.contains("\"error\":true") && last.contains("INV-2024-0620") => {
                        Turn::tool("send_invoice_reminder", json!({"invoice_id": "INV-2024-0620"}))
                    }
                    _ => Turn::text(format!("unexpected: {last}")),
                };
            }
            if !results.is_empty() {
                return Turn::text(format!("Here is what I found: {last}. Is the address right?"));
            }
            if user.starts_with("search customers") {
                Turn::tool("search_customer_list", json!({"search": "Acme"}))
            } else if user == "show their invoices" && system(req).contains("(id C-1004)") {
                // Leaves the id out: the runtime fills it from the active customer.
                Turn::tool("search_invoice_list", json!({}))
            } else if user.starts_with("find Globex") {
                Turn::tool("find_customer_by_name", json!({"customer_name": "Globex"}))
            } else {
                Turn::text("I do not know which customer you mean.")
            }
        })
        .shared();
        let s = Session::start(config, model).await;
        let (server, client) = (&s.server, &s.client);
        let mut history = Vec::new();
        let turn = |history: &mut Vec<Value>, id: &str, text: &str| {
            history.push(msg(id, "user", text));
            history.clone()
        };

        // 1. A list under `result`: its latest item is the active customer
        // (`customer_name`), and the address-confirmation flag is raised.
        let h = turn(&mut history, "u1", "search customers named Acme");
        let t1 = chat(client, server, "inv", "assistant", &h, "submit-message").await;
        let s1 = final_state(server, t1.run_id).await;
        assert_eq!(
            s1["entities"],
            json!([{"kind": "customer", "id": "C-1004", "name": "Acme Logistics GmbH", "source": "search_customer_list"}])
        );
        assert_eq!(s1["awaiting_address_confirmation"], true);
        assert!(
            t1.chunks.iter().any(|c| c["type"] == "data-awaiting-address-confirmation" && c["data"] == true),
            "the flag reaches the UI: {}",
            t1.sse
        );
        let (ok, report) = aisdk_validate(&t1.sse);
        assert!(ok, "{report}");

        // 2. "their" invoices: the model omits the id, the runtime fills it;
        // the `<table>` result is the answer, verbatim, with no model call after it.
        history.push(msg(&t1.message_id, "assistant", &t1.text()));
        let h = turn(&mut history, "u2", "show their invoices");
        let before = calls.load(Ordering::SeqCst);
        let t2 = chat(client, server, "inv", "assistant", &h, "submit-message").await;
        let input = t2.tool_chunk("search_invoice_list", "tool-input-available").expect("called");
        assert_eq!(input["input"], json!({"customer_id": "C-1004"}), "filled from the active customer");
        let answer = t2.text();
        assert!(answer.starts_with("<table>[") && answer.contains("INV-2024-0620"), "{answer}");
        assert_eq!(calls.load(Ordering::SeqCst), before + 1, "no model call after a display-ready result");
        let s2 = final_state(server, t2.run_id).await;
        assert_eq!((s2["answer"].as_str(), s2["awaiting_address_confirmation"].as_bool()), (Some(answer.as_str()), Some(false)));
        let (ok, report) = aisdk_validate(&t2.sse);
        assert!(ok, "{report}");

        // 3. A failed call corrected from its error, then a result flagged
        // [DISPLAY_VERBATIM]: shown as it is, the marker nowhere on the stream.
        history.push(msg(&t2.message_id, "assistant", &answer));
        let h = turn(&mut history, "u3", "remind them about the open invoice");
        let t3 = chat(client, server, "inv", "assistant", &h, "submit-message").await;
        assert_eq!(
            t3.text(),
            "Reminder for INV-2024-0620 (3,100.00 EUR) sent to finance@acme-logistics.example."
        );
        assert!(!t3.sse.contains("DISPLAY_VERBATIM"), "{}", t3.sse);
        let r3 = tool_results(server, t3.run_id).await;
        assert_eq!(r3.iter().map(|r| r.3).collect::<Vec<_>>(), [true], "one success, shown");
        // Every step of both calls is logged with this request's id.
        let lines = logs.of_request(&t3.request_id);
        let said: Vec<&str> = lines.iter().filter_map(|l| l["fields"]["message"].as_str()).collect();
        for step in ["executing tool", "tool arguments parsed", "tool started", "tool finished", "tool failed"] {
            assert!(said.contains(&step), "no `{step}` line for request {}: {said:?}", t3.request_id);
        }
        assert_eq!(said.iter().filter(|m| **m == "executing tool").count(), 2, "{said:?}");
        assert!(
            lines.iter().any(|l| l["fields"]["message"] == "tool failed"
                && l["fields"]["error_type"].as_str().is_some_and(|t| t.ends_with("_error") || t == "not_found")),
            "{lines:?}"
        );

        // 4. The same search again: from the cache, and the stream says so.
        history.push(msg(&t3.message_id, "assistant", &t3.text()));
        let h = turn(&mut history, "u4", "search customers named Acme again");
        let t4 = chat(client, server, "inv", "assistant", &h, "submit-message").await;
        assert_eq!(
            t4.tool_chunk("search_customer_list", "tool-output-available").map(|c| c["providerMetadata"].clone()),
            Some(json!({"stategraph": {"cached": true}})),
            "{}",
            t4.sse
        );
        let (ok, report) = aisdk_validate(&t4.sse);
        assert!(ok, "{report}");

        // 5. A single record under `result` (`name`): Globex becomes active.
        history.push(msg(&t4.message_id, "assistant", &t4.text()));
        let h = turn(&mut history, "u5", "find Globex by name");
        let t5 = chat(client, server, "inv", "assistant", &h, "submit-message").await;
        assert_eq!(
            final_state(server, t5.run_id).await["entities"],
            json!([{"kind": "customer", "id": "C-1002", "name": "Globex Industries", "source": "find_customer_by_name"}])
        );
        let counts = server.state.mcp.as_ref().unwrap().call_tool("business", "call_counts", json!({})).await.unwrap();
        assert_eq!(counts["search_customer_list"], 1, "{counts}");
        // Every turn re-executes from its recording alone.
        assert!(crate::support::assert_all_reexecute(&server.state).await >= 5);
        s.server.shutdown().await;
    })
    .await
    .expect("the test took longer than its time limit");
}

#[tokio::test]
async fn the_assistant_graph_is_served_without_its_mcp_server() {
    // The shipped file, on a registry with nothing configured: the graph
    // declares `business` external, so it validates; its agent has no tools.
    let root = crate::support::root();
    let cat = crate::support::registries().load(&root.join("graphs"), &root.join("prompts"));
    let graph = cat
        .get("assistant")
        .unwrap_or_else(|| panic!("{:#?}", cat.diagnostics));
    assert_eq!(graph.external_tools, ["business"]);
    assert_eq!(
        graph.chat.carry.iter().map(|f| &**f).collect::<Vec<_>>(),
        ["entities"]
    );
    assert!(
        crate::support::registries()
            .tools
            .expand(&["business".to_owned()])
            .is_empty()
    );
}

#[tokio::test]
async fn the_chat_graph_carries_its_summary_so_it_is_not_rewritten_every_turn() {
    let summaries = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&summaries);
    let model = ScriptedModel::from_fn(move |req: &ChatRequest| {
        let system = match req.messages.first() {
            Some(ChatMessage::System { content }) => content.as_str(),
            _ => "",
        };
        if req
            .response_format
            .as_ref()
            .is_some_and(|f| f.name == "intent_classification")
        {
            return Turn::json(
                json!({"intent": "DIRECT", "reasoning": "chat", "missing_slots": [], "detected_language": "en"}),
            );
        }
        if system.starts_with("You maintain a running summary") {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            return Turn::text(format!("SUMMARY-{n}"));
        }
        // The direct answer shows which summary its prompt got.
        let seen = system
            .split_whitespace()
            .find(|w| w.starts_with("SUMMARY-"))
            .unwrap_or("none");
        Turn::text(format!("seen {seen}"))
    });
    let server = TestServer::start(Arc::new(model), |_| {}).await;
    let client = reqwest::Client::new();
    // 21 messages: past `first_after: 20`, so the first turn summarizes.
    let mut history: Vec<Value> = (0..20)
        .map(|i| {
            msg(
                &format!("m{i}"),
                if i % 2 == 0 { "user" } else { "assistant" },
                &format!("message {i}"),
            )
        })
        .collect();
    history.push(msg("m20", "user", "first question"));
    let t1 = chat(&client, &server, "long", "chat", &history, "submit-message").await;
    assert_eq!(summaries.load(Ordering::SeqCst), 1);
    assert_eq!(t1.text(), "seen SUMMARY-1");
    // 23 messages, 2 past the 21 summarized (`every: 8`): no new summary,
    // and the answer still sees the carried one.
    history.push(msg(&t1.message_id, "assistant", &t1.text()));
    history.push(msg("m22", "user", "second question"));
    let t2 = chat(&client, &server, "long", "chat", &history, "submit-message").await;
    assert_eq!(
        summaries.load(Ordering::SeqCst),
        1,
        "the carried summary is still fresh"
    );
    assert_eq!(t2.text(), "seen SUMMARY-1");
    let run = server
        .state
        .store
        .get_run(t2.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            run.input["summary"].as_str(),
            run.input["summarized_count"].as_u64()
        ),
        (Some("SUMMARY-1"), Some(21))
    );
    server.shutdown().await;
}
