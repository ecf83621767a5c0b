//! `followup`: two or three suggested follow-up questions.
//!
//! Asks the model for `{questions: [...]}` in JSON-schema mode. Follow-ups
//! are a nicety: a model failure or unusable answer yields no questions and
//! a thinking note, never a failed run. The questions are also emitted as
//! custom data `followups` for the UI.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::bounds::{Failure, GENERATION_SETTINGS, Generation, ON_ERROR, OnError, Recovery};
use super::model::{self, HISTORY_SETTINGS, INPUT, PROMPT, ROLE_SETTINGS};
use super::structured::extract_json;
use super::{BuildCx, Kind, Node, NodeContext, NodeError, Roles};
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::graph::{PromptRef, SettingDoc};
use crate::llm::{ChatMessage, JsonSchemaFormat};
use crate::state::{FieldId, Patch};

/// The kind.
pub(super) fn kind() -> Kind {
    let mut settings = vec![
        PROMPT,
        INPUT,
        SettingDoc::new(
            "output",
            schema::FIELD,
            "list field receiving the questions (default `followups`)",
        ),
        SettingDoc::new(
            "count",
            schema::INTEGER,
            "how many questions (2 or 3, default 3)",
        ),
    ];
    settings.extend(ROLE_SETTINGS);
    settings.extend(GENERATION_SETTINGS);
    settings.push(ON_ERROR);
    settings.extend(HISTORY_SETTINGS);
    Kind::new(
        "followup",
        "Two or three suggested follow-up questions; a failure adds none, never fails the run.",
        &settings,
        Surface::Hidden,
        |cx| Followup::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// `{questions: [...]}` with 2 to `count` questions of at most 160 characters.
fn format(count: usize) -> JsonSchemaFormat {
    JsonSchemaFormat::new(
        "followups",
        json!({
            "type": "object",
            "properties": {"questions": {"type": "array", "minItems": 2, "maxItems": count,
                "items": {"type": "string", "maxLength": 160}}},
            "required": ["questions"],
            "additionalProperties": false
        }),
    )
}

/// Follow-up question generator.
#[derive(Debug)]
struct Followup {
    prompt: PromptRef,
    roles: Roles,
    input: Option<FieldId>,
    history: (Option<FieldId>, usize),
    output: Arc<str>,
    count: usize,
    generation: Generation,
    on_error: OnError,
    /// The structured-output format, built once: its strict form costs
    /// ~19,000 instructions, 9 % of a chat run, when built per call.
    format: JsonSchemaFormat,
}

impl Followup {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let prompt = cx.prompt(true);
        let input = cx.text_input("input");
        let history = cx.history(6);
        let roles = model::roles(cx);
        let output = cx.output("output", "followups", "a list field", |f| f.ty.is_list());
        let count = cx.integer("count", 2..=3, 3);
        let generation = Generation::build(cx, 256);
        // A nicety: one that fails is skipped, never fails the run.
        let on_error = OnError::build(cx, OnError::Skip, false);
        let count = count.ok()? as usize;
        Some(Self {
            generation: generation.ok()?,
            on_error: on_error.ok()?,
            prompt: prompt.ok()??,
            roles: roles.ok()?,
            input: input.ok()?,
            history: history.ok()?,
            output: output?.1,
            count,
            format: format(count),
        })
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        // The rendered prompt (question and answer) is the user turn; some
        // endpoints reject a request without one.
        let mut messages = vec![ChatMessage::System {
            content: "You suggest follow-up questions.".into(),
        }];
        messages.extend(model::history(cx.state, self.history.0, self.history.1));
        if let Some(text) = self.input.and_then(|f| cx.state.text(f)) {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        messages.push(ChatMessage::User {
            content: cx.render(&self.prompt)?,
        });
        let mut request = self.generation.request(messages);
        request.response_format = Some(self.format.clone());
        let questions = match cx.llm(&self.roles, 0, &request).await {
            Ok(reply) => parse_questions(&reply.output().text, self.count),
            Err(e) => {
                cx.events
                    .thinking(format!("No follow-up questions: {e}"))
                    .await;
                Vec::new()
            }
        };
        if !questions.is_empty() {
            cx.events
                .custom("followups", json!({ "questions": questions }))
                .await;
        }
        Ok(Patch::new().set(Arc::clone(&self.output), questions))
    }
}

impl Node for Followup {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }

    fn recover<'a>(
        &'a self,
        _cx: NodeContext<'a>,
        failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async move { Recovery::decide(self.on_error, &failure, || None) })
    }
}

/// Questions from a model answer: the JSON `questions` array, else one
/// question per non-empty line; at most `count`, fewer than two means none.
pub(crate) fn parse_questions(text: &str, count: usize) -> Vec<String> {
    let from_json = serde_json::from_str::<Value>(extract_json(text))
        .ok()
        .and_then(|v| {
            v["questions"].as_array().map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
        });
    let mut qs: Vec<String> = from_json.unwrap_or_else(|| {
        text.lines()
            .map(|l| {
                l.trim()
                    .trim_start_matches(['-', '*', '•', ' '])
                    .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ')')
                    .trim()
            })
            .filter(|l| l.ends_with('?') && l.len() > 3)
            .map(str::to_owned)
            .collect()
    });
    qs.retain(|q| !q.trim().is_empty());
    qs.truncate(count);
    if qs.len() < 2 { Vec::new() } else { qs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_from_json_lines_or_nothing() {
        assert_eq!(
            parse_questions(r#"{"questions":["a?","b?","c?","d?"]}"#, 3),
            ["a?", "b?", "c?"]
        );
        assert_eq!(
            parse_questions("Sure:\n1. Why is it?\n- How so?\n", 3),
            ["Why is it?", "How so?"]
        );
        assert!(parse_questions("not useful", 3).is_empty());
        assert!(parse_questions(r#"{"questions":["only one?"]}"#, 3).is_empty());
    }
}
