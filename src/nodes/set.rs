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
//! anything else is literal. A template written to a field that does not
//! hold strings (an object, a list, a number) renders JSON, which is parsed
//! — an empty rendering is `null` — so a value needing statements (`{% set
//! %}`, loops) can still be computed in the file:
//!
//! ```yaml
//! card: |
//!   {% set r = tool_results | selectattr("output") | list | last %}
//!   {% if r %}{{ {"value": r.output.value, "year": r.output.year} | tojson }}{% endif %}
//! ``` Every expression reads the state as the step
//! began (all values see the same state), and each written value is checked
//! against its field's type when the step is applied. `emit` sends each
//! entry as custom data (`data-<name>` in the UI stream) unless its value is
//! null; its expressions see the values this node sets.

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
    /// (field, value, whether a rendered template is parsed as JSON)
    writes: Vec<(Arc<str>, ValueExpr, bool)>,
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
                        let json = matches!(e, ValueExpr::Template { .. })
                            && cx.schema.is_some_and(|s| !s.spec(f).ty.is_string());
                        writes.push((Arc::<str>::from(name.value.as_str()), e, json));
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
        for (field, value, json) in &self.writes {
            let mut v = value.eval(cx.state, &extra)?;
            if *json && let serde_json::Value::String(text) = &v {
                v = parse_rendered(field, text)?;
            }
            patch.insert(Arc::clone(field), v);
        }
        // `emit` sees the values this node sets (what it just computed),
        // not the step's starting state.
        for (field, value) in patch.iter() {
            extra.push((field, crate::graph::expr::from_json(value)));
        }
        for (name, value) in &self.emits {
            let data = value.eval(cx.state, &extra)?;
            // Nothing to show is not a part: a null value is not sent.
            if !data.is_null() {
                cx.events.custom(name.clone(), data).await;
            }
        }
        Ok(patch)
    }
}

/// A template's JSON rendering (blank → `null`).
///
/// # Errors
/// The rendering is not JSON: the node fails, naming the field.
fn parse_rendered(field: &str, text: &str) -> Result<serde_json::Value, NodeError> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_str(text).map_err(|e| {
        NodeError::Failed(format!(
            "`set.{field}` rendered text that is not JSON ({e}): {}",
            text.chars().take(200).collect::<String>()
        ))
    })
}

impl Node for SetNode {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }
}
