//! The research pipeline's state (`state: research`, graphs/research.yaml).
//!
//! Search results and fetched pages are kept as the records the `tool`
//! node writes (`{tool, args, output}` or `{tool, args, error}`), one per
//! map task, appended: they are the raw material of every round, and a
//! failure stays visible next to what succeeded. Everything derived from
//! them (passages, facts, sources) is recomputed from all rounds by the
//! research nodes and replaced (`last`), so a second round never has to
//! merge with the first.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Message;

crate::state! {
    /// State of the research pipeline (graphs/research.yaml).
    pub struct ResearchState as "research" {
        /// The conversation so far, including the newest user message.
        messages: Vec<Message> => merge_by_id,
        /// The question being researched.
        query: String => last,
        /// The aspects of the question the plan decomposed it into; coverage
        /// is measured against these.
        sub_queries: Vec<String> => last,
        /// The searches of the current round (the map fan-out list): the
        /// sub-queries first, then the queries written for the gaps.
        queries: Vec<String> => last,
        /// One `web_search` record per search task, every round.
        results: Vec<Value> => append,
        /// The URLs the current round fetches (the crawl's map list).
        urls: Vec<String> => last,
        /// Whether the current round has new URLs to fetch.
        fetch_needed: bool => last,
        /// One `http_fetch` record per fetched URL, every round.
        pages: Vec<Value> => append,
        /// The readable pages cut into passages.
        passages: Vec<Passage> => last,
        /// Passages that bear on a sub-query.
        facts: Vec<Fact> => last,
        /// The pages read, ranked.
        sources: Vec<Source> => last,
        /// Share of the sub-queries with at least one fact (0 to 1).
        coverage: f64 => last,
        /// Sub-queries no fact covers yet.
        gaps: Vec<String> => last,
        /// Search rounds completed.
        iteration: u32 => last,
        /// Whether research is over (coverage reached, the round cap hit, or
        /// nothing more to search).
        done: bool => last,
        /// The answer shown to the user, citing sources as `[N]`.
        answer: String => last,
        /// The sources the answer cites, by their number.
        citations: Vec<Citation> => last,
        /// Related questions to ask next.
        related: Vec<String> => last,
    }
}

/// A piece of a fetched page, small enough to quote.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Passage {
    /// The page's URL (as fetched, after redirects).
    pub url: String,
    /// The page's title.
    pub title: String,
    /// Position within the page, from 0.
    pub index: u32,
    /// The text.
    pub text: String,
}

/// A passage that bears on one sub-query.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Fact {
    /// The sub-query it bears on.
    pub aspect: String,
    /// The passage text, verbatim.
    pub text: String,
    /// The page it is from.
    pub url: String,
    /// That page's title.
    pub title: String,
    /// Share of the sub-query's terms the passage contains (0 to 1).
    pub score: f64,
}

/// A page that was read, with how much it is worth.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Source {
    /// The page's URL.
    pub url: String,
    /// Its title.
    pub title: String,
    /// The combined score (0 to 1) sources are ranked by.
    pub score: f64,
    /// Share of the question's terms its best passage contains.
    pub relevance: f64,
    /// Its best position in a result list, from 1 (0: not from a search).
    pub rank: u32,
    /// How many searches returned it.
    pub hits: u32,
}

/// A source the answer cites.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Citation {
    /// The number the answer cites it by.
    pub id: u32,
    /// Its URL.
    pub url: String,
    /// Its title.
    pub title: String,
}

impl super::FieldValue for Passage {
    fn type_spec() -> super::TypeSpec {
        super::TypeSpec::object()
    }
}

impl super::FieldValue for Fact {
    fn type_spec() -> super::TypeSpec {
        super::TypeSpec::object()
    }
}

impl super::FieldValue for Source {
    fn type_spec() -> super::TypeSpec {
        super::TypeSpec::object()
    }
}

impl super::FieldValue for Citation {
    fn type_spec() -> super::TypeSpec {
        super::TypeSpec::object()
    }
}
