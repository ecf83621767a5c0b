//! `research_score`: the pages read, ranked as sources.
//!
//! Three signals, each between 0 and 1, weighted into one score:
//! - relevance (0.5): the share of the question's terms found in the
//!   page's best passage — what the page says;
//! - rank (0.3): `1 / best position` in any result list — what the search
//!   engine thought of it;
//! - agreement (0.2): how many searches returned it, counting up to three —
//!   independent queries landing on the same page.
//!
//! The synthesizer numbers sources in this order, so the best-supported
//! pages come first in its prompt. Runs next to `research_facts`.
//!
//! Reads `query`, `results`, `pages`, `passages`; writes `sources`.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

use super::FieldType;
use super::text::{arg, canonical_url, output, terms};
use super::{Field, round3};
use crate::nodes::{BuildCx, NodeContext, NodeError};
use crate::state::{Passage, Patch, Source};

/// The source ranker.
#[derive(Debug)]
pub struct Score {
    query: Field,
    results: Field,
    pages: Field,
    passages: Field,
    sources: Field,
}

impl Score {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&[]);
        let query = Field::read(cx, "query", FieldType::Text);
        let results = Field::read(cx, "results", FieldType::List);
        let pages = Field::read(cx, "pages", FieldType::List);
        let passages = Field::read(cx, "passages", FieldType::List);
        let sources = Field::write(cx, "sources", FieldType::List);
        Some(Self {
            query: query?,
            results: results?,
            pages: pages?,
            passages: passages?,
            sources: sources?,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let question = terms(cx.state.text(self.query.id).unwrap_or(""));
        let results = self.results.get::<Vec<Value>>(cx.state)?;
        let pages = self.pages.get::<Vec<Value>>(cx.state)?;
        let passages = self.passages.get::<Vec<Passage>>(cx.state)?;
        let sources = rank(&question, &results, &pages, &passages);
        if let Some(best) = sources.first() {
            cx.events
                .thinking(format!(
                    "Ranked {} source{}; best: {} ({:.2}).",
                    sources.len(),
                    if sources.len() == 1 { "" } else { "s" },
                    best.title,
                    best.score
                ))
                .await;
        }
        Ok(Patch::new().set(self.sources.name(), json!(sources)))
    }
}

/// The sources, best first (equal scores keep reading order).
pub(super) fn rank(
    question: &BTreeSet<String>,
    results: &[Value],
    pages: &[Value],
    passages: &[Passage],
) -> Vec<Source> {
    // (best rank, hits) by canonical URL, over every successful search.
    let mut found: HashMap<String, (u32, u32)> = HashMap::new();
    for out in results.iter().filter_map(output) {
        let mut seen = BTreeSet::new();
        for (i, item) in out["results"].as_array().into_iter().flatten().enumerate() {
            let Some(url) = item["url"].as_str() else {
                continue;
            };
            let key = canonical_url(url);
            if seen.insert(key.clone()) {
                let e = found.entry(key).or_insert((u32::MAX, 0));
                e.0 = e.0.min(i as u32 + 1);
                e.1 += 1;
            }
        }
    }
    // A page fetched through a redirect is known to the search by the URL
    // that was asked for.
    let asked: HashMap<String, String> = pages
        .iter()
        .filter_map(|p| {
            let final_url = output(p)?["url"].as_str()?;
            Some((canonical_url(final_url), canonical_url(arg(p, "url")?)))
        })
        .collect();
    let mut out: Vec<Source> = Vec::new();
    for p in passages {
        let relevance = super::text::overlap(question, &terms(&p.text));
        if let Some(s) = out.iter_mut().find(|s| s.url == p.url) {
            s.relevance = s.relevance.max(relevance);
            continue;
        }
        let key = canonical_url(&p.url);
        let (rank, hits) = found
            .get(&key)
            .or_else(|| asked.get(&key).and_then(|k| found.get(k)))
            .copied()
            .unwrap_or((0, 0));
        out.push(Source {
            url: p.url.clone(),
            title: p.title.clone(),
            score: 0.0,
            relevance,
            rank,
            hits,
        });
    }
    for s in &mut out {
        let rank = if s.rank == 0 {
            0.0
        } else {
            1.0 / f64::from(s.rank)
        };
        let agreement = f64::from(s.hits.min(3)) / 3.0;
        s.relevance = round3(s.relevance);
        s.score = round3(0.5 * s.relevance + 0.3 * rank + 0.2 * agreement);
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_rank_by_relevance_position_and_agreement() {
        let search = |q: &str, urls: &[&str]| {
            json!({"tool": "web_search", "args": {"query": q}, "output": {"results":
                urls.iter().map(|u| json!({"url": u, "title": u})).collect::<Vec<_>>()}})
        };
        let results = [
            search("a", &["https://x/1", "https://x/2"]),
            search("b", &["https://x/2/", "https://x/3"]),
            json!({"tool": "web_search", "args": {"query": "c"}, "error": {"message": "down"}}),
        ];
        let pages = [json!({"args": {"url": "https://x/3"}, "output": {"url": "https://y/3"}})];
        let p = |url: &str, text: &str| Passage {
            url: url.into(),
            title: url.into(),
            index: 0,
            text: text.into(),
        };
        let passages = [
            p("https://x/1", "unrelated words"),
            p("https://x/2", "heat pump"),
            p("https://x/2", "heat pump cost"),
            p("https://y/3", "cost"),
        ];
        let s = rank(&terms("heat pump cost"), &results, &pages, &passages);
        let got: Vec<(&str, f64, u32, u32)> = s
            .iter()
            .map(|s| (s.url.as_str(), s.relevance, s.rank, s.hits))
            .collect();
        assert_eq!(
            got,
            [
                ("https://x/2", 1.0, 1, 2),
                ("https://y/3", 0.333, 2, 1),
                ("https://x/1", 0.0, 1, 1),
            ]
        );
        // 0.5 + 0.3 + 0.2 * 2/3
        assert_eq!(s[0].score, 0.933);
    }
}
