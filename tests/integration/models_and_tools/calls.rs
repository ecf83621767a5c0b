//! Model calls you can read (issue 35, item 1): each call's request is
//! stored — messages after templating, tools, settings, model — beside its
//! answer; content is stored once by address (a 40-turn chat stores its
//! history once, measured here against a bound derived from the requests
//! the model received); secrets are redacted before anything is stored;
//! content expires after `[calls] retention` while the record stays; the
//! API answers `/calls` and `/calls/{n}` with stable error codes.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest};
use stategraph::internals::store::{SqliteStore, Store};

use crate::support::post_json;
use crate::support::server::TestServer;
use crate::support::talk::{TALK_PROMPT, talk_dirs};

/// What the model answers to the `n`th user message (deterministic, so the
/// client can send it back as history unchanged).
fn reply(n: usize) -> String {
    format!(
        "Answer {n}: the derivative of x^{n} is {n}·x^{}, because the power rule brings the exponent down and lowers it by one; this holds for every real exponent as well.",
        n.saturating_sub(1)
    )
}

fn question(n: usize) -> String {
    format!(
        "Question {n}: what is the derivative of x^{n}? Please explain the rule you use and why it works, step by step, as for a first-year student."
    )
}

/// A model answering `reply(n)` to the conversation's `n`th question and
/// keeping every request it got.
fn tutor() -> (Arc<ScriptedModel>, Arc<Mutex<Vec<ChatRequest>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&seen);
    let model = ScriptedModel::from_fn(move |req: &ChatRequest| {
        keep.lock().unwrap().push(req.clone());
        let n = req
            .messages
            .iter()
            .filter(|m| m.user_text().is_some())
            .count();
        Turn::text(reply(n))
    });
    (Arc::new(model), seen)
}

/// The AI SDK request of turn `turns`: the whole conversation so far.
fn turn_body(chat: &str, turns: usize) -> Value {
    let mut messages = Vec::new();
    for n in 1..=turns {
        messages.push(json!({"id": format!("u{n}"), "role": "user", "parts": [{"type": "text", "text": question(n)}]}));
        if n < turns {
            messages.push(json!({"id": format!("a{n}"), "role": "assistant", "parts": [{"type": "text", "text": reply(n)}]}));
        }
    }
    json!({"id": chat, "messages": messages, "trigger": "submit-message", "graph": "talk"})
}

async fn talk_server(
    dir: &Path,
    store: Arc<dyn Store>,
    model: Arc<ScriptedModel>,
    tweak: impl FnOnce(&mut stategraph::internals::config::Config),
) -> TestServer {
    let (graphs, prompts) = talk_dirs(dir);
    TestServer::start_with_store(model, store, |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = prompts;
        c.server.default_graph = "talk".into();
        tweak(c);
    })
    .await
}

/// The runs of `chat`, oldest first.
async fn runs_of(client: &reqwest::Client, server: &TestServer, chat: &str) -> Vec<String> {
    let page: Value = client
        .get(server.url(&format!("/api/runs?chat={chat}&limit=100")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut ids: Vec<String> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    ids.reverse();
    ids
}

/// Waits until the store holds `n` call records (they are written off the
/// node's task).
async fn await_calls(store: &dyn Store, n: u64) -> stategraph::internals::store::CallStorage {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = store.call_storage().await.unwrap();
        if s.calls >= n || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get(client: &reqwest::Client, url: String) -> (u16, Value) {
    let r = client.get(url).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// A 40-turn chat on SQLite: every turn's call sends the whole history,
/// yet each message is stored once. The bound, derived from the requests
/// the model received: the parts take at most the bytes of the distinct
/// messages and tool definitions, and each record at most a fixed
/// overhead plus one hash reference (35 bytes: 32 hex digits, quotes,
/// comma) per part it lists. Storing every request whole would take the
/// sum over calls of all their messages: the test prints both.
#[tokio::test]
async fn a_40_turn_chat_stores_its_history_once() {
    const TURNS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("db/stategraph.db"))
            .await
            .unwrap(),
    );
    let (model, seen) = tutor();
    let server = talk_server(dir.path(), Arc::clone(&store), model, |_| {}).await;
    let client = reqwest::Client::new();
    for turn in 1..=TURNS {
        let resp = post_json(&client, &server.url("/api/chat"), &turn_body("long", turn)).await;
        assert_eq!(resp.status(), 200, "turn {turn}");
        let sse = resp.text().await.unwrap();
        assert!(sse.contains(r#""type":"finish""#), "turn {turn}: {sse}");
    }
    let stored = await_calls(&*store, TURNS as u64).await;

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), TURNS, "one model call per turn");
    assert_eq!(
        requests[TURNS - 1].messages.len(),
        2 * TURNS,
        "the last call sends the whole chat"
    );
    let mut distinct = HashSet::new();
    let mut naive = 0u64;
    for r in &requests {
        let bodies = r
            .messages
            .iter()
            .map(|m| json!(m).to_string())
            .chain(r.tools.iter().map(|t| json!(t).to_string()));
        for b in bodies {
            naive += b.len() as u64;
            distinct.insert(b);
        }
    }
    let distinct_bytes: u64 = distinct.iter().map(|b| b.len() as u64).sum();
    // Per call: the record (~600 B of place, model and settings, the
    // tools' hashes) and the chain links of its new messages (a link is
    // ~90 B: two hashes; 2 new messages per turn, 1 more in the first).
    const OVERHEAD: u64 = 1024;
    const LINK: u64 = 100;
    let links = distinct.len() as u64;
    let bound = distinct_bytes + OVERHEAD * TURNS as u64 + LINK * links;
    let total = stored.record_bytes + stored.part_bytes;
    println!(
        "40-turn chat: {} records ({} B) + {} parts ({} B) = {total} B stored; bound {bound} B; \
         distinct content {distinct_bytes} B; every request whole would be {naive} B ({:.1}x)",
        stored.calls,
        stored.record_bytes,
        stored.parts,
        stored.part_bytes,
        naive as f64 / total as f64
    );
    assert_eq!(stored.calls, TURNS as u64);
    // Each distinct message and tool once, plus one link per message.
    let messages = 2 * TURNS as u64;
    assert_eq!(
        stored.parts,
        distinct.len() as u64 + messages,
        "each distinct part once"
    );
    assert!(
        stored.part_bytes >= distinct_bytes,
        "the content is all there"
    );
    assert!(
        stored.part_bytes <= distinct_bytes + LINK * messages,
        "the history is stored once: {} B of parts",
        stored.part_bytes
    );
    assert!(total <= bound, "{total} B stored, bound {bound} B");
    assert!(total * 4 < naive, "{total} B is not far below {naive} B");

    // The last run's call, whole: the whole conversation, the tools, the answer.
    let runs = runs_of(&client, &server, "long").await;
    assert_eq!(runs.len(), TURNS);
    let (status, call) = get(
        &client,
        server.url(&format!("/api/runs/{}/calls/0", runs[TURNS - 1])),
    )
    .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["content"], "recorded");
    let messages = call["request"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2 * TURNS);
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are a patient tutor")
    );
    assert_eq!(messages[2 * TURNS - 1]["content"], question(TURNS));
    assert_eq!(messages[2]["content"], reply(1), "history as sent");
    server.shutdown().await;
}

/// `/calls` lists each call summarized, `/calls/{n}` gives it whole with
/// its node's template; errors carry stable codes; a secret in the chat is
/// redacted by a `[[calls.redact]]` rule before it is stored, while the
/// model itself still got it.
#[tokio::test]
async fn calls_show_request_template_tools_and_answer_and_redact_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(stategraph::internals::store::memory::MemoryStore::new());
    let (model, seen) = tutor();
    let server = talk_server(dir.path(), Arc::clone(&store), model, |c| {
        c.calls.redact = vec![
            toml::from_str::<stategraph::internals::llm::RedactRule>(
                r#"pattern = "sk-[A-Za-z0-9]{16,}""#,
            )
            .unwrap(),
        ];
    })
    .await;
    let client = reqwest::Client::new();
    let mut body = turn_body("secret", 1);
    body["messages"][0]["parts"][0]["text"] = json!("My key is sk-abcdefghijklmnop1234, keep it.");
    let resp = post_json(&client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap();
    await_calls(&*store, 1).await;
    let got = seen.lock().unwrap()[0].clone();
    assert!(
        got.messages.iter().any(|m| matches!(m, ChatMessage::User { content } if content.contains("sk-abcdefghijklmnop1234"))),
        "the model gets the message as it is"
    );

    let run = runs_of(&client, &server, "secret").await.remove(0);
    let (status, list) = get(&client, server.url(&format!("/api/runs/{run}/calls"))).await;
    assert_eq!(status, 200, "{list}");
    let first = &list["calls"][0];
    assert_eq!(list["calls"].as_array().unwrap().len(), 1);
    assert_eq!(first["node"], "talk");
    assert_eq!(first["status"], "finished");
    assert_eq!(first["request"]["messages"], 2);
    assert_eq!(
        first["request"]["tools"],
        json!(["calculator", "current_time"])
    );
    assert_eq!(first["request"]["redactions"], 1);

    let (status, call) = get(&client, server.url(&format!("/api/runs/{run}/calls/0"))).await;
    assert_eq!(status, 200, "{call}");
    let text = call.to_string();
    assert!(!text.contains("sk-abcdefghijklmnop1234"), "{text}");
    assert_eq!(
        call["request"]["messages"][1]["content"],
        "My key is [redacted], keep it."
    );
    assert_eq!(call["template"]["name"], "talk/system.md");
    assert_eq!(call["template"]["text"], TALK_PROMPT);
    assert_eq!(call["request"]["messages"][0]["content"], TALK_PROMPT);
    let tools = call["request"]["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "calculator" && t["parameters"]["type"] == "object"),
        "{tools:?}"
    );
    assert_eq!(call["response"]["text"], reply(1));
    assert_eq!(call["response"]["finish_reason"], "stop");
    assert!(call["response"]["latency_ms"].as_f64().unwrap() >= 0.0);
    assert!(
        call["request"]["endpoint"]
            .as_str()
            .unwrap()
            .contains("scripted")
            || !call["request"]["endpoint"].as_str().unwrap().is_empty()
    );

    let (status, e) = get(&client, server.url(&format!("/api/runs/{run}/calls/7"))).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (404, Some("no_call")),
        "{e}"
    );
    let (status, e) = get(&client, server.url(&format!("/api/runs/{run}/calls/first"))).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (400, Some("bad_call_index")),
        "{e}"
    );
    let (status, e) = get(&client, server.url("/api/runs/nope/calls")).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{e}"
    );
    server.shutdown().await;
}

/// With `retention`, the server's upkeep expires call content: the record
/// stays, says `expired`, keeps its answer, and the parts are gone.
#[tokio::test]
async fn call_content_expires_after_the_retention_and_the_record_stays() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("db/stategraph.db"))
            .await
            .unwrap(),
    );
    let (model, _) = tutor();
    let server = talk_server(dir.path(), Arc::clone(&store), model, |c| {
        c.calls.retention = stategraph::internals::config::Dur(Duration::from_millis(600));
    })
    .await;
    let client = reqwest::Client::new();
    let resp = post_json(&client, &server.url("/api/chat"), &turn_body("brief", 1)).await;
    resp.text().await.unwrap();
    let stored = await_calls(&*store, 1).await;
    assert!(stored.parts > 0);
    let run = runs_of(&client, &server, "brief").await.remove(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let call = loop {
        let (_, call) = get(&client, server.url(&format!("/api/runs/{run}/calls/0"))).await;
        if call["content"] == "expired" || Instant::now() > deadline {
            break call;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(call["content"], "expired", "{call}");
    assert_eq!(call["request"]["messages"], json!([]));
    assert_eq!(call["request"]["model"], call["model"]);
    assert_eq!(
        call["response"]["text"],
        reply(1),
        "the answer is the run's"
    );
    assert_eq!(
        store.call_storage().await.unwrap().parts,
        0,
        "content deleted"
    );
    server.shutdown().await;
}

fn sg(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_stategraph"))
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

/// `stategraph replay RUN --calls` prints each call: place, model, the
/// rendered system prompt and the user's message as sent, and the answer
/// with its finish reason and tokens. A `[[calls.redact]]` rule in the
/// config file keeps a secret out of what the CLI run stored.
#[test]
fn replay_calls_prints_each_calls_request_and_answer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(sg(d, &["new", "hello"]).status.success());
    std::fs::write(
        d.join("stategraph.toml"),
        "[[calls.redact]]\npattern = \"hunter[0-9]+\"\nreplace = \"[pw]\"\n",
    )
    .unwrap();
    let run = sg(d, &["run", "hello", "Is hunter42 a good password?"]);
    assert!(run.status.success(), "{run:?}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("run ")?.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id on stderr: {stderr}"))
        .to_owned();
    let out = sg(d, &["replay", &id, "--calls"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("call 0 · step 1 · answer · ") && lines[0].ends_with(" · finished"),
        "{text}"
    );
    assert!(lines.contains(&"  [system] You are a helpful assistant. Answer the user's message briefly and clearly."), "{text}");
    assert!(
        lines.contains(&"  [user] Is [pw] a good password?"),
        "the secret is redacted: {text}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("  [") && l.contains("hunter42")),
        "no message as stored holds the secret: {text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  → ") && l.contains("hunter42")),
        "the answer is the run's, as the model gave it: {text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  finish: stop · tokens ")),
        "{text}"
    );
    // Not a run: an error, not a panic.
    let bad = sg(
        d,
        &["replay", "01a21f61-d217-7254-b6ba-05a480fdef69", "--calls"],
    );
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no run"),
        "{bad:?}"
    );
}
