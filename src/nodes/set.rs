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
//! null; its expressions see the values this node sets. `emit_id` gives an
//! entry's part an id, so a node that runs again (a loop, another node
//! emitting the same name and id) updates the part in place instead of
//! adding one:
//!
//! ```yaml
//!   emit:
//!     sources: "{{ ranked }}"
//!   emit_id:
//!     sources: sources                        # one part, updated each round
//! ```
//!
//! `on_error: skip` makes the node optional: when an expression cannot be
//! computed (it reads a value of a shape it was not written for, or a
//! template renders text that is not JSON), the node writes and emits
//! nothing, a thinking note says why, and the run goes on. The default,
//! `fail`, fails the run.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::bounds::{Failure, ON_ERROR, OnError, Recovery};
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
            SettingDoc::new(
                "emit_id",
                schema::MAP,
                "name (of an `emit` entry) → the part's id (text or a template): a later part with the same name and id replaces it",
            ),
            ON_ERROR,
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
    /// (name, value, the part's id)
    emits: Vec<(String, ValueExpr, Option<ValueExpr>)>,
    /// `fail` (default) or `skip`: an expression that cannot be computed
    /// (a value of a shape it does not read) writes and emits nothing.
    on_error: OnError,
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
                    Ok(n) => emits.push((name.value.clone(), n, None)),
                    Err(Reported) => ok = false,
                }
            }
        } else if cx.setting("emit").is_some() {
            ok = false;
        }
        match cx.mapping("emit_id") {
            Ok(Some(entries)) => {
                for (name, value) in entries {
                    let id = cx.value_expr(value, &format!("`emit_id.{}`", name.value), &[]);
                    match emits.iter_mut().find(|(n, _, _)| *n == name.value) {
                        Some((_, _, slot)) => match id {
                            Ok(id) => *slot = Some(id),
                            Err(Reported) => ok = false,
                        },
                        None => {
                            let names: Vec<&str> =
                                emits.iter().map(|(n, _, _)| n.as_str()).collect();
                            cx.error(
                                name.loc,
                                "unknown-emit",
                                format!(
                                    "`emit_id.{}` names no entry of `emit` in node `{}`",
                                    name.value,
                                    cx.id()
                                ),
                                Some(if names.is_empty() {
                                    "add the entry to `emit`".to_owned()
                                } else {
                                    format!("`emit` has: {}", names.join(", "))
                                }),
                            );
                            ok = false;
                        }
                    }
                }
            }
            Ok(None) => {}
            Err(Reported) => ok = false,
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
        let on_error = OnError::build(cx, OnError::Fail, false).ok()?;
        ok.then_some(Self {
            writes,
            emits,
            on_error,
        })
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
        for (name, value, id) in &self.emits {
            let data = value.eval(cx.state, &extra)?;
            // Nothing to show is not a part: a null value is not sent.
            if data.is_null() {
                continue;
            }
            let id = match id {
                Some(id) => Some(part_id(name, id.eval(cx.state, &extra)?)?),
                None => None,
            };
            cx.events.custom_with_id(name.clone(), id, data).await;
        }
        Ok(patch)
    }
}

/// The id an `emit_id` entry evaluated to: text, or a number written as
/// text.
///
/// # Errors
/// Anything else (or empty text): the node fails, naming the entry.
fn part_id(name: &str, id: serde_json::Value) -> Result<String, NodeError> {
    match id {
        serde_json::Value::String(s) if !s.is_empty() => Ok(s),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(NodeError::Failed(format!(
            "`emit_id.{name}` is {other}, not a text id"
        ))),
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

    fn recover<'a>(
        &'a self,
        _cx: NodeContext<'a>,
        failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async move { Recovery::decide(self.on_error, &failure, || None) })
    }
}
