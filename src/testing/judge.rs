//! LLM-judged expectations (`expect: { judge: ["the answer is polite"] }`):
//! optional and off by default. With a judge model (`--judge ROLE`, or
//! `[testing] judge = "ROLE"`) each criterion is put to it with the turn's
//! question and answer, and it answers in structured JSON
//! `{verdict: pass|fail, reason}`; without one the criterion is reported
//! as not judged — never as passed.

use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};

use crate::graph::loc::Sp;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, JsonSchemaFormat, LlmChunk};

/// The judge model and the role it was configured under.
#[derive(Clone, Debug)]
pub struct Judge {
    /// The `[llm]` role named (for reports).
    pub role: String,
    /// Its model.
    pub model: Arc<dyn ChatModel>,
}

impl Judge {
    /// The judge of `role` among `models` (a role without its own model
    /// is the default one).
    ///
    /// # Errors
    /// The role's model is the built-in offline model: it makes up JSON
    /// that fits the schema, so its verdicts would pass without judging.
    pub fn of_role(models: &crate::llm::Models, role: &str) -> Result<Self, String> {
        let model = Arc::clone(models.for_role(role));
        if model.is_offline() {
            return Err(format!(
                "judge role `{role}`: its model is the offline model, which cannot judge (configure `[llm]` or a role `[llm.roles.{role}]`, or give --model-script)"
            ));
        }
        Ok(Self {
            role: role.to_owned(),
            model,
        })
    }

    /// `role ROLE, model MODEL`: the judge, as reports name it.
    pub fn describe(&self) -> String {
        format!("role {}, model {}", self.role, self.model.name())
    }
}

/// What became of one judged expectation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Judged {
    /// The turn (0-based).
    pub turn: usize,
    /// Where the criterion is written.
    pub line: u32,
    /// Its column.
    pub column: u32,
    /// The criterion.
    pub criterion: String,
    /// `pass`, `fail`, `skipped` (no judge configured) or `error` (the
    /// judge failed or answered out of form: counts as a failure).
    pub verdict: &'static str,
    /// The judge's reason, or why there is no verdict.
    pub reason: String,
    /// The judge: its `[llm]` role and model, e.g. `role judge, model
    /// gpt-4o-mini`; empty when nothing was judged.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub judge: String,
}

impl Judged {
    /// Whether it fails the case.
    pub fn failed(&self) -> bool {
        matches!(self.verdict, "fail" | "error")
    }
}

/// What the judge is told, before the question, answer and criterion.
const INSTRUCTIONS: &str = "You judge one answer of an assistant against one criterion. \
Read the user's question, the answer and the criterion. Reply with JSON: `verdict` is `pass` \
when the answer meets the criterion and `fail` when it does not; `reason` says why in one or \
two sentences, naming what in the answer decided it.";

/// The structured output the judge must give.
pub(super) fn verdict_format() -> JsonSchemaFormat {
    JsonSchemaFormat::new(
        "judge_verdict",
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["verdict", "reason"],
            "properties": {
                "verdict": {"type": "string", "enum": ["pass", "fail"]},
                "reason": {"type": "string"}
            }
        }),
    )
}

/// The request put to the judge.
pub(super) fn request(question: &str, answer: &str, criterion: &str) -> ChatRequest {
    let user = format!(
        "Question:\n{question}\n\nAnswer:\n{answer}\n\nCriterion:\n{criterion}\n\nDoes the answer meet the criterion?"
    );
    ChatRequest {
        messages: vec![
            ChatMessage::System {
                content: INSTRUCTIONS.into(),
            },
            ChatMessage::User { content: user },
        ],
        response_format: Some(verdict_format()),
        temperature: Some(0.0),
        ..ChatRequest::default()
    }
}

/// Judges each criterion of a turn (`judge: None`: each is `skipped`).
pub(super) async fn judge_turn(
    judge: Option<&Judge>,
    turn: usize,
    criteria: &[Sp<String>],
    question: &str,
    answer: &str,
) -> Vec<Judged> {
    let mut out = Vec::with_capacity(criteria.len());
    for c in criteria {
        let (verdict, reason) = match judge {
            None => (
                "skipped",
                "not judged: no judge model is configured (`--judge ROLE` or `[testing] judge`)"
                    .to_owned(),
            ),
            Some(j) => match ask(j, question, answer, &c.value).await {
                Ok(v) => v,
                Err(e) => ("error", format!("the judge ({}) failed: {e}", j.role)),
            },
        };
        out.push(Judged {
            turn,
            line: c.loc.line,
            column: c.loc.column,
            criterion: c.value.clone(),
            verdict,
            reason,
            judge: judge.map(Judge::describe).unwrap_or_default(),
        });
    }
    out
}

async fn ask(
    judge: &Judge,
    question: &str,
    answer: &str,
    criterion: &str,
) -> Result<(&'static str, String), String> {
    let req = request(question, answer, criterion);
    let mut stream = judge.model.stream(&req);
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        match chunk.map_err(|e| e.to_string())? {
            LlmChunk::Text(t) => text.push_str(&t),
            LlmChunk::ToolCallStart { name, .. } => {
                return Err(format!("it called a tool (`{name}`) instead of answering"));
            }
            _ => {}
        }
    }
    read_verdict(&text)
}

/// The verdict in the judge's JSON answer.
pub(super) fn read_verdict(text: &str) -> Result<(&'static str, String), String> {
    let mut v: Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("its answer is not JSON ({e}): {text:.200}"))?;
    verdict_format().restore(&mut v);
    let reason = v["reason"].as_str().unwrap_or_default().to_owned();
    match v["verdict"].as_str() {
        Some("pass") => Ok(("pass", reason)),
        Some("fail") => Ok(("fail", reason)),
        _ => Err(format!(
            "its answer has no `verdict` of `pass` or `fail`: {text:.200}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_read_from_the_judges_json() {
        assert_eq!(
            read_verdict(r#"{"verdict":"fail","reason":"no source"}"#),
            Ok(("fail", "no source".to_owned()))
        );
        assert!(read_verdict(r#"{"verdict":"maybe","reason":""}"#).is_err());
        assert!(read_verdict("yes").is_err());
    }

    #[test]
    fn the_request_asks_for_structured_output_with_the_three_texts() {
        let r = request("Q?", "A.", "is polite");
        assert_eq!(
            r.response_format.as_ref().map(|f| f.name.as_str()),
            Some("judge_verdict")
        );
        let user = r.messages.iter().find_map(ChatMessage::user_text).unwrap();
        assert!(user.contains("Q?") && user.contains("A.") && user.contains("is polite"));
    }
}
