//! `followup`: two or three suggested follow-up questions.
//!
//! Asks the model for `{questions: [...]}` in JSON-schema mode. Follow-ups
//! are a nicety: a model failure or unusable answer yields no questions and
//! a thinking note, never a failed run. The questions are also emitted as
//! custom data `followups` for the UI.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Reported;
use super::{BuildCx, NodeContext, NodeError, PromptRef, history};
use crate::llm::{ChatMessage, ChatRequest, JsonSchemaFormat};
use crate::state::{FieldId, Patch};

const SETTINGS: &[&str] = &[
    "prompt",
    "model",
    "input",
    "output",
    "count",
    "history",
    "history_window",
    "fallback_model",
];

/// Follow-up question generator.
#[derive(Debug)]
pub struct Followup {
    prompt: PromptRef,
    role: Arc<str>,
    input: Option<FieldId>,
    history: (Option<FieldId>, usize),
    output: Arc<str>,
    count: usize,
}

impl Followup {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let n = cx.node;
        cx.accept(SETTINGS);
        let prompt = cx.prompt(true);
        let input = match &n.input {
            Some(_) => cx.input(&n.input, "query").map(Some).ok_or(Reported),
            None => Ok(None),
        };
        let history = cx.history(6);
        let output = cx.output(&n.output, "followups", "a list field", |f| f.ty.is_list());
        let count = n.count.as_ref().map_or(3, |c| c.value);
        if !(2..=3).contains(&count) {
            let loc = n.count.as_ref().map_or(n.kind.loc, |c| c.loc);
            cx.error(loc, "invalid-setting", "`count` must be 2 or 3", None);
            return None;
        }
        output?;
        Some(Self {
            prompt: prompt.ok()??,
            role: cx.role(),
            input: input.ok()?,
            history: history.ok()?,
            output: n
                .output
                .as_ref()
                .map_or("followups", |o| o.value.as_str())
                .into(),
            count: count as usize,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        // The rendered prompt (question and answer) is the user turn; some
        // endpoints reject a request without one.
        let mut messages = vec![ChatMessage::System {
            content: "You suggest follow-up questions.".into(),
        }];
        messages.extend(history(cx.state, self.history.0, self.history.1));
        if let Some(text) = self.input.and_then(|f| cx.state.text(f)) {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        messages.push(ChatMessage::User {
            content: self.prompt.render(&cx)?,
        });
        let format = JsonSchemaFormat {
            name: "followups".into(),
            schema: Arc::new(json!({
                "type": "object",
                "properties": {"questions": {"type": "array", "minItems": 2, "maxItems": self.count,
                    "items": {"type": "string", "maxLength": 160}}},
                "required": ["questions"],
                "additionalProperties": false
            })),
        };
        let request = ChatRequest {
            messages,
            response_format: Some(format),
            ..Default::default()
        };
        let questions = match cx.llm(&self.role, 0, &request).await {
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

/// Questions from a model answer: the JSON `questions` array, else one
/// question per non-empty line; at most `count`, fewer than two means none.
pub(crate) fn parse_questions(text: &str, count: usize) -> Vec<String> {
    let from_json = serde_json::from_str::<Value>(super::router::extract_json(text))
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
