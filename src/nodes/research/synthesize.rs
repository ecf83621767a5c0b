//! `research_synthesize`: the streamed answer, citing sources as `[N]`.
//!
//! The sources with facts are numbered in score order (at most
//! `max_sources`); the prompt is the system message, and the user message
//! holds the question and, per numbered source, its title, URL and best
//! facts (at most `facts_per_source`). The numbering is made here, in the
//! same code that later reads the citations back, so `[N]` in the answer
//! always means source N of this prompt. The answer streams like an `llm`
//! node's (set `surface: answer`), through [`NodeContext::llm`], so a
//! `fallback_model` answers when the model fails before answering.
//!
//! After the answer, the citations are read from its text (`[2]`,
//! `[1, 3]`, `[2-4]`, `[1][2]`) and each cited source — only those — is
//! emitted as a `source` event (a `source-url` part in the UI stream,
//! `sourceId` = N) and written to `citations`. A number that is no source
//! is noted and ignored.
//!
//! With no source at all the model is not asked (it could only guess):
//! the answer says what went wrong — the search failed, no page could be
//! read, or nothing read was relevant — and streams as the node's text.
//!
//! Reads `query`, `sources`, `facts`, `results`, `pages`; writes `answer`,
//! `citations`. Params: `max_sources` (1–20, default 8),
//! `facts_per_source` (1–10, default 3).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::FieldType;
use super::text::{error, output};
use super::{Field, params, within};
use crate::events::EventKind;
use crate::llm::{ChatMessage, ChatRequest};
use crate::nodes::{BuildCx, NodeContext, NodeError, PromptRef};
use crate::state::{Citation, Fact, Patch, Source};

/// `params` of `research_synthesize`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    max_sources: usize,
    facts_per_source: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            max_sources: 8,
            facts_per_source: 3,
        }
    }
}

/// The synthesizer.
#[derive(Debug)]
pub struct Synthesize {
    prompt: PromptRef,
    role: Arc<str>,
    query: Field,
    sources: Field,
    facts: Field,
    results: Field,
    pages: Field,
    answer: Field,
    citations: Field,
    max_sources: usize,
    facts_per_source: usize,
}

/// A numbered source with the facts shown for it.
struct Numbered<'a> {
    id: u32,
    source: &'a Source,
    facts: Vec<&'a Fact>,
}

impl Synthesize {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&["prompt", "model", "fallback_model", "params"]);
        let prompt = cx.prompt(true);
        let p = params::<Params>(cx, |p| {
            within("max_sources", p.max_sources, 1..=20)?;
            within("facts_per_source", p.facts_per_source, 1..=10)
        });
        let query = Field::read(cx, "query", FieldType::Text);
        let sources = Field::read(cx, "sources", FieldType::List);
        let facts = Field::read(cx, "facts", FieldType::List);
        let results = Field::read(cx, "results", FieldType::List);
        let pages = Field::read(cx, "pages", FieldType::List);
        let answer = Field::write(cx, "answer", FieldType::Text);
        let citations = Field::write(cx, "citations", FieldType::List);
        let p = p?;
        Some(Self {
            prompt: prompt.ok()??,
            role: cx.role(),
            query: query?,
            sources: sources?,
            facts: facts?,
            results: results?,
            pages: pages?,
            answer: answer?,
            citations: citations?,
            max_sources: p.max_sources,
            facts_per_source: p.facts_per_source,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let question = cx.state.text(self.query.id).unwrap_or("");
        let sources = self.sources.get::<Vec<Source>>(cx.state)?;
        let facts = self.facts.get::<Vec<Fact>>(cx.state)?;
        let numbered = self.number(&sources, &facts);
        if numbered.is_empty() {
            let results = self.results.get::<Vec<Value>>(cx.state)?;
            let pages = self.pages.get::<Vec<Value>>(cx.state)?;
            let text = nothing_found(&results, &pages);
            let _ = cx
                .events
                .emit(EventKind::TextDelta {
                    call: 0,
                    delta: text.clone(),
                })
                .await;
            return Ok(Patch::new()
                .set(self.answer.name(), text)
                .set(self.citations.name(), json!([])));
        }
        let request = ChatRequest {
            messages: vec![
                ChatMessage::System {
                    content: self.prompt.render(&cx)?,
                },
                ChatMessage::User {
                    content: evidence(question, &numbered),
                },
            ],
            ..Default::default()
        };
        let reply = cx.llm(&self.role, 0, &request).await?;
        let answer = reply.output().text.clone();
        let mut citations = Vec::new();
        let mut unknown = Vec::new();
        for id in cited(&answer) {
            match numbered.iter().find(|n| n.id == id) {
                Some(n) => citations.push(Citation {
                    id,
                    url: n.source.url.clone(),
                    title: n.source.title.clone(),
                }),
                None => unknown.push(format!("[{id}]")),
            }
        }
        if !unknown.is_empty() {
            cx.events
                .thinking(format!(
                    "The answer cites {}, which {} no source; ignored.",
                    unknown.join(", "),
                    if unknown.len() == 1 { "is" } else { "are" }
                ))
                .await;
        }
        for c in &citations {
            let _ = cx
                .events
                .emit(EventKind::Source {
                    source_id: c.id.to_string(),
                    url: c.url.clone(),
                    title: Some(c.title.clone()).filter(|t| !t.is_empty()),
                })
                .await;
        }
        Ok(Patch::new()
            .set(self.answer.name(), answer)
            .set(self.citations.name(), json!(citations)))
    }

    /// Sources with at least one fact, numbered from 1 in score order.
    fn number<'a>(&self, sources: &'a [Source], facts: &'a [Fact]) -> Vec<Numbered<'a>> {
        let mut out = Vec::new();
        for source in sources {
            if out.len() == self.max_sources {
                break;
            }
            let mut mine: Vec<&Fact> = Vec::new();
            let mut by_score: Vec<&Fact> = facts.iter().filter(|f| f.url == source.url).collect();
            by_score.sort_by(|a, b| b.score.total_cmp(&a.score));
            for f in by_score {
                if mine.len() == self.facts_per_source {
                    break;
                }
                if !mine.iter().any(|m| m.text == f.text) {
                    mine.push(f);
                }
            }
            if !mine.is_empty() {
                out.push(Numbered {
                    id: out.len() as u32 + 1,
                    source,
                    facts: mine,
                });
            }
        }
        out
    }
}

/// The user message: the question and the numbered sources with facts.
fn evidence(question: &str, numbered: &[Numbered<'_>]) -> String {
    let mut out = format!("Question: {question}\n\nSources:\n");
    for n in numbered {
        out.push_str(&format!(
            "\n[{}] {} — {}\n",
            n.id, n.source.title, n.source.url
        ));
        for f in &n.facts {
            out.push_str(&format!("- {}\n", f.text.replace('\n', " ")));
        }
    }
    out
}

/// Why there is nothing to cite, for the user.
fn nothing_found(results: &[Value], pages: &[Value]) -> String {
    let searched_ok = results.iter().any(|r| output(r).is_some());
    if !searched_ok {
        let why = results
            .iter()
            .find_map(error)
            .unwrap_or("it returned nothing");
        return format!(
            "I could not research this: the web search failed ({why}). \
             Without sources I would only be guessing, so I have no answer."
        );
    }
    if !pages.iter().any(|p| output(p).is_some()) {
        return "I found search results but could not read any of the pages, so I have no \
                sources to answer from."
            .into();
    }
    "I read the pages the search found, but none of them covered the question, so I have no \
     sources to answer from. Try rephrasing or narrowing the question."
        .into()
}

/// The source numbers an answer cites, each once, in order of first
/// citation: `[2]`, `[1, 3]`, `[2-4]` (at most 20 per range), `[1][2]`.
pub(super) fn cited(text: &str) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']').filter(|&c| c <= 40) else {
            continue;
        };
        let inner = &rest[..close];
        if let Some(ids) = citation_ids(inner) {
            for id in ids {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
            rest = &rest[close + 1..];
        }
    }
    out
}

/// The numbers of one bracket's content, `None` when it is not a citation.
fn citation_ids(inner: &str) -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    for part in inner.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once(['-', '–']) {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 4 && s.bytes().all(|c| c.is_ascii_digit());
        if !digits(a) || !digits(b) {
            return None;
        }
        let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        if a == 0 || b < a || b - a > 20 {
            return None;
        }
        ids.extend(a..=b);
    }
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_in_order_of_first_appearance() {
        assert_eq!(
            cited("A [2]. B [1, 3] and [2-4]; C[1][5]. Not: [a], [0], [], [see 2], [9999999]."),
            [2, 1, 3, 4, 5]
        );
        assert_eq!(cited("Link [text](http://x) then [7]"), [7]);
        assert!(cited("no citations [").is_empty());
    }

    #[test]
    fn nothing_found_says_what_went_wrong() {
        let failed =
            json!({"args": {"query": "q"}, "error": {"message": "no tool named `web_search`"}});
        assert!(nothing_found(&[failed], &[]).contains("no tool named `web_search`"));
        let ok = json!({"args": {"query": "q"}, "output": {"results": []}});
        let page_failed = json!({"args": {"url": "u"}, "error": {"message": "timeout"}});
        assert!(
            nothing_found(std::slice::from_ref(&ok), &[page_failed]).contains("could not read")
        );
        let page = json!({"args": {"url": "u"}, "output": {"text": "x"}});
        assert!(nothing_found(&[ok], &[page]).contains("none of them covered"));
    }
}
