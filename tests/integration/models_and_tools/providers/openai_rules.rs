//! OpenAI's request rules, as the emulator enforces them: each check names
//! its source, and a violation is answered as the API answers it
//! (status 400, `{"error": {"message", "type", "param", "code"}}`).
//!
//! Sources:
//! - [SDK] the official Python SDK `openai` (types generated from OpenAI's
//!   OpenAPI spec): `openai/types/chat/completion_create_params.py` (the
//!   body's fields; `max_tokens` "is not compatible with o-series models";
//!   `reasoning_effort` values), `openai/types/shared/response_format_json_schema.py`
//!   (`name` "a-z, A-Z, 0-9, or contain underscores and dashes, with a
//!   maximum length of 64"), `openai/lib/_pydantic.py` (the SDK's own
//!   strict transform: `additionalProperties: false` and every property in
//!   `required` on every object);
//! - [SO] OpenAI's structured-outputs guide, "Supported schemas": root an
//!   object, all fields required, `additionalProperties: false`, the
//!   supported keywords (strings `pattern`, `format`; numbers `multipleOf`,
//!   `minimum`, `maximum`, `exclusive*`; arrays `minItems`, `maxItems`);
//! - [FC] OpenAI's function-calling guide, "Strict mode": with
//!   `strict: true` a function's `parameters` must follow the
//!   structured-outputs rules above — `additionalProperties: false` on
//!   every object, every field in `required`, optional ones as a union
//!   with `null`; the SDK's `pydantic_function_tool` builds them with the
//!   same `to_strict_json_schema` as response formats;
//! - [API] the error bodies the API returns, as users quote them in public
//!   issues (e.g. "Unsupported parameter: 'max_tokens' is not supported
//!   with this model. Use 'max_completion_tokens' instead.", type
//!   `invalid_request_error`, param `max_tokens`, code
//!   `unsupported_parameter`; "Invalid schema for response_format 'X': In
//!   context=('properties', 'a'), 'required' is required to be supplied
//!   and to be an array including every key in properties. Missing 'b'.").

use serde_json::{Value, json};

/// A rejected request: status and the error body.
pub type Rejection = (u16, Value);

fn error(message: String, param: Option<&str>, code: Option<&str>) -> Rejection {
    (
        400,
        json!({"error": {"message": message, "type": "invalid_request_error",
            "param": param, "code": code}}),
    )
}

/// The body fields of `POST /chat/completions` [SDK completion_create_params.py].
const KNOWN: &[&str] = &[
    "messages",
    "model",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// `reasoning_effort` values [SDK shared/reasoning_effort.py].
const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// Whether the model is of a reasoning family (what the API decides by
/// model; the emulator serves these names).
pub fn is_reasoning(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    (m.starts_with("gpt-5") || m.starts_with("o1") || m.starts_with("o3") || m.starts_with("o4"))
        && !m.contains("-chat")
}

/// Checks a chat-completions body for `model` (the body's, or an Azure
/// deployment's model).
pub fn check(body: &Value, model: &str) -> Result<(), Rejection> {
    let Some(obj) = body.as_object() else {
        return Err(error(
            "We could not parse the JSON body of your request.".into(),
            None,
            None,
        ));
    };
    for key in obj.keys() {
        if !KNOWN.contains(&key.as_str()) {
            return Err(error(
                format!("Unrecognized request argument supplied: {key}"),
                None,
                None,
            ));
        }
    }
    let messages = obj.get("messages").and_then(Value::as_array);
    match messages {
        None => {
            return Err(error(
                "Missing required parameter: 'messages'.".into(),
                Some("messages"),
                Some("missing_required_parameter"),
            ));
        }
        Some(m) if m.is_empty() => {
            return Err(error(
                "[] is too short - 'messages'".into(),
                Some("messages"),
                None,
            ));
        }
        Some(m) => check_messages(m)?,
    }
    if obj.get("stream_options").is_some() && obj.get("stream") != Some(&json!(true)) {
        return Err(error(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
            Some("stream_options"),
            None,
        ));
    }
    if is_reasoning(model) {
        check_reasoning(obj)?;
    } else if obj.contains_key("reasoning_effort") {
        return Err(unsupported("reasoning_effort", None));
    }
    if let Some(t) = obj.get("temperature").and_then(Value::as_f64)
        && !(0.0..=2.0).contains(&t)
    {
        return Err(error(
            format!("{t} is greater than the maximum of 2 - 'temperature'"),
            Some("temperature"),
            None,
        ));
    }
    if let Some(effort) = obj.get("reasoning_effort")
        && !effort.as_str().is_some_and(|e| EFFORTS.contains(&e))
    {
        return Err(error(
            format!(
                "Invalid value: {effort}. Supported values are: {}.",
                EFFORTS.join(", ")
            ),
            Some("reasoning_effort"),
            Some("invalid_value"),
        ));
    }
    let tools = obj
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, tool) in tools.iter().enumerate() {
        check_tool(tool, i)?;
    }
    if let Some(choice) = obj.get("tool_choice").filter(|c| c.is_object()) {
        let name = choice["function"]["name"].as_str().unwrap_or_default();
        if !tools.iter().any(|t| t["function"]["name"] == name) {
            return Err(error(
                format!("Invalid value for 'tool_choice': tool '{name}' not found in 'tools'."),
                Some("tool_choice"),
                None,
            ));
        }
    }
    if let Some(format) = obj.get("response_format") {
        check_format(format, messages.map(Vec::as_slice).unwrap_or_default())?;
    }
    Ok(())
}

fn unsupported(param: &str, instead: Option<&str>) -> Rejection {
    let tail = instead
        .map(|i| format!(" Use '{i}' instead."))
        .unwrap_or_default();
    error(
        format!("Unsupported parameter: '{param}' is not supported with this model.{tail}"),
        Some(param),
        Some("unsupported_parameter"),
    )
}

/// Reasoning families: `max_completion_tokens` only, default sampling only
/// [SDK: "not compatible with o-series models"; API error bodies].
fn check_reasoning(obj: &serde_json::Map<String, Value>) -> Result<(), Rejection> {
    if obj.contains_key("max_tokens") {
        return Err(unsupported("max_tokens", Some("max_completion_tokens")));
    }
    for param in ["temperature", "top_p"] {
        if let Some(v) = obj.get(param).and_then(Value::as_f64)
            && v != 1.0
        {
            return Err(error(
                format!(
                    "Unsupported value: '{param}' does not support {v} with this model. Only the default (1) value is supported."
                ),
                Some(param),
                Some("unsupported_value"),
            ));
        }
    }
    for param in [
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "stop",
    ] {
        if obj.contains_key(param) {
            return Err(unsupported(param, None));
        }
    }
    Ok(())
}

/// Every tool call answered by a tool message, every tool message answering
/// one [API: "An assistant message with 'tool_calls' must be followed by
/// tool messages responding to each 'tool_call_id'"].
fn check_messages(messages: &[Value]) -> Result<(), Rejection> {
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if role != "tool" && !open.is_empty() {
            return Err(error(
                format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                    open.join(", ")
                ),
                Some(&format!("messages.[{i}].role")),
                None,
            ));
        }
        match role {
            "system" | "developer" | "user" => {
                if m.get("content").is_none_or(Value::is_null) {
                    return Err(error(
                        format!(
                            "Invalid value for 'content': expected a string, got null. - 'messages.[{i}].content'"
                        ),
                        None,
                        None,
                    ));
                }
            }
            "assistant" => {
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    let args = call["function"]["arguments"].as_str().unwrap_or_default();
                    if serde_json::from_str::<serde_json::Map<String, Value>>(args).is_err() {
                        return Err(error(
                            format!(
                                "Invalid 'messages[{i}].tool_calls.function.arguments': not a JSON object."
                            ),
                            None,
                            None,
                        ));
                    }
                    open.push(call["id"].as_str().unwrap_or_default().to_owned());
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                let Some(pos) = open.iter().position(|o| o == id) else {
                    return Err(error("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".into(), Some(&format!("messages.[{i}].role")), None));
                };
                open.remove(pos);
            }
            other => {
                return Err(error(
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
                    ),
                    Some(&format!("messages[{i}].role")),
                    Some("invalid_value"),
                ));
            }
        }
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn check_tool(tool: &Value, i: usize) -> Result<(), Rejection> {
    let name = tool["function"]["name"].as_str().unwrap_or_default();
    if tool["type"] != "function" || !valid_name(name) {
        return Err(error(
            format!(
                "Invalid 'tools[{i}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
            ),
            Some(&format!("tools[{i}].function.name")),
            Some("invalid_value"),
        ));
    }
    // [FC] a strict function's parameters follow the [SO] rules.
    if tool["function"]["strict"] == true {
        let params = &tool["function"]["parameters"];
        if let Some(why) = strict_violation(params) {
            return Err(error(
                format!("Invalid schema for function '{name}': {why}"),
                Some(&format!("tools[{i}].function.parameters")),
                Some("invalid_function_parameters"),
            ));
        }
    }
    Ok(())
}

fn check_format(format: &Value, messages: &[Value]) -> Result<(), Rejection> {
    match format["type"].as_str() {
        Some("text") => Ok(()),
        Some("json_object") => {
            let said_json = messages.iter().any(|m| {
                m["content"]
                    .to_string()
                    .to_ascii_lowercase()
                    .contains("json")
            });
            if said_json {
                Ok(())
            } else {
                Err(error("'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.".into(), Some("messages"), None))
            }
        }
        Some("json_schema") => {
            let js = &format["json_schema"];
            let name = js["name"].as_str().unwrap_or_default();
            if !valid_name(name) {
                return Err(error(
                    "Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.".into(),
                    Some("response_format.json_schema.name"),
                    Some("invalid_value"),
                ));
            }
            if js["strict"] == true
                && let Some(why) = strict_violation(&js["schema"])
            {
                return Err(error(
                    format!("Invalid schema for response_format '{name}': {why}"),
                    Some("response_format"),
                    None,
                ));
            }
            Ok(())
        }
        _ => Err(error(
            "Invalid value for 'response_format.type'.".into(),
            Some("response_format.type"),
            Some("invalid_value"),
        )),
    }
}

/// The keywords strict mode accepts [SO "Supported properties"; SDK
/// _pydantic.py for `$defs`/`$ref`/`anyOf`].
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "title",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "pattern",
    "format",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
];

fn context(path: &[String]) -> String {
    let parts: Vec<String> = path.iter().map(|p| format!("'{p}'")).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

/// Why a schema is not accepted in strict mode, worded as the API words it
/// [SO; API error bodies].
pub fn strict_violation(schema: &Value) -> Option<String> {
    if schema["type"] != "object" {
        return Some("In context=(), schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{}\"'.".replace("{}", schema["type"].as_str().unwrap_or("None")));
    }
    walk(schema, &mut Vec::new())
}

fn walk(schema: &Value, path: &mut Vec<String>) -> Option<String> {
    let Some(obj) = schema.as_object() else {
        return Some(format!(
            "In context={}, schema must be an object.",
            context(path)
        ));
    };
    for key in obj.keys() {
        if !STRICT_KEYWORDS.contains(&key.as_str()) {
            return Some(format!(
                "In context={}, '{key}' is not permitted.",
                context(path)
            ));
        }
    }
    if !["type", "enum", "const", "anyOf", "$ref"]
        .iter()
        .any(|k| obj.contains_key(*k))
    {
        return Some(format!(
            "In context={}, schema must have a 'type' key.",
            context(path)
        ));
    }
    let types: Vec<&str> = match &obj.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types.contains(&"object") {
        if obj.get("additionalProperties") != Some(&json!(false)) {
            return Some(format!(
                "In context={}, 'additionalProperties' is required to be supplied and to be false.",
                context(path)
            ));
        }
        let props = obj.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, sub) in props.into_iter().flatten() {
            if !required.contains(&name.as_str()) {
                return Some(format!(
                    "In context={}, 'required' is required to be supplied and to be an array including every key in properties. Missing '{name}'.",
                    context(path)
                ));
            }
            path.extend(["properties".to_owned(), name.clone()]);
            if let Some(why) = walk(sub, path) {
                return Some(why);
            }
            path.truncate(path.len() - 2);
        }
    }
    if types.contains(&"array") {
        let Some(items) = obj.get("items") else {
            return Some(format!(
                "In context={}, array schema missing items.",
                context(path)
            ));
        };
        path.push("items".to_owned());
        if let Some(why) = walk(items, path) {
            return Some(why);
        }
        path.pop();
    }
    for (i, v) in obj
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        path.extend(["anyOf".to_owned(), i.to_string()]);
        if let Some(why) = walk(v, path) {
            return Some(why);
        }
        path.truncate(path.len() - 2);
    }
    None
}
