//! The request body sent to an OpenAI-compatible chat-completions
//! endpoint (`POST {base}/chat/completions`): messages, tools, structured
//! output and the model family's rules, borrowing the request. The stream
//! that answers it is read by [`super::stream`], errors by
//! [`super::error_body`].

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::llm::profile::{Family, ModelRules, REASONING_REFUSES, Structured};
use crate::llm::strict::StrictSchema;
use crate::llm::{ChatMessage, ChatRequest, JsonSchemaFormat, ToolDef};

/// The request body (`POST {base}/chat/completions`), borrowing the request.
#[derive(Debug, Serialize)]
pub(super) struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    /// The model's extra fields, minus those written above.
    #[serde(flatten)]
    extra: Extra<'a>,
}

/// Body fields the client writes itself; a model's extra fields may not
/// set them (`temperature`, `max_tokens` and `stop` may: a request that
/// sets them wins).
pub(crate) const RESERVED_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "response_format",
];

/// A model's extra body fields, serialized without the ones the request
/// sets itself or the model's family refuses, so no key is ever written
/// twice and none is sent that the model answers with a 400.
#[derive(Debug)]
struct Extra<'a> {
    fields: Option<&'a Map<String, Value>>,
    temperature: bool,
    max_tokens: bool,
    stop: bool,
    refused: &'static [&'static str],
}

impl Extra<'_> {
    fn keeps(&self, key: &str) -> bool {
        !(RESERVED_FIELDS.contains(&key)
            || self.refused.contains(&key)
            || (self.temperature && key == "temperature")
            || (self.max_tokens && matches!(key, "max_tokens" | "max_completion_tokens"))
            || (self.stop && key == "stop"))
    }
}

impl Serialize for Extra<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.fields.into_iter().flatten() {
            if self.keeps(k) {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    /// Instructions the client adds (the schema, in `json_object` mode).
    #[serde(rename = "system")]
    Instructions {
        content: String,
    },
    User {
        content: &'a str,
    },
    /// A user turn with images: content parts.
    #[serde(rename = "user")]
    UserParts {
        content: Vec<WirePart<'a>>,
    },
    Assistant {
        /// `null` when the turn only calls tools.
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A content part of a user turn.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: WireImage<'a> },
}

#[derive(Debug, Serialize)]
struct WireImage<'a> {
    url: &'a str,
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    #[serde(skip_serializing_if = "Value::is_null")]
    parameters: Cow<'a, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

impl<'a> WireTool<'a> {
    /// A tool as offered. In strict mode a tool whose parameters have a
    /// strict form goes with it and `strict: true` (the same transform as
    /// structured output: OpenAI's function-calling guide asks the same of
    /// strict tools); the model then answers `null` for an optional
    /// parameter, which the agent maps back to absent before the tool runs.
    /// Other tools (free-form parameters, or strict mode off) go as
    /// declared, without `strict`.
    fn offered(t: &'a ToolDef, strict: bool) -> Self {
        let strict_form = strict.then(|| StrictSchema::of(&t.parameters));
        let (parameters, strict) = match strict_form {
            Some(StrictSchema::Strict { schema, .. }) => (Cow::Owned(schema), Some(true)),
            _ => (Cow::Borrowed(&*t.parameters), None),
        };
        WireTool {
            r#type: "function",
            function: WireFunction {
                name: &t.name,
                description: &t.description,
                parameters,
                strict,
            },
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseFormat<'a> {
    JsonSchema { json_schema: JsonSchema<'a> },
    JsonObject,
}

#[derive(Debug, Serialize)]
struct JsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

/// The schema to send for a format, and whether it is strict.
fn sendable_schema(format: &JsonSchemaFormat) -> (&Value, bool) {
    match format.strict.schema() {
        Some(strict) => (strict, true),
        None => (&format.schema, false),
    }
}

impl<'a> WireRequest<'a> {
    /// The streaming request for `model` under its family's `rules`; usage
    /// is always asked for. `extra` fields (the model's configured ones)
    /// fill in what the request leaves unset. Also returns what the rules
    /// changed (for the one warning per role and model).
    pub(super) fn new(
        model: &'a str,
        request: &'a ChatRequest,
        extra: Option<&'a Map<String, Value>>,
        rules: &'a ModelRules,
    ) -> (Self, Vec<String>) {
        let mut messages: Vec<WireMessage<'a>> =
            request.messages.iter().map(WireMessage::from).collect();
        let mut tools: Vec<WireTool<'a>> = request
            .tools
            .iter()
            .map(|t| WireTool::offered(t, rules.strict_tools))
            .collect();
        let (response_format, tool_choice) =
            request.response_format.as_ref().map_or((None, None), |f| {
                structured_output(f, rules.structured, &mut messages, &mut tools)
            });
        let reasoning = rules.family == Family::Reasoning;
        let effort = request
            .reasoning_effort
            .as_deref()
            .or(rules.reasoning_effort.as_deref());
        let (max_tokens, max_completion_tokens, changes) =
            family_rules(request, extra, rules, effort.is_some());
        let request_wins = Extra {
            fields: extra,
            temperature: request.temperature.is_some(),
            max_tokens: request.max_tokens.is_some() || reasoning,
            stop: !request.stop.is_empty(),
            refused: if reasoning {
                REASONING_REFUSES
            } else {
                &["reasoning_effort"]
            },
        };
        let body = Self {
            model,
            messages,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            tools,
            tool_choice,
            response_format,
            temperature: request.temperature.filter(|_| !reasoning),
            max_tokens,
            max_completion_tokens,
            reasoning_effort: effort.filter(|_| reasoning),
            stop: if reasoning { &[] } else { &request.stop },
            extra: request_wins,
        };
        (body, changes)
    }
}

/// How a response format goes on the wire under the model's `structured`
/// mode: a `response_format`, an instruction plus `json_object`, or a tool
/// the model must call (with its `tool_choice`).
fn structured_output<'a>(
    f: &'a JsonSchemaFormat,
    structured: Structured,
    messages: &mut Vec<WireMessage<'a>>,
    tools: &mut Vec<WireTool<'a>>,
) -> (Option<ResponseFormat<'a>>, Option<Value>) {
    let (schema, strict) = sendable_schema(f);
    match structured {
        Structured::JsonSchema => {
            let json_schema = JsonSchema {
                name: &f.name,
                schema,
                strict,
            };
            (Some(ResponseFormat::JsonSchema { json_schema }), None)
        }
        Structured::JsonObject => {
            messages.insert(0, WireMessage::Instructions {
                content: format!(
                    "Answer with one JSON object matching this JSON Schema, and nothing else:\n{}",
                    f.schema
                ),
            });
            (Some(ResponseFormat::JsonObject), None)
        }
        Structured::Tool => {
            tools.push(WireTool {
                r#type: "function",
                function: WireFunction {
                    name: &f.name,
                    description: "Give the answer (the arguments are the answer).",
                    parameters: Cow::Borrowed(schema),
                    strict: Some(strict),
                },
            });
            let choice = serde_json::json!({"type": "function", "function": {"name": f.name}});
            (None, Some(choice))
        }
    }
}

/// What the model family's rules make of the request's limits: its
/// `max_tokens` and `max_completion_tokens`, and what was changed or left
/// out (`effort`: a reasoning effort was asked for).
fn family_rules(
    request: &ChatRequest,
    extra: Option<&Map<String, Value>>,
    rules: &ModelRules,
    effort: bool,
) -> (Option<u32>, Option<u32>, Vec<String>) {
    let reasoning = rules.family == Family::Reasoning;
    let mut changes = Vec::new();
    let (max_tokens, max_completion_tokens) = if reasoning {
        let with_budget = request
            .max_tokens
            .map(|m| m.saturating_add(rules.reasoning_budget));
        if request.max_tokens.is_some() {
            changes.push(format!(
                "`max_tokens` sent as `max_completion_tokens` (+{} for reasoning)",
                rules.reasoning_budget
            ));
        }
        (None, with_budget)
    } else {
        (request.max_tokens, None)
    };
    let mut dropped: Vec<&str> = Vec::new();
    if reasoning {
        if request.temperature.is_some() {
            dropped.push("temperature");
        }
        if !request.stop.is_empty() {
            dropped.push("stop");
        }
        for k in extra.into_iter().flat_map(|e| e.keys()) {
            if REASONING_REFUSES.contains(&k.as_str()) && !dropped.contains(&k.as_str()) {
                dropped.push(k);
            }
        }
    } else if effort {
        dropped.push("reasoning_effort");
    }
    if !dropped.is_empty() {
        changes.push(format!(
            "left out what a {} model refuses: {}",
            rules.family.as_str(),
            dropped.join(", ")
        ));
    }
    (max_tokens, max_completion_tokens, changes)
}

impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(m: &'a ChatMessage) -> Self {
        match m {
            ChatMessage::System { content } => WireMessage::System { content },
            ChatMessage::User { content } => WireMessage::User { content },
            ChatMessage::UserWithImages { content, images } => WireMessage::UserParts {
                content: std::iter::once(WirePart::Text { text: content })
                    .chain(images.iter().map(|url| WirePart::ImageUrl {
                        image_url: WireImage { url },
                    }))
                    .collect(),
            },
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => WireMessage::Assistant {
                content: (!content.is_empty() || tool_calls.is_empty()).then_some(content.as_str()),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| WireToolCall {
                        id: &c.id,
                        r#type: "function",
                        function: WireFunctionCall {
                            name: &c.name,
                            arguments: sendable_arguments(&c.arguments),
                        },
                    })
                    .collect(),
            },
            ChatMessage::Tool { call_id, content } => WireMessage::Tool {
                tool_call_id: call_id,
                content,
            },
        }
    }
}

/// A past tool call's arguments as they can be sent back. Servers that
/// render chat templates (llama.cpp, vLLM) parse them and fail the whole
/// request when they are not a JSON object — llama.cpp with a 500, so it
/// would even be retried. A model cut off mid-call (`finish_reason:
/// length`) or a small model writing broken JSON leaves such arguments in
/// an agent's history; they go as `{}`. Nothing is lost: the agent's tool
/// result for such a call reports the invalid arguments, text included.
fn sendable_arguments(arguments: &str) -> &str {
    if serde_json::from_str::<Map<String, Value>>(arguments).is_ok() {
        arguments
    } else {
        "{}"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::events::ToolCallRecord;

    #[test]
    fn request_maps_messages_tools_and_schema() {
        let req = ChatRequest {
            messages: vec![
                ChatMessage::System {
                    content: "be brief".into(),
                },
                ChatMessage::User {
                    content: "hi".into(),
                },
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCallRecord {
                        id: "c1".into(),
                        name: "now".into(),
                        arguments: String::new(),
                    }],
                },
                ChatMessage::Tool {
                    call_id: "c1".into(),
                    content: "\"noon\"".into(),
                },
            ],
            tools: vec![ToolDef {
                name: "now".into(),
                description: String::new(),
                parameters: Value::Null.into(),
                partition: None,
            }],
            response_format: Some(JsonSchemaFormat::new("out", json!({"type": "object"}))),
            temperature: None,
            max_tokens: Some(5),
            stop: vec!["\n\n".into()],
            reasoning_effort: None,
        };
        let rules = ModelRules::default();
        let v = serde_json::to_value(WireRequest::new("m", &req, None, &rules).0).unwrap();
        assert_eq!(
            v,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "\"noon\""},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "now"}}],
                // A free-form object cannot be strict: it goes with `strict: false`.
                "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": false}},
                "max_tokens": 5,
                "stop": ["\n\n"],
            })
        );
    }

    #[test]
    fn past_tool_arguments_go_back_as_a_json_object() {
        for (given, sent) in [
            (r#"{"city": "Paris"}"#, r#"{"city": "Paris"}"#),
            (
                r#" {"a": [1, {"b": null}]} "#,
                r#" {"a": [1, {"b": null}]} "#,
            ),
            ("", "{}"),
            (r#"{"city": "Par"#, "{}"),
            ("[1, 2]", "{}"),
            ("Paris", "{}"),
        ] {
            assert_eq!(sendable_arguments(given), sent, "{given}");
        }
    }

    #[test]
    fn extra_fields_fill_in_what_the_request_leaves_unset() {
        let extra = json!({"stop": ["</tool_call>"], "cache_prompt": false, "temperature": 0.7,
            "max_tokens": 64, "model": "other", "stream": false})
        .as_object()
        .cloned()
        .unwrap();
        let mut req = ChatRequest {
            messages: vec![ChatMessage::User {
                content: "hi".into(),
            }],
            temperature: Some(0.0),
            ..Default::default()
        };
        let body = |req: &ChatRequest| {
            let rules = ModelRules::default();
            serde_json::to_string(&WireRequest::new("m", req, Some(&extra), &rules).0).unwrap()
        };
        let text = body(&req);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (&v["model"], &v["stream"], &v["temperature"]),
            (&json!("m"), &json!(true), &json!(0.0)),
            "the request's own fields win: {text}"
        );
        assert_eq!(v["max_tokens"], 64);
        assert_eq!(v["stop"], json!(["</tool_call>"]));
        assert_eq!(v["cache_prompt"], false);
        for key in ["model", "stream", "temperature", "max_tokens"] {
            assert_eq!(text.matches(&format!("\"{key}\"")).count(), 1, "{text}");
        }
        req.max_tokens = Some(5);
        assert_eq!(
            serde_json::from_str::<Value>(&body(&req)).unwrap()["max_tokens"],
            5
        );
    }
}
