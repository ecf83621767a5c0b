//! The native Anthropic client through a real server and the real HTTP
//! client against the Anthropic emulator: a tool loop with two parallel
//! tool calls, thinking in the panel, a 529 retried, a fallback from
//! OpenAI to Anthropic, prompt caching in usage, and re-execution of an
//! Anthropic run. Every stream is checked with the AI SDK's own parser.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::llm::{ChatModel, LlmChunk};

use super::emulator::{Emulator, Reply};
use super::families::{ask, call, models};
use crate::support::server::TestServer;
use crate::support::{aisdk_validate, assert_all_reexecute, chat_body, post_json};

fn claude(emu: &Emulator, role_extra: &str) -> Arc<dyn ChatModel> {
    let toml = format!(
        "[endpoints.default]\napi = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"sk-ant-test\"\n\
         [retry]\nbackoff = \"10ms\"\n[roles.default]\nmodel = \"claude-sonnet-4-5\"\n{role_extra}",
        emu.url("anthropic")
    );
    Arc::clone(models(&toml).for_role("default"))
}

/// POSTs a chat turn to `graph`; returns the SSE text.
async fn chat(server: &TestServer, graph: &str, text: &str) -> String {
    let mut body = chat_body("c-anthropic", text);
    body["graph"] = json!(graph);
    let r = post_json(&reqwest::Client::new(), &server.url("/api/chat"), &body).await;
    assert_eq!(r.status(), 200);
    let sse = r.text().await.unwrap();
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "{report}\n{sse}");
    sse
}

/// The `data:` JSON chunks of an SSE text.
fn chunks(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[tokio::test]
async fn a_tool_loop_with_two_parallel_calls_runs_and_reexecutes() {
    let emu = Emulator::start().await;
    emu.script([
        Reply::Tools(vec![
            ("calculator".into(), json!({"expression": "6*7"})),
            ("current_time".into(), json!({})),
        ]),
        Reply::Text("It is 42, and I checked the time.".into()),
    ]);
    let prices = "[prices.\"claude-sonnet-4-5\"]\ninput = 3.0\ncached_input = 0.3\ncache_write = 3.75\noutput = 15.0";
    let server = TestServer::start(claude(&emu, prices), |_| {}).await;
    let sse = chat(&server, "tools", "What is 6*7, and what time is it?").await;
    let parts = chunks(&sse);
    // Usage names the models and carries the cost at the configured prices.
    let usage = &parts.iter().find(|c| c["type"] == "data-usage").unwrap()["data"]["total"];
    assert_eq!(usage["models"], json!(["claude-sonnet-4-5"]), "{usage}");
    let expected = (usage["promptTokens"].as_f64().unwrap()
        - usage["cachedTokens"].as_f64().unwrap()
        - usage["cacheWriteTokens"].as_f64().unwrap())
        * 3.0
        + usage["cachedTokens"].as_f64().unwrap() * 0.3
        + usage["cacheWriteTokens"].as_f64().unwrap() * 3.75
        + usage["completionTokens"].as_f64().unwrap() * 15.0;
    let cost = usage["cost"].as_f64().unwrap();
    assert!(
        cost > 0.0 && (cost - expected / 1e6).abs() < 1e-6,
        "{cost} vs {}: {usage}",
        expected / 1e6
    );
    let outputs: Vec<&Value> = parts
        .iter()
        .filter(|c| c["type"] == "tool-output-available")
        .collect();
    assert_eq!(outputs.len(), 2, "{sse}");
    assert!(
        outputs
            .iter()
            .any(|o| o["output"].to_string().contains("42")),
        "{sse}"
    );
    let text: String = parts
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect();
    assert_eq!(text, "It is 42, and I checked the time.");
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    let received = emu.received();
    assert_eq!(received.len(), 2);
    let first = &received[0].body;
    assert!(
        first["system"].is_array(),
        "the system prompt goes on top: {first}"
    );
    assert!(
        first["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["role"] != "system")
    );
    assert!(first["max_tokens"].as_u64().unwrap() > 0);
    let tools = first["tools"].as_array().unwrap();
    assert_eq!(
        tools.last().unwrap()["cache_control"],
        json!({"type": "ephemeral"})
    );
    // Both results in the one user turn after the assistant's tool uses.
    let turns = received[1].body["messages"].as_array().unwrap().clone();
    let last = turns.last().unwrap();
    assert_eq!(last["role"], "user");
    let results: Vec<&Value> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{last}");
    // The second call read the cache the first wrote.
    assert!(assert_all_reexecute(&server.state).await >= 1);
    server.shutdown().await;
}

#[tokio::test]
async fn thinking_reaches_the_panel_as_reasoning() {
    let emu = Emulator::start().await;
    emu.script([Reply::Thinking(
        "Weighing the two readings.".into(),
        Box::new(Reply::Text("Here it is.".into())),
    )]);
    let server = TestServer::start(claude(&emu, "thinking_budget = 2048"), |_| {}).await;
    let sse = chat(&server, "tools", "Think it over").await;
    let reasoning: String = chunks(&sse)
        .iter()
        .filter(|c| c["type"] == "reasoning-delta")
        .filter_map(|c| c["delta"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(reasoning, "Weighing the two readings.", "{sse}");
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    let body = &emu.received()[0].body;
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(body["max_tokens"].as_u64().unwrap() > 2048);
    server.shutdown().await;
}

#[tokio::test]
async fn overloaded_529_is_retried_honouring_retry_after() {
    let emu = Emulator::start().await;
    emu.script([
        Reply::Status(529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}), vec![("retry-after", "0")]),
        Reply::Status(429, json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}), vec![("retry-after", "0")]),
        Reply::Text("Back again.".into()),
    ]);
    let (text, chunks) = call(&*claude(&emu, ""), &ask("hello")).await;
    assert_eq!(text, "Back again.");
    assert_eq!(emu.received().len(), 3);
    assert!(chunks.contains(&LlmChunk::Finish("stop".into())));
}

#[tokio::test]
async fn prompt_caching_reports_writes_then_reads() {
    let emu = Emulator::start().await;
    let model = claude(&emu, "");
    let usage = |chunks: &[LlmChunk]| {
        chunks
            .iter()
            .find_map(|c| match c {
                LlmChunk::Usage(u) => Some(*u),
                _ => None,
            })
            .unwrap()
    };
    let (_, first) = call(&*model, &ask("one")).await;
    let (_, second) = call(&*model, &ask("two")).await;
    let (w, r) = (usage(&first), usage(&second));
    assert!(w.cache_write_tokens > 0 && w.cached_tokens == 0, "{w:?}");
    assert!(r.cached_tokens > 0 && r.cache_write_tokens == 0, "{r:?}");
    assert!(
        r.prompt_tokens >= r.cached_tokens,
        "input totals include cache reads"
    );
}

#[tokio::test]
async fn an_openai_primary_falls_back_to_claude() {
    let emu = Emulator::start().await;
    emu.script([Reply::Status(503, json!({"error": {"message": "The engine is currently overloaded", "type": "server_error", "param": null, "code": null}}), vec![])]);
    let toml = format!(
        "[endpoints.default]\nbase_url = \"{}\"\napi_key = \"sk\"\n\
         [endpoints.claude]\napi = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"sk-ant\"\n\
         [retry]\nattempts = 1\n\
         [roles.chat]\nmodel = \"gpt-5.1\"\nfallback = \"claude\"\n\
         [roles.claude]\nendpoint = \"claude\"\nmodel = \"claude-sonnet-4-5\"",
        emu.url("openai"),
        emu.url("anthropic")
    );
    let models = models(&toml);
    let (text, _) = call(&**models.for_role("chat"), &ask("hello")).await;
    assert_eq!(text, "Emulated answer from claude-sonnet-4-5.");
    let apis: Vec<&str> = emu.received().iter().map(|r| r.api).collect();
    assert_eq!(apis, ["openai", "anthropic"]);
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
}

#[tokio::test]
async fn structured_output_goes_through_a_forced_tool() {
    let emu = Emulator::start().await;
    let request = stategraph::internals::llm::ChatRequest {
        response_format: Some(stategraph::internals::llm::JsonSchemaFormat::new(
            "route",
            json!({"type": "object", "properties": {"intent": {"type": "string", "enum": ["A", "B"]}}, "required": ["intent"]}),
        )),
        ..ask("route this")
    };
    let (text, chunks) = call(&*claude(&emu, "thinking_budget = 1024"), &request).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"intent": "A"})
    );
    assert!(
        !chunks
            .iter()
            .any(|c| matches!(c, LlmChunk::ToolCallStart { .. }))
    );
    let body = &emu.received()[0].body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "route"})
    );
    assert!(
        body.get("thinking").is_none(),
        "thinking cannot go with a forced tool: {body}"
    );
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
}
