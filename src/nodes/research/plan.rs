//! `research_plan`: the question split into sub-queries.
//!
//! One JSON-schema model call (`{queries: [...]}`) with the prompt as the
//! system message, the recent conversation (a follow-up question needs its
//! context) and the question. The sub-queries are the aspects coverage is
//! measured against and the first round's searches. A plan is never empty:
//! a model failure or an empty answer plans one search for the question
//! itself, so the search fan-out always has a branch.
//!
//! Reads `query`, `messages`; writes `sub_queries`, `queries`. Params:
//! `max_queries` (1–8, default 4).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::FieldType;
use super::{Field, params, within};
use crate::llm::{ChatMessage, ChatRequest, JsonSchemaFormat};
use crate::nodes::{BuildCx, NodeContext, NodeError, PromptRef, history, router::extract_json};
use crate::state::Patch;

/// `params` of `research_plan`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    max_queries: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { max_queries: 4 }
    }
}

/// The planner.
#[derive(Debug)]
pub struct Plan {
    prompt: PromptRef,
    role: Arc<str>,
    query: Field,
    messages: Field,
    sub_queries: Field,
    queries: Field,
    format: JsonSchemaFormat,
    max_queries: usize,
}

impl Plan {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&["prompt", "model", "fallback_model", "params"]);
        let prompt = cx.prompt(true);
        let p = params::<Params>(cx, |p| within("max_queries", p.max_queries, 1..=8));
        let query = Field::read(cx, "query", FieldType::Text);
        let messages = Field::read(cx, "messages", FieldType::List);
        let sub_queries = Field::write(cx, "sub_queries", FieldType::List);
        let queries = Field::write(cx, "queries", FieldType::List);
        let p = p?;
        Some(Self {
            prompt: prompt.ok()??,
            role: cx.role(),
            query: query?,
            messages: messages?,
            sub_queries: sub_queries?,
            queries: queries?,
            format: queries_format("research_plan", p.max_queries),
            max_queries: p.max_queries,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let question = cx.state.text(self.query.id).unwrap_or("").trim().to_owned();
        let mut messages = vec![ChatMessage::System {
            content: self.prompt.render(&cx)?,
        }];
        messages.extend(history(cx.state, Some(self.messages.id), 6));
        if !matches!(messages.last(), Some(ChatMessage::User { content }) if content.trim() == question)
        {
            messages.push(ChatMessage::User {
                content: question.clone(),
            });
        }
        let request = ChatRequest {
            messages,
            response_format: Some(self.format.clone()),
            ..Default::default()
        };
        let planned = match cx.llm(&self.role, 0, &request).await {
            Ok(reply) => parse_queries(&reply.output().text, self.max_queries),
            Err(e) => {
                cx.events.thinking(format!("Planning failed ({e}).")).await;
                Vec::new()
            }
        };
        let plan = if planned.is_empty() {
            if question.is_empty() {
                return Err(NodeError::Failed(
                    "nothing to research: the question is empty".into(),
                ));
            }
            cx.events
                .thinking("No sub-queries planned; searching for the question itself.")
                .await;
            vec![question]
        } else {
            planned
        };
        cx.events
            .thinking(format!(
                "Plan: {} search{}: {}.",
                plan.len(),
                if plan.len() == 1 { "" } else { "es" },
                super::text::quoted(&plan)
            ))
            .await;
        Ok(Patch::new()
            .set(self.sub_queries.name(), json!(plan))
            .set(self.queries.name(), json!(plan)))
    }
}

/// The schema of a `{queries: [...]}` answer with at most `max` queries.
pub(super) fn queries_format(name: &str, max: usize) -> JsonSchemaFormat {
    JsonSchemaFormat {
        name: name.into(),
        schema: Arc::new(json!({
            "type": "object",
            "properties": {"queries": {"type": "array", "maxItems": max,
                "items": {"type": "string", "maxLength": 200}}},
            "required": ["queries"],
            "additionalProperties": false
        })),
    }
}

/// The queries of a `{queries: [...]}` answer: whitespace collapsed, empty
/// and repeated ones (ignoring case) dropped, at most `max`.
pub(super) fn parse_queries(text: &str, max: usize) -> Vec<String> {
    let v: Value = serde_json::from_str(extract_json(text)).unwrap_or(Value::Null);
    let mut out: Vec<String> = Vec::new();
    for q in v["queries"].as_array().into_iter().flatten() {
        let Some(q) = q.as_str() else { continue };
        let q = q.split_whitespace().collect::<Vec<_>>().join(" ");
        if !q.is_empty() && !out.iter().any(|o| o.eq_ignore_ascii_case(&q)) {
            out.push(q);
        }
    }
    out.truncate(max);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_cleaned_deduped_and_capped() {
        let text = r#"Sure: {"queries": [" heat  pump cost ", "Heat pump cost", "", 3, "noise", "x", "y"]}"#;
        assert_eq!(parse_queries(text, 3), ["heat pump cost", "noise", "x"]);
        assert!(parse_queries("no json", 3).is_empty());
        assert!(parse_queries(r#"{"queries": "one"}"#, 3).is_empty());
    }
}
