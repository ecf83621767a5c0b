//! The LangGraph Agent Server API (`server/langgraph/`) against LangGraph's
//! own clients, pinned in the repository's test tooling:
//! `@langchain/langgraph-sdk` (tests/tools/langgraph-sdk, `npm ci`, as
//! tests/run.sh installs it) drives a real `stategraph serve` of
//! examples/langgraph_api with two API keys. The script checks
//! assistants, threads, streamed runs in every mode, state and history, a
//! second turn, interrupt and resume, a rejoin after a disconnect with the
//! last event id, cancel, the 404s, another key's view and a chat from
//! `/api/chat` read as a thread; here every run it made must re-execute
//! from its recording without diverging, and show in the runs list the
//! studio reads. `useStream` runs in Chromium on a small React page
//! (tests/tools/langgraph-sdk/usestream).

use std::path::Path;

use serde_json::Value;

use crate::support::{root, spawn_serving};

/// `stategraph serve` of the example with two API keys (CORS open, for the
/// `useStream` page served from an origin of its own), in `dir`.
pub(crate) async fn serve_example(dir: &Path) -> (tokio::process::Child, String) {
    serve_graphs(dir, &root().join("examples/langgraph_api/graphs")).await
}

/// The same with the graphs of `graphs` (the example's prompts).
pub(crate) async fn serve_graphs(dir: &Path, graphs: &Path) -> (tokio::process::Child, String) {
    let example = root().join("examples/langgraph_api");
    let config = format!(
        r#"[paths]
graphs = "{graphs}"
prompts = "{prompts}"
[store]
backend = "sqlite"
data_dir = "{data}"
[server]
cors_origins = ["*"]
[auth]
local_user = ""
[auth.api_keys]
"key-a" = "alice"
"key-b" = "bob"
[llm.offline]
token_delay = "20ms"
"#,
        graphs = graphs.display(),
        prompts = example.join("prompts").display(),
        data = dir.join("data").display(),
    );
    let file = dir.join("stategraph.toml");
    std::fs::write(&file, config).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stategraph"));
    cmd.arg("--config").arg(&file).arg("serve");
    spawn_serving(cmd).await
}

/// Runs a client script; its output, which must report every case ok.
async fn run_client(program: &str, script: &Path, args: &[&str]) -> String {
    let out = tokio::process::Command::new(program)
        .arg(script)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {program} {}: {e}", script.display()));
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{output}");
    assert!(
        out.status.success() && !output.contains("FAIL"),
        "{} failed ({}):\n{output}",
        script.display(),
        out.status
    );
    output
}

/// Every run `key`'s user made: each finished one re-executes from its
/// recording without diverging. Returns how many did.
async fn all_reexecute(base: &str, key: &str) -> usize {
    let http = reqwest::Client::new();
    let runs: Value = http
        .get(format!("{base}/api/runs?limit=500"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut checked = 0;
    for r in runs["runs"].as_array().unwrap() {
        if r["status"] != "finished" {
            continue;
        }
        let id = r["id"].as_str().unwrap();
        let report: Value = http
            .post(format!("{base}/api/runs/{id}/reexecute"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(report["diverged"], false, "run {id}: {report}");
        checked += 1;
    }
    checked
}

#[tokio::test]
async fn langgraphs_js_sdk_works_against_stategraph_serve() {
    let tool = root().join("tests/tools/langgraph-sdk");
    assert!(
        tool.join("node_modules/@langchain/langgraph-sdk").is_dir(),
        "the LangGraph JS SDK is not installed: run `npm ci` in {} (tests/run.sh does)",
        tool.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let (mut child, base) = serve_example(dir.path()).await;
    let output = run_client(
        "node",
        &tool.join("sdk.test.mjs"),
        &[&base, "key-a", "key-b"],
    )
    .await;
    for case in [
        "assistants",
        "threads",
        "stream every mode",
        "events mode",
        "state and history",
        "second turn",
        "interrupt and resume",
        "messages mode",
        "interrupt_before and interrupt_after",
        "errors are LangGraph's detail everywhere",
        "rejoin with the last event id",
        "cancel",
        "multitask_strategy enqueue",
        "404s",
        "another key sees nothing",
        "a wrong key is 401 with LangGraph's detail",
        "a chat from /api/chat reads as a thread",
    ] {
        assert!(
            output.contains(&format!("ok   {case}")),
            "{case}:\n{output}"
        );
    }
    // Every finished run (the SDK's, and the chat's) replays exactly; the
    // runs list the studio shows has them, the paused-then-resumed and the
    // cancelled ones included.
    let checked = all_reexecute(&base, "key-a").await;
    assert!(checked >= 8, "only {checked} finished runs re-executed");
    assert_eq!(all_reexecute(&base, "key-b").await, 0, "key-b ran nothing");
    let _ = child.kill().await;
}

/// The venv tests/run.sh installs LangGraph's Python SDK in.
fn langgraph_python() -> std::path::PathBuf {
    let python = std::env::var_os("STATEGRAPH_TEST_LANGGRAPH_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache")
                });
            cache.join("stategraph-tests/langgraph-sdk-venv/bin/python")
        });
    assert!(
        python.exists(),
        "the LangGraph Python SDK venv is missing ({}): run `bash tests/run.sh` or set STATEGRAPH_TEST_LANGGRAPH_PYTHON",
        python.display()
    );
    python
}

#[tokio::test]
async fn langgraphs_python_sdk_works_against_stategraph_serve() {
    let python = langgraph_python();
    let dir = tempfile::tempdir().unwrap();
    let (mut child, base) = serve_example(dir.path()).await;
    let script = root().join("tests/tools/langgraph-sdk/sdk_test.py");
    let output = run_client(
        python.to_str().unwrap(),
        &script,
        &[&base, "key-a", "key-b"],
    )
    .await;
    for case in [
        "assistants",
        "threads",
        "stream every mode",
        "events mode",
        "state and history",
        "second turn",
        "interrupt and resume",
        "interrupt_before and interrupt_after",
        "update_state",
        "command.goto",
        "update_state and goto before any run",
        "run from a checkpoint",
        "rejoin with the last event id",
        "cancel",
        "multitask_strategy enqueue",
        "404s",
        "another key sees nothing",
    ] {
        assert!(
            output.contains(&format!("ok   {case}")),
            "{case}:\n{output}"
        );
    }
    assert!(all_reexecute(&base, "key-a").await >= 4);
    let _ = child.kill().await;
}

#[tokio::test]
async fn use_stream_works_in_chromium() {
    let tool = root().join("tests/tools/langgraph-sdk");
    assert!(
        tool.join("node_modules/playwright-core").is_dir(),
        "the useStream test's packages are not installed: run `npm ci` in {} (tests/run.sh does)",
        tool.display()
    );
    let chromium = crate::support::browser::chromium();
    let dir = tempfile::tempdir().unwrap();
    let (mut child, base) = serve_example(dir.path()).await;
    let output = run_client(
        "node",
        &tool.join("usestream.test.mjs"),
        &[&base, "key-a", chromium.to_str().unwrap()],
    )
    .await;
    for case in [
        "useStream streams a reply",
        "a second turn on the same thread",
        "an interrupt and its answer",
        "stop a slow run",
    ] {
        assert!(
            output.contains(&format!("ok   {case}")),
            "{case}:\n{output}"
        );
    }
    let _ = child.kill().await;
}

/// The shipped chat graph (graphs/chat.yaml, on the offline model), whose
/// answer goes to its `answer` field rather than into `messages`: through
/// the LangGraph API the answer is the conversation's AI message — in the
/// final values, in the thread state, in the next run's history — with the
/// id of the chat's stored assistant message.
#[tokio::test]
async fn the_shipped_chat_graph_answers_in_messages() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[paths]\ngraphs = \"{}\"\nprompts = \"{}\"\n[store]\nbackend = \"sqlite\"\ndata_dir = \"{}\"\n[auth]\nlocal_user = \"\"\n[auth.api_keys]\n\"key-a\" = \"alice\"\n",
        root().join("graphs").display(),
        root().join("prompts").display(),
        dir.path().join("data").display()
    );
    let file = dir.path().join("stategraph.toml");
    std::fs::write(&file, config).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stategraph"));
    cmd.arg("--config").arg(&file).arg("serve");
    let (mut child, base) = spawn_serving(cmd).await;
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        http.post(format!("{base}{path}"))
            .header("x-api-key", "key-a")
            .json(&body)
            .send()
    };
    let t: Value = post("/threads", serde_json::json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = t["thread_id"].as_str().unwrap();
    let turn = |text: &str| serde_json::json!({"assistant_id": "chat", "input": {"messages": [{"type": "human", "content": text}]}});
    let first: Value = post(
        &format!("/threads/{tid}/runs/wait"),
        turn("hello, who are you?"),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let types = |v: &Value| -> Vec<String> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(types(&first), ["human", "ai"], "{first}");
    assert_eq!(first["messages"][1]["content"], first["answer"]);
    let second: Value = post(
        &format!("/threads/{tid}/runs/wait"),
        turn("and the GDP of France?"),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(types(&second), ["human", "ai", "human", "ai"], "{second}");
    assert_ne!(
        second["messages"][1]["content"],
        second["messages"][3]["content"]
    );
    let chat: Value = http
        .get(format!("{base}/api/chat/{tid}"))
        .header("x-api-key", "key-a")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids = |v: &Value, key: &str| -> Vec<String> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[key].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids(&chat, "id"),
        ids(&second, "id"),
        "the thread's messages are the chat's"
    );
    assert!(all_reexecute(&base, "key-a").await >= 2);
    let _ = child.kill().await;
}

/// `runs/wait` and `join` on a run longer than the server's request
/// timeout: the answer starts at once (newlines while the run goes on, as
/// JSON allows) and ends with the final values — not a 504.
#[tokio::test]
async fn wait_and_join_outlast_the_request_timeout() {
    use crate::support::server::TestServer;
    use stategraph::internals::llm::offline::OfflineModel;
    let slow = OfflineModel {
        token_delay: Some(std::time::Duration::from_millis(40)),
        answer_tokens: Some(40),
    };
    let server = TestServer::start(std::sync::Arc::new(slow), |c| {
        c.server.request_timeout.0 = std::time::Duration::from_millis(800);
        c.server.keep_alive.0 = std::time::Duration::from_millis(200);
    })
    .await;
    let client = reqwest::Client::new();
    let input = serde_json::json!({"assistant_id": "chat", "if_not_exists": "create",
        "input": {"messages": [{"type": "human", "content": "a slow one"}]}});
    let started = std::time::Instant::now();
    let r = client
        .post(server.url("/threads/t-slow/runs/wait"))
        .json(&input)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        started.elapsed() > std::time::Duration::from_millis(800),
        "the run outlasted the timeout"
    );
    assert!(text.starts_with('\n'), "kept alive while waiting: {text:?}");
    let values: serde_json::Value = serde_json::from_str(&text).unwrap();
    let last = values["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["type"], "ai", "{values}");
    assert!(
        last["content"].as_str().unwrap().contains("a slow one"),
        "{values}"
    );

    // A background run, joined: the same.
    let run: serde_json::Value = client
        .post(server.url("/threads/t-slow/runs"))
        .json(&serde_json::json!({"assistant_id": "chat",
            "input": {"messages": [{"type": "human", "content": "slow again"}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rid = run["run_id"].as_str().unwrap();
    let joined = client
        .get(server.url(&format!("/threads/t-slow/runs/{rid}/join")))
        .send()
        .await
        .unwrap();
    assert_eq!(joined.status(), 200);
    let values: serde_json::Value = serde_json::from_str(&joined.text().await.unwrap()).unwrap();
    let last = values["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["content"].as_str().unwrap().contains("slow again"),
        "{values}"
    );
    server.shutdown().await;
}
