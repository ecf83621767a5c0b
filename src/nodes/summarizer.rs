//! `summarizer`: a rolling summary of long conversations.
//!
//! Defaults: the first summary once the history holds more than 20
//! messages; a new one after 8 or more further messages; the newest 30
//! messages go to the model (with the previous summary, which the prompt can
//! use). Below the thresholds the node returns an empty patch without
//! calling the model. The summary lands in state, where later nodes' prompts
//! read it.

use std::fmt::Write;
use std::sync::Arc;

use super::{BuildCx, NodeContext, NodeError, PromptRef, build::is_messages};
use crate::graph::loc::Sp;
use crate::llm::{ChatMessage, ChatRequest};
use crate::state::{FieldId, Patch, Role};

const SETTINGS: &[&str] = &[
    "prompt",
    "model",
    "history",
    "output",
    "covered",
    "first_after",
    "every",
    "window",
    "fallback_model",
];

/// Rolling-summary node.
#[derive(Debug)]
pub struct Summarizer {
    prompt: PromptRef,
    role: Arc<str>,
    history: FieldId,
    output: (FieldId, Arc<str>),
    covered: (FieldId, Arc<str>),
    first_after: usize,
    every: usize,
    window: usize,
}

impl Summarizer {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let n = cx.node;
        cx.accept(SETTINGS);
        let prompt = cx.prompt(true);
        let history_name = n
            .history
            .clone()
            .unwrap_or_else(|| Sp::new("messages".into(), n.kind.loc));
        let history = cx.field(&history_name, "a list of messages", is_messages);
        let output = cx.output(&n.output, "summary", "a text field", |f| f.ty.is_string());
        let covered = cx.output(&n.covered, "summarized_count", "an integer field", |f| {
            matches!(f.ty.kind, crate::state::TypeKind::Integer { .. })
        });
        let num = |v: &Option<Sp<u32>>, d: u32| v.as_ref().map_or(d, |v| v.value) as usize;
        let (first_after, every, window) = (
            num(&n.first_after, 20),
            num(&n.every, 8),
            num(&n.window, 30),
        );
        if every == 0 || window == 0 {
            cx.error(
                n.kind.loc,
                "invalid-setting",
                "`every` and `window` must be at least 1",
                None,
            );
            return None;
        }
        let name = |o: &Option<Sp<String>>, d: &str| -> Arc<str> {
            o.as_ref().map_or(d, |v| v.value.as_str()).into()
        };
        Some(Self {
            prompt: prompt.ok()??,
            role: cx.role(),
            history: history?,
            output: (output?, name(&n.output, "summary")),
            covered: (covered?, name(&n.covered, "summarized_count")),
            first_after,
            every,
            window,
        })
    }

    /// Whether a (new) summary is due for `len` messages when `covered` are
    /// already summarized (`has_summary` tells if a summary exists).
    pub fn due(&self, len: usize, covered: usize, has_summary: bool) -> bool {
        if !has_summary || covered == 0 {
            len > self.first_after
        } else {
            len >= covered + self.every
        }
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let msgs = cx.state.messages(self.history).unwrap_or_default();
        let covered = cx.state.get(self.covered.0).as_u64().unwrap_or(0) as usize;
        let has_summary = cx.state.text(self.output.0).is_some_and(|s| !s.is_empty());
        if !self.due(msgs.len(), covered, has_summary) {
            return Ok(Patch::new());
        }
        let start = msgs.len().saturating_sub(self.window);
        let mut transcript = String::new();
        for m in &msgs[start..] {
            let who = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::System => "system",
            };
            let _ = writeln!(transcript, "{who}: {}", m.content);
        }
        let messages = vec![
            ChatMessage::System {
                content: self.prompt.render(&cx)?,
            },
            ChatMessage::User {
                content: transcript,
            },
        ];
        let reply = cx
            .llm(
                &self.role,
                0,
                &ChatRequest {
                    messages,
                    ..Default::default()
                },
            )
            .await?;
        let summary = reply.output().text.trim();
        Ok(Patch::new()
            .set(Arc::clone(&self.output.1), summary)
            .set(Arc::clone(&self.covered.1), msgs.len()))
    }
}
