//! What was shown stays (issue 31, item 1), through the real server and
//! the stored chat: once the answer has streamed, a later node's failure
//! (here a card builder whose template renders something that is not
//! JSON, as the chat graph's card did on a tool result of another shape)
//! never removes it. The turn ends with the answer stored as streamed, a
//! `data-error` part naming the node, and `finishReason: "error"` — no
//! `error` chunk, which would put `useChat` in its error state beside a
//! good answer. The stream is checked with the AI SDK's own parser.

use std::sync::Arc;

use serde_json::json;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::runtime::RunStatus;
use stategraph::internals::store::{SqliteStore, Store};

use crate::support::JsonBody;
use crate::support::server::TestServer;
use crate::support::{aisdk_validate, chat_body, post_json, report_json};

const ANSWER: &str = "Qatar's GDP per capita was 87,661 USD in 2023.";

/// The answer streams, then a node after it fails the run.
const LATE_FAILURE: &str = r#"
state: chat
entry: answer
nodes:
  - { id: answer, kind: llm, prompt: chat/direct.md, surface: answer, input: query, history: messages, output: answer }
  - id: card
    kind: set
    set:
      quick_answer_card: "{{ '{' }} not json"
edges:
  - answer -> card
  - card -> END
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failing_after_the_answer_leaves_the_answer_stored_as_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("s.db")).await.unwrap());
    let graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::write(graphs.join("late.yaml"), LATE_FAILURE).unwrap();
    let model = ScriptedModel::from_fn(|_| Turn::text(ANSWER)).shared();
    let server = TestServer::start_with_store(model, store, move |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = crate::support::root().join("prompts");
    })
    .await;
    let client = reqwest::Client::new();

    let mut body = chat_body("s1", "GDP per capita of Qatar?");
    body["graph"] = json!("late");
    let resp = post_json(&client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "{report}\n{sse}");
    let live = report_json(&report);
    assert!(
        !sse.contains(r#""type":"error""#),
        "no error chunk beside a good answer: {sse}"
    );
    assert!(
        sse.contains(r#""finishReason":"error""#),
        "the finish reason tells the client: {sse}"
    );
    let live_parts = live["message"]["parts"].as_array().unwrap();
    let error = live_parts
        .iter()
        .find(|p| p["type"] == "data-error")
        .unwrap_or_else(|| panic!("a data-error part: {live}"));
    assert_eq!(error["data"]["node"], "card", "{error}");

    // Reloaded, the chat shows what the user saw: the answer, then the
    // failure as its own part.
    let chat = client
        .get(server.url("/api/chat/s1"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    let messages = chat["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{chat}");
    let stored = &messages[1];
    let parts = stored["parts"].as_array().unwrap();
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, ANSWER, "the answer is stored as streamed: {stored}");
    let last = parts.last().unwrap();
    assert_eq!(last["type"], "data-error", "{stored}");
    assert_eq!(last["data"]["node"], "card");
    let run_id = stored["metadata"]["runId"].as_str().unwrap().to_owned();
    assert_eq!(last["data"]["reference"], run_id.as_str());
    assert_eq!(stored["metadata"]["finishReason"], "error");
    assert_eq!(
        *parts, *live_parts,
        "the stored message is the one the client assembled"
    );

    // The run itself failed, and says so.
    let run = server
        .state
        .store
        .get_run(run_id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Failed);

    // The next turn sees the answer as an earlier answer.
    let body = json!({
        "id": "s1",
        "messages": [
            messages[0],
            stored,
            {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "And in 2020?"}]},
        ],
        "trigger": "submit-message",
        "graph": "late",
    });
    let resp = post_json(&client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await.unwrap();
    let kept = server.state.store.messages("s1").await.unwrap();
    assert_eq!(kept.len(), 4);
    assert!(kept[1].parts.to_string().contains(ANSWER));
    server.shutdown().await;
}
