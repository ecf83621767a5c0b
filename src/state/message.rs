//! Chat messages, the one item type the runtime itself understands: nodes
//! that talk to a model read their history from a list of these.

use serde::{Deserialize, Serialize};

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
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Stable id; writes with the same id replace the message.
    #[serde(default)]
    pub id: String,
    /// Author.
    pub role: Role,
    /// Plain text content (text files the user attached are part of it).
    #[serde(default)]
    pub content: String,
    /// Images the user attached: `data:` or `https:` URLs, sent to the
    /// model as image parts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

impl Message {
    /// A user message.
    pub fn user(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            role: Role::User,
            content: content.into(),
            images: Vec::new(),
        }
    }

    /// An assistant message.
    pub fn assistant(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            role: Role::Assistant,
            content: content.into(),
            images: Vec::new(),
        }
    }
}

impl HasId for Message {
    fn id(&self) -> &str {
        &self.id
    }
}
