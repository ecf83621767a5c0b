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

impl HasId for Message {
    fn id(&self) -> &str {
        &self.id
    }
}
