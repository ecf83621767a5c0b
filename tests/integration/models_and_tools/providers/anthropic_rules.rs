//! Anthropic's Messages API request rules, as the emulator enforces them,
//! each with its source; a violation is answered as the API answers it
//! (status 400, `{"type": "error", "error": {"type":
//! "invalid_request_error", "message"}}`).
//!
//! Sources:
//! - [SDK] the official Python SDK `anthropic` (types generated from
//!   Anthropic's OpenAPI spec): `types/message_create_params.py`
//!   (`max_tokens`, `messages`, `model` required; `system` top-level;
//!   `temperature` "Ranges from 0.0 to 1.0"), `tool_param.py`
//!   (`input_schema` with `type: "object"`, `name`),
//!   `tool_result_block_param.py`, `thinking_config_enabled_param.py`
//!   (`budget_tokens` "Must be ≥1024 and less than `max_tokens`"),
//!   `cache_control_ephemeral_param.py`, `_base_client.py` (the
//!   `x-api-key` and `anthropic-version` headers the client sends);
//! - [API] the error messages the API returns, as users quote them in
//!   public issues ("messages: Unexpected role \"system\"…", "`tool_use` ids
//!   were found without `tool_result` blocks immediately after…", "A
//!   maximum of 4 blocks with cache_control may be provided", "Thinking
//!   may not be enabled when tool_choice forces tool use", "Expected
//!   `thinking` or `redacted_thinking`, but found `tool_use`…").

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::openai_rules::Rejection;

fn invalid(message: impl Into<String>) -> Rejection {
    (
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message.into()}}),
    )
}

/// The body fields of `POST /v1/messages` [SDK message_create_params.py].
const KNOWN: &[&str] = &[
    "max_tokens",
    "messages",
    "model",
    "container",
    "context_management",
    "inference_geo",
    "mcp_servers",
    "metadata",
    "service_tier",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
    "output_config",
];

/// Checks the headers [SDK _base_client.py / _client.py auth headers].
pub fn check_headers(headers: &HeaderMap) -> Result<(), Rejection> {
    if headers.get("x-api-key").is_none() {
        return Err((
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "x-api-key header is required"}}),
        ));
    }
    if headers.get("anthropic-version").is_none() {
        return Err(invalid("anthropic-version: header is required"));
    }
    Ok(())
}

/// Checks a Messages API body.
pub fn check(body: &Value) -> Result<(), Rejection> {
    let Some(obj) = body.as_object() else {
        return Err(invalid("Request body must be a JSON object"));
    };
    for key in obj.keys() {
        if !KNOWN.contains(&key.as_str()) {
            return Err(invalid(format!("{key}: Extra inputs are not permitted")));
        }
    }
    for field in ["model", "max_tokens", "messages"] {
        if !obj.contains_key(field) {
            return Err(invalid(format!("{field}: Field required")));
        }
    }
    let max_tokens = obj["max_tokens"].as_u64().unwrap_or(0);
    if max_tokens == 0 {
        return Err(invalid(
            "max_tokens: Input should be greater than or equal to 1",
        ));
    }
    if let Some(t) = obj.get("temperature").and_then(Value::as_f64)
        && !(0.0..=1.0).contains(&t)
    {
        return Err(invalid(
            "temperature: Input should be less than or equal to 1",
        ));
    }
    let thinking = obj.get("thinking").filter(|t| t["type"] == "enabled");
    if let Some(t) = thinking {
        let budget = t["budget_tokens"].as_u64().unwrap_or(0);
        if budget < 1024 {
            return Err(invalid(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
            ));
        }
        if budget >= max_tokens {
            return Err(invalid(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size",
            ));
        }
        if obj
            .get("temperature")
            .and_then(Value::as_f64)
            .is_some_and(|t| t != 1.0)
        {
            return Err(invalid(
                "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility",
            ));
        }
        if matches!(
            obj.get("tool_choice").and_then(|c| c["type"].as_str()),
            Some("tool" | "any")
        ) {
            return Err(invalid(
                "Thinking may not be enabled when tool_choice forces tool use.",
            ));
        }
    }
    let tools = obj
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, tool) in tools.iter().enumerate() {
        let name = tool["name"].as_str().unwrap_or_default();
        if name.is_empty()
            || name.len() > 128
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid(format!(
                "tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
            )));
        }
        if tool["input_schema"]["type"] != "object" {
            return Err(invalid(format!(
                "tools.{i}.custom.input_schema.type: Input should be 'object'"
            )));
        }
    }
    if let Some(choice) = obj.get("tool_choice")
        && choice["type"] == "tool"
        && !tools.iter().any(|t| t["name"] == choice["name"])
    {
        return Err(invalid(format!(
            "Tool '{}' not found in provided tools",
            choice["name"].as_str().unwrap_or_default()
        )));
    }
    check_system(obj.get("system"))?;
    let messages = obj["messages"].as_array().cloned().unwrap_or_default();
    check_messages(&messages, thinking.is_some())?;
    let marked = count_cache_control(body);
    if marked > 4 {
        return Err(invalid(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {marked}."
        )));
    }
    Ok(())
}

fn check_system(system: Option<&Value>) -> Result<(), Rejection> {
    match system {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                if b["type"] != "text" || b["text"].as_str().is_none_or(str::is_empty) {
                    return Err(invalid(format!(
                        "system.{i}: text content blocks must be non-empty"
                    )));
                }
            }
            Ok(())
        }
        Some(_) => Err(invalid("system: Input should be a valid string or list")),
    }
}

/// Roles, blocks, and tool uses answered in the next turn [API].
fn check_messages(messages: &[Value], thinking: bool) -> Result<(), Rejection> {
    if messages.is_empty() {
        return Err(invalid("messages: at least one message is required"));
    }
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if role == "system" {
            return Err(invalid(
                "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role.",
            ));
        }
        if role != "user" && role != "assistant" {
            return Err(invalid(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            )));
        }
        if i == 0 && role != "user" {
            return Err(invalid(
                "messages: first message must use the \"user\" role",
            ));
        }
        let blocks = blocks_of(m);
        for (j, b) in blocks.iter().enumerate() {
            if b["type"] == "text" && b["text"].as_str().is_none_or(str::is_empty) {
                return Err(invalid(format!(
                    "messages.{i}.content.{j}: text content blocks must be non-empty"
                )));
            }
        }
        let uses = ids(&blocks, "tool_use", "id");
        let prev_uses = if i > 0 {
            ids(&blocks_of(&messages[i - 1]), "tool_use", "id")
        } else {
            Vec::new()
        };
        for id in ids(&blocks, "tool_result", "tool_use_id") {
            if !prev_uses.contains(&id) {
                return Err(invalid(format!(
                    "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )));
            }
        }
        if uses.is_empty() {
            continue;
        }
        let opens_with_thinking = blocks
            .first()
            .is_some_and(|b| b["type"] == "thinking" || b["type"] == "redacted_thinking");
        if thinking && is_last_assistant(messages, i) && !opens_with_thinking {
            let found = blocks
                .first()
                .and_then(|b| b["type"].as_str())
                .unwrap_or("none");
            return Err(invalid(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`."
            )));
        }
        if let Some(next) = messages.get(i + 1) {
            let answered = ids(&blocks_of(next), "tool_result", "tool_use_id");
            let missing: Vec<String> = uses.into_iter().filter(|u| !answered.contains(u)).collect();
            if !missing.is_empty() {
                return Err(invalid(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    missing.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// Whether message `i` is the last assistant message.
fn is_last_assistant(messages: &[Value], i: usize) -> bool {
    messages[i + 1..].iter().all(|m| m["role"] != "assistant")
}

/// The `key`s of the blocks of type `kind`.
fn ids(blocks: &[Value], kind: &str, key: &str) -> Vec<String> {
    blocks
        .iter()
        .filter(|b| b["type"] == kind)
        .filter_map(|b| b[key].as_str().map(str::to_owned))
        .collect()
}

fn blocks_of(m: &Value) -> Vec<Value> {
    match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => Vec::new(),
    }
}

fn count_cache_control(v: &Value) -> usize {
    match v {
        Value::Object(m) => {
            usize::from(m.contains_key("cache_control"))
                + m.values().map(count_cache_control).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(count_cache_control).sum(),
        _ => 0,
    }
}
