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
//! entry as custom data (`data-<name>` in the UI stream); its expressions
//! see the values this node sets.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{BuildCx, Kind, Node, NodeContext, NodeError};
use crate::graph::expr::ValueExpr;
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
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
    emits: Vec<(String, ValueExpr)>,
}

/// The map item, for expressions on map targets.
fn item<'a>(cx: &NodeContext<'_>) -> Vec<(&'a str, minijinja::Value)> {
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
                match cx.value_expr(value, &format!("`emit.{}`", name.value), &[]) {
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
        let mut extra = item(&cx);
        let mut patch = Patch::new();
        for (field, value) in &self.writes {
            patch.insert(Arc::clone(field), value.eval(cx.state, &extra)?);
        }
        // `emit` sees the values this node sets (what it just computed),
        // not the step's starting state.
        for (field, value) in patch.iter() {
            extra.push((field, crate::graph::expr::from_json(value)));
        }
        for (name, value) in &self.emits {
            let data = value.eval(cx.state, &extra)?;
            cx.events.custom(name.clone(), data).await;
        }
        Ok(patch)
    }
}

impl Node for SetNode {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }
}
