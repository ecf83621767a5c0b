//! Breakpoints (docs/breakpoints.md) on the shipped chat graph with the
//! offline model: a run pauses before or after chosen nodes, its state is
//! read and edited (checked as a fork's edit), and it continues, steps one
//! superstep or is aborted — through `POST /api/chat` and `POST
//! /api/runs/{id}/resume`, and across a server killed while it waits.
//!
//! The offline model answers "You asked: “…”" with the newest user message,
//! and the narrator appends `query` as that message: an edit of `query` at
//! the breakpoint shows in the answer.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stategraph::internals::llm::offline::OfflineModel;

use crate::support::server::TestServer;
use crate::support::{assert_reexecutes, chat_body, post_json};

async fn offline_server() -> TestServer {
    TestServer::start(Arc::new(OfflineModel::default()), |_| {}).await
}

/// A chat turn on the EXPLAIN path (summarizer → router → explain →
/// narrator → followup) with `breakpoints`; the SSE text.
async fn turn(base: &str, chat: &str, breakpoints: Value) -> (reqwest::StatusCode, String) {
    let mut body = chat_body(chat, "what does the poverty headcount measure?");
    body["forced_intent"] = json!("EXPLAIN");
    body["breakpoints"] = breakpoints;
    let r = post_json(&reqwest::Client::new(), &format!("{base}/api/chat"), &body).await;
    (r.status(), r.text().await.unwrap())
}

/// The text the stream's text parts add up to.
fn text_of(sse: &str) -> String {
    chunks(sse)
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect()
}

fn chunks(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

async fn get(base: &str, path: &str) -> Value {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert!(r.status().is_success(), "GET {path}: {}", r.status());
    r.json().await.unwrap()
}

async fn resume(base: &str, run: &str, body: Value) -> (u16, Value) {
    let r = post_json(
        &reqwest::Client::new(),
        &format!("{base}/api/runs/{run}/resume"),
        &body,
    )
    .await;
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The chat's newest run id.
async fn run_of(base: &str, chat: &str) -> String {
    let runs = get(base, &format!("/api/runs?chat={chat}")).await;
    runs["runs"][0]["id"].as_str().expect("a run").to_owned()
}

/// Waits until the run is no longer `running`; returns the run.
async fn settled(base: &str, run: &str) -> Value {
    for _ in 0..400 {
        let r = get(base, &format!("/api/runs/{run}")).await;
        if r["status"] != "running" {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("run {run} never settled");
}

/// The one breakpoint the run waits at.
fn breakpoint(run: &Value) -> &Value {
    assert_eq!(run["status"], "interrupted", "{run}");
    let waiting = run["interrupts"].as_array().expect("interrupts");
    assert_eq!(waiting.len(), 1, "{run}");
    assert_eq!(waiting[0]["type"], "breakpoint", "{run}");
    &waiting[0]
}

#[tokio::test]
async fn a_breakpoint_before_the_narrator_pauses_and_an_edit_of_the_state_reaches_the_answer() {
    let server = offline_server().await;
    let base = server.url("");
    let (status, sse) = turn(&base, "bp-edit", json!({"before": ["narrator"]})).await;
    assert_eq!(status, 200, "{sse}");
    // The pause is a valid UI message stream for the AI SDK's own parser.
    let (ok, report) = crate::support::aisdk_validate(&sse);
    assert!(ok, "{report}\n{sse}");
    let c = chunks(&sse);
    let pause: Vec<&Value> = c.iter().filter(|c| c["type"] == "data-interrupt").collect();
    assert_eq!(pause.len(), 1, "{sse}");
    assert_eq!(pause[0]["data"]["type"], "breakpoint");
    assert_eq!(pause[0]["data"]["when"], "before");
    assert_eq!(pause[0]["data"]["nodes"], json!(["narrator"]));
    let finish = c.iter().find(|c| c["type"] == "finish").expect("finish");
    assert_eq!(finish["messageMetadata"]["interrupted"], true, "{sse}");
    assert!(
        !text_of(&sse).contains("You asked"),
        "the narrator must not have run: {sse}"
    );

    let run = run_of(&base, "bp-edit").await;
    let record = get(&base, &format!("/api/runs/{run}")).await;
    let at = breakpoint(&record).clone();
    assert_eq!(at["next"], json!(["narrator"]), "{at}");
    // The paused state: the explain agent's findings, not yet an answer.
    let paused = get(&base, &format!("/api/runs/{run}/state")).await;
    assert_eq!(paused["step"], at["step"].as_u64().unwrap() - 1, "{paused}");
    assert_eq!(
        paused["state"]["query"],
        "what does the poverty headcount measure?"
    );
    assert_eq!(paused["state"]["intent"], "EXPLAIN", "{paused}");
    assert!(
        paused["state"]["answer"].as_str().unwrap_or("").is_empty(),
        "{paused}"
    );

    // Bad edits are refused as a fork's are, and the run stays paused.
    let (code, err) = resume(&base, &run, json!({"set": {"no_such_field": 1}})).await;
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (400, Some("unknown_field")),
        "{err}"
    );
    let (code, err) = resume(&base, &run, json!({"set": {"summarized_count": "many"}})).await;
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (400, Some("invalid_value")),
        "{err}"
    );
    let (code, err) = resume(&base, &run, json!({"action": "jump"})).await;
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (400, Some("invalid_body")),
        "{err}"
    );
    breakpoint(&get(&base, &format!("/api/runs/{run}")).await);

    let (code, ok) = resume(
        &base,
        &run,
        json!({"action": "continue", "set": {"query": "how tall is Mount Everest?"}}),
    )
    .await;
    assert_eq!(code, 202, "{ok}");
    assert_eq!(settled(&base, &run).await["status"], "finished");
    let end = get(&base, &format!("/api/runs/{run}/state")).await;
    let answer = end["state"]["answer"].as_str().unwrap_or("");
    assert!(
        answer.contains("how tall is Mount Everest?"),
        "the answer reflects the edit: {answer}"
    );
    assert!(!answer.contains("poverty headcount"), "{answer}");
    // The chat's stored answer is the edited run's.
    let chat = get(&base, "/api/chat/bp-edit").await;
    assert!(
        chat.to_string().contains("how tall is Mount Everest?"),
        "{chat}"
    );
    // The log records the breakpoints and the edit: a re-execution from
    // the recording applies it and does not diverge.
    let events = get(&base, &format!("/api/runs/{run}/events")).await;
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"]["type"].as_str())
        .collect();
    assert!(kinds.contains(&"breakpoints_set"), "{kinds:?}");
    assert!(kinds.contains(&"run_resumed"), "{kinds:?}");
    assert_reexecutes(&server.state, uuid::Uuid::parse_str(&run).unwrap()).await;
    server.shutdown().await;
}

#[tokio::test]
async fn step_runs_one_superstep_and_after_breakpoints_pause_after_nodes_and_at_the_end() {
    let server = offline_server().await;
    let base = server.url("");
    let bps = json!({"before": ["router"], "after": ["narrator", "followup"]});
    let (status, sse) = turn(&base, "bp-step", bps).await;
    assert_eq!(status, 200, "{sse}");
    let run = run_of(&base, "bp-step").await;
    let path = format!("/api/runs/{run}");

    let at = breakpoint(&get(&base, &path).await).clone();
    assert_eq!(
        (at["when"].as_str(), at["step"].as_u64()),
        (Some("before"), Some(2)),
        "{at}"
    );
    assert_eq!(at["nodes"], json!(["router"]));

    // One step: the router runs, the run pauses before explain.
    let (code, body) = resume(&base, &run, json!({"action": "step"})).await;
    assert_eq!(code, 202, "{body}");
    let record = settled(&base, &run).await;
    let at = breakpoint(&record).clone();
    assert_eq!(
        (at["when"].as_str(), at["step"].as_u64()),
        (Some("step"), Some(3)),
        "{at}"
    );
    assert_eq!(at["next"], json!(["explain"]));
    let state = get(&base, &format!("{path}/state")).await;
    assert_eq!(
        state["state"]["intent"], "EXPLAIN",
        "the router ran: {state}"
    );

    // Continue: explain and the narrator run; it pauses after the narrator.
    let (code, body) = resume(&base, &run, json!({"action": "continue"})).await;
    assert_eq!(code, 202, "{body}");
    let at = breakpoint(&settled(&base, &run).await).clone();
    assert_eq!(at["when"], "after", "{at}");
    assert_eq!(at["nodes"], json!(["narrator"]));
    assert_eq!(at["next"], json!(["followup"]));
    let state = get(&base, &format!("{path}/state")).await;
    assert!(
        state["state"]["answer"]
            .as_str()
            .unwrap_or("")
            .contains("You asked"),
        "the narrator's answer is in the paused state: {state}"
    );

    // After the last node: paused with nothing left to run.
    let (code, body) = resume(&base, &run, json!({"action": "continue"})).await;
    assert_eq!(code, 202, "{body}");
    let at = breakpoint(&settled(&base, &run).await).clone();
    assert_eq!(at["when"], "after", "{at}");
    assert_eq!(at["nodes"], json!(["followup"]));
    assert_eq!(at["next"], json!([]));
    let (code, body) = resume(&base, &run, json!({"action": "continue"})).await;
    assert_eq!(code, 202, "{body}");
    let done = settled(&base, &run).await;
    assert_eq!(done["status"], "finished", "{done}");
    let state = get(&base, &format!("{path}/state")).await;
    assert!(
        state["state"]["followups"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "{state}"
    );
    assert_reexecutes(&server.state, uuid::Uuid::parse_str(&run).unwrap()).await;
    server.shutdown().await;
}

#[tokio::test]
async fn abort_ends_a_paused_run_and_unknown_nodes_are_refused() {
    let server = offline_server().await;
    let base = server.url("");
    let (status, body) = turn(&base, "bp-bad", json!({"before": ["narator"]})).await;
    assert_eq!(status, 400, "{body}");
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error"]["code"], "unknown_node", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("narator")
    );
    let (status, body) = turn(&base, "bp-bad", json!({"before": "narrator"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_breakpoints"), "{body}");

    let (status, _) = turn(&base, "bp-abort", json!({"before": ["narrator"]})).await;
    assert_eq!(status, 200);
    let run = run_of(&base, "bp-abort").await;
    breakpoint(&get(&base, &format!("/api/runs/{run}")).await);
    let (code, err) = resume(
        &base,
        &run,
        json!({"breakpoints": {"after": ["nobody"]}, "action": "continue"}),
    )
    .await;
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (400, Some("unknown_node")),
        "{err}"
    );
    let (code, body) = resume(&base, &run, json!({"action": "abort"})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert_eq!(
        get(&base, &format!("/api/runs/{run}")).await["status"],
        "cancelled"
    );
    let (code, err) = resume(&base, &run, json!({"action": "abort"})).await;
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (409, Some("not_interrupted")),
        "{err}"
    );
    // The chat is free again: a new turn runs to its end.
    let (status, sse) = turn(&base, "bp-abort", json!({})).await;
    assert_eq!(status, 200, "{sse}");
    assert!(text_of(&sse).contains("You asked"), "{sse}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_run_paused_at_a_breakpoint_survives_a_killed_server() {
    use crate::support::process::{config, start};
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::copy(
        crate::support::root().join("graphs/chat.yaml"),
        graphs.join("chat.yaml"),
    )
    .unwrap();
    let data = dir.path().join("data");
    let cfg = config(&format!(
        "[store]\nbackend = \"sqlite\"\ndata_dir = \"{}\"\n",
        data.display()
    ));
    let mut a = start(dir.path(), &cfg, &graphs).await;
    let (status, sse) = turn(&a.base, "bp-kill", json!({"before": ["narrator"]})).await;
    assert_eq!(status, 200, "{sse}");
    let run = run_of(&a.base, "bp-kill").await;
    breakpoint(&get(&a.base, &format!("/api/runs/{run}")).await);

    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let b = start(dir.path(), &cfg, &graphs).await;
    // Past the lease and several recovery passes: a paused run is not a
    // crashed one; nothing runs it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let at = breakpoint(&get(&b.base, &format!("/api/runs/{run}")).await).clone();
    assert_eq!(at["nodes"], json!(["narrator"]));
    let paused = get(&b.base, &format!("/api/runs/{run}/state")).await;
    assert_eq!(paused["state"]["intent"], "EXPLAIN", "{paused}");
    let (code, body) = resume(
        &b.base,
        &run,
        json!({"set": {"query": "what is the capital of Peru?"}}),
    )
    .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(settled(&b.base, &run).await["status"], "finished");
    let end = get(&b.base, &format!("/api/runs/{run}/state")).await;
    let answer = end["state"]["answer"].as_str().unwrap_or("");
    assert!(answer.contains("capital of Peru"), "{answer}");
}

/// `stategraph` with the shipped graphs and a SQLite store in `dir`.
fn cli(dir: &std::path::Path) -> std::process::Command {
    let root = crate::support::root();
    let cfg = dir.join("stategraph.toml");
    std::fs::write(
        &cfg,
        format!(
            "[store]\nbackend = \"sqlite\"\ndata_dir = \"{}\"\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_stategraph"));
    cmd.arg("--config")
        .arg(&cfg)
        .arg("--graphs")
        .arg(root.join("graphs"))
        .arg("--prompts")
        .arg(root.join("prompts"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("STATEGRAPH_CONFIG");
    cmd
}

#[test]
fn the_cli_breaks_before_a_node_and_resumes_with_an_edit() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path())
        .args(["run", "chat", "what does the poverty headcount measure?"])
        .args([
            "--set",
            "forced_intent=\"EXPLAIN\"",
            "--break-before",
            "narrator",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        text.contains("run paused at breakpoint-4: a breakpoint before narrator"),
        "{text}\n{err}"
    );
    assert!(
        !text.contains("You asked"),
        "the narrator did not run: {text}"
    );
    let run = err
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .expect("the run id on stderr")
        .to_owned();

    let bad = cli(dir.path())
        .args(["run", "chat", "hi", "--break-after", "narator"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("has no node `narator`"));
    let refused = cli(dir.path())
        .args(["resume", &run, "--set", "no_such_field=1"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("has no field `no_such_field`"));

    let done = cli(dir.path())
        .args(["resume", &run, "--set", "query=how tall is Mount Everest?"])
        .output()
        .unwrap();
    let timeline = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "{timeline}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(timeline.contains("finished after"), "{timeline}");
    // What the client received: the narrator's answer to the edited query.
    let sse = cli(dir.path())
        .args(["replay", &run, "--sse"])
        .output()
        .unwrap();
    let answer = text_of(&String::from_utf8_lossy(&sse.stdout));
    assert!(answer.contains("how tall is Mount Everest?"), "{answer}");
}
