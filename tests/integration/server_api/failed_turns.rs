//! A turn whose run fails (#15 item 9), through the real server on SQLite
//! and PostgreSQL: the answering agent calls a tool, then its model breaks
//! mid-answer after streaming part of it and reporting its usage. The
//! agent is `on_error: fail` (by default an agent keeps a cut answer as a
//! truncated one and the run finishes; see docs/graph-files.md), so the run
//! fails. The client saw the half answer and an error; the stored
//! conversation has no half answer presented as an answer (a `data-error`
//! part instead), even after the client sends its copy back with the next
//! message; the run keeps every token it spent, the failed call's included.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};
use stategraph::internals::events::{EventKind, LlmFailure, Usage};
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmChunk, LlmError};
use stategraph::internals::runtime::RunStatus;
use stategraph::internals::store::Store;

use crate::support::JsonBody;
use crate::support::db::{PgDb, SqliteDb};
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

/// What the narrator streams before its connection breaks.
const HALF: [&str; 2] = ["GDP grew by", " 3.1% in"];
/// The usage it reported before breaking.
const HALF_USAGE: Usage = Usage {
    prompt_tokens: 100,
    completion_tokens: 5,
    cached_tokens: 0,
    reasoning_tokens: 0,
    cache_write_tokens: 0,
    cost_nano_usd: 0,
};

/// An answer node that fails the run when its model fails.
const STRICT_GRAPH: &str = r#"
state: chat
entry: answer
nodes:
  - id: answer
    kind: agent
    prompt: chat/direct.md
    surface: answer
    tools: [basic]
    input: query
    history: messages
    max_iterations: 3
    output: answer
    on_error: fail
edges: [answer -> END]
"#;

/// The answering model: a tool call, then (while `failing` is set) half an
/// answer and a broken stream, else a whole answer. Every request is kept
/// in `seen`.
struct Script {
    failing: AtomicBool,
    seen: Mutex<Vec<ChatRequest>>,
}

impl Script {
    fn turn(&self, req: &ChatRequest) -> Turn {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(req.clone());
        let used_tool = req
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::Tool { .. }));
        if used_tool && self.failing.load(Ordering::SeqCst) {
            let mut chunks: Vec<LlmChunk> =
                HALF.iter().map(|t| LlmChunk::Text((*t).into())).collect();
            chunks.push(LlmChunk::Usage(HALF_USAGE));
            return Turn::Chunks(chunks, Some(LlmError::Stream("connection reset".into())));
        }
        if !used_tool {
            return Turn::tool("calculator", json!({"expression": "6*7"}));
        }
        Turn::text("Growth was 2.9% that year.")
    }
}

fn script() -> (Arc<Script>, Arc<ScriptedModel>) {
    let script = Arc::new(Script {
        failing: AtomicBool::new(true),
        seen: Mutex::new(Vec::new()),
    });
    let s = Arc::clone(&script);
    (script, Arc::new(ScriptedModel::from_fn(move |r| s.turn(r))))
}

/// Text parts of a stored message, joined.
fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

async fn a_failed_turn_stores_no_half_answer_and_keeps_its_usage(store: Arc<dyn Store>) {
    let (script, model) = script();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("strict.yaml"), STRICT_GRAPH).unwrap();
    let graphs = dir.path().to_owned();
    let server = TestServer::start_with_store(model, store, move |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = crate::support::root().join("prompts");
    })
    .await;
    let client = reqwest::Client::new();

    // The client sees the half answer stream, then one error.
    let mut body = chat_body("f1", "GDP growth?");
    body["graph"] = json!("strict");
    let resp = post_json(&client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    assert!(
        sse.contains("GDP grew by"),
        "the half answer streamed live: {sse}"
    );
    assert_eq!(sse.matches("\"type\":\"error\"").count(), 1, "{sse}");
    assert!(
        !sse.contains("connection reset"),
        "internals stay inside: {sse}"
    );

    // Reloading the chat: the question, then a failed message with no text.
    let chat = client
        .get(server.url("/api/chat/f1"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    let messages = chat["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{chat}");
    let failed = &messages[1];
    assert_eq!(failed["role"], "assistant");
    assert_eq!(text_of(failed), "", "no half answer is stored: {failed}");
    assert_eq!(failed["metadata"]["finishReason"], "error");
    let run_id = failed["metadata"]["runId"].as_str().unwrap().to_owned();
    let last = failed["parts"].as_array().unwrap().last().unwrap();
    assert_eq!(last["type"], "data-error", "{failed}");
    assert_eq!(last["data"]["reference"], run_id.as_str());
    let tool = failed["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "dynamic-tool");
    assert_eq!(
        tool.map(|t| t["state"].clone()),
        Some(json!("output-available")),
        "what the run did stays: {failed}"
    );

    // The run is failed and keeps every token spent: the calls before the
    // narrator's and what the broken call reported.
    let run = server
        .state
        .store
        .get_run(run_id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let events = server.state.store.events(run.id, 0, 10_000).await.unwrap();
    let mut spent = Usage::default();
    let mut broken = Vec::new();
    for e in &events {
        spent += e.event.spent();
        if let EventKind::LlmFailed(llm_failure) = &e.event {
            let LlmFailure { usage, .. } = &**llm_failure;
            broken.push(*usage);
        }
    }
    assert!(
        !broken.is_empty() && broken.iter().all(|u| *u == HALF_USAGE),
        "{broken:?}"
    );
    let finished_calls = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::LlmFinished(_)))
        .count();
    assert_eq!(finished_calls, 1, "the tool call came first");
    assert_eq!(run.usage, spent, "the run's usage is every call's");
    assert!(
        run.usage.prompt_tokens > HALF_USAGE.prompt_tokens * broken.len() as u64,
        "calls before the failure count too: {:?}",
        run.usage
    );
    let api = client
        .get(server.url(&format!("/api/runs/{run_id}")))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(api["usage"]["promptTokens"], run.usage.prompt_tokens);

    // The client still holds the half answer and sends it back with its
    // next question: the stored failed message wins, and the model never
    // reads the half answer as an earlier answer.
    script.failing.store(false, Ordering::SeqCst);
    script.seen.lock().unwrap().clear();
    let failed_id = failed["id"].as_str().unwrap();
    let body = json!({
        "id": "f1",
        "messages": [
            messages[0],
            {"id": failed_id, "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "text", "text": HALF.concat(), "state": "streaming"}]},
            {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "And in 2020?"}]},
        ],
        "trigger": "submit-message",
        "graph": "strict",
    });
    let resp = post_json(&client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    assert!(sse.contains("\"finishReason\":\"stop\""), "{sse}");
    let stored = server.state.store.messages("f1").await.unwrap();
    assert_eq!(stored.len(), 4);
    assert_eq!(stored[1].id, failed_id);
    assert!(
        !stored[1].parts.to_string().contains("GDP grew by"),
        "the client's copy of the half answer is not stored: {:?}",
        stored[1].parts
    );
    assert!(text_of(&json!({"parts": stored[3].parts})).contains("Growth was 2.9%"));
    let seen = std::mem::take(&mut *script.seen.lock().unwrap());
    assert!(!seen.is_empty());
    for req in &seen {
        let sent = serde_json::to_string(&req.messages).unwrap();
        assert!(
            !sent.contains("GDP grew by"),
            "the model was shown the half answer: {sent}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_on_sqlite() {
    let db = SqliteDb::new();
    a_failed_turn_stores_no_half_answer_and_keeps_its_usage(db.open().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_on_postgres() {
    PgDb::with_store(4, a_failed_turn_stores_no_half_answer_and_keeps_its_usage).await;
}
