//! Messages in state as LangChain message dicts, as LangGraph's server
//! serialises them (`langchain_core` `BaseMessage.model_dump()`: `type`
//! `human` / `ai` / `tool` / `system`, `content`, `id`, `name`,
//! `tool_calls`, `tool_call_id`), mapped to and from our `messages` items
//! (`{id, role, content, tool_calls, tool_call_id, name}`, see
//! `state/message.rs`). Fields of other types pass as they are.

use serde_json::{Map, Value, json};

use crate::nodes::Graph;
use crate::state::StateSchema;

/// Our role for a LangChain message `type` (or an OpenAI-style `role`, which
/// the SDKs also accept as input).
fn role_of(kind: &str) -> Option<&'static str> {
    match kind {
        "human" | "user" | "HumanMessage" | "HumanMessageChunk" => Some("user"),
        "ai" | "assistant" | "AIMessage" | "AIMessageChunk" => Some("assistant"),
        "tool" | "ToolMessage" | "ToolMessageChunk" => Some("tool"),
        "system" | "developer" | "SystemMessage" => Some("system"),
        _ => None,
    }
}

/// The LangChain `type` of our role.
fn type_of(role: &str) -> &'static str {
    match role {
        "user" => "human",
        "assistant" => "ai",
        "tool" => "tool",
        _ => "system",
    }
}

/// A message's text: a string, or the text blocks of a content list.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.as_str()),
                b if b["type"] == "text" => b["text"].as_str(),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One of our messages as a LangChain message dict.
pub(super) fn to_langchain(m: &Value) -> Value {
    let role = m["role"].as_str().unwrap_or("assistant");
    let mut out = json!({
        "type": type_of(role),
        "content": m["content"].as_str().unwrap_or(""),
        "id": m["id"],
        "name": m.get("name").cloned().unwrap_or(Value::Null),
        "additional_kwargs": {},
        "response_metadata": {},
    });
    match role {
        "assistant" => {
            let calls: Vec<Value> = m["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| json!({"id": c["id"], "name": c["name"], "args": c["args"], "type": "tool_call"}))
                        .collect()
                })
                .unwrap_or_default();
            out["tool_calls"] = Value::Array(calls);
            out["invalid_tool_calls"] = json!([]);
            out["usage_metadata"] = Value::Null;
        }
        "tool" => {
            out["tool_call_id"] = m["tool_call_id"].clone();
            out["status"] = json!("success");
        }
        _ => {}
    }
    out
}

/// A LangChain message dict (or a bare string: a human message) as one of
/// ours. Messages without an id get one, as LangGraph's `add_messages`
/// gives them.
///
/// # Errors
/// Not a message: says why.
pub(super) fn from_langchain(v: &Value) -> Result<Value, String> {
    if let Value::String(s) = v {
        return Ok(json!({"id": new_id(), "role": "user", "content": s}));
    }
    let Some(obj) = v.as_object() else {
        return Err(format!("a message is an object or a string, not {v}"));
    };
    let kind = obj
        .get("type")
        .or_else(|| obj.get("role"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let role = role_of(kind)
        .ok_or_else(|| format!("unknown message type `{kind}` (human, ai, tool or system)"))?;
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => new_id(),
    };
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("role".into(), json!(role));
    out.insert(
        "content".into(),
        json!(text_of(obj.get("content").unwrap_or(&Value::Null))),
    );
    if let Some(name) = obj.get("name").filter(|n| n.is_string()) {
        out.insert("name".into(), name.clone());
    }
    if role == "assistant"
        && let Some(calls) = obj.get("tool_calls").and_then(Value::as_array)
        && !calls.is_empty()
    {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| json!({"id": c["id"], "name": c["name"], "args": c.get("args").cloned().unwrap_or(json!({}))}))
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if role == "tool" {
        out.insert(
            "tool_call_id".into(),
            obj.get("tool_call_id").cloned().unwrap_or(Value::Null),
        );
    }
    Ok(Value::Object(out))
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A state's values as the API shows them: its `messages` fields as
/// LangChain dicts.
pub(super) fn values_out(schema: &StateSchema, state: &Value) -> Value {
    let Value::Object(map) = state else {
        return state.clone();
    };
    let mut out = map.clone();
    for f in schema.fields.iter().filter(|f| f.ty.is_messages()) {
        if let Some(Value::Array(items)) = map.get(&*f.name) {
            out.insert(
                f.name.to_string(),
                Value::Array(items.iter().map(to_langchain).collect()),
            );
        }
    }
    Value::Object(out)
}

/// The turn's answer as the conversation's last message, for graphs whose
/// answer goes to a field of its own (`chat.answer`, e.g. the shipped chat
/// graph's `answer`) rather than into the messages: `/api/chat` stores it
/// as the chat's assistant message (`message_id`); a LangGraph client sees
/// it in `messages`, after the user message it answers, and the next run
/// has it in its history. Nothing changes when a node already answered in
/// the messages (the last one is not the user's).
pub(super) fn with_answer(graph: &Graph, values: &mut Value, message_id: &str) {
    let schema = &graph.state.schema;
    let (Some(answer), Some(history)) = (
        graph.chat.answer.as_deref(),
        schema
            .messages_field()
            .map(|f| schema.spec(f).name.to_string()),
    ) else {
        return;
    };
    let text = match values.get(answer) {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => return,
    };
    let Some(list) = values.get_mut(&history).and_then(Value::as_array_mut) else {
        return;
    };
    if list.last().is_some_and(|m| m["role"] == "user") {
        list.push(json!({"id": message_id, "role": "assistant", "content": text}));
    }
}

/// A patch (field → written value) as the API shows it: `messages` items
/// as LangChain dicts.
pub(super) fn patch_out(schema: &StateSchema, patch: &Value) -> Value {
    values_out(schema, patch)
}

/// Input values as our state takes them: `messages` fields' items read as
/// LangChain messages (a single message or string is a list of one).
///
/// # Errors
/// A message that is not one, or input that is not an object.
pub(super) fn values_in(schema: &StateSchema, input: &Value) -> Result<Map<String, Value>, String> {
    let map = match input {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => return Err(format!("`input` is an object of state fields, not {other}")),
    };
    let mut out = map.clone();
    for f in schema.fields.iter().filter(|f| f.ty.is_messages()) {
        let items = match map.get(&*f.name) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(items)) => items.clone(),
            Some(one) => vec![one.clone()],
        };
        let converted = items
            .iter()
            .map(from_langchain)
            .collect::<Result<Vec<_>, _>>()?;
        out.insert(f.name.to_string(), Value::Array(converted));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_and_ai_messages_map_both_ways() {
        let ours = from_langchain(
            &json!({"type": "human", "content": [{"type": "text", "text": "hi"}], "id": "m1"}),
        )
        .unwrap();
        assert_eq!(ours, json!({"id": "m1", "role": "user", "content": "hi"}));
        let back = to_langchain(&ours);
        assert_eq!(back["type"], "human");
        assert_eq!(back["content"], "hi");
        let ai = to_langchain(
            &json!({"id": "a", "role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "t", "args": {"x": 1}}]}),
        );
        assert_eq!(ai["type"], "ai");
        assert_eq!(ai["tool_calls"][0]["type"], "tool_call");
        assert_eq!(ai["tool_calls"][0]["args"]["x"], 1);
        let role = from_langchain(&json!({"role": "user", "content": "x"})).unwrap();
        assert_eq!(role["role"], "user");
        assert!(
            !role["id"].as_str().unwrap_or("").is_empty(),
            "an id is given"
        );
        assert!(from_langchain(&json!({"type": "robot", "content": "x"})).is_err());
    }
}
