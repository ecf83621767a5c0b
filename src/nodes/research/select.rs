//! `research_select`: this round's result lists merged into the URLs to
//! read.
//!
//! Each search of the round (a record in `results` whose query is in
//! `queries`) gives a ranked list. The lists are merged with reciprocal
//! rank fusion — a page scores `Σ 1/(60 + rank)` over the lists it appears
//! in — which needs no comparable scores from the engine and rewards pages
//! several searches agree on. Pages are deduplicated by
//! [`canonical_url`](super::text::canonical_url); pages fetched in an
//! earlier round are not fetched again; at most `max_per_host` pages come
//! from one host, so one site cannot fill the reading list.
//!
//! Reads `queries`, `results`, `pages`; writes `urls` and `fetch_needed`
//! (false when there is nothing new to read: the graph then skips the
//! crawl instead of fanning out over nothing). Params: `max_urls` (1–20,
//! default 5), `max_per_host` (1–20, default 2).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;
use serde_json::{Value, json};

use super::FieldType;
use super::text::{arg, canonical_url, error, output};
use super::{Field, params, within};
use crate::nodes::{BuildCx, NodeContext, NodeError};
use crate::state::Patch;

/// The constant of reciprocal rank fusion (the usual 60).
const RRF_K: f64 = 60.0;

/// `params` of `research_select`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    max_urls: usize,
    max_per_host: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            max_urls: 5,
            max_per_host: 2,
        }
    }
}

/// The URL selector.
#[derive(Debug)]
pub struct Select {
    queries: Field,
    results: Field,
    pages: Field,
    urls: Field,
    fetch_needed: Field,
    max_urls: usize,
    max_per_host: usize,
}

/// A page found by this round's searches.
struct Candidate<'a> {
    url: &'a str,
    host: String,
    score: f64,
}

impl Select {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&["params"]);
        let p = params::<Params>(cx, |p| {
            within("max_urls", p.max_urls, 1..=20)?;
            within("max_per_host", p.max_per_host, 1..=20)
        });
        let queries = Field::read(cx, "queries", FieldType::List);
        let results = Field::read(cx, "results", FieldType::List);
        let pages = Field::read(cx, "pages", FieldType::List);
        let urls = Field::write(cx, "urls", FieldType::List);
        let fetch_needed = Field::write(cx, "fetch_needed", FieldType::Bool);
        let p = p?;
        Some(Self {
            queries: queries?,
            results: results?,
            pages: pages?,
            urls: urls?,
            fetch_needed: fetch_needed?,
            max_urls: p.max_urls,
            max_per_host: p.max_per_host,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let queries = self.queries.get::<Vec<String>>(cx.state)?;
        let results = self.results.get::<Vec<Value>>(cx.state)?;
        let pages = self.pages.get::<Vec<Value>>(cx.state)?;
        let fetched: HashSet<String> = pages
            .iter()
            .flat_map(|p| [arg(p, "url"), output(p).and_then(|o| o["url"].as_str())])
            .flatten()
            .map(canonical_url)
            .collect();

        let round: Vec<&Value> = results
            .iter()
            .filter(|r| arg(r, "query").is_some_and(|q| queries.iter().any(|x| x == q)))
            .collect();
        let mut found: BTreeMap<String, Candidate<'_>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        let mut failed = Vec::new();
        for record in &round {
            let Some(out) = output(record) else {
                failed.push(format!(
                    "`{}`: {}",
                    arg(record, "query").unwrap_or(""),
                    error(record).unwrap_or("failed")
                ));
                continue;
            };
            for (rank, item) in out["results"].as_array().into_iter().flatten().enumerate() {
                let Some(url) = item["url"].as_str().filter(|u| !u.is_empty()) else {
                    continue;
                };
                let key = canonical_url(url);
                let gain = 1.0 / (RRF_K + rank as f64 + 1.0);
                match found.get_mut(&key) {
                    Some(c) => c.score += gain,
                    None => {
                        let host = key.split(['/', '?']).next().unwrap_or("").to_owned();
                        order.push(key.clone());
                        found.insert(
                            key,
                            Candidate {
                                url,
                                host,
                                score: gain,
                            },
                        );
                    }
                }
            }
        }
        // Best fused score first; first seen first among equals.
        let position: HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        let mut ranked: Vec<(&String, &Candidate<'_>)> = found.iter().collect();
        ranked.sort_by(|a, b| {
            b.1.score
                .total_cmp(&a.1.score)
                .then(position[a.0.as_str()].cmp(&position[b.0.as_str()]))
        });
        let mut per_host: HashMap<&str, usize> = HashMap::new();
        let mut urls: Vec<String> = Vec::new();
        let mut already = 0;
        for (key, c) in ranked {
            if urls.len() == self.max_urls {
                break;
            }
            if fetched.contains(key) {
                already += 1;
                continue;
            }
            let n = per_host.entry(c.host.as_str()).or_default();
            if *n < self.max_per_host {
                *n += 1;
                urls.push(c.url.to_owned());
            }
        }

        let mut note = format!(
            "{} search{}, {} distinct page{}",
            round.len(),
            if round.len() == 1 { "" } else { "es" },
            found.len(),
            if found.len() == 1 { "" } else { "s" }
        );
        if !failed.is_empty() {
            note.push_str(&format!("; failed: {}", failed.join(", ")));
        }
        if already > 0 {
            note.push_str(&format!("; {already} already read"));
        }
        if urls.is_empty() {
            note.push_str(". Nothing new to read.");
        } else {
            note.push_str(&format!(". Reading {}: {}.", urls.len(), urls.join(", ")));
        }
        cx.events.thinking(note).await;
        Ok(Patch::new()
            .set(self.fetch_needed.name(), !urls.is_empty())
            .set(self.urls.name(), json!(urls)))
    }
}
