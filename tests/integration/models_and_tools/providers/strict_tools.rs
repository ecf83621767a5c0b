//! Strict tools: OpenAI and Azure get every tool whose parameters can be
//! strict with `strict: true` and the same strict transform as structured
//! output (OpenAI's function-calling guide, "Strict mode": the rules of
//! the structured-outputs guide's "Supported schemas" apply to a strict
//! function's `parameters`); the emulator checks them by those rules.
//! The model then answers `null` for an optional parameter, which becomes
//! an absent argument before the tool runs. Anthropic gets tools as
//! declared.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::events::{EventKind, ToolReady, ToolReturn};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::{ChatModel, ChatRequest, ToolDef};
use stategraph::internals::runtime::{self, RunOptions};
use tokio::sync::mpsc;

use super::emulator::{Emulator, Reply};
use super::families::{ask, call, models};
use crate::support::{registries, services};

/// A tool with a required and two optional parameters, descriptions and a
/// keyword strict mode lacks.
fn forecast() -> ToolDef {
    ToolDef {
        name: "forecast".into(),
        description: "The weather forecast for a city.".into(),
        parameters: Arc::new(json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "the city's name"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "description": "how many days"},
                "units": {"type": "string", "enum": ["metric", "imperial"], "maxLength": 8},
            },
            "required": ["city"],
        })),
        partition: None,
    }
}

/// A tool with free-form parameters: it cannot be strict.
fn anything() -> ToolDef {
    ToolDef {
        name: "anything".into(),
        description: "Takes any object.".into(),
        parameters: Arc::new(json!({"type": "object"})),
        partition: None,
    }
}

fn with_tools() -> ChatRequest {
    ChatRequest {
        tools: vec![forecast(), anything()],
        ..ask("Weather in Paris?")
    }
}

fn endpoint(emu: &Emulator, api: &str, extra: &str) -> String {
    let head = match api {
        "anthropic" => format!(
            "api = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"sk-ant\"",
            emu.url("anthropic")
        ),
        "azure" => format!(
            "api = \"azure\"\nbase_url = \"{}\"\napi_key = \"az\"\napi_version = \"2025-04-01-preview\"",
            emu.url("azure")
        ),
        _ => format!(
            "base_url = \"{}\"\napi_key = \"sk-test\"",
            emu.url("openai")
        ),
    };
    let model = if api == "anthropic" {
        "claude-sonnet-4-5"
    } else {
        "gpt-4o-mini"
    };
    format!("[endpoints.default]\n{head}\n{extra}\n[roles.chat]\nmodel = \"{model}\"\n")
}

#[tokio::test]
async fn openai_and_azure_get_strict_tools_in_strict_form() {
    for api in ["openai", "azure"] {
        let emu = Emulator::start().await;
        let models = models(&endpoint(&emu, api, ""));
        call(&**models.for_role("chat"), &with_tools()).await;
        assert!(emu.rejected().is_empty(), "{api}: {:?}", emu.rejected());
        let tools = emu.received()[0].body["tools"].clone();
        let f = &tools[0]["function"];
        assert_eq!(f["strict"], true, "{api}: {tools}");
        assert_eq!(f["description"], "The weather forecast for a city.");
        let params = &f["parameters"];
        assert_eq!(params["additionalProperties"], false);
        assert_eq!(params["required"], json!(["city", "days", "units"]));
        assert_eq!(
            params["properties"]["city"],
            json!({"type": "string", "description": "the city's name"}),
            "a required parameter stays as it is"
        );
        let days = params["properties"]["days"].to_string();
        assert!(
            days.contains("null") && days.contains("how many days") && days.contains("14"),
            "{api}: optional, nullable, described, its bounds kept: {days}"
        );
        let units = params["properties"]["units"].to_string();
        assert!(
            !units.contains("\"maxLength\"") && units.contains("8"),
            "{api}: a keyword strict mode lacks moves into the description: {units}"
        );
        // Free-form parameters go as declared, without `strict`.
        assert_eq!(
            tools[1]["function"],
            json!({"name": "anything", "description": "Takes any object.", "parameters": {"type": "object"}})
        );
    }
}

#[tokio::test]
async fn the_emulator_rejects_a_strict_tool_as_declared() {
    // What the client would send without the transform: the emulator
    // answers as OpenAI does, so the test above could fail.
    let emu = Emulator::start().await;
    let body = json!({"model": "gpt-4o-mini", "stream": true,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "forecast",
            "parameters": *forecast().parameters, "strict": true}}]});
    let resp = reqwest::Client::new()
        .post(format!("{}/chat/completions", emu.url("openai")))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let error = resp.json::<Value>().await.unwrap()["error"].clone();
    assert_eq!(error["param"], "tools[0].function.parameters", "{error}");
    assert_eq!(
        error["message"],
        "Invalid schema for function 'forecast': In context=(), 'additionalProperties' is required to be supplied and to be false."
    );
}

#[tokio::test]
async fn strict_tools_can_be_turned_off_and_anthropic_gets_tools_as_declared() {
    let emu = Emulator::start().await;
    let off = models(&endpoint(&emu, "openai", "strict_tools = false"));
    call(&**off.for_role("chat"), &with_tools()).await;
    let sent = emu.received()[0].body["tools"][0]["function"].clone();
    assert_eq!(sent.get("strict"), None, "{sent}");
    assert_eq!(sent["parameters"], *forecast().parameters);

    // A server without json_schema is not sent strict tools either.
    let emu = Emulator::start().await;
    let plain = models(&endpoint(&emu, "openai", "structured = \"json_object\""));
    call(&**plain.for_role("chat"), &with_tools()).await;
    let sent = emu.received()[0].body["tools"][0]["function"].clone();
    assert_eq!(sent.get("strict"), None, "{sent}");

    let emu = Emulator::start().await;
    let claude = models(&endpoint(&emu, "anthropic", ""));
    call(&**claude.for_role("chat"), &with_tools()).await;
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    let tools = emu.received()[0].body["tools"].clone();
    assert_eq!(tools[0]["input_schema"], *forecast().parameters, "{tools}");
    assert_eq!(tools[0].get("strict"), None);
}

const AGENT: &str = r#"
state:
  fields:
    messages: { type: messages }
    query: { type: string }
    answer: { type: string }
entry: helper
nodes:
  - id: helper
    kind: agent
    prompt: p.md
    tools: [data]
    input: query
    max_iterations: 3
    output: answer
edges: [helper -> END]
"#;

#[tokio::test]
async fn a_null_for_an_optional_parameter_reaches_the_tool_as_absent() {
    let reg = registries();
    // The test data tool's `indicator` is an optional string: `null` is
    // not a valid argument for it.
    let refused = reg
        .tools
        .call(
            "indicator_value",
            json!({"country": "KEN", "indicator": null}),
            &["data".to_owned()],
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");

    let emu = Emulator::start().await;
    emu.script([
        Reply::Tools(vec![(
            "indicator_value".into(),
            json!({"country": "KEN", "indicator": null}),
        )]),
        Reply::Text("Kenya: 42.".into()),
    ]);
    let model: Arc<dyn ChatModel> =
        Arc::clone(models(&endpoint(&emu, "openai", "")).for_role("chat"));
    let prompts = Prompts::from_sources(std::path::Path::new("prompts"), [("p.md", "You help.")]);
    let cat = reg.from_sources(&[("g", AGENT)], prompts);
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    let graph = Arc::clone(cat.get("g").unwrap());
    let (tx, mut rx) = mpsc::channel(1024);
    let opts = RunOptions {
        events: Some(tx),
        ..Default::default()
    };
    let input =
        json!({"messages": [{"id": "u1", "role": "user", "content": "Kenya?"}], "query": "Kenya?"});
    let task = tokio::spawn(runtime::run(graph, services(model), input, opts));
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push((*e).clone());
    }
    let outcome = task.await.unwrap().unwrap();
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    let offered = &emu.received()[0].body["tools"][0]["function"];
    assert_eq!(offered["strict"], true, "{offered}");
    let ready: Vec<&Value> = events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::ToolCallReady(tool_ready) => {
                let ToolReady { args, .. } = &**tool_ready;
                Some(args)
            }
            _ => None,
        })
        .collect();
    assert_eq!(ready, [&json!({"country": "KEN"})]);
    let results: Vec<&Value> = events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::ToolResult(tool_return) => {
                let ToolReturn { output, .. } = &**tool_return;
                Some(output)
            }
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "the tool ran: {events:#?}");
    assert_eq!(
        results[0]["indicator"], "WB_WDI_SP_POP_TOTL",
        "{}",
        results[0]
    );
    assert_eq!(outcome.state.to_json()["answer"], "Kenya: 42.");
}
