//! `research_facts`: the passages that bear on each sub-query.
//!
//! A sub-query's *distinguishing* terms are its terms minus those every
//! sub-query shares: for "heat pump efficiency" and "heat pump cost" the
//! shared topic (`heat`, `pump`) matches every page about heat pumps and
//! says nothing about which aspect a passage covers, so only `efficiency`
//! and `cost` count (all terms count when there is one sub-query, or when
//! nothing distinguishes it). A passage is a fact for the sub-query when it
//! contains at least `min_overlap` of those terms; the best `per_aspect`
//! facts are kept, each quoted verbatim with its page.
//!
//! Runs next to `research_score` (both read the passages, neither needs
//! the other), joined before `research_reflect`.
//!
//! Reads `sub_queries`, `passages`; writes `facts`. Params: `min_overlap`
//! (0–1, default 0.5), `per_aspect` (1–20, default 4).

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::json;

use super::FieldType;
use super::text::terms;
use super::{Field, params, round3, within};
use crate::nodes::{BuildCx, NodeContext, NodeError};
use crate::state::{Fact, Passage, Patch};

/// `params` of `research_facts`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    min_overlap: f64,
    per_aspect: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            min_overlap: 0.5,
            per_aspect: 4,
        }
    }
}

/// The fact extractor.
#[derive(Debug)]
pub struct Facts {
    sub_queries: Field,
    passages: Field,
    facts: Field,
    min_overlap: f64,
    per_aspect: usize,
}

impl Facts {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&["params"]);
        let p = params::<Params>(cx, |p| {
            within("min_overlap", p.min_overlap, 0.0..=1.0)?;
            within("per_aspect", p.per_aspect, 1..=20)
        });
        let sub_queries = Field::read(cx, "sub_queries", FieldType::List);
        let passages = Field::read(cx, "passages", FieldType::List);
        let facts = Field::write(cx, "facts", FieldType::List);
        let p = p?;
        Some(Self {
            sub_queries: sub_queries?,
            passages: passages?,
            facts: facts?,
            min_overlap: p.min_overlap,
            per_aspect: p.per_aspect,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let aspects = self.sub_queries.get::<Vec<String>>(cx.state)?;
        let passages = self.passages.get::<Vec<Passage>>(cx.state)?;
        let facts = extract(&aspects, &passages, self.min_overlap, self.per_aspect);
        Ok(Patch::new().set(self.facts.name(), json!(facts)))
    }
}

/// The facts for each aspect, in aspect order, best first.
pub(super) fn extract(
    aspects: &[String],
    passages: &[Passage],
    min_overlap: f64,
    per_aspect: usize,
) -> Vec<Fact> {
    let aspect_terms: Vec<BTreeSet<String>> = aspects.iter().map(|a| terms(a)).collect();
    let shared: BTreeSet<String> = match aspect_terms.split_first() {
        Some((first, rest)) if !rest.is_empty() => first
            .iter()
            .filter(|t| rest.iter().all(|r| r.contains(*t)))
            .cloned()
            .collect(),
        _ => BTreeSet::new(),
    };
    let passage_terms: Vec<BTreeSet<String>> = passages.iter().map(|p| terms(&p.text)).collect();
    let mut out = Vec::new();
    for (aspect, all) in aspects.iter().zip(&aspect_terms) {
        let distinct: BTreeSet<String> = all.difference(&shared).cloned().collect();
        let wanted = if distinct.is_empty() { all } else { &distinct };
        let mut scored: Vec<(f64, &Passage)> = passages
            .iter()
            .zip(&passage_terms)
            .map(|(p, t)| (super::text::overlap(wanted, t), p))
            .filter(|(s, _)| *s > 0.0 && *s >= min_overlap)
            .collect();
        // Stable: equal scores keep page and passage order.
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut texts: Vec<&str> = Vec::new();
        for (score, p) in scored {
            if texts.len() == per_aspect {
                break;
            }
            if texts.contains(&p.text.as_str()) {
                continue;
            }
            texts.push(&p.text);
            out.push(Fact {
                aspect: aspect.clone(),
                text: p.text.clone(),
                url: p.url.clone(),
                title: p.title.clone(),
                score: round3(score),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(url: &str, text: &str) -> Passage {
        Passage {
            url: url.into(),
            title: url.into(),
            index: 0,
            text: text.into(),
        }
    }

    #[test]
    fn facts_match_what_distinguishes_each_sub_query() {
        let aspects = [
            "heat pump efficiency".to_owned(),
            "heat pump installation cost".to_owned(),
            "heat pump noise levels".to_owned(),
        ];
        let passages = [
            passage("a", "Heat pump efficiency is measured as a COP of 3 to 4."),
            passage("b", "Installation of a heat pump costs 8,000 euros."),
            passage("c", "Heat pumps are popular in Norway."),
            passage("d", "The cost of a heat pump varies."),
        ];
        let facts = extract(&aspects, &passages, 0.5, 4);
        let got: Vec<(&str, &str, f64)> = facts
            .iter()
            .map(|f| (f.aspect.as_str(), f.url.as_str(), f.score))
            .collect();
        assert_eq!(
            got,
            [
                ("heat pump efficiency", "a", 1.0),
                ("heat pump installation cost", "b", 1.0),
                ("heat pump installation cost", "d", 0.5),
            ],
            "`heat pump` alone covers nothing; noise is not covered"
        );
        assert_eq!(extract(&aspects, &passages, 0.5, 1).len(), 2);
        // One sub-query: all its terms count.
        let one = extract(&["heat pump".to_owned()], &passages, 1.0, 9);
        assert_eq!(one.len(), 4);
    }
}
