//! GenAI traces received by a real OpenTelemetry consumer: Arize Phoenix
//! (from PyPI, installed by tests/run.sh under
//! `~/.cache/stategraph-tests/phoenix-venv`, its path in
//! `STATEGRAPH_TEST_PHOENIX`) is started on free loopback ports; the real
//! `stategraph serve` exports to it over OTLP/HTTP protobuf while a chat
//! turn runs against the OpenAI emulator; then Phoenix's own REST API
//! (`GET /v1/projects/default/spans`) must return the model-call spans with
//! the OpenTelemetry GenAI attributes (operation, provider, request and
//! response model, input and output tokens, finish reasons), the tool
//! spans, and the run span as their ancestor with its correlation ids.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

// The provider emulators of the integration tests (they name each other
// as `super::…`, the crate root here).
#[allow(dead_code, unreachable_pub)]
#[path = "integration/models_and_tools/providers/anthropic_rules.rs"]
mod anthropic_rules;
#[allow(dead_code, unreachable_pub)]
#[path = "integration/models_and_tools/providers/emulator.rs"]
mod emulator;
#[allow(dead_code, unreachable_pub)]
#[path = "integration/models_and_tools/providers/instance.rs"]
mod instance;
#[allow(dead_code, unreachable_pub)]
#[path = "integration/models_and_tools/providers/openai_rules.rs"]
mod openai_rules;

use emulator::Emulator;

/// A graph whose answer node is an agent with the built-in tools.
const OTEL_GRAPH: &str = r#"
entry: helper
state:
  fields:
    messages: { type: messages }
    query: { type: string }
    answer: { type: string }
nodes:
  - id: helper
    kind: agent
    prompt: otel/helper.md
    surface: answer
    tools: [basic]
    input: query
    history: messages
    max_iterations: 3
    output: answer
edges: [helper -> END]
"#;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for(url: &str, what: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        if reqwest::get(url)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        assert!(started.elapsed() < limit, "{what} did not come up at {url}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Phoenix's nested attribute objects as dotted keys.
fn flatten(prefix: &str, v: &Value, out: &mut HashMap<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

fn attributes(span: &Value) -> HashMap<String, Value> {
    let mut out = HashMap::new();
    flatten("", &span["attributes"], &mut out);
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn genai_spans_reach_phoenix_with_their_attributes() {
    let phoenix = std::env::var("STATEGRAPH_TEST_PHOENIX").expect(
        "STATEGRAPH_TEST_PHOENIX must name the `phoenix` executable (tests/run.sh installs it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let (_phoenix, phx) = start_phoenix(&phoenix, dir.path()).await;
    let emu = Emulator::start().await;
    let (_server, app) = serve_otel_graph(dir.path(), &phx, &emu).await;
    let body = json!({"id": "otel-chat", "trigger": "submit-message", "graph": "otel",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "How did Kenya's GDP grow?"}]}]});
    let sse = reqwest::Client::new()
        .post(format!("{app}/api/chat"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(sse.contains("\"type\":\"finish\""), "{sse}");
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());

    let spans = spans_arrived(&phx, emu.received().len()).await;
    let by_id: Map<String, Value> = spans
        .iter()
        .map(|s| {
            (
                s["context"]["span_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                s.clone(),
            )
        })
        .collect();
    let chat = spans.iter().find(|s| s["name"] == "chat gpt-5.1").unwrap();
    chat_span_has_its_attributes(chat);
    run_span_is_above(chat, &by_id);
    tool_calls_are_execute_tool_spans(&spans);
}

/// Phoenix serving on free ports with its data in `dir`; its URL.
async fn start_phoenix(phoenix: &str, dir: &std::path::Path) -> (Guard, String) {
    let (phx_port, grpc_port) = (free_port(), free_port());
    let guard = Guard(
        Command::new(phoenix)
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir)
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", phx_port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let phx = format!("http://127.0.0.1:{phx_port}");
    wait_for(
        &format!("{phx}/healthz"),
        "Phoenix",
        Duration::from_secs(180),
    )
    .await;
    (guard, phx)
}

/// `stategraph serve` exporting to Phoenix at `phx` with content capture
/// on, its model the OpenAI emulator, serving the `otel` graph; its URL.
async fn serve_otel_graph(dir: &std::path::Path, phx: &str, emu: &Emulator) -> (Guard, String) {
    let app_port = free_port();
    let config = dir.join("stategraph.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nbind = \"127.0.0.1:{app_port}\"\n[store]\nbackend = \"memory\"\n\
             [telemetry]\notlp_endpoint = \"{phx}\"\notlp_protocol = \"http/protobuf\"\ncapture_content = true\n\
             [llm.endpoints.default]\nbase_url = \"{}\"\napi_key = \"sk-test\"\n[llm]\nmodel = \"gpt-5.1\"\n",
            emu.url("openai")
        ),
    )
    .unwrap();
    // A graph whose answer node is an agent with the built-in tools, so the
    // run makes model calls and tool calls.
    let (graphs, prompts) = (dir.join("graphs"), dir.join("prompts"));
    std::fs::create_dir_all(prompts.join("otel")).unwrap();
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::write(
        prompts.join("otel/helper.md"),
        "Answer the question; use a tool when it helps.\n",
    )
    .unwrap();
    std::fs::write(graphs.join("otel.yaml"), OTEL_GRAPH).unwrap();
    let server = Guard(
        Command::new(env!("CARGO_BIN_EXE_stategraph"))
            .arg("--config")
            .arg(&config)
            .arg("--graphs")
            .arg(&graphs)
            .arg("--prompts")
            .arg(&prompts)
            .arg("serve")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let app = format!("http://127.0.0.1:{app_port}");
    wait_for(
        &format!("{app}/healthz"),
        "stategraph",
        Duration::from_secs(60),
    )
    .await;
    (server, app)
}

/// The spans in Phoenix once a chat span per model call and the run span
/// have arrived.
async fn spans_arrived(phx: &str, model_calls: usize) -> Vec<Value> {
    // Spans are exported every half second; Phoenix inserts them in the background.
    let started = Instant::now();
    loop {
        let page: Value = reqwest::get(format!("{phx}/v1/projects/default/spans?limit=1000"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or(Value::Null);
        let spans = page["data"].as_array().cloned().unwrap_or_default();
        let chats = spans.iter().filter(|s| s["name"] == "chat gpt-5.1").count();
        if chats >= model_calls && spans.iter().any(|s| s["name"] == "run") {
            break spans;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "spans never arrived: {page:#}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The model call's span carries the GenAI semantic conventions.
fn chat_span_has_its_attributes(chat: &Value) {
    let a = attributes(chat);
    assert_eq!(a["gen_ai.operation.name"], "chat", "{chat:#}");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "gpt-5.1");
    assert_eq!(a["gen_ai.response.model"], "gpt-5.1");
    assert!(
        a["gen_ai.usage.input_tokens"].as_u64().unwrap() > 0,
        "{a:?}"
    );
    assert!(
        a["gen_ai.usage.output_tokens"].as_u64().unwrap() > 0,
        "{a:?}"
    );
    // A list attribute: sent as an OTLP array, not as its JSON text.
    let reasons = a["gen_ai.response.finish_reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("{a:?}"));
    assert!(
        !reasons.is_empty() && reasons.iter().all(Value::is_string),
        "{a:?}"
    );
    assert!(
        a.keys().any(|k| k.starts_with("gen_ai.input.messages")),
        "content capture on: {a:?}"
    );
}

/// The run span is an ancestor of the model call's, with its correlation ids.
fn run_span_is_above(chat: &Value, by_id: &Map<String, Value>) {
    let mut at = chat.clone();
    let run = loop {
        let parent = at["parent_id"].as_str().unwrap_or_default().to_owned();
        let Some(p) = by_id.get(&parent) else {
            panic!("no run span above {chat:#}");
        };
        if p["name"] == "run" {
            break p.clone();
        }
        at = p.clone();
    };
    let r = attributes(&run);
    for id in ["run_id", "request_id", "chat_id"] {
        assert!(
            r.get(id)
                .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty())),
            "{id}: {r:?}"
        );
    }
    assert_eq!(r["chat_id"], "otel-chat");
}

/// The agent's tool calls are `execute_tool` spans.
fn tool_calls_are_execute_tool_spans(spans: &[Value]) {
    let tool = spans
        .iter()
        .find(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("execute_tool "))
        })
        .unwrap_or_else(|| {
            panic!(
                "no tool span in {:?}",
                spans.iter().map(|s| &s["name"]).collect::<Vec<_>>()
            )
        });
    let t = attributes(tool);
    assert_eq!(t["gen_ai.operation.name"], "execute_tool");
    assert!(
        t["gen_ai.tool.name"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
    );
}
