//! The research pipeline's own steps (graphs/research.yaml), one kind each.
//!
//! The pipeline is plan → search (a `tool` node per sub-query) → select →
//! crawl (a `tool` node per URL) → passages → facts ∥ score → reflect,
//! looping back to search while coverage is low, then synthesize. The
//! searching and fetching are generic `tool` nodes; what is particular to
//! research lives here:
//! - `research_plan`: the model splits the question into sub-queries;
//! - `research_select`: merges the round's result lists, dedupes, ranks
//!   (reciprocal rank fusion) and picks the URLs to read;
//! - `research_passages`: cuts the readable pages into passages, skipping
//!   pages that failed;
//! - `research_facts`: the passages that bear on each sub-query;
//! - `research_score`: ranks the pages read as sources;
//! - `research_reflect`: coverage of the sub-queries; below the threshold
//!   and under the round cap, the model writes new queries for the gaps;
//! - `research_synthesize`: the streamed answer citing sources as `[N]`,
//!   then a `source` event for each source the answer actually cites.
//!
//! Model calls go through [`NodeContext::llm`], so they stream, are
//! recorded for replay and honour `fallback_model`; everything else is
//! deterministic Rust over the state, cheap enough to recompute from all
//! rounds every time (so later rounds never merge with earlier ones).
//! Facts are extracted, not generated: a fact is a passage quoted verbatim,
//! so the answer can only cite what a page says, and no model call is
//! spent per page.
//!
//! These kinds read and write the `research` state's fields by name (see
//! [`crate::state::ResearchState`]); each checks at build time that the
//! graph's state has them. Their knobs are `params`.

mod facts;
mod passages;
mod plan;
mod reflect;
mod score;
mod select;
mod synthesize;
mod text;

use std::borrow::Cow;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::{BuildCx, NodeContext, NodeError};
use crate::graph::loc::Sp;
use crate::state::{DynState, FieldId, Patch, TypeSpec};

/// The field types research steps need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FieldType {
    Text,
    List,
    Bool,
    Integer,
    Number,
}

impl FieldType {
    fn fits(self, t: &TypeSpec) -> bool {
        match self {
            FieldType::Text => t.is_string(),
            FieldType::List => t.is_list(),
            FieldType::Bool => t.finite_values().is_some_and(|v| v == ["true", "false"]),
            FieldType::Integer => matches!(t.kind, crate::state::TypeKind::Integer { .. }),
            FieldType::Number => t.is_number(),
        }
    }
}

/// The research kinds.
pub(super) const KINDS: &[&str] = &[
    "research_facts",
    "research_passages",
    "research_plan",
    "research_reflect",
    "research_score",
    "research_select",
    "research_synthesize",
];

/// A compiled research step.
#[derive(Debug)]
pub enum Research {
    /// `research_plan`.
    Plan(plan::Plan),
    /// `research_select`.
    Select(select::Select),
    /// `research_passages`.
    Passages(passages::Passages),
    /// `research_facts`.
    Facts(facts::Facts),
    /// `research_score`.
    Score(score::Score),
    /// `research_reflect`.
    Reflect(reflect::Reflect),
    /// `research_synthesize`.
    Synthesize(synthesize::Synthesize),
}

impl Research {
    pub(super) fn build(kind: &str, cx: &mut BuildCx<'_>) -> Option<Self> {
        match kind {
            "research_plan" => plan::Plan::build(cx).map(Self::Plan),
            "research_select" => select::Select::build(cx).map(Self::Select),
            "research_passages" => passages::Passages::build(cx).map(Self::Passages),
            "research_facts" => facts::Facts::build(cx).map(Self::Facts),
            "research_score" => score::Score::build(cx).map(Self::Score),
            "research_reflect" => reflect::Reflect::build(cx).map(Self::Reflect),
            "research_synthesize" => synthesize::Synthesize::build(cx).map(Self::Synthesize),
            _ => None,
        }
    }

    /// The kind name.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Plan(_) => "research_plan",
            Self::Select(_) => "research_select",
            Self::Passages(_) => "research_passages",
            Self::Facts(_) => "research_facts",
            Self::Score(_) => "research_score",
            Self::Reflect(_) => "research_reflect",
            Self::Synthesize(_) => "research_synthesize",
        }
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        match self {
            Self::Plan(n) => n.run(cx).await,
            Self::Select(n) => n.run(cx).await,
            Self::Passages(n) => n.run(cx).await,
            Self::Facts(n) => n.run(cx).await,
            Self::Score(n) => n.run(cx).await,
            Self::Reflect(n) => n.run(cx).await,
            Self::Synthesize(n) => n.run(cx).await,
        }
    }
}

/// A state field a research step reads or writes, resolved at build time.
#[derive(Debug, Clone)]
pub(super) struct Field {
    id: FieldId,
    name: Arc<str>,
}

impl Field {
    /// Resolves `name`, which must have type `ty`.
    fn read(cx: &mut BuildCx<'_>, name: &str, ty: FieldType) -> Option<Self> {
        let sp = Sp::new(name.to_owned(), cx.node.kind.loc);
        let expected = format!("a {ty:?} field").to_lowercase();
        let id = cx.field(&sp, &expected, |f| ty.fits(&f.ty))?;
        Some(Self {
            id,
            name: name.into(),
        })
    }

    /// As [`Field::read`], and declares that the node writes it.
    fn write(cx: &mut BuildCx<'_>, name: &str, ty: FieldType) -> Option<Self> {
        let f = Self::read(cx, name, ty)?;
        cx.writes.push(f.id);
        Some(f)
    }

    /// The value, borrowed when the state holds exactly `T` (the research
    /// state does), decoded from JSON otherwise.
    fn get<'a, T>(&self, state: &'a dyn DynState) -> Result<Cow<'a, T>, NodeError>
    where
        T: DeserializeOwned + Clone + 'static,
    {
        serde_json::from_value(state.get(self.id))
            .map(Cow::Owned)
            .map_err(|e| NodeError::Failed(format!("field `{}`: {e}", self.name)))
    }

    /// The name patches write.
    fn name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }
}

/// The node's `params` as `T` (defaults when absent); `check` adds the
/// rules serde cannot express. Problems are `invalid-params` diagnostics.
fn params<T: DeserializeOwned + Default>(
    cx: &mut BuildCx<'_>,
    check: impl Fn(&T) -> Result<(), String>,
) -> Option<T> {
    let node = cx.node;
    let Some(p) = &node.params else {
        return Some(T::default());
    };
    let parsed = serde_json::from_value::<T>(p.value.clone())
        .map_err(|e| e.to_string())
        .and_then(|t| check(&t).map(|()| t));
    match parsed {
        Ok(t) => Some(t),
        Err(message) => {
            let (id, kind) = (&node.id.value, &node.kind.value);
            cx.error(
                p.loc,
                "invalid-params",
                format!("node `{id}` of kind `{kind}`: {message}"),
                None,
            );
            None
        }
    }
}

/// `Err` naming `name` unless `value` is within `range`.
fn within<T: PartialOrd + std::fmt::Display>(
    name: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), String> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is {value}; it must be between {} and {}",
            range.start(),
            range.end()
        ))
    }
}

/// `x` rounded to three decimals, so scores in the state and in events
/// read well and compare exactly on replay.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
