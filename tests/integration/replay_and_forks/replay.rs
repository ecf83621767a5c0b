//! Replay for debugging: the stored events reproduce the live stream byte
//! for byte, re-execution from the recording matches (and finds the first
//! divergence after a prompt edit), forks start from a checkpoint with
//! edited state.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::events::{EventKind, ToolReturn};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::ScriptedModel;
use stategraph::internals::llm::scripted::Turn;
use stategraph::internals::llm::{ChatMessage, ChatRequest, Models};
use stategraph::internals::replay;
use stategraph::internals::runs::LogCheckpointer;
use stategraph::internals::runtime::{self, RunOptions, Services};
use stategraph::internals::store::memory::MemoryStore;
use stategraph::internals::store::{RunStore, Store};
use uuid::Uuid;

use crate::support::server::TestServer;
use crate::support::{chat_body, post_json, root};

fn model() -> Arc<ScriptedModel> {
    Arc::new(answering())
}

/// The model behind [`model`], unshared (to be given a name).
fn answering() -> ScriptedModel {
    ScriptedModel::from_fn(|req: &ChatRequest| {
        if req
            .response_format
            .as_ref()
            .is_some_and(|f| f.name == "intent_classification")
        {
            return Turn::json(
                json!({"intent": "RESEARCH", "reasoning": "r", "missing_slots": [], "detected_language": "en"}),
            );
        }
        if req.response_format.is_some() {
            return Turn::json(json!({"questions": ["A?", "B?"]}));
        }
        if !req.tools.is_empty()
            && !req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }))
        {
            return Turn::tool("current_time", json!({}));
        }
        Turn::text("It is time to answer.")
    })
}

/// A model that fails every call: re-execution must not reach it.
fn unreachable_model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new([]))
}

#[tokio::test]
async fn replaying_the_log_gives_the_bytes_the_client_received() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = TestServer::start_with_store(model(), Arc::clone(&store), |_| {}).await;
    let client = reqwest::Client::new();
    let live = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("replay-1", "what time is it?"),
    )
    .await
    .text()
    .await
    .unwrap();
    let run_id: Uuid = live
        .split("\"runId\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    server.shutdown().await;
    let (run, events) = replay::load(&*store, run_id).await.unwrap();
    assert_eq!(
        run.status,
        stategraph::internals::runtime::RunStatus::Finished
    );
    let bytes = replay::sse(&events).unwrap();
    let without_keepalive: String = live
        .split_inclusive("\n\n")
        .filter(|f| !f.starts_with(':'))
        .collect();
    assert_eq!(bytes, without_keepalive);
    let timeline = replay::timeline(&run, &events);
    assert!(timeline.contains("research finished in"), "{timeline}");
    assert!(timeline.contains("tool current_time ok"), "{timeline}");
}

async fn recorded_run(
    store: &Arc<MemoryStore>,
) -> (Arc<stategraph::internals::nodes::Graph>, Uuid) {
    let cat = crate::support::shipped_catalog();
    let graph = Arc::clone(cat.get("chat").unwrap());
    let opts = RunOptions {
        checkpointer: Some(Arc::new(LogCheckpointer::new(
            store.clone() as Arc<dyn Store>
        ))),
        snapshot_every: 2,
        ..Default::default()
    };
    let run_id = opts.run_id;
    store
        .create_run(stategraph::internals::store::RunRecord {
            id: run_id,
            chat_id: None,
            user_id: "u".into(),
            graph: "chat".into(),
            graph_version: graph.version.clone(),
            status: stategraph::internals::runtime::RunStatus::Running,
            input: Value::Null,
            created_at: 0,
            finished_at: None,
            error: None,
            usage: Default::default(),
            parent: None,
            request_id: None,
            message_id: None,
            last_seq: 0,
            last_step: 0,
        })
        .await
        .unwrap();
    let input = json!({"messages": [{"id": "u1", "role": "user", "content": "what time is it?"}], "query": "what time is it?"});
    runtime::run(
        Arc::clone(&graph),
        crate::support::services(model()),
        input,
        opts,
    )
    .await
    .unwrap();
    (graph, run_id)
}

#[tokio::test]
async fn reexecution_serves_every_call_from_the_recording_and_matches() {
    let store = Arc::new(MemoryStore::new());
    let (graph, run_id) = recorded_run(&store).await;
    let (_, events) = replay::load(&*store, run_id).await.unwrap();
    let services = Services::new(
        Models::single(unreachable_model()),
        Arc::clone(&crate::support::registries().tools),
    );
    let r = replay::reexecute(graph, services, &events).await.unwrap();
    assert!(r.divergence.is_none(), "{}", r.report());
    assert!(r.same_version);
    assert!(r.report().starts_with("no divergence"));
    // The clock tool was not called again: its recorded answer came back.
    let time = |evs: &[stategraph::internals::events::Event]| {
        evs.iter().find_map(|e| match &e.event {
            EventKind::ToolResult(tool_return) => {
                let ToolReturn { output, .. } = &**tool_return;
                Some(output.clone())
            }
            _ => None,
        })
    };
    assert_eq!(time(&r.events), time(&events));
}

#[tokio::test]
async fn after_a_prompt_edit_reexecution_reports_the_first_divergence() {
    let store = Arc::new(MemoryStore::new());
    let (_, run_id) = recorded_run(&store).await;
    let (_, events) = replay::load(&*store, run_id).await.unwrap();
    // The same graph with an edited narrator prompt.
    let dir = root().join("prompts");
    let mut sources: Vec<(String, String)> = std::fs::read_dir(dir.join("chat"))
        .unwrap()
        .flatten()
        .map(|e| {
            (
                format!("chat/{}", e.file_name().to_string_lossy()),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    for (name, text) in &mut sources {
        if name == "chat/narrator.md" {
            text.push_str("\nAlways end with a joke.\n");
        }
    }
    let prompts =
        Prompts::from_sources(&dir, sources.iter().map(|(a, b)| (a.as_str(), b.as_str())));
    let yaml = std::fs::read_to_string(root().join("graphs/chat.yaml")).unwrap();
    let cat = crate::support::registries().from_sources(&[("chat", &yaml)], prompts);
    let edited = Arc::clone(cat.get("chat").unwrap());
    let services = Services::new(
        Models::single(unreachable_model()),
        Arc::clone(&crate::support::registries().tools),
    );
    let r = replay::reexecute(edited, services, &events).await.unwrap();
    assert!(!r.same_version);
    let (_, recorded, now) = r.divergence.clone().expect("a divergence");
    let (recorded, now) = (recorded.unwrap(), now.unwrap());
    assert_eq!(recorded.node.as_deref(), Some("narrator"));
    assert!(
        matches!(recorded.event, EventKind::LlmStarted(_))
            && matches!(now.event, EventKind::LlmStarted(_))
    );
    assert!(r.report().contains("first divergence"), "{}", r.report());
}

fn after(step: Option<u32>, node: Option<&str>, set: &[(&str, Value)]) -> replay::Edit {
    replay::Edit {
        step,
        mode: stategraph::internals::events::ForkMode::After,
        node: node.map(str::to_owned),
        set: set
            .iter()
            .map(|(f, v)| ((*f).to_owned(), v.clone()))
            .collect(),
    }
}

#[tokio::test]
async fn a_fork_after_the_router_routes_again_from_the_edit() {
    let store = Arc::new(MemoryStore::new());
    let (graph, run_id) = recorded_run(&store).await;
    // After step 2 the router has decided; say it decided DIRECT instead.
    let at2 = replay::state_at(&*store, &graph, run_id, 2).await.unwrap();
    assert_eq!(at2.to_json()["intent"], "RESEARCH");
    let point = replay::fork_point(
        &*store,
        &graph,
        run_id,
        &after(Some(2), None, &[("intent", json!("DIRECT"))]),
    )
    .await
    .unwrap();
    let next: Vec<&str> = point.resume.next.iter().map(|t| t.node.as_str()).collect();
    assert_eq!(
        next,
        ["direct"],
        "routed again from the edit, not the recorded frontier"
    );
    assert_eq!(
        point.origin.nodes,
        ["router"],
        "the step's only node by default"
    );
    // The same by node alone: the router ran once, in step 2.
    let by_node = replay::fork_point(
        &*store,
        &graph,
        run_id,
        &after(None, Some("router"), &[("intent", json!("DIRECT"))]),
    )
    .await
    .unwrap();
    assert_eq!(by_node.origin.step, 2);
    let bad = replay::fork_point(
        &*store,
        &graph,
        run_id,
        &after(Some(2), None, &[("nope", json!(1))]),
    )
    .await;
    assert!(matches!(
        bad,
        Err(replay::ReplayError::Edit(
            replay::EditError::UnknownField { .. }
        ))
    ));
    let opts = RunOptions {
        forked_from: Some(point.origin.clone()),
        ..Default::default()
    };
    let out = runtime::resume(graph, crate::support::services(model()), point.resume, opts)
        .await
        .unwrap();
    assert_eq!(out.state.to_json()["intent"], "DIRECT");
    assert_eq!(out.state.to_json()["answer"], "It is time to answer.");
}

#[tokio::test]
async fn the_runs_api_serves_history_events_state_and_forks_per_user() {
    let server = TestServer::start(model(), |c| {
        c.auth.api_keys.insert("ka".into(), "alice".into());
        c.auth.api_keys.insert("kb".into(), "bob".into());
    })
    .await;
    let alice = Keyed::new(&server, "ka");
    let live = alice
        .post(
            "/api/chat",
            chat_body("runs-1", "what time is it?").to_string(),
        )
        .await
        .text()
        .await
        .unwrap();
    let runs = alice.get_json("/api/runs?chat=runs-1").await;
    let run = runs["runs"][0].clone();
    assert_eq!(run["status"], "finished");
    let id = run["id"].as_str().unwrap().to_owned();
    let one = alice.get_json(&format!("/api/runs/{id}")).await;
    assert_eq!(one["chatId"], "runs-1");
    timing_covers_every_node(&one["timing"]);
    events_page_and_replay_the_live_bytes(&alice, &id, &live).await;
    a_fork_with_an_edit_finishes_from_it(&alice, &id).await;
    bob_sees_none_of_it(&Keyed::new(&server, "kb"), &id).await;
    server.shutdown().await;
}

/// A client of `server` sending one API key.
struct Keyed<'a> {
    client: reqwest::Client,
    server: &'a TestServer,
    key: &'static str,
}

impl<'a> Keyed<'a> {
    fn new(server: &'a TestServer, key: &'static str) -> Self {
        Self {
            client: reqwest::Client::new(),
            server,
            key,
        }
    }

    fn with_key(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        rb.header("authorization", format!("Bearer {}", self.key))
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        let rb = self.client.get(self.server.url(path));
        self.with_key(rb).send().await.unwrap()
    }

    async fn get_json(&self, path: &str) -> Value {
        serde_json::from_str(&self.get(path).await.text().await.unwrap()).unwrap()
    }

    async fn post(&self, path: &str, body: String) -> reqwest::Response {
        let rb = self
            .client
            .post(self.server.url(path))
            .header("content-type", "application/json");
        self.with_key(rb).body(body).send().await.unwrap()
    }
}

/// The run's timing: the first visible part came before the end, and every
/// node task that ran has a latency.
fn timing_covers_every_node(timing: &Value) {
    let first = timing["firstVisibleMs"].as_f64().unwrap();
    let total = timing["totalMs"].as_f64().unwrap();
    assert!(first <= total, "{timing}");
    let nodes: Vec<&str> = timing["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    for node in ["summarizer", "router", "research", "narrator"] {
        assert!(nodes.contains(&node), "{node} in {nodes:?}");
    }
    assert!(
        timing["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["ms"].as_f64().unwrap() <= total && n["attempts"].as_u64() >= Some(1))
    );
}

/// The events come in pages, and as SSE they are the bytes the client saw
/// live (keep-alive comments aside); the state at a step is readable.
async fn events_page_and_replay_the_live_bytes(alice: &Keyed<'_>, id: &str, live: &str) {
    let events = alice
        .get_json(&format!("/api/runs/{id}/events?limit=5"))
        .await;
    assert_eq!(events["events"].as_array().unwrap().len(), 5);
    assert_eq!(events["next"], 5);
    let rb = alice
        .client
        .get(alice.server.url(&format!("/api/runs/{id}/events")))
        .header("accept", "text/event-stream");
    let sse = alice
        .with_key(rb)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let live: String = live
        .split_inclusive("\n\n")
        .filter(|f| !f.starts_with(':'))
        .collect();
    assert_eq!(sse, live, "the replayed SSE equals the live bytes");
    let state = alice
        .get_json(&format!("/api/runs/{id}/state?step=2"))
        .await;
    assert_eq!(state["state"]["intent"], "RESEARCH");
}

/// A fork at step 2 with the intent edited runs to its end from there and
/// names its parent.
async fn a_fork_with_an_edit_finishes_from_it(alice: &Keyed<'_>, id: &str) {
    let fork = alice
        .post(
            &format!("/api/runs/{id}/fork"),
            json!({"at": 2, "set": {"intent": "DIRECT"}}).to_string(),
        )
        .await;
    assert_eq!(fork.status(), 202);
    let body: Value = serde_json::from_str(&fork.text().await.unwrap()).unwrap();
    let child = body["runId"].as_str().unwrap().to_owned();
    let mut status = Value::Null;
    for _ in 0..100 {
        let r = alice.get_json(&format!("/api/runs/{child}")).await;
        status = r["status"].clone();
        if status != "running" {
            assert_eq!(r["parent"]["run_id"], id);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(status, "finished");
    let final_state = alice.get_json(&format!("/api/runs/{child}/state")).await;
    assert_eq!(final_state["state"]["intent"], "DIRECT");
}

/// Another user sees none of the run: not found everywhere, and no runs.
async fn bob_sees_none_of_it(bob: &Keyed<'_>, id: &str) {
    for path in [
        format!("/api/runs/{id}"),
        format!("/api/runs/{id}/events"),
        format!("/api/runs/{id}/state"),
        "/api/runs?chat=runs-1".to_owned(),
    ] {
        assert_eq!(bob.get(&path).await.status(), 404, "{path}");
    }
    let r = bob
        .post(&format!("/api/runs/{id}/fork"), "{\"at\":1}".into())
        .await;
    assert_eq!(r.status(), 404);
    let bobs = bob.get_json("/api/runs").await;
    assert_eq!(bobs["runs"], json!([]));
}

/// A graph whose answer node has a fallback role, with a tool.
const FALLBACK_GRAPH: &str = r#"
state: chat
entry: answer
nodes:
  - id: answer
    kind: agent
    prompt: chat/direct.md
    model: primary
    fallback_model: backup
    surface: answer
    tools: [basic]
    input: query
    max_iterations: 3
    output: answer
edges: [answer -> END]
"#;

#[tokio::test]
async fn a_run_answered_by_the_fallback_model_reexecutes_without_divergence() {
    let reg = crate::support::registries();
    let cat = reg.from_sources(
        &[("fallback", FALLBACK_GRAPH)],
        Prompts::load(&root().join("prompts")),
    );
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    let graph = Arc::clone(cat.get("fallback").unwrap());
    // The primary fails before answering every time; the backup answers.
    // Models with different names: a recording that served a call under
    // the other model's name would diverge (issue 31).
    let primary = Arc::new(
        ScriptedModel::from_fn(|_| {
            Turn::Fail(stategraph::internals::llm::LlmError::Http {
                status: 400,
                message: "primary is down".into(),
            })
        })
        .named("primary-model"),
    );
    let models =
        Models::single(Arc::new(answering().named("backup-model"))).with_role("primary", primary);
    let services = Arc::new(Services::new(models, Arc::clone(&reg.tools)));
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let input = json!({"messages": [{"id": "u1", "role": "user", "content": "what time is it?"}], "query": "what time is it?"});
    let out = runtime::run(
        Arc::clone(&graph),
        services,
        input,
        RunOptions {
            events: Some(tx),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(out.state.to_json()["answer"], "It is time to answer.");
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push((*e).clone());
    }
    let failed = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::LlmFailed(_)))
        .count();
    assert!(failed >= 1, "the primary's failures are recorded");
    let services = Services::new(Models::single(unreachable_model()), Arc::clone(&reg.tools));
    let r = replay::reexecute(graph, services, &events).await.unwrap();
    assert!(r.divergence.is_none(), "{}", r.report());
}

/// A run stored without a single checkpoint (it failed before its first
/// step was written) has no state to show: `GET /api/runs/{id}/state` is
/// `no_checkpoint`, 400 — the request names a state that does not exist —
/// not a 404 (the run exists) nor a 500.
#[tokio::test]
async fn the_state_of_a_run_with_no_checkpoint_is_no_checkpoint_400() {
    let server = TestServer::start(model(), |_| {}).await;
    let id = Uuid::now_v7();
    server
        .state
        .store
        .create_run(stategraph::internals::store::RunRecord {
            id,
            chat_id: None,
            user_id: "local".into(),
            graph: "chat".into(),
            graph_version: "v1".into(),
            status: runtime::RunStatus::Failed,
            input: json!({"query": "hello"}),
            created_at: stategraph::internals::events::now_micros(),
            finished_at: Some(stategraph::internals::events::now_micros()),
            error: None,
            usage: Default::default(),
            parent: None,
            request_id: None,
            message_id: None,
            last_seq: 0,
            last_step: 0,
        })
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let run = client
        .get(server.url(&format!("/api/runs/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), 200, "the run itself is there");
    let r = client
        .get(server.url(&format!("/api/runs/{id}/state")))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("no_checkpoint")),
        "{body}"
    );
    server.shutdown().await;
}
