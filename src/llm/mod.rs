//! Language models behind one trait.
//!
//! A [`ChatModel`] turns a [`ChatRequest`] into a stream of [`LlmChunk`]s.
//! Nodes never talk to a model directly: they call [`call_model`], which
//! emits the run's LLM events (start, deltas, tool-call fragments, finish)
//! while it assembles the [`LlmOutput`](crate::events::LlmOutput). Implementations: the
//! OpenAI-compatible HTTP client, the built-in offline model, a scripted
//! model for tests, a model script from a file ([`script`]) and a
//! recorded model for replay.

pub(crate) mod anthropic;
mod call;
pub(crate) mod config;
pub(crate) mod fallback;
mod keywords;
pub(crate) mod offline;
pub(crate) mod openai;
pub(crate) mod profile;
mod quiet;
pub(crate) mod record;
pub(crate) mod reply;
pub(crate) mod script;
pub(crate) mod scripted;
pub(crate) mod spans;
pub(crate) mod strict;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::stream::BoxStream;
use serde::Serialize;
use serde_json::Value;

use crate::events::{ToolCallRecord, Usage};

pub(crate) use call::stream_call;
pub use call::{LlmReply, ModelCall, call_model};
pub use config::LlmConfig;
pub use fallback::FallbackModel;
pub(crate) use keywords::ValueKeywords;
pub use openai::{
    DEFAULT_H2_STREAMS_PER_CONNECTION, EndpointSettings, OpenAiModel, RetryPolicy, Timeouts,
};
pub(crate) use record::CallRecorder;
#[cfg(feature = "server")]
pub(crate) use record::{CallStart, NoRedaction, RegexRedactor};
pub use record::{Redact, RedactRule};

/// One message sent to a model.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// Instructions.
    System {
        /// Text.
        content: String,
    },
    /// The user.
    User {
        /// Text.
        content: String,
    },
    /// The user, with images attached (sent as image parts).
    UserWithImages {
        /// Text.
        content: String,
        /// Image URLs (`data:` or `https:`).
        images: Vec<String>,
    },
    /// An earlier model turn, possibly with tool calls.
    Assistant {
        /// Text.
        content: String,
        /// Tool calls it made.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCallRecord>,
    },
    /// A tool result answering one tool call.
    Tool {
        /// The call answered.
        call_id: String,
        /// The result as JSON text.
        content: String,
    },
}

impl ChatMessage {
    /// The text of a user message (with or without images).
    pub fn user_text(&self) -> Option<&str> {
        match self {
            ChatMessage::User { content } | ChatMessage::UserWithImages { content, .. } => {
                Some(content)
            }
            _ => None,
        }
    }
}

/// A tool offered to the model (defined with the events: a run records
/// the tools it offered, see [`crate::events::EventKind::ToolsOffered`]).
pub use crate::events::ToolDef;

/// Ask for JSON matching a schema (OpenAI `response_format: json_schema`,
/// Anthropic's forced tool).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JsonSchemaFormat {
    /// Schema name (`[a-zA-Z0-9_-]{1,64}`).
    pub name: String,
    /// The schema as declared (portable: optional fields, descriptions);
    /// shared, built once per node.
    pub schema: Arc<Value>,
    /// Its strict form, for providers with a strict mode (built once with
    /// the schema, see `strict`).
    #[serde(skip)]
    pub strict: Arc<strict::StrictSchema>,
    /// Keywords choosing its enum values from text, for the offline model
    /// (from the graph file; never sent to a provider).
    #[serde(skip)]
    pub keywords: ValueKeywords,
}

impl JsonSchemaFormat {
    /// A format named `name` for `schema`, with its strict form.
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        Self {
            name: name.into(),
            strict: Arc::new(strict::StrictSchema::of(&schema)),
            schema: Arc::new(schema),
            keywords: ValueKeywords::default(),
        }
    }

    /// The format with keywords for its enum values (see [`ValueKeywords`]).
    #[must_use]
    pub fn with_keywords(mut self, keywords: ValueKeywords) -> Self {
        self.keywords = keywords;
        self
    }

    /// An answer as the declared schema has it: the `null`s a strict
    /// provider sends for optional fields become absent fields.
    pub fn restore(&self, answer: &mut Value) {
        if self.strict.schema().is_some() {
            strict::restore_absent(&self.schema, answer);
        }
    }
}

/// A request to a model.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDef>,
    /// Structured output, if wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<JsonSchemaFormat>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Output token limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sequences that end the generation.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// How hard a reasoning model thinks (`none`, `minimal`, `low`,
    /// `medium`, `high`, …); wins over the role's. Left out for models
    /// without reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
}

impl ChatRequest {
    /// A stable fingerprint of the request (xxh3 over its content), stored in
    /// `llm_started` so a re-execution can tell when it asks something else.
    pub fn fingerprint(&self) -> String {
        use xxhash_rust::xxh3::xxh3_64_with_seed as hash;
        // Each piece is hashed in one shot, seeded with the hash so far and
        // a tag for its kind, so moving text between messages changes it.
        let mut h = 0u64;
        for m in &self.messages {
            let (tag, text) = match m {
                ChatMessage::System { content } => (1, content),
                ChatMessage::User { content } => (2, content),
                ChatMessage::UserWithImages { content, images } => {
                    for url in images {
                        h = hash(url.as_bytes(), h ^ 9);
                    }
                    (2, content)
                }
                ChatMessage::Assistant {
                    content,
                    tool_calls,
                } => {
                    for c in tool_calls {
                        h = hash(c.name.as_bytes(), h ^ 5);
                        h = hash(c.arguments.as_bytes(), h ^ 6);
                    }
                    (3, content)
                }
                ChatMessage::Tool { call_id, content } => {
                    h = hash(call_id.as_bytes(), h ^ 7);
                    (4, content)
                }
            };
            h = hash(text.as_bytes(), h ^ tag);
        }
        for t in &self.tools {
            h = hash(t.name.as_bytes(), h ^ 8);
        }
        if let Some(f) = &self.response_format {
            h = hash(f.name.as_bytes(), h ^ 9);
        }
        hex16(h)
    }
}

/// `h` as 16 lowercase hex digits (without the formatting machinery: this
/// runs once per model call).
fn hex16(h: u64) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    (0..16)
        .rev()
        .map(|i| DIGITS[((h >> (i * 4)) & 0xf) as usize] as char)
        .collect()
}

/// One piece of a streamed model response.
#[derive(Clone, Debug, PartialEq)]
pub enum LlmChunk {
    /// Answer text.
    Text(String),
    /// Reasoning text.
    Reasoning(String),
    /// The first fragment of tool call `index`.
    ToolCallStart {
        /// Position among this response's tool calls.
        index: u32,
        /// The model's call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument text for tool call `index`.
    ToolCallArgs {
        /// Position among this response's tool calls.
        index: u32,
        /// Argument fragment.
        delta: String,
    },
    /// Token usage (usually last).
    Usage(Usage),
    /// Why generation stopped.
    Finish(String),
}

/// Errors from a model call.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LlmError {
    /// The endpoint answered with an error status.
    #[error("model endpoint returned HTTP {status}: {message}")]
    Http {
        /// Status code.
        status: u16,
        /// Error message from the body.
        message: String,
    },
    /// Could not connect or the connection broke.
    #[error("model endpoint unreachable: {0}")]
    Connect(String),
    /// A time limit passed.
    #[error("model call timed out ({0})")]
    Timeout(&'static str),
    /// The stream was malformed or carried an error.
    #[error("model stream broke: {0}")]
    Stream(String),
    /// No model is configured for a role.
    #[error("no model configured for role `{0}`")]
    NoModel(String),
    /// A scripted model ran out of turns or was told to fail.
    #[error("scripted model: {0}")]
    Scripted(String),
    /// The provider refused the request under its content policy: not
    /// worth repeating, and shown to the user as a refusal, not an error.
    #[error("{CONTENT_POLICY}{0}")]
    ContentPolicy(String),
    /// A recorded call is missing during re-execution.
    #[error("recording has no model call here: {0}")]
    NotRecorded(String),
    /// A failure served from a recording (re-execution, resume), with the
    /// original's message and transience, so the run takes the same path.
    #[error("{message}")]
    Replayed {
        /// The recorded message, as the original displayed it.
        message: String,
        /// Whether the original was transient.
        transient: bool,
    },
}

impl LlmError {
    /// Whether trying again may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Http { status, .. } => {
                *status == 408 || *status == 409 || *status == 429 || *status >= 500
            }
            LlmError::Connect(_) | LlmError::Timeout(_) | LlmError::Stream(_) => true,
            LlmError::NoModel(_)
            | LlmError::Scripted(_)
            | LlmError::NotRecorded(_)
            | LlmError::ContentPolicy(_) => false,
            LlmError::Replayed { transient, .. } => *transient,
        }
    }

    /// The error a recorded failure message stands for: the same message,
    /// transient when the original kind was (read back from the message,
    /// which is all an `llm_failed` event keeps).
    pub fn replayed(message: &str) -> Self {
        if let Some(rest) = message.strip_prefix(CONTENT_POLICY) {
            return LlmError::ContentPolicy(rest.to_owned());
        }
        let transient = if let Some(rest) = message.strip_prefix("model endpoint returned HTTP ") {
            let status: u16 = rest
                .split(':')
                .next()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            LlmError::Http {
                status,
                message: String::new(),
            }
            .is_transient()
        } else {
            [
                "model endpoint unreachable",
                "model call timed out",
                "model stream broke",
            ]
            .iter()
            .any(|p| message.starts_with(p))
        };
        LlmError::Replayed {
            message: message.to_owned(),
            transient,
        }
    }
}

/// How a content-policy refusal's message begins (a recorded one is read
/// back by it).
const CONTENT_POLICY: &str = "the model provider refused the request under its content policy: ";

/// The streamed response of a model.
pub type ChunkStream = BoxStream<'static, Result<LlmChunk, LlmError>>;

/// A chat model.
pub trait ChatModel: Send + Sync + fmt::Debug {
    /// The model name reported in events and response metadata.
    fn name(&self) -> &str;

    /// Whether this is the built-in offline model (never a real LLM).
    fn is_offline(&self) -> bool {
        false
    }

    /// Starts a call. Errors (including connection errors) arrive in the
    /// stream. The request is borrowed: callers such as the agent loop keep
    /// growing one request instead of copying it per call; implementations
    /// that need it later (for retries) copy what they need.
    fn stream(&self, request: &ChatRequest) -> ChunkStream;

    /// Where and how the model is served, for people (`stategraph doctor`):
    /// API, family, endpoint.
    fn describe(&self) -> String {
        self.name().to_owned()
    }

    /// What the provider's and the family's rules change in `request`
    /// before it is sent (one line each; none for most models).
    fn adjustments(&self, request: &ChatRequest) -> Vec<String> {
        let _ = request;
        Vec::new()
    }
}

/// Models by role (`chat`, `routing`, …). Roles without their own model use
/// the default.
#[derive(Clone, Debug)]
pub struct Models {
    default: Arc<dyn ChatModel>,
    roles: BTreeMap<String, Arc<dyn ChatModel>>,
}

impl Models {
    /// Every role uses `model`.
    pub fn single(model: Arc<dyn ChatModel>) -> Self {
        Self {
            default: model,
            roles: BTreeMap::new(),
        }
    }

    /// Gives `role` its own model.
    pub fn with_role(mut self, role: impl Into<String>, model: Arc<dyn ChatModel>) -> Self {
        self.roles.insert(role.into(), model);
        self
    }

    /// The model for `role`.
    pub fn for_role(&self, role: &str) -> &Arc<dyn ChatModel> {
        self.roles.get(role).unwrap_or(&self.default)
    }

    /// Whether any model in use is the offline model.
    pub fn any_offline(&self) -> bool {
        self.default.is_offline() || self.roles.values().any(|m| m.is_offline())
    }

    /// The roles with their own model.
    pub fn roles(&self) -> impl Iterator<Item = &str> {
        self.roles.keys().map(String::as_str)
    }
}
