//! `command.goto` with `Send` (`{node, input}`, what LangGraph's SDKs send
//! for `Send(node, arg)`) on the LangGraph API: the input is the task's
//! own, read by a map edge's target as its `item`; sent to a node no map
//! edge leads to it is 422, not dropped (src/server/langgraph/frontier.rs).

use serde_json::{Value, json};

/// `fan` maps `one` over `topics`; `one` appends what it is given to
/// `seen`, then `plain` (no map target) notes it is done.
const GRAPH: &str = r#"
entry: fan
state:
  fields:
    topics: { type: array, items: { type: string } }
    seen:   { type: array, reducer: append }
    note:   { type: string }
nodes:
  - id: fan
    kind: set
    set: { topics: [a, b] }
  - id: one
    kind: set
    set: { seen: ["{{ item }}"] }
  - id: plain
    kind: set
    set: { note: done }
edges:
  - from: fan
    map: { over: topics, to: one }
  - one -> plain
  - plain -> END
"#;

#[tokio::test]
async fn a_sends_input_reaches_its_node_as_its_item() {
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::write(graphs.join("fanout.yaml"), GRAPH).unwrap();
    let (mut child, base) = super::langgraph_api::serve_graphs(dir.path(), &graphs).await;
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        http.post(format!("{base}{path}"))
            .header("x-api-key", "key-a")
            .json(&body)
            .send()
    };
    let t: Value = post("/threads", json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = t["thread_id"].as_str().unwrap().to_owned();
    // Two Sends to `one` (two tasks, each with its input) and a plain goto.
    let goto = json!([{"node": "one", "input": "x"}, {"node": "one", "input": {"k": 2}}, "plain"]);
    let r = post(
        &format!("/threads/{t}/runs/wait"),
        json!({"assistant_id": "fanout", "input": {}, "command": {"goto": goto}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let values: Value = serde_json::from_str(r.text().await.unwrap().trim()).unwrap();
    assert_eq!(values["seen"], json!(["x", {"k": 2}]), "{values}");
    assert_eq!(values["note"], "done");
    assert_eq!(values["topics"], json!([]), "fan did not run");

    // A Send with input to a node no map edge leads to: 422, nothing runs.
    let r = post(
        &format!("/threads/{t}/runs/wait"),
        json!({"assistant_id": "fanout", "input": {}, "command": {"goto": {"node": "plain", "input": {"a": 1}}}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("map"), "{body}");
    let _ = child.kill().await;
}
