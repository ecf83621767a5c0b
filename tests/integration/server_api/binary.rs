//! The `stategraph` binary as a user runs it: `serve` on its defaults
//! (offline model announced), span export to an OTLP collector, graceful
//! shutdown on SIGTERM; `check`, `graph`, `run`, `new`, `schema`,
//! `replay` and `fork`.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{chat_body, post_json, root};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stategraph")
}

/// A fake OTLP/HTTP collector collecting the JSON bodies it receives.
async fn collector() -> (String, Arc<Mutex<Vec<Value>>>) {
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = Arc::clone(&got);
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: String| {
            let sink = Arc::clone(&sink);
            async move {
                if let Ok(v) = serde_json::from_str(&body) {
                    sink.lock().unwrap().push(v);
                }
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

fn spans(batches: &[Value]) -> Vec<Value> {
    batches
        .iter()
        .flat_map(|b| b["resourceSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

#[tokio::test]
async fn serve_on_defaults_exports_spans_and_stops_gracefully_on_sigterm() {
    let (otlp, received) = collector().await;
    let data = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(["serve", "--bind", "127.0.0.1:0"])
        .current_dir(root())
        .env("STATEGRAPH_DATA_DIR", data.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped());
    let (mut child, base, _) = crate::support::serving(cmd, false).await;
    let base = base.expect("the server announces its address");
    let stderr = child.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut all = String::new();
        while let Ok(Some(l)) = lines.next_line().await {
            all.push_str(&l);
            all.push('\n');
        }
        all
    });

    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{base}/api/chat"))
        .header("content-type", "application/json")
        .header("x-request-id", "otlp-test-1")
        .body(chat_body("bin-1", "explain how tides work").to_string())
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    assert!(
        text.contains(r#""offlineModel":true"#),
        "the offline model is announced in the metadata"
    );
    assert!(text.ends_with("data: [DONE]\n\n"));
    let chats = post_json(&client, &format!("{base}/api/chat"), &json!({})).await;
    assert_eq!(chats.status(), 400);

    // SIGTERM: the server finishes and exits cleanly.
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?}");
    let log = log.await.unwrap();
    assert!(
        log.contains("OFFLINE model"),
        "the startup log announces the offline model:\n{log}"
    );
    assert!(
        log.contains("request_id") && log.contains("otlp-test-1"),
        "log lines carry the correlation id:\n{log}"
    );

    // Spans were exported with the correlation id, the run inside the request's trace.
    let batches = received.lock().unwrap().clone();
    let spans = spans(&batches);
    let request = spans
        .iter()
        .find(|s| s["name"] == "request" && attr(s, "request_id") == Some("otlp-test-1"))
        .expect("request span");
    let run = spans
        .iter()
        .find(|s| s["name"] == "run" && attr(s, "request_id") == Some("otlp-test-1"))
        .expect("run span");
    assert_eq!(run["traceId"], request["traceId"]);
    assert_eq!(
        batches[0]["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
        "stategraph"
    );
}

#[test]
fn check_graph_and_run_commands() {
    let out = std::process::Command::new(bin())
        .args(["check"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 error(s)"));
    let bad = std::process::Command::new(bin())
        .args([
            "check",
            "tests/fixtures/invalid/dead_end.yaml",
            "--prompts",
            "tests/fixtures/prompts",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stdout).contains("dead_end.yaml:7:9: error[no-path-to-end]")
    );
    let graph = std::process::Command::new(bin())
        .args(["graph", "chat"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&graph.stdout).starts_with("flowchart TD"));
    let dot = std::process::Command::new(bin())
        .args(["graph", "chat", "--format", "dot"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&dot.stdout).starts_with("digraph \"chat\""));
    let data = tempfile::tempdir().unwrap();
    let run = std::process::Command::new(bin())
        .args(["run", "chat", "hello there", "--json", "--no-store"])
        .current_dir(root())
        .env("STATEGRAPH_DATA_DIR", data.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    assert!(run.status.success());
    let events: Vec<Value> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["event"]["type"], "run_started");
    assert_eq!(events.last().unwrap()["event"]["type"], "run_finished");
}

/// The binary carries the shipped graphs (the library embeds none): in a
/// directory with no `graphs/`, it runs the built-in chat graph, offline.
#[test]
fn the_binary_runs_its_built_in_graphs_from_an_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    let graph = sg(dir.path(), &["graph", "chat"]);
    assert!(stdout(&graph).starts_with("flowchart TD"), "{graph:?}");
    let run = sg(
        dir.path(),
        &["run", "chat", "thank you", "--json", "--no-store"],
    );
    assert!(run.status.success(), "{run:?}");
    // The chat graph's own keywords route thanks to `direct`.
    let text = stdout(&run);
    assert!(text.contains("\"intent\":\"DIRECT\""), "{text}");
}

/// Runs the binary in `dir` with its own data directory and no model.
fn sg(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("STATEGRAPH_DATA_DIR", dir.join("data"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("STATEGRAPH_CONFIG")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A new user's first minutes: `new` writes a graph `check` accepts (in
/// JSON too), `run` runs it on the offline model and stores it, `replay`
/// shows and re-executes it, `fork` continues it with an edit.
#[test]
fn new_graph_checks_runs_stores_replays_and_forks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let new = sg(d, &["new", "hello"]);
    assert!(new.status.success(), "{new:?}");
    assert!(d.join("graphs/hello.yaml").is_file() && d.join("prompts/hello/answer.md").is_file());
    let again = sg(d, &["new", "hello"]);
    assert!(!again.status.success(), "new must not overwrite");
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    let check = sg(d, &["check", "--format", "json"]);
    assert!(check.status.success(), "{}", stdout(&check));
    let report: Value = serde_json::from_str(&stdout(&check)).unwrap();
    assert_eq!(report["valid"], json!(["hello"]));
    assert_eq!(report["errors"], 0);

    let run = sg(d, &["run", "hello", "What is a graph?"]);
    assert!(run.status.success(), "{run:?}");
    let text = stdout(&run);
    assert!(text.contains("You asked: “What is a graph?”"), "{text}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("run ")?.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id on stderr: {stderr}"))
        .to_owned();
    let timeline = sg(d, &["replay", &id]);
    assert!(
        stdout(&timeline).contains("status Finished"),
        "{}",
        stdout(&timeline)
    );
    let reexec = sg(d, &["replay", &id, "--reexecute"]);
    assert!(reexec.status.success(), "{}", stdout(&reexec));
    assert!(
        stdout(&reexec).contains("no divergence"),
        "{}",
        stdout(&reexec)
    );
    let sse = sg(d, &["replay", &id, "--sse"]);
    assert!(
        stdout(&sse).starts_with("id: 1\ndata: {\"type\":\"start\""),
        "{}",
        stdout(&sse)
    );

    let fork = sg(d, &["fork", &id, "--at", "0", "--set", "query=\"Why?\""]);
    assert!(fork.status.success(), "{fork:?}");
    assert!(stdout(&fork).contains(&format!("of run {id} at step 0")));
    let bad = sg(d, &["fork", &id, "--at", "0", "--set", "nope=1"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("nope"),
        "{bad:?}"
    );
    // Before a node: it runs again on the edited input (a plain string
    // needs no JSON quotes); the fork replays and re-executes like any run.
    let before = sg(
        d,
        &["fork", &id, "--before", "answer", "--set", "query=Why not?"],
    );
    assert!(before.status.success(), "{before:?}");
    let text = stdout(&before);
    assert!(
        text.contains(&format!("of run {id} at step 1, before answer")),
        "{text}"
    );
    assert!(text.contains("answer finished"), "{text}");
    let child = text
        .lines()
        .find_map(|l| l.strip_prefix("fork ")?.split_whitespace().next())
        .unwrap()
        .to_owned();
    let reexec = sg(d, &["replay", &child, "--reexecute"]);
    assert!(
        stdout(&reexec).contains("no divergence"),
        "{}",
        stdout(&reexec)
    );
    let sse = sg(d, &["replay", &child, "--sse"]);
    assert!(
        stdout(&sse).contains("\"type\":\"start\""),
        "{}",
        stdout(&sse)
    );
    // A refused edit names its code.
    let refused = sg(d, &["fork", &id, "--after", "ghost"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("[unknown_node]"), "{stderr}");
}

/// `schema` prints a JSON Schema naming every node kind; `check --format
/// github` prints annotations with the place of each problem.
#[test]
fn schema_and_github_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let schema = sg(dir.path(), &["schema"]);
    assert!(schema.status.success());
    let schema: Value = serde_json::from_str(&stdout(&schema)).unwrap();
    let text = schema.to_string();
    for kind in ["llm", "agent", "router", "set", "tool", "http", "subgraph"] {
        assert!(text.contains(&format!("\"{kind}\"")), "kind {kind} missing");
    }
    let bad = std::process::Command::new(bin())
        .args([
            "check",
            "tests/fixtures/invalid/dead_end.yaml",
            "--prompts",
            "tests/fixtures/prompts",
            "--format",
            "github",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stdout(&bad).contains(
            "::error file=tests/fixtures/invalid/dead_end.yaml,line=7,col=9,title=no-path-to-end::"
        ),
        "{}",
        stdout(&bad)
    );
}

/// A run stored by `stategraph run` belongs to the local user, so the
/// runs API (and the studio on it) shows it to a loopback caller instead
/// of answering `not_found` (issue 31). A file that sets `[store]
/// data_dir` elsewhere does not hide it either: `STATEGRAPH_DATA_DIR`
/// wins over the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_from_the_cli_is_visible_to_the_local_user() {
    use stategraph::internals::store::{RunStore, SqliteStore};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    std::fs::write(
        d.join("stategraph.toml"),
        "[store]\ndata_dir = \"elsewhere\"\n",
    )
    .unwrap();
    let id = tokio::task::spawn_blocking(move || {
        assert!(sg(&d, &["new", "hello"]).status.success());
        let run = sg(&d, &["run", "hello", "What is a graph?"]);
        assert!(run.status.success(), "{run:?}");
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        stderr
            .lines()
            .find_map(|l| l.strip_prefix("run ")?.split_whitespace().next())
            .unwrap_or_else(|| panic!("no run id on stderr: {stderr}"))
            .to_owned()
    })
    .await
    .unwrap();
    assert!(
        !dir.path().join("elsewhere").exists(),
        "STATEGRAPH_DATA_DIR overrides [store] data_dir"
    );
    let db = dir
        .path()
        .join("data")
        .join(stategraph::internals::store::config::SQLITE_FILE);
    let store = Arc::new(SqliteStore::open(db).await.unwrap());
    let run = store
        .get_run(id.parse().unwrap())
        .await
        .unwrap()
        .expect("the run is stored in STATEGRAPH_DATA_DIR");
    assert_eq!(run.user_id, "local");
    let model = stategraph::internals::llm::scripted::ScriptedModel::new([]).shared();
    let server = crate::support::server::TestServer::start_with_store(model, store, |_| {}).await;
    let resp = reqwest::get(server.url(&format!("/api/runs/{id}")))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    server.shutdown().await;
}
