//! `set`: computes fields from expressions — counters, filters, dedupe,
//! top N, a packet for the next prompt — and emits data parts.
//!
//! ```yaml
//! - id: next_round
//!   kind: set
//!   set:
//!     iteration: "{{ iteration + 1 }}"
//!     queries: "{{ gaps | unique | list }}"
//!     status: searching                       # a literal
//!   emit:
//!     stage: { phase: searching, round: "{{ iteration + 1 }}" }
//! ```
//!
//! Values follow the graph-file value rule: `"{{ expression }}"` is the
//! expression's value (typed), other strings with `{{ }}` are templates,
//! anything else is literal. Every expression reads the state as the step
//! began (all values see the same state), and each written value is checked
//! against its field's type when the step is applied. `emit` sends each
//! entry as custom data (`data-<name>` in the UI stream) as the node runs.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;

use super::{BuildCx, Kind, Node, NodeContext, NodeError};
use crate::graph::expr::ValueExpr;
use crate::graph::kinds::schema;
use crate::graph::loc::Sp;
use crate::graph::spec::Surface;
use crate::graph::value::SpValue;
use crate::graph::{Reported, SettingDoc};
use crate::state::Patch;

/// The kind.
pub(super) fn kind() -> Kind {
    Kind::new(
        "set",
        "Computes fields from expressions and emits data parts.",
        &[
            SettingDoc::new(
                "set",
                schema::MAP,
                "field → value (`\"{{ expression }}\"`, a template or a literal)",
            ),
            SettingDoc::new(
                "emit",
                schema::MAP,
                "name → value, sent as custom data (`data-<name>` parts)",
            ),
        ],
        Surface::Hidden,
        |cx| SetNode::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// A node computing fields.
#[derive(Debug)]
struct SetNode {
    writes: Vec<(Arc<str>, ValueExpr)>,
    emits: Vec<(String, Nested)>,
}

/// A value that may be a mapping or list of values, each evaluated.
#[derive(Debug)]
enum Nested {
    Value(ValueExpr),
    Map(Vec<(String, Nested)>),
    List(Vec<Nested>),
}

impl Nested {
    fn build(cx: &mut BuildCx<'_>, v: &Sp<SpValue>, what: &str) -> Result<Self, Reported> {
        match &v.value {
            SpValue::Map(entries) => entries
                .iter()
                .map(|(k, val)| Ok((k.value.clone(), Self::build(cx, val, what)?)))
                .collect::<Result<_, _>>()
                .map(Nested::Map),
            SpValue::Seq(items) => items
                .iter()
                .map(|i| Self::build(cx, i, what))
                .collect::<Result<_, _>>()
                .map(Nested::List),
            _ => cx.value_expr(v, what, &[]).map(Nested::Value),
        }
    }

    fn eval(&self, cx: &NodeContext<'_>) -> Result<Value, NodeError> {
        Ok(match self {
            Nested::Value(v) => v.eval(cx.state, &item(cx))?,
            Nested::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), v.eval(cx)?)))
                    .collect::<Result<_, NodeError>>()?,
            ),
            Nested::List(items) => {
                Value::Array(items.iter().map(|i| i.eval(cx)).collect::<Result<_, _>>()?)
            }
        })
    }
}

/// The map item, for expressions on map targets.
fn item(cx: &NodeContext<'_>) -> Vec<(&'static str, minijinja::Value)> {
    cx.item
        .map(|i| vec![("item", crate::graph::expr::from_json(i))])
        .unwrap_or_default()
}

impl SetNode {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let mut ok = true;
        let mut writes = Vec::new();
        if let Ok(Some(entries)) = cx.mapping("set") {
            for (name, value) in entries {
                let field = cx.field(name, "a field", |_| true);
                let expr = cx.value_expr(value, &format!("`set.{}`", name.value), &[]);
                match (field, expr) {
                    (Some(f), Ok(e)) => {
                        cx.writes(f);
                        writes.push((Arc::<str>::from(name.value.as_str()), e));
                    }
                    _ => ok = false,
                }
            }
        } else if cx.setting("set").is_some() {
            ok = false;
        }
        let mut emits = Vec::new();
        if let Ok(Some(entries)) = cx.mapping("emit") {
            for (name, value) in entries {
                match Nested::build(cx, value, &format!("`emit.{}`", name.value)) {
                    Ok(n) => emits.push((name.value.clone(), n)),
                    Err(Reported) => ok = false,
                }
            }
        }
        if writes.is_empty() && emits.is_empty() && ok {
            cx.error(
                cx.kind_loc(),
                "missing-setting",
                format!("node `{}` of kind `set` needs `set` or `emit`", cx.id()),
                None,
            );
            return None;
        }
        ok.then_some(Self { writes, emits })
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        for (name, value) in &self.emits {
            let data = value.eval(&cx)?;
            cx.events.custom(name.clone(), data).await;
        }
        let extra = item(&cx);
        let mut patch = Patch::new();
        for (field, value) in &self.writes {
            patch.insert(Arc::clone(field), value.eval(cx.state, &extra)?);
        }
        Ok(patch)
    }
}

impl Node for SetNode {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }
}
