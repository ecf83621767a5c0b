//! Chat messages, the one item type the runtime itself understands: nodes
//! that talk to a model read their conversation from a list of these, and
//! `llm` and `agent` nodes append their turns to one (`messages:`).
//!
//! An item carries a whole turn, as LangGraph's message list does:
//! `{id, role, content, images?, reasoning?, tool_calls?, tool_call_id?,
//! name?}`. The first form (`{id, role, content}` with `role` one of
//! `system`, `user`, `assistant`) is a subset, so histories written before
//! tool turns existed read unchanged.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::reduce::HasId;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The person chatting.
    User,
    /// The model / the application's answer.
    Assistant,
    /// A tool's result, answering the assistant's call `tool_call_id`.
    Tool,
}

impl Role {
    /// The role as written in the file and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool call an assistant message made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageToolCall {
    /// The model's id for the call; the tool message answering it carries
    /// the same id as `tool_call_id`.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments: a JSON object, or the model's text when it was not
    /// valid JSON (kept as sent, so the model sees its own mistake).
    #[serde(default)]
    pub args: Value,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Stable id; writes with the same id replace the message.
    #[serde(default)]
    pub id: String,
    /// Author.
    pub role: Role,
    /// Plain text content (text files the user attached are part of it);
    /// for a tool message, the result as JSON text.
    #[serde(default)]
    pub content: String,
    /// Images the user attached: `data:` or `https:` URLs, sent to the
    /// model as image parts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    /// The model's reasoning before this answer (kept, not sent back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The tool calls this assistant message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<MessageToolCall>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool message, the tool; for others, the node that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// A message of `role` with text `content` and nothing else.
    pub fn new(id: impl Into<String>, role: Role, content: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            role,
            content: content.into(),
            images: Vec::new(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// A user message.
    pub fn user(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::new(id, Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::new(id, Role::Assistant, content)
    }

    /// A tool result answering call `call_id` of `tool`.
    pub fn tool(
        id: impl Into<String>,
        call_id: impl Into<String>,
        tool: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            name: Some(tool.into()),
            ..Self::new(id, Role::Tool, content)
        }
    }
}

/// Messages from a JSON list, as `Vec::<Message>::deserialize` reads them.
///
/// A message of only `id`, `role` and `content` (strings; what a chat's
/// history mostly is) is read directly, without serde's field-by-field
/// struct visitor over the map (~800 instructions a message, the largest
/// cost of turning a chat's input into its state); any other message, and
/// any error, goes through serde, so the result and the errors are the same.
///
/// # Errors
/// Not a list of messages (serde's error).
pub(crate) fn messages_from_json(value: &Value) -> Result<Vec<Message>, serde_json::Error> {
    let Value::Array(items) = value else {
        return Vec::<Message>::deserialize(value);
    };
    items
        .iter()
        .map(|item| plain_message(item).map_or_else(|| Message::deserialize(item), Ok))
        .collect()
}

/// `item` if it is an object of a string `role` that names a role and at
/// most a string `id` and a string `content` besides.
fn plain_message(item: &Value) -> Option<Message> {
    let Value::Object(map) = item else {
        return None;
    };
    let (mut id, mut role, mut content) = (None, None, None);
    for (key, value) in map {
        let Value::String(text) = value else {
            return None;
        };
        match key.as_str() {
            "id" => id = Some(text),
            "content" => content = Some(text),
            "role" => {
                role = Some(match text.as_str() {
                    "system" => Role::System,
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    "tool" => Role::Tool,
                    _ => return None,
                });
            }
            _ => return None,
        }
    }
    Some(Message::new(
        id.cloned().unwrap_or_default(),
        role?,
        content.cloned().unwrap_or_default(),
    ))
}

impl HasId for Message {
    fn id(&self) -> &str {
        &self.id
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The direct read and serde's agree on plain messages, and every other
    /// shape (more fields, a wrong type, an unknown role, no role) goes to
    /// serde, errors included.
    #[test]
    fn plain_messages_read_as_serde_reads_them() {
        let cases = [
            json!([{"id": "m1", "role": "user", "content": "hi"}, {"role": "assistant"}]),
            json!([{"role": "tool", "content": "{}", "tool_call_id": "c1", "name": "search"}]),
            json!([{"role": "assistant", "content": "x", "reasoning": "why", "extra": 1}]),
            json!([{"role": "system", "content": "s"}, {"role": "user", "images": ["data:x"]}]),
            json!([{"id": 1, "role": "user", "content": "hi"}]),
            json!([{"role": "robot", "content": "hi"}]),
            json!([{"id": "m1", "content": "hi"}]),
            json!([{"role": "user", "content": null}]),
            json!([1]),
            json!({"role": "user"}),
            json!(null),
        ];
        for case in &cases {
            let ours = messages_from_json(case).map_err(|e| e.to_string());
            let serde = Vec::<Message>::deserialize(case).map_err(|e| e.to_string());
            assert_eq!(ours, serde, "{case}");
        }
        let read = messages_from_json(&cases[0]).expect("plain messages");
        assert_eq!(read[0], Message::user("m1", "hi"));
        assert_eq!(read[1], Message::assistant("", ""));
        assert_eq!(read[1].role, Role::Assistant);
    }
}
