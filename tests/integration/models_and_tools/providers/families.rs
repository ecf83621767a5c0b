//! The OpenAI client against the emulators: each family's rules, Azure,
//! and structured output in every mode, through the real HTTP client; the
//! emulator rejects what the providers reject (see `openai_rules`).

use futures::StreamExt;
use serde_json::{Value, json};
use stategraph::internals::llm::{
    ChatMessage, ChatModel, ChatRequest, JsonSchemaFormat, LlmChunk, LlmConfig, Models,
};

use super::emulator::Emulator;

/// The models a `[llm]` TOML table builds (keys given inline).
pub fn models(toml: &str) -> Models {
    let config: LlmConfig = toml::from_str(toml).unwrap();
    config.build_models_with(|_| None).unwrap()
}

pub fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::System {
                content: "Be brief.".into(),
            },
            ChatMessage::User {
                content: text.into(),
            },
        ],
        ..Default::default()
    }
}

/// The text, usage and errors of a call.
pub async fn call(model: &dyn ChatModel, request: &ChatRequest) -> (String, Vec<LlmChunk>) {
    let mut text = String::new();
    let mut chunks = Vec::new();
    let mut stream = model.stream(request);
    while let Some(c) = stream.next().await {
        let c = c.unwrap_or_else(|e| panic!("the call failed: {e}"));
        if let LlmChunk::Text(t) = &c {
            text.push_str(t);
        }
        chunks.push(c);
    }
    (text, chunks)
}

fn openai_toml(emu: &Emulator, model: &str, role_extra: &str) -> String {
    format!(
        "[endpoints.default]\nbase_url = \"{}\"\napi_key = \"sk-test\"\n[roles.chat]\nmodel = \"{model}\"\n{role_extra}",
        emu.url("openai")
    )
}

/// A graph's typical request: sampling, a token cap, a stop sequence.
fn tuned(text: &str) -> ChatRequest {
    ChatRequest {
        temperature: Some(0.2),
        max_tokens: Some(300),
        stop: vec!["END".into()],
        reasoning_effort: Some("low".into()),
        ..ask(text)
    }
}

#[tokio::test]
async fn the_emulator_answers_the_old_request_as_openai_does() {
    // What the client sent before family rules: max_tokens and a
    // temperature to a reasoning model, and a non-strict schema in strict mode.
    let emu = Emulator::start().await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", emu.url("openai"));
    let send = |body: Value| {
        let req = client.post(&url).bearer_auth("sk-test").json(&body);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = send(json!({"model": "gpt-5.1", "stream": true,
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2048}))
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}})
    );
    let (status, body) = send(
        json!({"model": "gpt-5.1", "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("unsupported_value"))
    );
    let (status, body) = send(json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "strict": true, "schema":
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
             "required": [], "additionalProperties": true}}}})).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "Invalid schema for response_format 'out': In context=(), 'additionalProperties' is required to be supplied and to be false."
    );
    assert_eq!(emu.rejected().len(), 3);
}

#[tokio::test]
async fn reasoning_models_get_max_completion_tokens_and_no_sampling_settings() {
    let emu = Emulator::start().await;
    let models = models(&openai_toml(&emu, "gpt-5.1", ""));
    let (text, chunks) = call(&**models.for_role("chat"), &tuned("hi")).await;
    assert_eq!(text, "Emulated answer from gpt-5.1.");
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    let body = &emu.received()[0].body;
    assert_eq!(body["max_completion_tokens"], 300 + 8192);
    assert_eq!(body["reasoning_effort"], "low");
    for gone in ["max_tokens", "temperature", "stop"] {
        assert!(body.get(gone).is_none(), "{gone} sent: {body}");
    }
    let usage = chunks.iter().find_map(|c| match c {
        LlmChunk::Usage(u) => Some(*u),
        _ => None,
    });
    assert_eq!(
        usage.unwrap().reasoning_tokens,
        16,
        "reasoning tokens reach usage"
    );
}

#[tokio::test]
async fn classic_models_keep_sampling_and_leave_out_reasoning_effort() {
    let emu = Emulator::start().await;
    let models = models(&openai_toml(
        &emu,
        "gpt-4o-mini",
        "reasoning_effort = \"high\"",
    ));
    call(&**models.for_role("chat"), &tuned("hi")).await;
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    let body = &emu.received()[0].body;
    assert_eq!(
        (body["max_tokens"].as_u64(), body["stop"].clone()),
        (Some(300), json!(["END"]))
    );
    assert!((body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6);
    assert!(body.get("reasoning_effort").is_none(), "{body}");
    assert!(body.get("max_completion_tokens").is_none(), "{body}");
}

#[tokio::test]
async fn azure_deployments_need_the_family_when_their_name_hides_it() {
    let emu = Emulator::start().await;
    let toml = |family: &str| {
        format!(
            "[endpoints.default]\napi = \"azure\"\nbase_url = \"{}\"\napi_key = \"az-key\"\napi_version = \"2025-04-01-preview\"\n\
             [retry]\nattempts = 1\n[roles.chat]\nmodel = \"reasoning-prod\"\n{family}",
            emu.url("azure")
        )
    };
    // Detected from the name: classic; the deployment serves gpt-5.1, which refuses max_tokens.
    let models_plain = models(&toml(""));
    let out: Vec<_> = models_plain
        .for_role("chat")
        .stream(&tuned("hi"))
        .collect()
        .await;
    assert!(
        matches!(out.last(), Some(Err(e)) if e.to_string().contains("max_completion_tokens")),
        "{out:?}"
    );
    let configured = models(&toml("family = \"reasoning\""));
    let (text, _) = call(&**configured.for_role("chat"), &tuned("hi")).await;
    assert_eq!(text, "Emulated answer from reasoning-prod.");
    let received = emu.received();
    let last = received.last().unwrap();
    assert!(last.rejected.is_none());
    assert_eq!(last.api, "azure");
    assert_eq!(last.headers["api-key"], "az-key");
    assert!(last.headers.get("authorization").is_none());
}

/// A schema as graph files write them: optional fields, descriptions, a
/// keyword strict mode lacks.
fn ticket_schema() -> Value {
    json!({"type": "object", "description": "a support ticket",
        "properties": {
            "category": {"type": "string", "enum": ["BUG", "BILLING"], "description": "what it is about"},
            "summary": {"type": "string", "maxLength": 80, "description": "one line"},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["category"]})
}

#[tokio::test]
async fn structured_output_is_strict_for_openai_and_nulls_come_back_absent() {
    let emu = Emulator::start().await;
    let models = models(&openai_toml(&emu, "gpt-4o-mini", ""));
    let format = JsonSchemaFormat::new("ticket", ticket_schema());
    let request = ChatRequest {
        response_format: Some(format.clone()),
        ..ask("My invoice is wrong")
    };
    let (text, _) = call(&**models.for_role("chat"), &request).await;
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    let sent = &emu.received()[0].body["response_format"]["json_schema"];
    assert_eq!(sent["strict"], true);
    assert_eq!(
        sent["schema"]["properties"]["summary"]["description"],
        "one line (maxLength: 80)"
    );
    assert_eq!(
        sent["schema"]["properties"]["category"]["description"],
        "what it is about"
    );
    let mut answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        answer,
        json!({"category": "BUG", "summary": null, "priority": null, "tags": null})
    );
    format.restore(&mut answer);
    assert_eq!(answer, json!({"category": "BUG"}));
}

#[tokio::test]
async fn servers_without_json_schema_get_json_object_or_a_forced_tool() {
    let emu = Emulator::start().await;
    for mode in ["json_object", "tool"] {
        let toml = format!(
            "[endpoints.default]\nbase_url = \"{}\"\napi_key = \"k\"\nstructured = \"{mode}\"\n[roles.chat]\nmodel = \"gpt-4o-mini\"",
            emu.url("openai")
        );
        let request = ChatRequest {
            response_format: Some(JsonSchemaFormat::new("ticket", ticket_schema())),
            ..ask("My invoice is wrong")
        };
        let (text, chunks) = call(&**models(&toml).for_role("chat"), &request).await;
        let body = emu.received().last().unwrap().body.clone();
        assert!(emu.rejected().is_empty(), "{mode}: {:?}", emu.rejected());
        let answer: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{mode}: {e}: {text}"));
        assert!(answer.is_object(), "{mode}: {text}");
        assert!(
            !chunks
                .iter()
                .any(|c| matches!(c, LlmChunk::ToolCallStart { .. })),
            "{mode}: the answer tool is not a tool call for the graph"
        );
        match mode {
            "json_object" => {
                assert_eq!(body["response_format"], json!({"type": "json_object"}));
                assert!(
                    body["messages"][0]["content"]
                        .as_str()
                        .unwrap()
                        .contains("\"category\"")
                );
            }
            _ => {
                assert_eq!(body["tool_choice"]["function"]["name"], "ticket");
                assert_eq!(answer["category"], "BUG");
            }
        }
    }
}
