//! The production model client against a real OpenAI-compatible server:
//! llama.cpp's `llama-server` with a tiny base model on 127.0.0.1
//! (`tests/tools/local-llm`, started by `tests/run.sh`).
//!
//! Everything goes the way a deployment goes: an `[llm]` table parsed into
//! [`LlmConfig`], models built from it, calls through [`ChatModel::stream`]
//! and [`call_model`] (what nodes use), and one run of the `stategraph`
//! binary. The model's text means nothing, so the tests assert on
//! structure: deltas, usage, finish reasons, JSON that matches its schema,
//! tool calls that assemble, errors that map to [`LlmError`].
//!
//! Requests send `temperature: 0`, and every role sends `cache_prompt:
//! false` through its `extra` table, so answers repeat.
//!
//! Run on its own (a separate test binary, kept out of the main run):
//! ```sh
//! bash tests/tools/local-llm/start.sh 8097
//! STATEGRAPH_TEST_LOCAL_LLM=http://127.0.0.1:8097/v1 cargo nextest run --test local_llm
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The integration tests' database fixture (this binary uses only `PgDb`).
#[path = "integration/support/db.rs"]
#[allow(dead_code, unreachable_pub)]
mod db;

use stategraph::internals::events::LlmFinish;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};
use stategraph::internals::events::{
    Event, EventKind, EventSink, NodeEvents, ToolCallRecord, Usage,
};
use stategraph::internals::llm::{
    ChatMessage, ChatModel, ChatRequest, JsonSchemaFormat, LlmChunk, LlmConfig, LlmError, LlmReply,
    ModelCall, Models, ToolDef, call_model,
};
use tokio::sync::mpsc;
use uuid::Uuid;

/// The variable naming the server's base URL.
const URL_VAR: &str = "STATEGRAPH_TEST_LOCAL_LLM";
/// The model alias `start.sh` gives the server.
const MODEL: &str = "gemma-3-270m";

/// The server's base URL (`http://127.0.0.1:PORT/v1`). Fails, never skips:
/// a test binary that passes without its server proves nothing.
fn base_url() -> String {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => panic!(
            "{URL_VAR} is not set. These tests need a real OpenAI-compatible server: run \
             `bash tests/tools/local-llm/start.sh 8097` and set \
             {URL_VAR}=http://127.0.0.1:8097/v1 (tests/run.sh does both)."
        ),
    }
}

/// The configuration file a deployment on this server would write; the
/// in-process tests build their models from its `[llm]` table, the binary
/// reads the file. Every role sends `cache_prompt: false` so answers
/// repeat; `tools` stops at the end of a tool-call block (the chat template
/// `start.sh` installs writes Hermes-style `<tool_call>` blocks);
/// `narrator` gives the graph's node, which sets no temperature, one, and
/// caps its length (a role's `max_tokens` bounds what a node asks for). The server has one slot, so a call may queue behind another
/// test's: the first-token timeout is generous.
fn config_toml(base_url: &str) -> String {
    format!(
        r#"
[llm]
model = "{MODEL}"
[llm.endpoints.default]
base_url = "{base_url}"
[llm.roles.chat.extra]
cache_prompt = false
[llm.roles.tools.extra]
cache_prompt = false
stop = ["</tool_call>"]
[llm.roles.narrator]
max_tokens = {NARRATOR_MAX_TOKENS}
[llm.roles.narrator.extra]
cache_prompt = false
temperature = 0
[llm.timeouts]
connect = "5s"
first_token = "4m"
total = "5m"
[llm.retry]
attempts = 2
backoff = "200ms"
"#
    )
}

/// The `narrator` role's `max_tokens`.
const NARRATOR_MAX_TOKENS: u64 = 24;

/// The models of [`config_toml`] on `base_url`, built as `stategraph`
/// builds them (minus the environment).
fn models_at(base_url: &str) -> Models {
    let file: toml::Table = toml::from_str(&config_toml(base_url)).unwrap();
    let config: LlmConfig = file["llm"].clone().try_into().unwrap();
    config.build_models_with(|_| None).unwrap()
}

fn models() -> Models {
    models_at(&base_url())
}

fn model(role: &str) -> Arc<dyn ChatModel> {
    Arc::clone(models().for_role(role))
}

/// A request at temperature 0 with a bounded answer.
fn request(messages: Vec<ChatMessage>, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        messages,
        temperature: Some(0.0),
        max_tokens: Some(max_tokens),
        ..Default::default()
    }
}

fn system(content: &str) -> ChatMessage {
    ChatMessage::System {
        content: content.into(),
    }
}

fn user(content: &str) -> ChatMessage {
    ChatMessage::User {
        content: content.into(),
    }
}

async fn chunks(model: &dyn ChatModel, request: &ChatRequest) -> Vec<LlmChunk> {
    model
        .stream(request)
        .map(|c| c.unwrap_or_else(|e| panic!("the call failed: {e}")))
        .collect()
        .await
}

fn texts(chunks: &[LlmChunk]) -> Vec<&str> {
    chunks
        .iter()
        .filter_map(|c| match c {
            LlmChunk::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn finish_reasons(chunks: &[LlmChunk]) -> Vec<&str> {
    chunks
        .iter()
        .filter_map(|c| match c {
            LlmChunk::Finish(r) => Some(r.as_str()),
            _ => None,
        })
        .collect()
}

fn usages(chunks: &[LlmChunk]) -> Vec<Usage> {
    chunks
        .iter()
        .filter_map(|c| match c {
            LlmChunk::Usage(u) => Some(*u),
            _ => None,
        })
        .collect()
}

/// Runs [`call_model`] as a node would; returns the reply and the events.
async fn call_as_node(
    model: &dyn ChatModel,
    role: &str,
    request: &ChatRequest,
) -> (Result<LlmReply, LlmError>, Vec<EventKind>) {
    let (tx, mut rx) = mpsc::channel(4096);
    let events = NodeEvents::new(
        Arc::new(EventSink::new(Uuid::now_v7(), Some(tx), 0, false)),
        1,
        "node".into(),
        0,
    );
    let role: Arc<str> = role.into();
    let cx = ModelCall {
        events: &events,
        role: &role,
        call: 0,
        quiet: &[],
        recorder: None,
        endpoint: "",
    };
    let reply = call_model(model, cx, request).await;
    drop(events);
    let mut kinds = Vec::new();
    while let Ok(event) = rx.try_recv() {
        kinds.push(event.event.clone());
    }
    (reply, kinds)
}

// ---------------------------------------------------------------- text

#[tokio::test]
async fn text_streams_as_several_deltas_with_finish_and_usage_last() {
    let chat = model("chat");
    let req = request(
        vec![
            system("You are a helpful assistant."),
            user("Write a short story about a cat."),
        ],
        24,
    );
    let out = chunks(&*chat, &req).await;
    let deltas = texts(&out);
    assert!(deltas.len() >= 3, "expected several text deltas: {out:?}");
    assert!(deltas.iter().all(|d| !d.is_empty()), "{out:?}");
    let reasons = finish_reasons(&out);
    assert!(
        matches!(reasons.as_slice(), ["stop" | "length"]),
        "one finish reason: {out:?}"
    );
    // Usage (asked for with stream_options.include_usage) comes last, once.
    let usage = usages(&out);
    assert_eq!(usage.len(), 1, "{out:?}");
    assert!(matches!(out.last(), Some(LlmChunk::Usage(_))), "{out:?}");
    let Usage {
        prompt_tokens,
        completion_tokens,
        ..
    } = usage[0];
    assert!(prompt_tokens > 10, "the prompt has tokens: {usage:?}");
    assert!(
        (1..=24).contains(&completion_tokens),
        "max_tokens bounds the answer: {usage:?}"
    );
    if reasons == ["length"] {
        assert_eq!(completion_tokens, 24, "{usage:?}");
    }
    // Finish after every delta.
    let finish_at = out
        .iter()
        .position(|c| matches!(c, LlmChunk::Finish(_)))
        .unwrap();
    assert!(
        out[finish_at..]
            .iter()
            .all(|c| !matches!(c, LlmChunk::Text(_)))
    );
    // Temperature 0 and no prompt cache: the same request, the same answer.
    let again = chunks(&*chat, &req).await;
    assert_eq!(texts(&again).concat(), deltas.concat());
}

#[tokio::test]
async fn call_model_assembles_the_text_and_records_usage_in_events() {
    let chat = model("chat");
    let req = request(vec![user("List some fruits.")], 16);
    let (reply, events) = call_as_node(&*chat, "chat", &req).await;
    let reply = reply.unwrap();
    let output = reply.output();
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            EventKind::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "{events:?}");
    assert_eq!(output.text, deltas.concat());
    assert!(matches!(output.finish_reason.as_str(), "stop" | "length"));
    assert!(output.tool_calls.is_empty());
    let usage = reply.usage();
    assert!(usage.prompt_tokens > 0 && (1..=16).contains(&usage.completion_tokens));
    assert!(
        matches!(&events[0], EventKind::LlmStarted(s) if &*s.role == "chat" && s.model == MODEL),
        "{:?}",
        events[0]
    );
    assert!(
        matches!(events.last(), Some(EventKind::LlmFinished(f)) if f.usage == usage),
        "{:?}",
        events.last()
    );
}

// ---------------------------------------------------------------- JSON schema

#[tokio::test]
async fn a_json_schema_response_parses_and_matches_the_schema() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "colour": {"type": "string", "enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}
        },
        "required": ["name", "age", "colour", "tags"],
        "additionalProperties": false
    });
    let mut req = request(
        vec![
            system("Reply with JSON only."),
            user("Describe a person as JSON with name, age, favourite colour and tags."),
        ],
        200,
    );
    req.response_format = Some(JsonSchemaFormat::new("person", schema.clone()));
    let out = chunks(&*model("chat"), &req).await;
    assert_eq!(finish_reasons(&out), ["stop"], "{out:?}");
    let text = texts(&out).concat();
    let value: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let validator = jsonschema::validator_for(&schema).unwrap();
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(problems.is_empty(), "{text}: {problems:?}");
}

// ---------------------------------------------------------------- tool calls

fn weather_tool() -> ToolDef {
    ToolDef {
        name: "get_weather".into(),
        description: "Current weather for a city".into(),
        parameters: Arc::new(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        })),
        partition: None,
    }
}

/// A conversation with two example tool exchanges, ending in a question
/// of the same kind (the base model imitates; it does not follow orders).
fn tool_conversation() -> Vec<ChatMessage> {
    let exchange = |question: &str, id: &str, city: &str, result: &str, answer: &str| {
        vec![
            user(question),
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCallRecord {
                    id: id.into(),
                    name: "get_weather".into(),
                    arguments: json!({ "city": city }).to_string(),
                }],
            },
            ChatMessage::Tool {
                call_id: id.into(),
                content: result.into(),
            },
            ChatMessage::Assistant {
                content: answer.into(),
                tool_calls: Vec::new(),
            },
        ]
    };
    let mut messages = vec![system(
        "You answer weather questions by calling get_weather.",
    )];
    messages.extend(exchange(
        "What is the weather in Paris?",
        "call_1",
        "Paris",
        r#"{"temp_c": 21, "sky": "sunny"}"#,
        "It is 21 °C and sunny in Paris.",
    ));
    messages.extend(exchange(
        "What is the weather in Tokyo?",
        "call_2",
        "Tokyo",
        r#"{"temp_c": 14, "sky": "rain"}"#,
        "It is 14 °C and raining in Tokyo.",
    ));
    messages.push(user("What is the weather in Berlin?"));
    messages
}

#[tokio::test]
async fn a_streamed_tool_call_assembles_into_a_name_and_json_arguments() {
    let tools = model("tools");
    let mut req = request(tool_conversation(), 64);
    req.tools = vec![weather_tool()];
    let out = chunks(&*tools, &req).await;
    // Name first, then the arguments in pieces.
    let starts: Vec<(u32, &str, &str)> = out
        .iter()
        .filter_map(|c| match c {
            LlmChunk::ToolCallStart { index, id, name } => {
                Some((*index, id.as_str(), name.as_str()))
            }
            _ => None,
        })
        .collect();
    assert!(
        matches!(starts.as_slice(), [(0, _, "get_weather")]),
        "one call of the offered tool: {out:?}"
    );
    let start_at = out
        .iter()
        .position(|c| matches!(c, LlmChunk::ToolCallStart { .. }))
        .unwrap();
    let pieces: Vec<(usize, &str)> = out
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c {
            LlmChunk::ToolCallArgs { index: 0, delta } => Some((i, delta.as_str())),
            _ => None,
        })
        .collect();
    assert!(pieces.len() >= 2, "arguments stream in pieces: {out:?}");
    assert!(pieces.iter().all(|(i, _)| *i > start_at), "{out:?}");
    assert_eq!(finish_reasons(&out), ["tool_calls"], "{out:?}");
    assert_eq!(usages(&out).len(), 1, "{out:?}");

    // What a node gets: one assembled call with JSON arguments.
    let (reply, events) = call_as_node(&*tools, "tools", &req).await;
    let reply = reply.unwrap();
    let output = reply.output();
    assert_eq!(output.finish_reason, "tool_calls");
    let [call] = output.tool_calls.as_slice() else {
        panic!("one tool call: {output:?}");
    };
    assert_eq!(call.name, "get_weather");
    assert!(!call.id.is_empty());
    let args: Value = serde_json::from_str(&call.arguments)
        .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {}", call.arguments));
    assert!(
        args.get("city").is_some_and(Value::is_string),
        "arguments match the tool's schema: {args}"
    );
    assert!(events.iter().any(
        |e| matches!(e, EventKind::ToolCallStarted { call_id, tool } if *call_id == call.id && tool == "get_weather")
    ));
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            EventKind::ToolCallDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, call.arguments);
}

/// An agent's next call after the model was cut off mid-call: the history
/// holds the broken arguments and the tool's validation error. llama.cpp
/// parses past arguments to render its template and answered such a
/// request with a 500 (retried, then failing the node) until the client
/// sent them as `{}`.
#[tokio::test]
async fn a_history_with_cut_off_tool_arguments_is_still_answered() {
    let mut messages = tool_conversation();
    messages.extend([
        ChatMessage::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCallRecord {
                id: "call_3".into(),
                name: "get_weather".into(),
                arguments: r#"{"city": "Ber"#.into(),
            }],
        },
        ChatMessage::Tool {
            call_id: "call_3".into(),
            content: json!({"error": true, "type": "validation_error",
                "message": "arguments are not valid JSON: EOF while parsing a string",
                "details": {"arguments": r#"{"city": "Ber"#}})
            .to_string(),
        },
    ]);
    let mut req = request(messages, 32);
    req.tools = vec![weather_tool()];
    let out: Vec<Result<LlmChunk, LlmError>> = model("tools").stream(&req).collect().await;
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    assert!(
        out.iter().any(|c| matches!(c, Ok(LlmChunk::Finish(_)))),
        "{out:?}"
    );
}

// ---------------------------------------------------------------- errors

#[tokio::test]
async fn a_prompt_beyond_the_context_is_a_permanent_http_error() {
    // ~20k tokens against the server's 8192-token context.
    let long = "lorem ipsum dolor sit amet ".repeat(4000);
    let req = request(vec![user(&long)], 8);
    let out: Vec<Result<LlmChunk, LlmError>> = model("chat").stream(&req).collect().await;
    let [Err(error)] = out.as_slice() else {
        panic!("one error and nothing else: {out:?}");
    };
    let LlmError::Http { status, message } = error else {
        panic!("an HTTP error: {error:?}");
    };
    assert_eq!(*status, 400, "{message}");
    assert!(
        message.contains("context"),
        "the server's message: {message}"
    );
    assert!(
        !message.trim_start().starts_with('{'),
        "not raw JSON: {message}"
    );
    assert!(!error.is_transient());
}

#[tokio::test]
async fn a_wrong_base_path_is_an_http_404_with_the_servers_message() {
    let url = base_url();
    let wrong = format!("{}/nope", url.trim_end_matches('/'));
    let out: Vec<Result<LlmChunk, LlmError>> = models_at(&wrong)
        .for_role("chat")
        .stream(&request(vec![user("hi")], 4))
        .collect()
        .await;
    let [Err(error @ LlmError::Http { status, message })] = out.as_slice() else {
        panic!("one HTTP error and nothing else: {out:?}");
    };
    assert_eq!(*status, 404, "{message}");
    assert!(
        !message.is_empty() && !message.trim_start().starts_with('{'),
        "the message from the body, not the body: {message}"
    );
    assert!(!error.is_transient());
}

// ---------------------------------------------------------------- end to end

const GRAPH: &str = "\
description: One model call against the local server.
state:
  fields:
    query: { type: string }
    answer: { type: string }
entry: answer
nodes:
  - id: answer
    kind: llm
    prompt: answer.md
    model: narrator
    surface: answer
    input: query
    output: answer
edges:
  - answer -> END
";

/// `stategraph run` on a one-node graph whose `llm` node calls the
/// server: the events a client would see, in order.
#[tokio::test]
async fn stategraph_run_streams_llm_events_from_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (graphs, prompts) = (dir.path().join("graphs"), dir.path().join("prompts"));
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::write(graphs.join("answer.yaml"), GRAPH).unwrap();
    std::fs::write(prompts.join("answer.md"), "You are a helpful assistant.\n").unwrap();
    let config_path = dir.path().join("stategraph.toml");
    std::fs::write(&config_path, config_toml(&base_url())).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_stategraph"))
        .arg("--config")
        .arg(&config_path)
        .arg("--graphs")
        .arg(&graphs)
        .arg("--prompts")
        .arg(&prompts)
        .args(["run", "answer", "Tell me about the sea.", "--json"])
        .current_dir(dir.path())
        .env("STATEGRAPH_DATA_DIR", dir.path().join("data"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("STATEGRAPH_MODEL")
        .env_remove("STATEGRAPH_CONFIG")
        .env_remove("DATABASE_URL")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let events: Vec<Event> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.event).collect();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(
        matches!(kinds.first(), Some(EventKind::RunStarted(start)) if start.graph == "answer"),
        "{stdout}"
    );
    let position = |f: &dyn Fn(&EventKind) -> bool| kinds.iter().position(|k| f(k));
    let started = position(
        &|k| matches!(k, EventKind::LlmStarted(s) if &*s.role == "narrator" && s.model == MODEL),
    )
    .unwrap_or_else(|| panic!("llm_started: {stdout}"));
    let finished = position(&|k| matches!(k, EventKind::LlmFinished(_)))
        .unwrap_or_else(|| panic!("llm_finished: {stdout}"));
    let deltas: Vec<(usize, &str)> = kinds
        .iter()
        .enumerate()
        .filter_map(|(i, k)| match k {
            EventKind::TextDelta { delta, .. } => Some((i, delta.as_str())),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "several token deltas: {stdout}");
    assert!(deltas.iter().all(|(i, _)| (started..finished).contains(i)));
    assert!(
        events[started..=finished]
            .iter()
            .all(|e| e.node.as_deref() == Some("answer"))
    );
    let EventKind::LlmFinished(llm_finish) = kinds[finished] else {
        unreachable!()
    };
    let LlmFinish { output, usage, .. } = &**llm_finish;
    let text: String = deltas.iter().map(|(_, d)| *d).collect();
    assert_eq!(output.text, text);
    assert!(
        usage.prompt_tokens > 0 && (1..=NARRATOR_MAX_TOKENS).contains(&usage.completion_tokens),
        "usage recorded; the role's max_tokens reached the server: {usage:?}"
    );
    let Some(EventKind::RunFinished { usage: total, .. }) = kinds.last() else {
        panic!("run_finished last: {stdout}");
    };
    assert_eq!(total, usage, "the run's usage is its one call's");
    let patch = kinds
        .iter()
        .find_map(|k| match k {
            EventKind::NodeFinished { patch, .. } => Some(patch),
            _ => None,
        })
        .unwrap_or_else(|| panic!("node_finished: {stdout}"));
    assert_eq!(patch.get("answer"), Some(&Value::String(text)));
}

/// The server on this model as an operator of a slow machine would run
/// it: the configuration above plus `[llm] max_tokens = 48`, a cap on every
/// role that has none of its own, so each call ends within seconds however
/// the model rambles.
async fn serve_chat(data: &std::path::Path, tools: &str) -> (String, tokio::task::JoinHandle<()>) {
    let toml = config_toml(&base_url()).replacen("[llm]\n", "[llm]\nmax_tokens = 48\n", 1)
        + &format!("[paths]\ndata = {:?}\n", data.display().to_string())
        + tools;
    let path = data.join("stategraph.toml");
    std::fs::write(&path, toml).unwrap();
    let config = stategraph::internals::config::Config::load(Some(&path)).unwrap();
    let state =
        stategraph::internals::server::build_state(config, stategraph::Registries::default())
            .await
            .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = stategraph::internals::server::serve(state, listener, std::future::pending()).await;
    });
    (base, server)
}

/// Runs the AI SDK's own parser over a stream; returns its report.
fn aisdk_report(dir: &std::path::Path, sse: &str) -> Value {
    let tool = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/aisdk-validate");
    let file = dir.join("capture.sse");
    std::fs::write(&file, sse).unwrap();
    let out = std::process::Command::new("node")
        .arg(tool.join("validate.mjs"))
        .arg(&file)
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "invalid stream: {stdout}\n{sse}");
    stdout
        .find('{')
        .and_then(|i| serde_json::from_str(&stdout[i..]).ok())
        .unwrap_or_default()
}

/// The longest a turn may take here: calls of at most 48 tokens each on a
/// ~30 tokens/s model, queued on one server slot. Measured on the 2-core
/// development machine while it also compiled: chat paths 1.5–15 s, the
/// analyst 11 s, research (plan, search, read, reflect, write, related
/// questions: ~10 calls) 37 s — but 122 s in a cold CI run while four other
/// builds shared the two cores (load average 14). The bound is a liveness
/// check (a turn that loops or hangs), not a speed target, so it leaves
/// room for such a machine.
const TURN_BOUND: std::time::Duration = std::time::Duration::from_secs(240);

/// Every path of the chat graph — each intent forced, and one the router
/// classifies — ends with a valid stream and a non-error finish within
/// [`TURN_BOUND`], whatever the base model rambles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chat_path_ends_cleanly_on_a_rambling_model() {
    let dir = tempfile::tempdir().unwrap();
    let (base, server) = serve_chat(dir.path(), "").await;
    let client = reqwest::Client::new();
    let intents = [
        None,
        Some("QUICK_ANSWER"),
        Some("RESEARCH"),
        Some("EXPLAIN"),
        Some("CLARIFY"),
        Some("OUT_OF_SCOPE"),
        Some("DIRECT"),
    ];
    for (i, intent) in intents.into_iter().enumerate() {
        let body = json!({
            "id": format!("chat-{i}"),
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi! How are you today?"}]}],
            "forced_intent": intent,
        });
        let finish = turn(&client, &base, dir.path(), &body).await;
        eprintln!("chat {intent:?}: finish {finish}");
    }
    server.abort();
}

/// One chat turn: its stream is valid, it ends within [`TURN_BOUND`] with
/// a finish that is not an error; returns the finish reason.
async fn turn(client: &reqwest::Client, base: &str, dir: &std::path::Path, body: &Value) -> String {
    let started = std::time::Instant::now();
    let sse = client
        .post(format!("{base}/api/chat"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took <= TURN_BOUND, "{body} took {took:?}");
    let report = aisdk_report(dir, &sse);
    let finish = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|c| c["type"] == "finish")
        .unwrap_or_else(|| panic!("no finish for {body}: {sse}"));
    assert_ne!(finish["finishReason"], "error", "{body}: {sse}");
    assert!(
        report["errorChunks"]
            .as_array()
            .is_none_or(|e| e.is_empty()),
        "{body}: {report}"
    );
    eprintln!("{} in {took:?}", body["graph"]);
    finish["finishReason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A search engine and two pages on 127.0.0.1, for the research graph.
async fn fake_web() -> String {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let pages = base.clone();
    let app = axum::Router::new()
        .route(
            "/search",
            get(move || {
                let pages = pages.clone();
                async move {
                    axum::Json(json!({"results": [
                        {"url": format!("{pages}/page/1"), "title": "Tides", "content": "Tides are caused by the Moon."},
                        {"url": format!("{pages}/page/2"), "title": "Moon", "content": "The Moon orbits the Earth."}
                    ]}))
                }
            }),
        )
        .route(
            "/page/{n}",
            get(|| async {
                axum::response::Html(
                    "<html><head><title>Tides</title></head><body><p>Tides rise and fall twice a day because of the Moon's gravity.</p><p>Spring tides happen at new and full moon.</p></body></html>",
                )
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// The research graph (searching and reading a fake web) and the analyst
/// graph (SQL over the demo data in PostgreSQL) end cleanly too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_and_analyst_end_cleanly_on_a_rambling_model() {
    use tokio_postgres::NoTls;
    let web = fake_web().await;
    let db = db::PgDb::create().await;
    let url = db.url();
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(conn);
    let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sql/demo.sql");
    client
        .batch_execute(&std::fs::read_to_string(seed).unwrap())
        .await
        .unwrap();
    let tools = format!(
        r#"
[tools.search]
url = "{web}"
[tools.http]
allow = ["127.0.0.1"]
[tools.sql]
database_url = "{url}"
[tools.sql.sources.fi_reporting]
table = "fi_reporting"
dimensions = ["company", "period", "account", "currency"]
measures = ["amount"]
[tools.sql.sources.bpc_reporting]
table = "bpc_reporting"
dimensions = ["company", "period", "account", "currency"]
measures = ["amount"]
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let (base, server) = serve_chat(dir.path(), &tools).await;
    let http = reqwest::Client::new();
    for (graph, text) in [
        ("research", "Why are there two tides a day?"),
        (
            "analyst",
            "Compare fi_reporting and bpc_reporting for company 1001",
        ),
    ] {
        let body = json!({
            "id": format!("{graph}-1"),
            "graph": graph,
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}],
        });
        turn(&http, &base, dir.path(), &body).await;
    }
    server.abort();
    db.drop_db().await;
}
