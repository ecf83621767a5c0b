//! `llm`: one prompt, one model call. Either the streamed text goes into
//! one field (`output`: the narrator, direct answers, clarifying
//! questions), or the model answers as JSON checked against a type and
//! written to fields (`outputs`, see the structured-output module).
//!
//! Citations: with `citations: sources` (a list field of objects with
//! `url` and `title`, numbered from 1 in order, or by their `id`), every
//! source the text cites as `[N]` (or `[N, M]`) is sent as a `source-url`
//! part once the answer is complete, in the order first cited — only the
//! sources the answer uses.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::bounds::{Failure, GENERATION_SETTINGS, Generation, ON_ERROR, OnError, Recovery};
use super::convo::{self, Conversation};
use super::model::{self, INPUT, PROMPT, QUIET, ROLE_SETTINGS};
use super::structured::{self, Structured};
use super::{BuildCx, Kind, Node, NodeContext, NodeError, Roles};
use crate::events::{EventKind, SourceRef};
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::graph::{PromptRef, SettingDoc};
use crate::llm::ChatMessage;
use crate::state::{FieldId, Patch};
use serde_json::Value;

/// The kind.
pub(super) fn kind() -> Kind {
    let mut settings = vec![
        PROMPT,
        INPUT,
        SettingDoc::new(
            "output",
            schema::FIELD,
            "string field receiving the text (default `answer`)",
        ),
    ];
    settings.extend(ROLE_SETTINGS);
    settings.push(QUIET);
    settings.extend(convo::SETTINGS);
    settings.push(convo::REPLY_AS);
    settings.extend(structured::SETTINGS);
    settings.extend(GENERATION_SETTINGS);
    settings.push(ON_ERROR);
    settings.push(SettingDoc::new(
        "citations",
        schema::FIELD,
        "list field of sources ({url, title}); the ones the answer cites as [N] become source-url parts",
    ));
    Kind::new(
        "llm",
        "One prompt, one model call: streamed text into a field, or JSON answering several fields (`outputs`).",
        &settings,
        Surface::Answer,
        |cx| LlmNode::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// What the node writes.
#[derive(Debug)]
enum Output {
    /// The text, into one string field.
    Text(Arc<str>),
    /// JSON, into several fields.
    Structured(Structured),
}

/// Default `max_tokens`: a text answer, and a JSON answer.
const MAX_TOKENS_TEXT: u32 = 1024;
const MAX_TOKENS_JSON: u32 = 512;

/// A single-prompt model node.
#[derive(Debug)]
struct LlmNode {
    prompt: PromptRef,
    roles: Roles,
    input: Option<FieldId>,
    conversation: Conversation,
    output: Output,
    citations: Option<FieldId>,
    generation: Generation,
    on_error: OnError,
}

impl LlmNode {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let prompt = cx.prompt(true);
        let input = cx.text_input("input");
        let conversation = Conversation::build(cx, 12);
        let roles = model::roles(cx);
        let structured = Structured::build(cx, cx.id());
        let output = match structured {
            Ok(Some(s)) => {
                if let Some(v) = cx.setting("messages") {
                    cx.error(
                        v.loc,
                        "invalid-setting",
                        "`messages` appends a text reply; a node with `outputs` answers JSON into fields",
                        Some("append from a text node, or write the JSON fields and route on them".into()),
                    );
                    return None;
                }
                if let Some(v) = cx.setting("output") {
                    cx.error(
                        v.loc,
                        "invalid-setting",
                        "a node has `output` (text) or `outputs` (structured), not both",
                        None,
                    );
                    return None;
                }
                Some(Output::Structured(s))
            }
            Ok(None) => cx
                .output("output", "answer", "a string field", |f| f.ty.is_string())
                .map(|(_, name)| Output::Text(name)),
            Err(_) => None,
        };
        let (default_max, can_fall_back) = match &output {
            Some(Output::Structured(s)) => (MAX_TOKENS_JSON, s.has_fallback()),
            _ => (MAX_TOKENS_TEXT, true),
        };
        let generation = Generation::build(cx, default_max);
        // The default falls back where it can (a text answer keeps what it
        // streamed); a structured node without `fallback` values fails.
        let default = if can_fall_back {
            OnError::Fallback
        } else {
            OnError::Fail
        };
        let on_error = OnError::build(cx, default, can_fall_back);
        let citations = match cx.string("citations") {
            Ok(None) => Ok(None),
            Ok(Some(name)) => cx
                .field(&name, "a list field", |f| f.ty.is_list())
                .map(Some)
                .ok_or(()),
            Err(_) => Err(()),
        };
        Some(Self {
            prompt: prompt.ok()??,
            roles: roles.ok()?,
            input: input.ok()?,
            conversation: conversation.ok()?,
            output: output?,
            citations: citations.ok()?,
            generation: generation.ok()?,
            on_error: on_error.ok()?,
        })
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let mut messages = vec![ChatMessage::System {
            content: cx.render(&self.prompt)?,
        }];
        messages.extend(self.conversation.history(cx.state));
        // The newest user message is usually the history's last already.
        if let Some(text) = self.input.and_then(|f| cx.state.text(f))
            && !model::ends_with_input(&messages, text)
        {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        let request = self.generation.request(messages);
        match &self.output {
            Output::Text(field) => {
                let reply = cx.llm(&self.roles, 0, &request).await?;
                let text = reply.output().text.as_str();
                if reply.output().finish_reason == "length" {
                    truncated(&cx, "length").await;
                }
                if let Some(list) = self.citations {
                    emit_citations(&cx, text, &cx.state.get(list)).await;
                }
                let mut patch = Patch::new().set(Arc::clone(field), text);
                if let Some(mut turn) = self.conversation.turn(&cx) {
                    turn.reply(text, Some(&reply.output().reasoning));
                    turn.write(&mut patch);
                }
                Ok(patch)
            }
            Output::Structured(s) => s.call(&cx, &self.roles, request).await,
        }
    }
}

impl Node for LlmNode {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }

    fn recover<'a>(
        &'a self,
        cx: NodeContext<'a>,
        failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async move {
            let mut r = self.recovery(&cx, &failure)?;
            // A kept answer is the node's reply in its conversation too.
            let kept = if r.refused.is_some() {
                Some(super::bounds::REFUSAL)
            } else {
                r.truncated.map(|_| failure.streamed)
            };
            if let Some(text) = kept {
                self.conversation.keep(&cx, &mut r.patch, text);
            }
            Some(r)
        })
    }
}

impl LlmNode {
    /// How the failed node ends, if it does not fail the run.
    fn recovery(&self, cx: &NodeContext<'_>, failure: &Failure<'_>) -> Option<Recovery> {
        {
            if let Output::Text(field) = &self.output
                && let Some(r) = Recovery::refusal(field, failure)
            {
                return Some(r);
            }
            Recovery::decide(self.on_error, failure, || match &self.output {
                Output::Text(_) => Recovery::partial_text(failure),
                Output::Structured(s) => match s.fallback_writes(cx)? {
                    Ok(patch) => Some(Recovery {
                        patch,
                        note: format!(
                            "`{}` failed ({}); using its fallback.",
                            failure.node, failure.error
                        ),
                        truncated: None,
                        refused: None,
                    }),
                    Err(e) => {
                        tracing::warn!(node = failure.node, error = %e, "the fallback failed too");
                        None
                    }
                },
            })
        }
    }
}

/// Says the answer was cut short (a `data-truncated` part).
pub(super) async fn truncated(cx: &NodeContext<'_>, reason: &str) {
    let node = cx.events.node().to_string();
    cx.events
        .custom(
            crate::events::TRUNCATED,
            serde_json::json!({ "node": node, "reason": reason }),
        )
        .await;
}

/// Sends a `source-url` part for each source `text` cites as `[N]`, in the
/// order first cited.
async fn emit_citations(cx: &NodeContext<'_>, text: &str, sources: &Value) {
    let Value::Array(list) = sources else { return };
    for n in cited(text) {
        let found = list
            .iter()
            .find(|s| s.get("id").and_then(Value::as_u64) == Some(u64::from(n)))
            .or_else(|| list.get((n as usize).wrapping_sub(1)));
        let Some(source) = found else { continue };
        let Some(url) = source.get("url").and_then(Value::as_str) else {
            continue;
        };
        cx.events
            .emit(EventKind::Source(Box::new(SourceRef {
                source_id: n.to_string(),
                url: url.to_owned(),
                title: source
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })))
            .await;
    }
}

/// The numbers cited as `[N]` or `[N, M]`, each once, in order.
pub(super) fn cited(text: &str) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let inner = &after[..close];
        let numbers: Option<Vec<u32>> = inner.split(',').map(|p| p.trim().parse().ok()).collect();
        if let Some(numbers) = numbers {
            for n in numbers.into_iter().filter(|n| *n > 0) {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        rest = &after[close..];
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn citations_are_read_once_in_order() {
        assert_eq!(
            super::cited("A [2]. B [1, 3] and [2] again; [x] and [0] are not."),
            [2, 1, 3]
        );
        assert!(super::cited("no citations [here").is_empty());
    }
}
