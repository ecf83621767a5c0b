//! A chat request for a graph that is not served says why (issue 31):
//! a graph whose file failed validation is named with its diagnostics
//! (file:line:col and code), not answered `unknown_graph … (available: )`.

use serde_json::json;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};

use crate::support::JsonBody;
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

const GOOD: &str = r#"
state: chat
entry: answer
nodes:
  - { id: answer, kind: llm, prompt: chat/direct.md, input: query, output: answer }
edges: [answer -> END]
"#;

/// `answer -> nowhere`: an edge to a node that does not exist (line 6).
const BROKEN: &str = r#"
state: chat
entry: answer
nodes:
  - { id: answer, kind: llm, prompt: chat/direct.md, input: query, output: answer }
edges: [answer -> nowhere]
"#;

async fn refusal(server: &TestServer, graph: &str) -> serde_json::Value {
    let mut body = chat_body(&format!("c-{graph}"), "hello");
    body["graph"] = json!(graph);
    let resp = post_json(&reqwest::Client::new(), &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 400);
    resp.json_value().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_graph_is_named_with_its_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::write(graphs.join("good.yaml"), GOOD).unwrap();
    std::fs::write(graphs.join("broken.yaml"), BROKEN).unwrap();
    let model = ScriptedModel::from_fn(|_| Turn::text("hi")).shared();
    let server = TestServer::start(model, move |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = crate::support::root().join("prompts");
    })
    .await;

    let e = refusal(&server, "broken").await;
    assert_eq!(e["error"]["code"], "unknown_graph", "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("graph `broken` was rejected"), "{message}");
    assert!(message.contains("broken.yaml:6:"), "the place: {message}");
    assert!(message.contains("nowhere"), "what is wrong: {message}");

    let e = refusal(&server, "nope").await;
    let message = e["error"]["message"].as_str().unwrap();
    assert_eq!(message, "no graph `nope` (available: good)");
    server.shutdown().await;
}
