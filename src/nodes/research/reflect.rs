//! `research_reflect`: enough, or another round for the gaps?
//!
//! Coverage is the share of sub-queries with at least one fact; the
//! sub-queries without one are the gaps. Research is done when coverage
//! reaches `min_coverage`, when this was round `max_rounds` (the cap that
//! bounds the cycle back to search — the count is `iteration` in the
//! state), or when every search of the round failed (new queries would
//! fail the same way). Otherwise the model writes new queries for the gaps
//! — one JSON-schema call with the prompt as the system message and the
//! question, the gaps, what was already searched and excerpts of what was
//! found as the user message — and they become the next round's `queries`.
//! Queries already searched are dropped; no new query, or a model failure,
//! ends research with what was found rather than failing the run.
//!
//! Reads `query`, `sub_queries`, `queries`, `facts`, `results`,
//! `iteration`; writes `coverage`, `gaps`, `iteration`, `done` (routed on)
//! and, when looping, `queries`. Params: `min_coverage` (0–1, default
//! 0.75), `max_rounds` (1–10, default 2), `max_queries` (1–8, default 3).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::FieldType;
use super::plan::{parse_queries, queries_format};
use super::text::{arg, clip, output, quoted};
use super::{Field, params, round3, within};
use crate::llm::{ChatMessage, ChatRequest, JsonSchemaFormat};
use crate::nodes::{BuildCx, NodeContext, NodeError, PromptRef};
use crate::state::{Fact, Patch};

/// `params` of `research_reflect`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    min_coverage: f64,
    max_rounds: u32,
    max_queries: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            min_coverage: 0.75,
            max_rounds: 2,
            max_queries: 3,
        }
    }
}

/// The reflection step.
#[derive(Debug)]
pub struct Reflect {
    prompt: PromptRef,
    role: Arc<str>,
    query: Field,
    sub_queries: Field,
    queries: Field,
    facts: Field,
    results: Field,
    iteration: Field,
    coverage: Field,
    gaps: Field,
    done: Field,
    format: JsonSchemaFormat,
    min_coverage: f64,
    max_rounds: u32,
    max_queries: usize,
}

impl Reflect {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&["prompt", "model", "fallback_model", "params"]);
        let prompt = cx.prompt(true);
        let p = params::<Params>(cx, |p| {
            within("min_coverage", p.min_coverage, 0.0..=1.0)?;
            within("max_rounds", p.max_rounds, 1..=10)?;
            within("max_queries", p.max_queries, 1..=8)
        });
        let query = Field::read(cx, "query", FieldType::Text);
        let sub_queries = Field::read(cx, "sub_queries", FieldType::List);
        let facts = Field::read(cx, "facts", FieldType::List);
        let results = Field::read(cx, "results", FieldType::List);
        let queries = Field::write(cx, "queries", FieldType::List);
        let iteration = Field::write(cx, "iteration", FieldType::Integer);
        let coverage = Field::write(cx, "coverage", FieldType::Number);
        let gaps = Field::write(cx, "gaps", FieldType::List);
        let done = Field::write(cx, "done", FieldType::Bool);
        let p = p?;
        Some(Self {
            prompt: prompt.ok()??,
            role: cx.role(),
            query: query?,
            sub_queries: sub_queries?,
            queries: queries?,
            facts: facts?,
            results: results?,
            iteration: iteration?,
            coverage: coverage?,
            gaps: gaps?,
            done: done?,
            format: queries_format("research_gaps", p.max_queries),
            min_coverage: p.min_coverage,
            max_rounds: p.max_rounds,
            max_queries: p.max_queries,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let aspects = self.sub_queries.get::<Vec<String>>(cx.state)?;
        let facts = self.facts.get::<Vec<Fact>>(cx.state)?;
        let results = self.results.get::<Vec<Value>>(cx.state)?;
        let queries = self.queries.get::<Vec<String>>(cx.state)?;
        let round = self.iteration.get::<u32>(cx.state)?.into_owned() + 1;

        let gaps: Vec<String> = aspects
            .iter()
            .filter(|a| !facts.iter().any(|f| f.aspect == **a))
            .cloned()
            .collect();
        let covered = aspects.len() - gaps.len();
        let coverage = if aspects.is_empty() {
            0.0
        } else {
            covered as f64 / aspects.len() as f64
        };
        let round_failed = queries.iter().all(|q| {
            !results
                .iter()
                .any(|r| arg(r, "query") == Some(q.as_str()) && output(r).is_some())
        });

        let mut note = format!(
            "Round {round}: coverage {:.0} % ({covered} of {} sub-quer{})",
            coverage * 100.0,
            aspects.len(),
            if aspects.len() == 1 { "y" } else { "ies" }
        );
        if !gaps.is_empty() {
            note.push_str(&format!("; not covered: {}", quoted(&gaps)));
        }
        let stop = if coverage >= self.min_coverage || gaps.is_empty() {
            Some("coverage is sufficient".to_owned())
        } else if round >= self.max_rounds {
            Some(format!("the cap of {} rounds is reached", self.max_rounds))
        } else if round_failed {
            Some("every search of this round failed".to_owned())
        } else {
            None
        };
        let next = match stop {
            Some(reason) => Err(reason),
            None => self
                .gap_queries(&cx, &gaps, &results, &facts)
                .await
                .map_err(|e| e.unwrap_or_else(|| "no new query to search".to_owned())),
        };
        let mut patch = Patch::new()
            .set(self.coverage.name(), round3(coverage))
            .set(self.gaps.name(), json!(gaps))
            .set(self.iteration.name(), round);
        match next {
            Ok(new) => {
                note.push_str(&format!(". Searching again: {}.", quoted(&new)));
                patch.insert(self.queries.name(), json!(new));
                patch.insert(self.done.name(), false);
            }
            Err(reason) => {
                note.push_str(&format!(". Answering now: {reason}."));
                patch.insert(self.done.name(), true);
            }
        }
        cx.events.thinking(note).await;
        Ok(patch)
    }

    /// New queries for the gaps; `Err(Some(why))` when the model failed,
    /// `Err(None)` when it had nothing new.
    async fn gap_queries(
        &self,
        cx: &NodeContext<'_>,
        gaps: &[String],
        results: &[Value],
        facts: &[Fact],
    ) -> Result<Vec<String>, Option<String>> {
        let searched: Vec<&str> = results.iter().filter_map(|r| arg(r, "query")).collect();
        let mut user = format!(
            "Question: {}\n\nNot covered yet:\n",
            cx.state.text(self.query.id).unwrap_or("")
        );
        for g in gaps {
            user.push_str(&format!("- {g}\n"));
        }
        user.push_str("\nAlready searched:\n");
        for q in &searched {
            user.push_str(&format!("- {q}\n"));
        }
        if !facts.is_empty() {
            user.push_str("\nFound so far:\n");
            for f in facts.iter().take(8) {
                user.push_str(&format!("- ({}) {}\n", f.aspect, clip(&f.text, 200)));
            }
        }
        let request = ChatRequest {
            messages: vec![
                ChatMessage::System {
                    content: self.prompt.render(cx).map_err(|e| Some(e.to_string()))?,
                },
                ChatMessage::User { content: user },
            ],
            response_format: Some(self.format.clone()),
            ..Default::default()
        };
        let reply = cx
            .llm(&self.role, 0, &request)
            .await
            .map_err(|e| Some(format!("no new queries ({e})")))?;
        let new: Vec<String> = parse_queries(&reply.output().text, self.max_queries)
            .into_iter()
            .filter(|q| !searched.iter().any(|s| s.eq_ignore_ascii_case(q)))
            .collect();
        if new.is_empty() { Err(None) } else { Ok(new) }
    }
}
