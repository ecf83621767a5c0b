//! Human in the loop over HTTP: a run pauses at a tool approval, a
//! client-side tool or a question; the chat's next request (as `useChat`
//! sends it) or `POST /api/runs/{id}/resume` answers it; the run continues
//! from its checkpoint, its earlier model and tool calls served from the
//! log. Forged, repeated, mistyped and cross-user answers are refused and
//! change nothing; a lapsed wait fails the run; replay and re-execution go
//! through the pause.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use stategraph::internals::llm::offline::OfflineModel;
use stategraph::internals::runtime::RunStatus;
use stategraph::internals::store::Store;
use stategraph::internals::store::memory::MemoryStore;

use crate::support::hitl::{Fixture, fixture, fixture_with};
use crate::support::server::TestServer;
use crate::support::{aisdk_validate, assert_reexecutes};

/// A continuation's stream (it continues a message the client has, so the
/// standalone validator cannot assemble it): steps open before they close
/// and it ends with one `finish`.
fn assert_continuation(chunks: &[Value]) {
    let mut open = false;
    for c in chunks {
        match c["type"].as_str().unwrap_or("") {
            "start-step" => {
                assert!(!open, "a step opened twice: {chunks:?}");
                open = true;
            }
            "finish-step" => {
                assert!(open, "finish-step without start-step: {chunks:?}");
                open = false;
            }
            _ => {}
        }
    }
    assert_eq!(chunks[0]["type"], "start");
    assert_eq!(of_type(chunks, "finish").len(), 1);
    assert_eq!(chunks.last().unwrap()["type"], "finish");
}

/// The JSON chunks of an SSE body.
fn chunks(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn of_type<'a>(chunks: &'a [Value], ty: &str) -> Vec<&'a Value> {
    chunks.iter().filter(|c| c["type"] == ty).collect()
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

/// The assistant message as `useChat` holds it after the paused stream,
/// with `answer` applied to the tool part of `call` (what
/// `addToolApprovalResponse` / `addToolOutput` do).
fn answered(message_id: &str, call: &str, tool: &str, answer: Value) -> Value {
    let mut part = json!({"type": "dynamic-tool", "toolName": tool, "toolCallId": call,
        "input": {"id": 42}});
    if tool == "pick_record" {
        part = json!({"type": "tool-pick_record", "toolCallId": call, "input": {"count": 3}});
    }
    for (k, v) in answer.as_object().unwrap() {
        part[k] = v.clone();
    }
    json!({"id": message_id, "role": "assistant", "parts": [{"type": "step-start"}, part]})
}

/// Starts a chat that pauses at `delete record 42`; returns the chunks,
/// the assistant message id, the call id and the approval id.
async fn paused_at_approval(f: &Fixture, chat: &str) -> (Vec<Value>, String, String, String) {
    let body = json!({"id": chat, "graph": "approval", "trigger": "submit-message",
        "messages": [user("u1", "delete record 42")]});
    let (status, sse) = f.post("/api/chat", &body).await;
    assert_eq!(status, 200, "{sse}");
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "the paused stream is a valid AI SDK stream: {report}");
    let c = chunks(&sse);
    let start = of_type(&c, "start");
    let message_id = start[0]["messageId"].as_str().unwrap().to_owned();
    let input = of_type(&c, "tool-input-available");
    assert_eq!(input.len(), 1, "{sse}");
    assert_eq!(input[0]["toolName"], "delete_record");
    assert_eq!(input[0]["input"], json!({"id": 42}));
    let request = of_type(&c, "tool-approval-request");
    assert_eq!(request.len(), 1, "{sse}");
    let call = request[0]["toolCallId"].as_str().unwrap().to_owned();
    assert_eq!(call, input[0]["toolCallId"].as_str().unwrap());
    let approval = request[0]["approvalId"].as_str().unwrap().to_owned();
    let finish = c.last().unwrap();
    assert_eq!(finish["type"], "finish");
    assert_eq!(finish["finishReason"], "tool-calls");
    assert_eq!(
        f.deletes.load(Ordering::SeqCst),
        0,
        "nothing ran while it waits"
    );
    (c, message_id, call, approval)
}

fn continuation(chat: &str, message_id: &str, assistant: Value) -> Value {
    json!({"id": chat, "graph": "approval", "trigger": "submit-message", "messageId": message_id,
        "messages": [user("u1", "delete record 42"), assistant]})
}

#[tokio::test]
async fn an_approved_tool_runs_once_and_its_output_streams_into_the_same_message() {
    let f = fixture().await;
    let (_, message_id, call, approval) = paused_at_approval(&f, "c-approve").await;
    let run = f.newest_run("c-approve").await;
    assert_eq!(run["status"], "interrupted");
    let waiting = run["interrupts"]
        .as_array()
        .expect("the pending interrupts");
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0]["id"], approval.as_str());
    assert_eq!(waiting[0]["type"], "approval");
    assert_eq!(waiting[0]["tool"], "delete_record");
    assert_eq!(waiting[0]["args"], json!({"id": 42}));
    let run_id = run["id"].as_str().unwrap().to_owned();

    let assistant = answered(
        &message_id,
        &call,
        "delete_record",
        json!({"state": "approval-responded", "approval": {"id": approval, "approved": true}}),
    );
    let (status, sse) = f
        .post(
            "/api/chat",
            &continuation("c-approve", &message_id, assistant.clone()),
        )
        .await;
    assert_eq!(status, 200, "{sse}");
    let c = chunks(&sse);
    assert_continuation(&c);
    assert_eq!(
        of_type(&c, "start")[0]["messageId"],
        message_id.as_str(),
        "the same message"
    );
    assert!(
        of_type(&c, "tool-approval-request").is_empty(),
        "only what is new: {sse}"
    );
    let output = of_type(&c, "tool-output-available");
    assert_eq!(output.len(), 1, "{sse}");
    assert_eq!(output[0]["toolCallId"], call.as_str());
    assert_eq!(output[0]["output"], json!({"deleted": 42}));
    assert!(
        !of_type(&c, "text-delta").is_empty(),
        "the model answers after the tool"
    );
    assert_eq!(c.last().unwrap()["finishReason"], "stop");
    assert_eq!(
        f.deletes.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );

    let run = f.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "finished");
    assert!(run.get("interrupts").is_none());
    // The model's first call was served from the log: one tool call made.
    let events = f.get(&format!("/api/runs/{run_id}/events")).await;
    let events = events["events"].as_array().unwrap();
    let model_calls = events
        .iter()
        .filter(|e| e["event"]["type"] == "llm_started")
        .count();
    assert_eq!(
        model_calls, 2,
        "call 0 once (before the pause), call 1 after"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"]["type"] == "run_resumed")
            .count(),
        1
    );
    // The stored message holds the whole answer: the call, its output, text.
    let chat = f.get("/api/chat/c-approve").await;
    let messages = chat["messages"].as_array().unwrap();
    let stored = messages
        .iter()
        .find(|m| m["id"] == message_id.as_str())
        .unwrap();
    let tool = stored["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCallId"] == call.as_str())
        .unwrap();
    assert_eq!(tool["state"], "output-available");
    assert_eq!(tool["approval"]["approved"], true);
    // The continuation's step holds the output and the answer: no empty
    // step (two `step-start` parts in a row) is stored.
    let types: Vec<&str> = stored["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap_or_default())
        .collect();
    assert!(
        !types.windows(2).any(|w| w == ["step-start", "step-start"]),
        "two step-start parts in a row: {types:?}"
    );
    assert!(
        stored["parts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["type"] == "text")
    );

    // The same answer again: the run no longer waits.
    let (status, body) = f
        .post(
            "/api/chat",
            &continuation("c-approve", &message_id, assistant),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("not_interrupted"), "{body}");
    assert_eq!(f.deletes.load(Ordering::SeqCst), 1, "never twice");

    // A re-execution from the recording passes through the pause.
    let id: uuid::Uuid = run_id.parse().unwrap();
    assert_reexecutes(&f.server.state, id).await;
    // The recorded stream replays as one message: the request, then the
    // output, one finish at the end.
    let r = f
        .client
        .get(f.server.url(&format!("/api/runs/{run_id}/events")))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let replay = r.text().await.unwrap();
    let rc = chunks(&replay);
    assert_eq!(of_type(&rc, "tool-approval-request").len(), 1, "{replay}");
    assert_eq!(of_type(&rc, "tool-output-available").len(), 1, "{replay}");
    assert_eq!(of_type(&rc, "finish").len(), 1, "{replay}");
    assert_eq!(rc.last().unwrap()["type"], "finish");
    let (ok, report) = aisdk_validate(&replay);
    assert!(ok, "{report}");
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_denied_tool_never_runs_and_the_model_is_told() {
    let f = fixture().await;
    let (_, message_id, call, approval) = paused_at_approval(&f, "c-deny").await;
    let assistant = answered(
        &message_id,
        &call,
        "delete_record",
        json!({"state": "approval-responded",
            "approval": {"id": approval, "approved": false, "reason": "keep it"}}),
    );
    let (status, sse) = f
        .post("/api/chat", &continuation("c-deny", &message_id, assistant))
        .await;
    assert_eq!(status, 200, "{sse}");
    let c = chunks(&sse);
    assert_continuation(&c);
    let denied = of_type(&c, "tool-output-denied");
    assert_eq!(denied.len(), 1, "{sse}");
    assert_eq!(denied[0]["toolCallId"], call.as_str());
    assert!(of_type(&c, "tool-output-available").is_empty());
    assert_eq!(
        f.deletes.load(Ordering::SeqCst),
        0,
        "a denied call never runs"
    );
    let run = f.newest_run("c-deny").await;
    assert_eq!(run["status"], "finished");
    let events = f
        .get(&format!("/api/runs/{}/events", run["id"].as_str().unwrap()))
        .await;
    let denial = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"]["type"] == "tool_denied")
        .expect("the denial is logged");
    assert_eq!(denial["event"]["reason"], "keep it");
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_client_tool_waits_for_the_front_ends_output() {
    let f = fixture().await;
    let body = json!({"id": "c-client", "graph": "approval", "trigger": "submit-message",
        "messages": [user("u1", "pick record 3")]});
    let (status, sse) = f.post("/api/chat", &body).await;
    assert_eq!(status, 200, "{sse}");
    let c = chunks(&sse);
    let input = of_type(&c, "tool-input-available");
    assert_eq!(input.len(), 1, "{sse}");
    assert_eq!(input[0]["toolName"], "pick_record");
    assert_eq!(
        input[0]["dynamic"], false,
        "a client tool is a static tool part"
    );
    assert!(of_type(&c, "tool-approval-request").is_empty());
    let call = input[0]["toolCallId"].as_str().unwrap().to_owned();
    let message_id = of_type(&c, "start")[0]["messageId"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = f.newest_run("c-client").await;
    assert_eq!(run["interrupts"][0]["type"], "client_tool");
    assert_eq!(run["interrupts"][0]["id"], call.as_str());

    let assistant = answered(
        &message_id,
        &call,
        "pick_record",
        json!({"state": "output-available", "output": {"picked": 7}}),
    );
    let body = json!({"id": "c-client", "graph": "approval", "trigger": "submit-message",
        "messageId": message_id, "messages": [user("u1", "pick record 3"), assistant]});
    let (status, sse) = f.post("/api/chat", &body).await;
    assert_eq!(status, 200, "{sse}");
    let c = chunks(&sse);
    assert_continuation(&c);
    let output = of_type(&c, "tool-output-available");
    assert_eq!(output.len(), 1, "{sse}");
    assert_eq!(output[0]["output"], json!({"picked": 7}));
    assert_eq!(c.last().unwrap()["finishReason"], "stop");
    let run = f
        .get(&format!("/api/runs/{}", run["id"].as_str().unwrap()))
        .await;
    assert_eq!(run["status"], "finished");
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_question_is_answered_by_the_next_message_and_its_type_is_checked() {
    let f = fixture().await;
    let first = json!({"id": "c-ask", "graph": "ask", "trigger": "submit-message",
        "messages": [user("u1", "the report")]});
    let (status, sse) = f.post("/api/chat", &first).await;
    assert_eq!(status, 200, "{sse}");
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "{report}");
    let c = chunks(&sse);
    let question = of_type(&c, "data-interrupt");
    assert_eq!(question.len(), 1, "{sse}");
    assert_eq!(
        question[0]["data"]["question"],
        "How many copies of the report?"
    );
    assert_eq!(question[0]["data"]["options"], json!([1, 2, 3]));
    assert!(
        of_type(&c, "text-delta")
            .iter()
            .any(|d| d["delta"] == "How many copies of the report?"),
        "the question is shown as text too: {sse}"
    );
    let asked = of_type(&c, "start")[0]["messageId"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = f.newest_run("c-ask").await;
    let run_id = run["id"].as_str().unwrap().to_owned();

    // Not an integer: refused, nothing changes.
    let bad = json!({"id": "c-ask", "graph": "ask", "trigger": "submit-message",
        "messages": [user("u1", "the report"),
            {"id": asked, "role": "assistant", "parts": [{"type": "text", "text": "How many copies of the report?"}]},
            user("u2", "lots")]});
    let (status, body) = f.post("/api/chat", &bad).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("invalid_answer"), "{body}");
    assert_eq!(
        f.get(&format!("/api/runs/{run_id}")).await["status"],
        "interrupted"
    );

    let good = json!({"id": "c-ask", "graph": "ask", "trigger": "submit-message",
        "messages": [user("u1", "the report"),
            {"id": asked, "role": "assistant", "parts": [{"type": "text", "text": "How many copies of the report?"}]},
            user("u2", "2")]});
    let (status, sse) = f.post("/api/chat", &good).await;
    assert_eq!(status, 200, "{sse}");
    // A new message: the standalone validator reads it whole.
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "{report}");
    let c = chunks(&sse);
    let start = of_type(&c, "start");
    assert_ne!(
        start[0]["messageId"],
        asked.as_str(),
        "a new assistant message"
    );
    assert!(sse.contains("Printing 2 copies."), "{sse}");
    let run = f.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "finished");
    let chat = f.get("/api/chat/c-ask").await;
    let roles: Vec<&str> = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    f.server.shutdown().await;
}

#[tokio::test]
async fn forged_repeated_cross_user_and_mistyped_answers_change_nothing() {
    let f = fixture().await;
    let (_, message_id, call, approval) = paused_at_approval(&f, "c-safe").await;
    let run = f.newest_run("c-safe").await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    let status_path = format!("/api/runs/{run_id}");

    // A forged approval id.
    let forged = answered(
        &message_id,
        &call,
        "delete_record",
        json!({"state": "approval-responded", "approval": {"id": "approval-forged", "approved": true}}),
    );
    let (status, body) = f
        .post("/api/chat", &continuation("c-safe", &message_id, forged))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown_interrupt"), "{body}");
    assert_eq!(f.get(&status_path).await["status"], "interrupted");

    // No answer at all.
    let none = answered(
        &message_id,
        &call,
        "delete_record",
        json!({"state": "approval-requested"}),
    );
    let (status, body) = f
        .post("/api/chat", &continuation("c-safe", &message_id, none))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unanswered_interrupt"), "{body}");

    // Through the runs API: wrong shape, another user, unknown run.
    let path = format!("/api/runs/{run_id}/resume");
    let (status, body) = f.post(&path, &json!({"value": "yes please"})).await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = f
        .post(
            &path,
            &json!({"answers": {"approval-nope": {"approved": true}}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = f.post(&path, &json!({"bogus": 1})).await;
    assert_eq!(status, 400);
    let (status, body) = f
        .post(
            &format!("/api/runs/{}/resume", uuid::Uuid::now_v7()),
            &json!({"value": true}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(f.get(&status_path).await["status"], "interrupted");
    assert_eq!(f.deletes.load(Ordering::SeqCst), 0);

    // The owner answers through the API; a second answer is refused.
    let (status, body) = f
        .post(
            &path,
            &json!({"answers": {approval.clone(): {"approved": true}}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let resumed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(resumed["runId"], run_id.as_str());
    for _ in 0..200 {
        if f.get(&format!("/api/runs/{run_id}")).await["status"] == "finished" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(
        f.get(&format!("/api/runs/{run_id}")).await["status"],
        "finished"
    );
    let (status, body) = f.post(&path, &json!({"value": {"approved": true}})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("not_interrupted"), "{body}");
    assert_eq!(f.deletes.load(Ordering::SeqCst), 1);
    f.server.shutdown().await;
}

#[tokio::test]
async fn another_users_answer_is_refused() {
    let f = fixture().await;
    // The run's owner is the local user; a stranger answers through the
    // library call the handlers use (the chat endpoint hides other users'
    // chats altogether).
    let (_, _, _, approval) = paused_at_approval(&f, "c-owner").await;
    let run = f.newest_run("c-owner").await;
    let run_id: uuid::Uuid = run["id"].as_str().unwrap().parse().unwrap();
    let err = f
        .server
        .state
        .runs
        .resume(stategraph::internals::runs::ResumeRequest {
            breakpoints: None,
            run_id,
            user_id: "mallory".into(),
            request_id: String::new(),
            answers: [(approval, json!({"approved": true}))].into(),
            new_message: None,
            messages: Vec::new(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, stategraph::internals::runs::ResumeError::NotFound(_)),
        "{err}"
    );
    let stored = f.server.state.store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Interrupted);
    assert_eq!(f.deletes.load(Ordering::SeqCst), 0);
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_new_message_sets_a_waiting_approval_aside() {
    let f = fixture().await;
    let (_, message_id, _, _) = paused_at_approval(&f, "c-aside").await;
    let first = f.newest_run("c-aside").await;
    let body = json!({"id": "c-aside", "graph": "approval", "trigger": "submit-message",
        "messages": [user("u1", "delete record 42"),
            {"id": message_id, "role": "assistant", "parts": []},
            user("u2", "never mind, hello")]});
    let (status, sse) = f.post("/api/chat", &body).await;
    assert_eq!(status, 200, "{sse}");
    let old = f
        .get(&format!("/api/runs/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(old["status"], "cancelled", "the paused run was set aside");
    assert_eq!(f.deletes.load(Ordering::SeqCst), 0);
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_lapsed_wait_fails_the_run() {
    let f = fixture().await;
    let body = json!({"id": "c-hurry", "graph": "hurry", "trigger": "submit-message",
        "messages": [user("u1", "go")]});
    let (status, sse) = f.post("/api/chat", &body).await;
    assert_eq!(status, 200, "{sse}");
    let run = f.newest_run("c-hurry").await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    assert_eq!(run["status"], "interrupted");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let (status, body) = f
        .post(
            &format!("/api/runs/{run_id}/resume"),
            &json!({"value": "yes"}),
        )
        .await;
    assert_eq!(status, 410, "{body}");
    assert!(body.contains("interrupt_expired"), "{body}");
    let run = f.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"]["code"], "interrupt_expired");
    // The upkeep pass finds lapsed waits by itself too.
    let (status, _) = f
        .post(
            "/api/chat",
            &json!({"id": "c-hurry2", "graph": "hurry", "trigger": "submit-message",
                "messages": [user("u1", "go")]}),
        )
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    f.server.state.runs.expire_interrupts().await;
    let run = f.newest_run("c-hurry2").await;
    assert_eq!(run["status"], "failed");
    f.server.shutdown().await;
}

/// The JSON error of a refused request: its status and code.
fn refusal(status: u16, body: &str) -> (u16, String) {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON error: {body}"));
    (status, v["error"]["code"].as_str().unwrap_or("").to_owned())
}

/// An approval sent back without its `approval.id` cannot be matched to
/// what waits: `invalid_answer`, 422 (the catalog's status for an answer
/// the run cannot take), and nothing runs.
#[tokio::test]
async fn an_approval_without_its_id_is_invalid_answer_422() {
    let f = fixture().await;
    let (_, message_id, call, _) = paused_at_approval(&f, "c-no-id").await;
    let no_id = answered(
        &message_id,
        &call,
        "delete_record",
        json!({"state": "approval-responded", "approval": {"approved": true}}),
    );
    let (status, body) = f
        .post("/api/chat", &continuation("c-no-id", &message_id, no_id))
        .await;
    assert_eq!(
        refusal(status, &body),
        (422, "invalid_answer".to_owned()),
        "{body}"
    );
    assert_eq!(f.newest_run("c-no-id").await["status"], "interrupted");
    assert_eq!(f.deletes.load(Ordering::SeqCst), 0);
    f.server.shutdown().await;
}

/// A stored run whose graph this server no longer serves (another instance
/// on the same store served it) is `unknown_graph`, 400, on every path
/// that would run it again: resuming it through the runs API, answering it
/// through its chat, and forking it.
#[tokio::test]
async fn a_stored_run_whose_graph_is_not_served_is_unknown_graph_400_everywhere() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let f = fixture_with(Arc::clone(&store), |_| {}).await;
    let (_, message_id, call, approval) = paused_at_approval(&f, "c-gone").await;
    let run_id = f.newest_run("c-gone").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The same store, served with the shipped graphs only (no `approval`),
    // and no upkeep that could touch the waiting run.
    let other =
        TestServer::start_with_store(Arc::new(OfflineModel::default()), Arc::clone(&store), |c| {
            c.server.recover_interval.0 = std::time::Duration::ZERO
        })
        .await;
    let client = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let req = client
            .post(other.url(&path))
            .header("content-type", "application/json")
            .body(body.to_string());
        async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            refusal(status, &r.text().await.unwrap())
        }
    };
    let unknown = (400, "unknown_graph".to_owned());
    let answer = json!({"answers": {approval.as_str(): {"approved": true}}});
    assert_eq!(
        post(format!("/api/runs/{run_id}/resume"), answer).await,
        unknown,
        "resume"
    );
    let approved = answered(
        &message_id,
        &call,
        "delete_record",
        json!({"state": "approval-responded", "approval": {"id": approval, "approved": true}}),
    );
    assert_eq!(
        post(
            "/api/chat".into(),
            continuation("c-gone", &message_id, approved)
        )
        .await,
        unknown,
        "the chat's answer"
    );
    assert_eq!(
        post(format!("/api/runs/{run_id}/fork"), json!({"at": 1})).await,
        unknown,
        "fork"
    );
    assert_eq!(
        f.get(&format!("/api/runs/{run_id}")).await["status"],
        "interrupted"
    );
    assert_eq!(f.deletes.load(Ordering::SeqCst), 0);
    other.shutdown().await;
    f.server.shutdown().await;
}
