//! Values remembered from tool results (`extract:` on `agent` and `tool`
//! nodes): entity memory, ids to reuse, anything a later turn needs.
//!
//! ```yaml
//! extract:
//!   - from: [find_customer, get_customer]    # tools whose successful results count
//!     to: entities                           # the field written (its reducer applies)
//!     value:                                 # what to write: values under the value rule
//!       kind: customer
//!       id: "{{ result.id }}"
//!       name: "{{ result.customer_name or result.name }}"
//! ```
//!
//! Expressions read `result` (the tool's result; a text result holding JSON
//! is that JSON), `args` (its arguments) and `tool` (its name). A rule
//! whose value comes out with a `null` (or empty) property wrote nothing
//! for that call: that is logged with the rule and tool, never silent. With
//! `merge_by_id` keyed by `kind`, a field holds the latest value of each
//! kind — the *active* entity a prompt renders to resolve "their invoices",
//! and `chat.carry` keeps it for the next turn. Extracted values are also
//! streamed as `data-<field>` parts.

use std::sync::Arc;

use serde_json::Value;

use super::BuildCx;
use crate::graph::expr::{ValueExpr, from_json};
use crate::graph::loc::Sp;
use crate::graph::value::SpValue;
use crate::graph::{Reported, SettingDoc};
use crate::state::DynState;

/// The setting.
pub(super) const SETTING: SettingDoc = SettingDoc::new(
    "extract",
    r#"{"type":"array","items":{"type":"object","required":["from","to","value"],"properties":{"from":{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}}]},"to":{"type":"string"},"value":{}}}}"#,
    "values to remember from tool results: [{from: [tools], to: field, value: …}]",
);

/// Extracted values as one write per field: the items of a list field in
/// first-seen order, the latest value of any other.
pub(super) fn writes(values: Vec<(Arc<str>, Value, bool)>) -> Vec<(Arc<str>, Value)> {
    let mut out: Vec<(Arc<str>, Value)> = Vec::new();
    for (field, v, list) in values {
        match (out.iter_mut().find(|(f, _)| *f == field), list) {
            (Some((_, Value::Array(items))), true) => items.push(v),
            (Some((_, slot)), _) => *slot = v,
            (None, true) => out.push((field, Value::Array(vec![v]))),
            (None, false) => out.push((field, v)),
        }
    }
    out
}

/// The compiled `extract` rules of a node.
#[derive(Debug, Default)]
pub(super) struct Extract {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    from: Vec<String>,
    to: Arc<str>,
    /// Whether `to` is a list (values are written as items) or a single
    /// value (the latest one wins).
    list: bool,
    value: ValueExpr,
}

impl Extract {
    /// Reads `extract`; `tools` are the tools the node may call (a rule
    /// naming another tool could never match).
    pub(super) fn build(cx: &mut BuildCx<'_>, tools: &[String]) -> Result<Self, Reported> {
        let Some(v) = cx.setting("extract") else {
            return Ok(Self::default());
        };
        let SpValue::Seq(items) = &v.value else {
            cx.error(
                v.loc,
                "invalid-setting",
                "`extract` must be a list of rules `{from, to, value}`",
                None,
            );
            return Err(Reported);
        };
        // Every rule is checked, so one file reports all of their problems.
        let rules: Vec<Result<Rule, Reported>> =
            items.iter().map(|item| rule(cx, item, tools)).collect();
        Ok(Self {
            rules: rules.into_iter().collect::<Result<_, _>>()?,
        })
    }

    /// Whether there are rules.
    pub(super) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The values a successful call of `tool` yields, in rule order:
    /// `(field, value, whether the field is a list)`.
    pub(super) fn apply(
        &self,
        state: &dyn DynState,
        item: Option<&Value>,
        tool: &str,
        args: &Value,
        result: &Value,
    ) -> Vec<(Arc<str>, Value, bool)> {
        let result = match result {
            Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| result.clone()),
            other => other.clone(),
        };
        let mut extra = vec![
            ("result", from_json(&result)),
            ("args", from_json(args)),
            ("tool", minijinja::Value::from(tool)),
        ];
        if let Some(i) = item {
            extra.push(("item", from_json(i)));
        }
        let mut out = Vec::new();
        for rule in self
            .rules
            .iter()
            .filter(|r| r.from.iter().any(|t| t == tool))
        {
            match rule.value.eval(state, &extra) {
                Ok(v) if complete(&v) => out.push((Arc::clone(&rule.to), v, rule.list)),
                Ok(v) => {
                    tracing::info!(tool, field = %rule.to, value = %v, "extract rule matched no value in this result")
                }
                Err(e) => tracing::warn!(tool, field = %rule.to, error = %e, "extract rule failed"),
            }
        }
        out
    }
}

/// Whether an extracted value has every part (no null or empty property).
fn complete(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Object(m) => m.values().all(|p| !p.is_null()),
        _ => true,
    }
}

fn rule(cx: &mut BuildCx<'_>, item: &Sp<SpValue>, tools: &[String]) -> Result<Rule, Reported> {
    let SpValue::Map(entries) = &item.value else {
        cx.error(
            item.loc,
            "invalid-setting",
            "an `extract` rule is a mapping `{from, to, value}`",
            None,
        );
        return Err(Reported);
    };
    let get = |k: &str| {
        entries
            .iter()
            .find(|(key, _)| key.value == k)
            .map(|(_, v)| v)
    };
    for (k, _) in entries {
        if !["from", "to", "value"].contains(&k.value.as_str()) {
            cx.error(
                k.loc,
                "invalid-setting",
                format!(
                    "`{}` is not part of an `extract` rule (from, to, value)",
                    k.value
                ),
                None,
            );
            return Err(Reported);
        }
    }
    let (Some(from), Some(to), Some(value)) = (get("from"), get("to"), get("value")) else {
        cx.error(
            item.loc,
            "invalid-setting",
            "an `extract` rule needs `from`, `to` and `value`",
            None,
        );
        return Err(Reported);
    };
    let from: Vec<Sp<String>> = match &from.value {
        SpValue::Seq(items) => items
            .iter()
            .filter_map(|i| i.value.as_name().map(|n| Sp::new(n, i.loc)))
            .collect(),
        other => other
            .as_name()
            .map(|n| vec![Sp::new(n, from.loc)])
            .unwrap_or_default(),
    };
    if from.is_empty() {
        cx.error(
            item.loc,
            "invalid-setting",
            "`extract.from` names no tool",
            None,
        );
        return Err(Reported);
    }
    for tool in &from {
        if !covered(cx, &tool.value, tools) {
            cx.error(
                tool.loc,
                "extract-never-matches",
                format!(
                    "`extract` reads results of `{}`, but the node cannot call it",
                    tool.value
                ),
                Some("list the tool (or its partition) in the node's `tools`".into()),
            );
            return Err(Reported);
        }
    }
    let Some(to_name) = to.value.as_name() else {
        cx.error(
            to.loc,
            "invalid-setting",
            "`extract.to` must be a field name",
            None,
        );
        return Err(Reported);
    };
    let to_sp = Sp::new(to_name, to.loc);
    let value = cx.value_expr(value, "`extract.value`", &["result", "args", "tool"]);
    let field = cx
        .field(&to_sp, "a field other than chat messages", |f| {
            !f.ty.is_messages()
        })
        .ok_or(Reported)?;
    cx.writes(field);
    let list = cx.schema.is_some_and(|s| s.spec(field).ty.is_list());
    Ok(Rule {
        from: from.into_iter().map(|t| t.value).collect(),
        to: to_sp.value.as_str().into(),
        list,
        value: value?,
    })
}

/// Whether a node whose `tools` are `tools` can call `tool`.
fn covered(cx: &BuildCx<'_>, tool: &str, tools: &[String]) -> bool {
    tools.iter().any(|t| t == tool)
        || cx
            .tools
            .spec(tool)
            .is_some_and(|s| tools.contains(&s.partition))
        || tools
            .iter()
            .any(|t| cx.tools.is_declared(t) || cx.external_tools.contains(t))
}
