//! What goes over the wire to an OpenAI-compatible chat-completions
//! endpoint, and the parser that turns streamed chunks into [`LlmChunk`]s.
//!
//! Servers that call themselves OpenAI-compatible differ in small ways:
//! numeric error codes, finish reasons outside OpenAI's list, reasoning in
//! `reasoning_content` or `reasoning`, content sent as a list of parts, tool
//! calls without `index`, error events after HTTP 200. So every incoming
//! field is optional and unknown fields are ignored; a chunk is malformed
//! only when it is not JSON or a field has an impossible type.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::events::Usage;
use crate::llm::profile::{Family, ModelRules, REASONING_REFUSES, Structured};
use crate::llm::{ChatMessage, ChatRequest, JsonSchemaFormat, LlmChunk};

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
    parameters: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
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
            .map(|t| WireTool {
                r#type: "function",
                function: WireFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                    strict: None,
                },
            })
            .collect();
        let (mut response_format, mut tool_choice) = (None, None);
        if let Some(f) = &request.response_format {
            let (schema, strict) = sendable_schema(f);
            match rules.structured {
                Structured::JsonSchema => {
                    response_format = Some(ResponseFormat::JsonSchema {
                        json_schema: JsonSchema {
                            name: &f.name,
                            schema,
                            strict,
                        },
                    });
                }
                Structured::JsonObject => {
                    response_format = Some(ResponseFormat::JsonObject);
                    messages.insert(0, WireMessage::Instructions {
                        content: format!(
                            "Answer with one JSON object matching this JSON Schema, and nothing else:\n{}",
                            f.schema
                        ),
                    });
                }
                Structured::Tool => {
                    tools.push(WireTool {
                        r#type: "function",
                        function: WireFunction {
                            name: &f.name,
                            description: "Give the answer (the arguments are the answer).",
                            parameters: schema,
                            strict: Some(strict),
                        },
                    });
                    tool_choice = Some(serde_json::json!(
                        {"type": "function", "function": {"name": f.name}}
                    ));
                }
            }
        }
        let mut changes = Vec::new();
        let reasoning = rules.family == Family::Reasoning;
        let effort = request
            .reasoning_effort
            .as_deref()
            .or(rules.reasoning_effort.as_deref());
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
        } else if effort.is_some() {
            dropped.push("reasoning_effort");
        }
        if !dropped.is_empty() {
            changes.push(format!(
                "left out what a {} model refuses: {}",
                rules.family.as_str(),
                dropped.join(", ")
            ));
        }
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

/// One streamed event: a `chat.completion.chunk`, or an error object.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireChunk {
    model: Option<String>,
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    /// OpenAI-style `{"error": {...}}`.
    error: Option<Value>,
    /// vLLM-style `{"object": "error", "message": ..., "code": 400}`.
    object: Option<String>,
    message: Option<Value>,
    code: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChoice {
    index: Option<u32>,
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireDelta {
    /// A string, or (some servers) a list of `{type, text}` parts.
    content: Option<Value>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<WireToolFragment>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireToolFragment {
    index: Option<u32>,
    id: Option<String>,
    function: Option<WireFunctionFragment>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunctionFragment {
    name: Option<String>,
    /// A string; a few servers send the arguments as a JSON object.
    arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<WireTokenDetails>,
    completion_tokens_details: Option<WireTokenDetails>,
}

/// `prompt_tokens_details` / `completion_tokens_details`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireTokenDetails {
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
}

/// What an error object (an HTTP error body or a mid-stream error event) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorInfo {
    /// The human-readable message.
    pub(crate) message: String,
    /// `type` or string `code`, e.g. `rate_limit_exceeded`.
    kind: Option<String>,
    /// A numeric `code`, as vLLM-style servers send.
    status: Option<u16>,
}

impl ErrorInfo {
    /// Reads an error object: `{"error":{message,type,code}}`, `{"error":"…"}`,
    /// `{"object":"error","message":…,"code":400}` or `{"detail":…}`.
    pub(crate) fn from_value(v: &Value) -> Self {
        let obj = v.get("error").filter(|e| !e.is_null()).unwrap_or(v);
        let text = |x: &Value| match x {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        };
        let message = obj
            .get("message")
            .and_then(text)
            .or_else(|| obj.as_str().map(str::to_owned))
            .or_else(|| obj.get("detail").and_then(text))
            .or_else(|| v.get("detail").and_then(text))
            .unwrap_or_else(|| truncate(&v.to_string()));
        let code = obj.get("code");
        let kind = obj
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .or_else(|| code.and_then(Value::as_str))
            .map(str::to_owned);
        let status = code
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok());
        let mut info = Self {
            message,
            kind,
            status,
        };
        // Codes that say more than the type beside them.
        if let Some(c @ (INSUFFICIENT_QUOTA | "content_filter" | "content_policy_violation")) =
            code.and_then(Value::as_str)
        {
            info.kind = Some(c.to_owned());
        }
        info
    }

    /// Reads an HTTP error body: JSON if it is JSON, else its text.
    pub(super) fn from_body(body: &[u8], status: u16) -> Self {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            return Self::from_value(&v);
        }
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        let message = if text.is_empty() {
            http_reason(status).to_owned()
        } else {
            truncate(text)
        };
        Self {
            message,
            kind: None,
            status: None,
        }
    }

    /// A refusal under the provider's content policy: Azure's
    /// `content_filter`, OpenAI's `content_policy_violation`, or a message
    /// naming the policy.
    pub(super) fn is_content_policy(&self) -> bool {
        let lower = self.message.to_ascii_lowercase();
        matches!(
            self.kind.as_deref(),
            Some("content_filter" | "content_policy_violation")
        ) || lower.contains("content management policy")
            || lower.contains("content policy")
    }

    /// OpenAI's permanent 429: the account has no credit left.
    pub(super) fn is_insufficient_quota(&self) -> bool {
        self.kind.as_deref() == Some(INSUFFICIENT_QUOTA)
    }

    /// Whether asking again could help (for error events in a stream).
    pub(crate) fn is_retryable(&self) -> bool {
        let permanent_status = self
            .status
            .is_some_and(|s| (400..500).contains(&s) && !matches!(s, 408 | 409 | 429));
        let permanent_kind = matches!(
            self.kind.as_deref(),
            Some(
                INSUFFICIENT_QUOTA
                    | "invalid_request_error"
                    | "context_length_exceeded"
                    | "invalid_api_key"
            )
        );
        !(permanent_status || permanent_kind)
    }
}

const INSUFFICIENT_QUOTA: &str = "insufficient_quota";

fn truncate(s: &str) -> String {
    const MAX: usize = 500;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn http_reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("no error message")
}

/// A stream that went wrong: the server sent an error event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamFault {
    /// What the server said.
    pub(crate) message: String,
    /// Whether a new attempt could succeed.
    pub(crate) retryable: bool,
}

/// Tool call fragments seen so far for one index.
#[derive(Debug)]
struct ToolSlot {
    index: u32,
    id: Option<String>,
    started: bool,
    /// A call of the forced answer tool: its arguments are the answer text.
    answer: bool,
    /// Arguments that arrived before the name (emitted once it does).
    pending_args: String,
}

/// Turns the chunks of one response into [`LlmChunk`]s.
#[derive(Debug, Default)]
pub(super) struct ChunkParser {
    slots: Vec<ToolSlot>,
    finished: bool,
    output: bool,
    /// The tool whose arguments are the answer (structured output through
    /// a forced tool call).
    answer_tool: Option<std::sync::Arc<str>>,
    /// The model the chunks name.
    model: Option<String>,
}

impl ChunkParser {
    /// A parser; calls of `answer_tool` become answer text.
    pub(super) fn new(answer_tool: Option<std::sync::Arc<str>>) -> Self {
        Self {
            answer_tool,
            ..Self::default()
        }
    }

    /// The model the chunks name, once one did.
    pub(super) fn response_model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Whether a `finish_reason` has arrived.
    pub(super) fn finished(&self) -> bool {
        self.finished
    }

    /// Whether any answer (text, reasoning or a tool call) has been produced.
    pub(super) fn produced_output(&self) -> bool {
        self.output
    }

    /// Parses one chunk, appending what it carries to `out`.
    ///
    /// # Errors
    /// The chunk is an error event.
    pub(super) fn push(
        &mut self,
        chunk: WireChunk,
        out: &mut Vec<LlmChunk>,
    ) -> Result<(), StreamFault> {
        if let Some(fault) = chunk_error(&chunk) {
            return Err(fault);
        }
        if self.model.is_none() {
            self.model = chunk.model.filter(|m| !m.is_empty());
        }
        let start = out.len();
        // Only the first choice: requests never ask for `n > 1`.
        for choice in chunk
            .choices
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.index.unwrap_or(0) == 0)
        {
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.flush_nameless(out);
                self.finished = true;
                out.push(LlmChunk::Finish(reason));
            }
        }
        if let Some(u) = chunk.usage {
            out.push(LlmChunk::Usage(Usage {
                prompt_tokens: u.prompt_tokens.unwrap_or(0),
                completion_tokens: u.completion_tokens.unwrap_or(0),
                cached_tokens: u
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                reasoning_tokens: u
                    .completion_tokens_details
                    .and_then(|d| d.reasoning_tokens)
                    .unwrap_or(0),
                cache_write_tokens: 0,
                cost_nano_usd: 0,
            }));
        }
        self.output |= out[start..].iter().any(crate::llm::fallback::is_answer);
        Ok(())
    }

    fn delta(&mut self, delta: WireDelta, out: &mut Vec<LlmChunk>) {
        for r in [delta.reasoning_content, delta.reasoning]
            .into_iter()
            .flatten()
        {
            if !r.is_empty() {
                out.push(LlmChunk::Reasoning(r));
            }
        }
        match delta.content {
            Some(Value::String(s)) if !s.is_empty() => out.push(LlmChunk::Text(s)),
            Some(Value::Array(parts)) => {
                for part in parts {
                    let text = part.get("text").and_then(Value::as_str).unwrap_or_default();
                    if text.is_empty() {
                        continue;
                    }
                    match part.get("type").and_then(Value::as_str) {
                        Some("thinking" | "reasoning") => {
                            out.push(LlmChunk::Reasoning(text.to_owned()))
                        }
                        _ => out.push(LlmChunk::Text(text.to_owned())),
                    }
                }
            }
            _ => {}
        }
        // A refusal is the answer the user gets; there is no separate chunk kind for it.
        if let Some(r) = delta.refusal.filter(|r| !r.is_empty()) {
            out.push(LlmChunk::Text(r));
        }
        for fragment in delta.tool_calls.unwrap_or_default() {
            self.tool_fragment(fragment, out);
        }
    }

    fn tool_fragment(&mut self, f: WireToolFragment, out: &mut Vec<LlmChunk>) {
        let id = f.id.filter(|s| !s.is_empty());
        let index = match f.index {
            Some(i) => i,
            // No index (some servers): a new id opens a new call, anything else continues the last.
            None => match self.slots.last() {
                Some(last) if id.is_some() && last.id.is_some() && last.id != id => last.index + 1,
                Some(last) => last.index,
                None => 0,
            },
        };
        let pos = match self.slots.iter().position(|s| s.index == index) {
            Some(pos) => pos,
            None => {
                self.slots.push(ToolSlot {
                    index,
                    id: None,
                    started: false,
                    answer: false,
                    pending_args: String::new(),
                });
                self.slots.len() - 1
            }
        };
        let (name, args) = match f.function {
            Some(func) => (
                func.name.filter(|n| !n.is_empty()),
                match func.arguments {
                    Some(Value::String(s)) => s,
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                },
            ),
            None => (None, String::new()),
        };
        let slot = &mut self.slots[pos];
        if !slot.started {
            if id.is_some() {
                slot.id = id;
            }
            if let Some(name) = name {
                slot.started = true;
                slot.answer = self.answer_tool.as_deref() == Some(name.as_str());
                if !slot.answer {
                    out.push(LlmChunk::ToolCallStart {
                        index,
                        id: slot.id.clone().unwrap_or_default(),
                        name,
                    });
                }
                if !slot.pending_args.is_empty() {
                    let delta = std::mem::take(&mut slot.pending_args);
                    out.push(args_chunk(slot, delta));
                }
            }
        }
        if !args.is_empty() {
            if slot.started {
                out.push(args_chunk(slot, args));
            } else {
                slot.pending_args.push_str(&args);
            }
        }
    }

    /// Arguments whose call never got a name still reach the caller.
    fn flush_nameless(&mut self, out: &mut Vec<LlmChunk>) {
        for slot in &mut self.slots {
            if !slot.started && !slot.pending_args.is_empty() {
                out.push(LlmChunk::ToolCallArgs {
                    index: slot.index,
                    delta: std::mem::take(&mut slot.pending_args),
                });
            }
        }
    }
}

/// Argument text of a call: the answer itself for the forced answer tool.
fn args_chunk(slot: &ToolSlot, delta: String) -> LlmChunk {
    if slot.answer {
        LlmChunk::Text(delta)
    } else {
        LlmChunk::ToolCallArgs {
            index: slot.index,
            delta,
        }
    }
}

fn chunk_error(chunk: &WireChunk) -> Option<StreamFault> {
    let info = if let Some(err) = chunk.error.as_ref().filter(|e| !e.is_null()) {
        ErrorInfo::from_value(&serde_json::json!({ "error": err }))
    } else if chunk.object.as_deref() == Some("error") {
        ErrorInfo::from_value(&serde_json::json!({
            "message": chunk.message.clone().unwrap_or(Value::Null),
            "code": chunk.code.clone().unwrap_or(Value::Null),
        }))
    } else {
        return None;
    };
    let retryable = info.is_retryable();
    let message = match (&info.kind, info.status) {
        (Some(kind), _) => format!("server sent an error event ({kind}): {}", info.message),
        (None, Some(code)) => format!("server sent an error event (code {code}): {}", info.message),
        (None, None) => format!("server sent an error event: {}", info.message),
    };
    Some(StreamFault { message, retryable })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::events::ToolCallRecord;
    use crate::llm::{JsonSchemaFormat, ToolDef};

    fn parse(lines: &[Value]) -> (Vec<LlmChunk>, Option<StreamFault>) {
        let mut p = ChunkParser::default();
        let mut out = Vec::new();
        for l in lines {
            let chunk: WireChunk = serde_json::from_value(l.clone()).unwrap();
            if let Err(f) = p.push(chunk, &mut out) {
                return (out, Some(f));
            }
        }
        (out, None)
    }

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

    #[test]
    fn fragments_without_index_and_args_before_name_are_assembled() {
        let (out, fault) = parse(&[
            json!({"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"arguments": "{\"x\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"function": {"name": "f", "arguments": ":1}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": {"y": 2}}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        ]);
        assert_eq!(fault, None);
        assert_eq!(
            out,
            vec![
                LlmChunk::ToolCallStart {
                    index: 0,
                    id: "a".into(),
                    name: "f".into()
                },
                LlmChunk::ToolCallArgs {
                    index: 0,
                    delta: "{\"x\"".into()
                },
                LlmChunk::ToolCallArgs {
                    index: 0,
                    delta: ":1}".into()
                },
                LlmChunk::ToolCallStart {
                    index: 1,
                    id: "b".into(),
                    name: "g".into()
                },
                LlmChunk::ToolCallArgs {
                    index: 1,
                    delta: "{\"y\":2}".into()
                },
                LlmChunk::Finish("tool_calls".into()),
            ]
        );
    }

    #[test]
    fn content_parts_reasoning_refusal_and_odd_finish_reasons_are_accepted() {
        let (out, fault) = parse(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning": "hmm"}}], "usage": null}),
            json!({"choices": [{"delta": {"content": [{"type": "thinking", "text": "so"}, {"type": "text", "text": "Hi"}]}}]}),
            json!({"choices": [{"delta": {"refusal": "no"}}, {"index": 1, "delta": {"content": "other choice"}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "eos"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 1}}}),
        ]);
        assert_eq!(fault, None);
        assert_eq!(
            out,
            vec![
                LlmChunk::Reasoning("hmm".into()),
                LlmChunk::Reasoning("so".into()),
                LlmChunk::Text("Hi".into()),
                LlmChunk::Text("no".into()),
                LlmChunk::Finish("eos".into()),
                LlmChunk::Usage(Usage {
                    prompt_tokens: 3,
                    completion_tokens: 2,
                    cached_tokens: 2,
                    reasoning_tokens: 1,
                    cache_write_tokens: 0,
                    cost_nano_usd: 0,
                }),
            ]
        );
    }

    #[test]
    fn error_events_in_both_styles_say_whether_to_retry() {
        let (_, fault) = parse(&[
            json!({"error": {"message": "overloaded", "type": "server_error", "code": null}}),
        ]);
        let fault = fault.unwrap();
        assert!(fault.retryable);
        assert!(fault.message.contains("overloaded"), "{}", fault.message);
        let (_, fault) = parse(&[json!({"object": "error", "message": "too long", "code": 400})]);
        let fault = fault.unwrap();
        assert!(!fault.retryable);
        assert_eq!(
            fault.message,
            "server sent an error event (code 400): too long"
        );
    }

    #[test]
    fn error_bodies_give_their_message() {
        let quota = ErrorInfo::from_body(
            br#"{"error":{"message":"no credit","type":"insufficient_quota"}}"#,
            429,
        );
        assert!(quota.is_insufficient_quota());
        assert_eq!(quota.message, "no credit");
        let vllm = ErrorInfo::from_body(br#"{"object":"error","message":"bad","code":400}"#, 400);
        assert_eq!((vllm.message.as_str(), vllm.status), ("bad", Some(400)));
        assert_eq!(
            ErrorInfo::from_body(br#"{"detail":"Not Found"}"#, 404).message,
            "Not Found"
        );
        assert_eq!(
            ErrorInfo::from_body(b"  upstream down \n", 502).message,
            "upstream down"
        );
        assert_eq!(
            ErrorInfo::from_body(b"", 503).message,
            "Service Unavailable"
        );
    }
}
