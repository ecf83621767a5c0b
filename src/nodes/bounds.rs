//! How the kinds that call a model are bounded and how they degrade.
//!
//! **Bounds.** Every model call carries `max_tokens` (the node's setting,
//! or its kind's default: a router needs a few hundred tokens, an answer a
//! generous but finite number), and optionally `temperature` and `stop`.
//! A configured role may cap `max_tokens` further (`[llm.roles.R]
//! max_tokens`), for slow or costly models.
//!
//! **Degrading.** When a node's last attempt fails — the model is down,
//! the node timed out, its answer stayed invalid — `on_error` decides:
//! - `fail`: the run fails;
//! - `skip`: the node writes nothing, a thinking note says why, the run
//!   goes on (the default of summaries and follow-ups);
//! - `fallback`: the kind's fallback — a router's fallback intent, an
//!   `llm` node's `fallback:` values, a data agent's `no_data` packet, or,
//!   for an answer the user has partly read (`llm`, `agent` on the
//!   `answer` surface), that text left in the message as streamed and
//!   marked as truncated (a `data-truncated` part; finish reason
//!   `length`). With nothing to fall back on, the run fails.
//!
//! **A broken stream is not data.** A model stream that ends without a
//! finish reason (cut off, timed out, a transport error) is a failed call
//! for every kind; the node retries (unless the user has read its text) or
//! degrades as above. Its partial text is never written to a field.

use std::sync::Arc;

use super::{BuildCx, NodeError};
use crate::graph::kinds::schema;
use crate::graph::{Reported, SettingDoc};
use crate::llm::{ChatMessage, ChatRequest, LlmError};
use crate::state::Patch;

/// `max_tokens`, `temperature`, `stop`, `reasoning_effort`.
pub(super) const GENERATION_SETTINGS: [SettingDoc; 4] = [
    SettingDoc::new(
        "max_tokens",
        schema::INTEGER,
        "most tokens a model call may generate (default per kind)",
    ),
    SettingDoc::new("temperature", schema::NUMBER, "sampling temperature, 0–2"),
    SettingDoc::new(
        "stop",
        schema::NAMES,
        "up to 4 sequences that end the generation",
    ),
    SettingDoc::new(
        "reasoning_effort",
        r#"{"enum":["none","minimal","low","medium","high","xhigh","max"]}"#,
        "how hard a reasoning model thinks (wins over the role's; left out for models without reasoning)",
    ),
];

/// The `reasoning_effort` values (OpenAI's; Anthropic maps them to a
/// thinking budget).
const EFFORTS: [&str; 7] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// `on_error`.
pub(super) const ON_ERROR: SettingDoc = SettingDoc::new(
    "on_error",
    r#"{"enum":["fail","skip","fallback"]}"#,
    "when the last attempt fails: fail the run, skip the node, or fall back (default per kind)",
);

/// The bounds of a node's model calls.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Generation {
    max_tokens: u32,
    temperature: Option<f32>,
    stop: Vec<String>,
    reasoning_effort: Option<String>,
}

impl Generation {
    /// Reads the settings; `max_tokens` defaults to `default_max`.
    ///
    /// # Errors
    /// A setting is out of range or of the wrong type (reported).
    pub(super) fn build(cx: &mut BuildCx<'_>, default_max: u32) -> Result<Self, Reported> {
        let max_tokens = cx.integer("max_tokens", 1..=200_000, i64::from(default_max));
        let temperature = match cx.setting("temperature") {
            None => Ok(None),
            Some(_) => cx
                .number("temperature", 0.0..=2.0, 1.0)
                .map(|t| Some(t as f32)),
        };
        let stop = cx.names("stop");
        let stop = match stop {
            Ok(s) if s.len() > 4 => {
                cx.error(
                    s[4].loc,
                    "invalid-setting",
                    "`stop` takes at most 4 sequences",
                    None,
                );
                Err(Reported)
            }
            Ok(s) if s.iter().any(|x| x.value.is_empty()) => {
                let loc = s.iter().find(|x| x.value.is_empty()).map(|x| x.loc);
                cx.error(
                    loc.unwrap_or_default(),
                    "invalid-setting",
                    "a `stop` sequence cannot be empty",
                    None,
                );
                Err(Reported)
            }
            Ok(s) => Ok(s.into_iter().map(|x| x.value).collect()),
            Err(r) => Err(r),
        };
        let effort = match cx.string("reasoning_effort") {
            Ok(Some(e)) if !EFFORTS.contains(&e.value.as_str()) => {
                cx.error(
                    e.loc,
                    "invalid-setting",
                    format!("`reasoning_effort` is `{}`", e.value),
                    Some(format!("write one of {}", EFFORTS.join(", "))),
                );
                Err(Reported)
            }
            other => other.map(|e| e.map(|e| e.value)),
        };
        Ok(Self {
            max_tokens: u32::try_from(max_tokens?).unwrap_or(u32::MAX),
            temperature: temperature?,
            stop: stop?,
            reasoning_effort: effort?,
        })
    }

    /// A request with these bounds.
    pub(super) fn request(&self, messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            messages,
            max_tokens: Some(self.max_tokens),
            temperature: self.temperature,
            stop: self.stop.clone(),
            reasoning_effort: self.reasoning_effort.clone(),
            ..Default::default()
        }
    }
}

/// What a node does when its last attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnError {
    /// The run fails.
    Fail,
    /// The node writes nothing; the run goes on.
    Skip,
    /// The kind's fallback (see the module docs).
    Fallback,
}

impl OnError {
    /// Reads `on_error`, or `default`; `fallback` only where the kind has
    /// one (`can_fall_back`).
    ///
    /// # Errors
    /// Another value (reported).
    pub(super) fn build(
        cx: &mut BuildCx<'_>,
        default: OnError,
        can_fall_back: bool,
    ) -> Result<Self, Reported> {
        let Some(v) = cx.string("on_error")? else {
            return Ok(default);
        };
        let choice = match v.value.as_str() {
            "fail" => OnError::Fail,
            "skip" => OnError::Skip,
            "fallback" if can_fall_back => OnError::Fallback,
            "fallback" => {
                let id = cx.id().to_owned();
                cx.error(
                    v.loc,
                    "invalid-setting",
                    format!("node `{id}` has nothing to fall back on"),
                    Some("give it `fallback:` values, or write `skip` or `fail`".into()),
                );
                return Err(Reported);
            }
            other => {
                cx.error(
                    v.loc,
                    "invalid-setting",
                    format!("`on_error` is `{other}`; write `fail`, `skip` or `fallback`"),
                    None,
                );
                return Err(Reported);
            }
        };
        Ok(choice)
    }
}

/// The answer a node gives when its model provider refused the request
/// under its content policy.
pub(crate) const REFUSAL: &str = "I can't help with that request: the model provider declined it under its content policy. Try rephrasing it.";

/// A node's last attempt failed.
#[derive(Debug)]
pub struct Failure<'a> {
    /// The node.
    pub node: &'a str,
    /// Why.
    pub error: &'a NodeError,
    /// The answer text it streamed in that attempt.
    pub streamed: &'a str,
    /// Whether that text reached the answer the user reads (the node's
    /// surface is `answer`).
    pub shown: bool,
}

/// How a failed node ends instead of failing the run.
#[derive(Debug)]
pub struct Recovery {
    /// What it writes.
    pub patch: Patch,
    /// A thinking note saying what happened.
    pub note: String,
    /// Set when an answer was cut short: why (`timeout`, `error`).
    pub truncated: Option<&'static str>,
    /// Set when the provider refused under its content policy: its message
    /// (sent as a `refusal` data part).
    pub refused: Option<String>,
}

impl Recovery {
    /// The node is skipped.
    pub(super) fn skip(failure: &Failure<'_>) -> Self {
        Self {
            patch: Patch::new(),
            note: format!(
                "`{}` failed ({}) and was skipped.",
                failure.node, failure.error
            ),
            truncated: None,
            refused: None,
        }
    }

    /// A refusal under the provider's content policy: a clear answer in
    /// `field` saying so (a user should learn why nothing came, not see a
    /// generic error), whatever `on_error` says. `None` for other failures.
    pub(super) fn refusal(field: &Arc<str>, failure: &Failure<'_>) -> Option<Self> {
        let NodeError::Llm(LlmError::ContentPolicy(message)) = failure.error else {
            return None;
        };
        Some(Self {
            patch: Patch::new().set(Arc::clone(field), REFUSAL),
            note: format!("The model provider refused the request: {message}"),
            truncated: None,
            refused: Some(message.clone()),
        })
    }

    /// An answer cut short after the user has read part of it: the text
    /// stays in the message as streamed, marked truncated; it is not
    /// written to any field, since half an answer is not data (a later
    /// node reading the field sees nothing). `None` when no answer text
    /// was shown: then there is nothing to keep, and the node fails.
    pub(super) fn partial_text(failure: &Failure<'_>) -> Option<Self> {
        if !failure.shown || failure.streamed.trim().is_empty() {
            return None;
        }
        let why = match failure.error {
            NodeError::Timeout(_) => "timeout",
            _ => "error",
        };
        Some(Self {
            patch: Patch::new(),
            note: format!(
                "The answer was cut short ({}); what was shown stays, marked as truncated.",
                failure.error
            ),
            truncated: Some(why),
            refused: None,
        })
    }

    /// Applies `on_error`: `fallback` asks `fallback`.
    pub(super) fn decide(
        on_error: OnError,
        failure: &Failure<'_>,
        fallback: impl FnOnce() -> Option<Recovery>,
    ) -> Option<Self> {
        match on_error {
            OnError::Fail => None,
            OnError::Skip => Some(Self::skip(failure)),
            OnError::Fallback => fallback(),
        }
    }
}
