//! `llm`: one prompt, one model call, the streamed text into a field.
//! Used for the narrator, direct answers, clarifying questions and
//! suggestions.

use std::sync::Arc;

use super::Reported;
use super::{BuildCx, NodeContext, NodeError, PromptRef, history};
use crate::llm::{ChatMessage, ChatRequest};
use crate::state::{FieldId, Patch};

/// Settings this kind accepts.
const SETTINGS: &[&str] = &[
    "prompt",
    "model",
    "input",
    "output",
    "history",
    "history_window",
    "fallback_model",
];

/// A single-prompt model node.
#[derive(Debug)]
pub struct LlmNode {
    prompt: PromptRef,
    role: Arc<str>,
    input: Option<FieldId>,
    history: (Option<FieldId>, usize),
    output: Arc<str>,
}

impl LlmNode {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let n = cx.node;
        cx.accept(SETTINGS);
        let prompt = cx.prompt(true);
        let input = match &n.input {
            Some(_) => cx.input(&n.input, "query").map(Some).ok_or(Reported),
            None => Ok(None),
        };
        let history = cx.history(12);
        let output = cx.output(&n.output, "answer", "a text field", |f| f.ty.is_string());
        output?;
        Some(Self {
            prompt: prompt.ok()??,
            role: cx.role(),
            input: input.ok()?,
            history: history.ok()?,
            output: n
                .output
                .as_ref()
                .map_or("answer", |o| o.value.as_str())
                .into(),
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let mut messages = vec![ChatMessage::System {
            content: self.prompt.render(&cx)?,
        }];
        messages.extend(history(cx.state, self.history.0, self.history.1));
        if let Some(text) = self.input.and_then(|f| cx.state.text(f)) {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
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
        Ok(Patch::new().set(Arc::clone(&self.output), reply.output().text.as_str()))
    }
}
