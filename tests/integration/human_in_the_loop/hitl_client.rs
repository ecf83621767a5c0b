//! Human in the loop from the client's side: the AI SDK's own chat class
//! (`tests/hitl/hitl.test.mjs`, in node) approves, denies, answers a
//! client-side tool and a question against a real server; and another
//! user's answer, by the chat or by the runs API, is refused as if the
//! run did not exist.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use stategraph::internals::store::memory::MemoryStore;

use crate::support::hitl::{Fixture, fixture, fixture_with};
use crate::support::root;

#[tokio::test]
async fn the_ai_sdks_chat_client_approves_denies_answers_tools_and_questions() {
    let f = fixture().await;
    let script = root().join("tests/hitl/hitl.test.mjs");
    let out = tokio::process::Command::new("node")
        .arg(&script)
        .arg(f.server.url(""))
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "node is needed to run {} (install Node.js >= 20): {e}",
                script.display()
            )
        });
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{output}");
    assert!(
        out.status.success(),
        "{} failed ({}):\n{output}",
        script.display(),
        out.status
    );
    for case in ["approve", "deny", "clientTool", "question"] {
        assert!(output.contains(&format!("ok   {case}")), "{output}");
    }
    // Approved once in `approve` (then repeated, refused); denied and
    // forged in `deny`.
    assert_eq!(
        f.deletes.load(Ordering::SeqCst),
        1,
        "delete_record ran exactly once:\n{output}"
    );
    f.server.shutdown().await;
}

/// A request as `key`'s user.
async fn post_as(f: &Fixture, key: &str, path: &str, body: &Value) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(f.server.url(path))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn get_as(f: &Fixture, key: &str, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(f.server.url(path))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

#[tokio::test]
async fn another_users_answer_by_chat_or_runs_api_is_not_found_and_changes_nothing() {
    let f = fixture_with(Arc::new(MemoryStore::new()), |c| {
        c.auth.api_keys.insert("key-alice".into(), "alice".into());
        c.auth.api_keys.insert("key-bob".into(), "bob".into());
    })
    .await;
    let question = json!({"id": "u1", "role": "user",
        "parts": [{"type": "text", "text": "delete record 42"}]});
    let (status, sse) = post_as(
        &f,
        "key-alice",
        "/api/chat",
        &json!({"id": "alices", "graph": "approval", "trigger": "submit-message",
            "messages": [question]}),
    )
    .await;
    assert_eq!(status, 200, "{sse}");
    let chunks: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let find = |ty: &str| chunks.iter().find(|c| c["type"] == ty).cloned().unwrap();
    let message_id = find("start")["messageId"].as_str().unwrap().to_owned();
    let request = find("tool-approval-request");
    let call = request["toolCallId"].as_str().unwrap().to_owned();
    let approval = request["approvalId"].as_str().unwrap().to_owned();
    let (_, runs) = get_as(&f, "key-alice", "/api/runs?chat=alices").await;
    let run_id = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let run_path = format!("/api/runs/{run_id}");
    assert_eq!(
        get_as(&f, "key-alice", &run_path).await.1["status"],
        "interrupted"
    );

    // The continuation exactly as alice's `useChat` would send it.
    let continuation = json!({"id": "alices", "graph": "approval", "trigger": "submit-message",
        "messageId": message_id,
        "messages": [question, {"id": message_id, "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "dynamic-tool", "toolName": "delete_record", "toolCallId": call,
             "input": {"id": 42}, "state": "approval-responded",
             "approval": {"id": approval, "approved": true}}]}]});
    let (status, body) = post_as(&f, "key-bob", "/api/chat", &continuation).await;
    assert_eq!(status, 404, "bob answering alice's chat: {body}");
    let resume = format!("{run_path}/resume");
    for body in [
        json!({"answers": {approval.clone(): {"approved": true}}}),
        json!({"value": {"approved": true}}),
    ] {
        let (status, text) = post_as(&f, "key-bob", &resume, &body).await;
        assert_eq!(status, 404, "bob resuming alice's run with {body}: {text}");
    }
    assert_eq!(get_as(&f, "key-bob", &run_path).await.0, 404);
    assert_eq!(
        get_as(&f, "key-alice", &run_path).await.1["status"],
        "interrupted",
        "the run still waits for alice"
    );
    assert_eq!(f.deletes.load(Ordering::SeqCst), 0);

    // Alice's own answer still goes through, once.
    let (status, sse) = post_as(&f, "key-alice", "/api/chat", &continuation).await;
    assert_eq!(status, 200, "{sse}");
    assert!(sse.contains(r#""type":"tool-output-available""#), "{sse}");
    assert_eq!(f.deletes.load(Ordering::SeqCst), 1);
    assert_eq!(
        get_as(&f, "key-alice", &run_path).await.1["status"],
        "finished"
    );
    f.server.shutdown().await;
}

/// The ids of the stored chat's messages.
async fn stored_ids(f: &Fixture, chat: &str) -> Vec<String> {
    f.get(&format!("/api/chat/{chat}")).await["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_refused_answer_to_a_question_leaves_the_stored_chat_as_it_was() {
    let f = fixture().await;
    for (chat, graph, answer, code) in [
        ("c-mistyped", "ask", "lots", (422, "invalid_answer")),
        ("c-lapsed", "hurry", "yes", (410, "interrupt_expired")),
    ] {
        let first = json!({"id": chat, "graph": graph, "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "the report"}]}]});
        let (status, sse) = f.post("/api/chat", &first).await;
        assert_eq!(status, 200, "{sse}");
        let before = stored_ids(&f, chat).await;
        assert_eq!(before.len(), 2, "the question and what it asks");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut reply = first.clone();
        let messages = reply["messages"].as_array_mut().unwrap();
        messages.push(json!({"id": before[1], "role": "assistant", "parts": []}));
        messages
            .push(json!({"id": "u2", "role": "user", "parts": [{"type": "text", "text": answer}]}));
        let (status, body) = f.post("/api/chat", &reply).await;
        assert_eq!((status, body.contains(code.1)), (code.0, true), "{body}");
        assert_eq!(
            stored_ids(&f, chat).await,
            before,
            "{chat}: the refused answer is not stored"
        );
    }
    f.server.shutdown().await;
}
