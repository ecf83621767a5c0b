//! A run waiting for a person survives its server: killed (SIGKILL) while
//! it waits, the server starts again and the run still waits, with what it
//! waits for; a second server joins on the same PostgreSQL database and the
//! approval, sent to both at once as `useChat` sends it, continues the run
//! exactly once.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::db::PgDb;
use crate::support::process::{Server, config, start};
use crate::support::{aisdk_validate, chat_body, post_json};

/// An agent that needs approval for the built-in `current_time` (which the
/// offline model calls first).
const CLOCK: &str = "state: {fields: {messages: {type: messages}, query: {type: string}, \
    answer: {type: string}, language: {type: string}, summary: {type: string}}}\nentry: assistant\nnodes:\n  - id: assistant\n    kind: agent\n    \
    prompt: chat/direct.md\n    history: messages\n    input: query\n    output: answer\n    \
    surface: answer\n    tools: [current_time]\n    approve: [current_time]\nedges: [assistant -> END]\n";

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

async fn get(base: &str, path: &str) -> Value {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert!(r.status().is_success(), "GET {path}: {}", r.status());
    r.json().await.unwrap()
}

/// The servers' logs, for a failure.
fn dump_logs(dir: &Path) {
    for f in std::fs::read_dir(dir).unwrap().flatten() {
        if f.file_name().to_string_lossy().ends_with(".log") {
            eprintln!(
                "==> {}\n{}",
                f.path().display(),
                std::fs::read_to_string(f.path()).unwrap_or_default()
            );
        }
    }
}

#[tokio::test]
async fn a_waiting_run_survives_a_kill_and_two_servers_continue_it_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::write(graphs.join("clock.yaml"), CLOCK).unwrap();
    let db = PgDb::create().await;
    let url = db.url();
    let store = format!("[store]\nbackend = \"postgres\"\ndatabase_url = \"{url}\"\n");
    let cfg = config(&store);
    let result = tokio::spawn({
        let dir = dir.path().to_owned();
        async move { scenario(&dir, &graphs, &cfg).await }
    })
    .await;
    if let Err(e) = result {
        dump_logs(dir.path());
        db.drop_db().await;
        std::panic::resume_unwind(e.into_panic());
    }
    db.drop_db().await;
}

async fn scenario(dir: &Path, graphs: &Path, cfg: &str) {
    let client = reqwest::Client::new();
    let mut a = start(dir, cfg, graphs).await;
    let mut body = chat_body("clock-chat", "what time is it?");
    body["graph"] = json!("clock");
    let sse = post_json(&client, &format!("{}/api/chat", a.base), &body)
        .await
        .text()
        .await
        .unwrap();
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "{report}\n{sse}");
    let c = chunks(&sse);
    let message_id = of_type(&c, "start")[0]["messageId"]
        .as_str()
        .unwrap()
        .to_owned();
    let request = of_type(&c, "tool-approval-request");
    assert_eq!(request.len(), 1, "{sse}");
    let call = request[0]["toolCallId"].as_str().unwrap().to_owned();
    let approval = request[0]["approvalId"].as_str().unwrap().to_owned();
    let input = of_type(&c, "tool-input-available")[0].clone();
    assert_eq!(input["toolName"], "current_time");
    assert_eq!(c.last().unwrap()["finishReason"], "tool-calls");
    let runs = get(&a.base, "/api/runs?chat=clock-chat").await;
    let run_id = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let run_path = format!("/api/runs/{run_id}");
    assert_eq!(get(&a.base, &run_path).await["status"], "interrupted");

    // Killed while the run waits; started again.
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let a = start(dir, cfg, graphs).await;
    // Past the lease (1 s) and a few recovery passes (every 200 ms): a
    // waiting run is not a crashed one, nothing picks it up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let run = get(&a.base, &run_path).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    let waiting = run["interrupts"].as_array().expect("what it waits for");
    assert_eq!(waiting.len(), 1, "{run}");
    assert_eq!(waiting[0]["id"], approval.as_str());
    assert_eq!(waiting[0]["type"], "approval");
    assert_eq!(waiting[0]["tool"], "current_time");

    // A second server on the same database; the approval goes to both.
    let b = start(dir, cfg, graphs).await;
    let mut part = json!({"type": "dynamic-tool", "toolName": "current_time", "toolCallId": call,
        "input": input["input"], "state": "approval-responded",
        "approval": {"id": approval, "approved": true}});
    if input["dynamic"] == false {
        part["type"] = json!("tool-current_time");
        part.as_object_mut().unwrap().remove("toolName");
    }
    let continuation = json!({"id": "clock-chat", "graph": "clock", "trigger": "submit-message",
        "messageId": message_id,
        "messages": [body["messages"][0],
            {"id": message_id, "role": "assistant", "parts": [{"type": "step-start"}, part]}]});
    let send = |s: &Server| {
        let url = format!("{}/api/chat", s.base);
        let (client, continuation) = (client.clone(), continuation.clone());
        async move {
            let r = post_json(&client, &url, &continuation).await;
            let status = r.status().as_u16();
            (status, r.text().await.unwrap())
        }
    };
    let (on_a, on_b) = tokio::join!(send(&a), send(&b));
    let (won, lost) = match (on_a.0, on_b.0) {
        (200, _) => (on_a, on_b),
        (_, 200) => (on_b, on_a),
        _ => panic!("neither continued:\nA {on_a:?}\nB {on_b:?}"),
    };
    assert_eq!(lost.0, 409, "the other is refused: {lost:?}");
    assert!(
        lost.1.contains("not_interrupted") || lost.1.contains("run_in_progress"),
        "{lost:?}"
    );
    let c = chunks(&won.1);
    assert_eq!(of_type(&c, "start")[0]["messageId"], message_id.as_str());
    let output = of_type(&c, "tool-output-available");
    assert_eq!(output.len(), 1, "{}", won.1);
    assert_eq!(output[0]["toolCallId"], call.as_str());
    assert_eq!(c.last().unwrap()["finishReason"], "stop", "{}", won.1);

    // Finished, continued once, the tool ran once; either server says so.
    for base in [&a.base, &b.base] {
        let mut run = get(base, &run_path).await;
        for _ in 0..100 {
            if run["status"] != "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            run = get(base, &run_path).await;
        }
        assert_eq!(run["status"], "finished", "{run}");
        let events = get(base, &format!("{run_path}/events")).await;
        let events: Vec<&Value> = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["event"])
            .collect();
        let count = |ty: &str| events.iter().filter(|e| e["type"] == ty).count();
        assert_eq!(count("run_resumed"), 1);
        assert_eq!(count("run_interrupted"), 1);
        let results: Vec<_> = events
            .iter()
            .filter(|e| e["type"] == "tool_result" && e["call_id"] == call.as_str())
            .collect();
        assert_eq!(results.len(), 1, "the approved call ran once: {events:?}");
    }
    // The same approval again, to either: the run no longer waits.
    for s in [&a, &b] {
        let (status, text) = send(s).await;
        assert_eq!(status, 409, "{text}");
        assert!(text.contains("not_interrupted"), "{text}");
    }
    drop((a, b));
}
