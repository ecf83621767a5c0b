//! `interrupt`: asks a person a question and waits for the answer.
//!
//! ```yaml
//! - id: confirm
//!   kind: interrupt
//!   question: "Send the invoice to {{ customer }}?"   # text or a template
//!   output: confirmed        # the field the answer goes to (typed)
//!   options: [yes, no]       # suggested answers (each of the field's type)
//!   expires_after: 1h        # optional: the run fails if nobody answers
//! ```
//!
//! The first time the node runs, the run pauses (status `interrupted`):
//! the stream shows the question as text and as a `data-interrupt` part and
//! ends. The answer — the chat's next user message, `POST
//! /api/runs/{id}/resume`, or `stategraph resume` — is checked against the
//! field's type before anything runs; the node then runs again and writes
//! it into the field.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{BuildCx, Kind, Node, NodeContext, NodeError};
use crate::events::Ask;
use crate::graph::SettingDoc;
use crate::graph::expr::{ValueExpr, from_json};
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::state::Patch;

/// The kind.
pub(super) fn kind() -> Kind {
    Kind::new(
        "interrupt",
        "Asks a person a question built from the state and waits: the run pauses until the answer comes, which is written into a field.",
        &[
            SettingDoc::new(
                "question",
                schema::STRING,
                "the question: text, or a template over the state",
            ),
            SettingDoc::new(
                "output",
                schema::FIELD,
                "the field receiving the answer (default `answer`); the answer must be of its type",
            ),
            SettingDoc::new(
                "options",
                r#"{"type":"array"}"#,
                "suggested answers, each of the output field's type",
            ),
            SettingDoc::new(
                "expires_after",
                schema::DURATION,
                "how long the answer is waited for before the run fails (default: no limit)",
            ),
        ],
        Surface::Answer,
        |cx| Question::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// A question to a person.
#[derive(Debug)]
struct Question {
    question: ValueExpr,
    output: Arc<str>,
    /// JSON Schema of the answer (the field's type).
    schema: Value,
    options: Vec<Value>,
    expires: Option<Duration>,
}

impl Question {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let question = match cx.setting("question") {
            Some(v) => cx.value_expr(v, "`question`", &["item"]),
            None => {
                let loc = cx.kind_loc();
                cx.error(
                    loc,
                    "missing-setting",
                    "an `interrupt` node needs a `question`".to_owned(),
                    Some("write `question: \"…\"` (text, or a template over the state)".into()),
                );
                Err(crate::graph::Reported)
            }
        };
        let output = cx.output("output", "answer", "a field", |_| true);
        let expires = cx.duration("expires_after");
        let (field, name) = output?;
        let ty = cx.schema.map(|s| s.fields[field.0 as usize].ty.clone())?;
        let options = match cx.json("options") {
            None => Vec::new(),
            Some(v) => match v.value {
                Value::Array(items) => {
                    if let Some(bad) = items.iter().find_map(|o| ty.check(o).err()) {
                        cx.error(
                            v.loc,
                            "invalid-setting",
                            format!(
                                "an option does not fit `{name}`: it takes {}, got {}",
                                bad.expected, bad.got
                            ),
                            None,
                        );
                        return None;
                    }
                    items
                }
                _ => {
                    cx.error(
                        v.loc,
                        "invalid-setting",
                        "`options` must be a list".to_owned(),
                        None,
                    );
                    return None;
                }
            },
        };
        Some(Self {
            question: question.ok()?,
            schema: ty.json_schema(),
            output: name,
            options,
            expires: expires.ok()?.map(|d| d.value),
        })
    }

    async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        // Unique within the run: the node, its step and its task.
        let id = format!(
            "question-{}-{}-{}",
            cx.events.node().replace('/', "-"),
            cx.events.step(),
            cx.events.task()
        );
        if let Some(answer) = cx.answer(&id) {
            return Ok(Patch::new().set(Arc::clone(&self.output), answer));
        }
        let extra: Vec<(&str, minijinja::Value)> = cx
            .item
            .map(|i| vec![("item", from_json(i))])
            .unwrap_or_default();
        let question = match self.question.eval(cx.state, &extra)? {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let ask = Ask::Question {
            question,
            field: self.output.to_string(),
            schema: self.schema.clone(),
            options: self.options.clone(),
        };
        Err(NodeError::Interrupted(vec![cx.interrupt(
            id,
            ask,
            self.expires,
        )]))
    }
}

impl Node for Question {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(Question::run(self, cx))
    }
}
