//! Values remembered from tool results (`extract:` on `agent` and `tool`
//! nodes): entity memory, ids to reuse, anything a later turn needs.
//!
//! ```yaml
//! extract:
//!   - from: [find_customer, search_customers]  # tools whose successful results count
//!     to: entities                             # the field written (its reducer applies)
//!     at: [/result, ""]                        # where the record is: the first pointer present
//!     value:                                   # what to write: values under the value rule
//!       kind: customer
//!       id: "{{ record.id }}"
//!       name: "{{ record.customer_name or record.name }}"
//! ```
//!
//! Expressions read `result` (the tool's result; a text result holding JSON
//! is that JSON), `record` (what `at` found in it, or the result itself),
//! `args` (its arguments) and `tool` (its name). `at` takes JSON pointers
//! (RFC 6901), tried in order; the first that resolves to something other
//! than `null` (or an empty list) is the record, and a list there stands
//! for its last item — the latest one. A rule finding none wrote nothing for
//! that call. Pointers are checked at load: one that can never match (a
//! token `-1` or `-`, a missing leading `/`, a bad `~` escape) is an error
//! at its place, and so is a pointer written as a `value` (a literal there,
//! not a lookup). A rule
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
    r#"{"type":"array","items":{"type":"object","required":["from","to","value"],"properties":{"from":{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}}]},"to":{"type":"string"},"at":{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}}]},"value":{}}}}"#,
    "values to remember from tool results: [{from: [tools], to: field, at: [pointers], value: …}]",
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
    /// JSON pointers to the record, tried in order (empty: the result).
    at: Vec<String>,
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
        let mut out = Vec::new();
        for rule in self
            .rules
            .iter()
            .filter(|r| r.from.iter().any(|t| t == tool))
        {
            let Some(record) = record(&result, &rule.at) else {
                tracing::info!(tool, field = %rule.to, at = ?rule.at, "extract rule found no record in this result");
                continue;
            };
            let mut extra = vec![
                ("result", from_json(&result)),
                ("record", from_json(record)),
                ("args", from_json(args)),
                ("tool", minijinja::Value::from(tool)),
            ];
            if let Some(i) = item {
                extra.push(("item", from_json(i)));
            }
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

/// The record of `result`: the first pointer of `at` that resolves to a
/// value (not `null`, not an empty list), a list standing for its last
/// item; the result itself when `at` is empty.
fn record<'v>(result: &'v Value, at: &[String]) -> Option<&'v Value> {
    if at.is_empty() {
        return Some(result);
    }
    at.iter().find_map(|p| match result.pointer(p)? {
        Value::Null => None,
        Value::Array(items) => items.last(),
        v => Some(v),
    })
}

/// Why a JSON pointer can never match a tool result, if it cannot: the
/// syntax of RFC 6901, and index tokens that count from the end (`-1`) or
/// name the element past it (`-`), which reading never finds.
fn pointer_problem(p: &str) -> Option<String> {
    if p.is_empty() {
        return None;
    }
    if !p.starts_with('/') {
        return Some(format!(
            "`{p}` is not a JSON pointer: it must start with `/` (or be \"\" for the whole result)"
        ));
    }
    for token in p[1..].split('/') {
        let mut chars = token.chars();
        while let Some(c) = chars.next() {
            if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                return Some(format!(
                    "`{p}`: `~` must be followed by 0 (for `~`) or 1 (for `/`)"
                ));
            }
        }
        let from_end = token == "-"
            || token
                .strip_prefix('-')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if from_end {
            return Some(format!(
                "`{p}` never matches: JSON pointers do not count from the end of a list (`{token}`)"
            ));
        }
    }
    None
}

/// A string that reads like a JSON pointer, written where a value goes.
fn looks_like_pointer(s: &str) -> bool {
    s.len() > 1 && s.starts_with('/') && !s.contains("{{") && !s.chars().any(char::is_whitespace)
}

/// Reports every `value` leaf written as a pointer: it would be stored as
/// that text, never looked up.
fn literal_pointers(cx: &mut BuildCx<'_>, v: &Sp<SpValue>) -> bool {
    match &v.value {
        SpValue::Str(s) if looks_like_pointer(s) => {
            cx.error(
                v.loc,
                "extract-never-matches",
                format!("`{s}` in `extract.value` is literal text, not a lookup: every call would store it as it is"),
                Some("choose the record with `at:` (JSON pointers) and read it with an expression: `\"{{ record.id }}\"`".into()),
            );
            true
        }
        // Not `any`: every leaf is reported, not only the first.
        SpValue::Seq(items) => {
            let mut bad = false;
            for i in items {
                bad |= literal_pointers(cx, i);
            }
            bad
        }
        SpValue::Map(entries) => {
            let mut bad = false;
            for (_, i) in entries {
                bad |= literal_pointers(cx, i);
            }
            bad
        }
        _ => false,
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

/// One `extract` rule `{from, to, at, value}`, checked against the node's
/// tools and the state.
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
        if !["from", "to", "at", "value"].contains(&k.value.as_str()) {
            cx.error(
                k.loc,
                "invalid-setting",
                format!(
                    "`{}` is not part of an `extract` rule (from, to, at, value)",
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
    let from = from_tools(cx, item, from, tools)?;
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
    // Both checks report, so one pass names every problem of the rule.
    let at = pointers(cx, get("at"));
    if literal_pointers(cx, value) {
        return Err(Reported);
    }
    let at = at?;
    let value = cx.value_expr(
        value,
        "`extract.value`",
        &["result", "record", "args", "tool"],
    );
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
        at,
        value: value?,
    })
}

/// `extract.from`: a tool name or a list of them, each one the node can
/// call.
fn from_tools(
    cx: &mut BuildCx<'_>,
    item: &Sp<SpValue>,
    from: &Sp<SpValue>,
    tools: &[String],
) -> Result<Vec<Sp<String>>, Reported> {
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
    Ok(from)
}

/// Reads `at`: a pointer or a list of them, each checked.
fn pointers(cx: &mut BuildCx<'_>, at: Option<&Sp<SpValue>>) -> Result<Vec<String>, Reported> {
    let Some(at) = at else {
        return Ok(Vec::new());
    };
    let items: Vec<&Sp<SpValue>> = match &at.value {
        SpValue::Seq(items) => items.iter().collect(),
        _ => vec![at],
    };
    let mut out = Vec::new();
    let mut bad = false;
    for item in items {
        let SpValue::Str(p) = &item.value else {
            cx.error(
                item.loc,
                "invalid-setting",
                "`extract.at` takes JSON pointers (strings such as `/result`)",
                None,
            );
            bad = true;
            continue;
        };
        if let Some(why) = pointer_problem(p) {
            let hint = why.contains("from the end").then(|| {
                "point at the list itself (`/result`): a list found there gives its last item, the latest".to_owned()
            });
            cx.error(item.loc, "extract-never-matches", why, hint);
            bad = true;
            continue;
        }
        out.push(p.clone());
    }
    if bad { Err(Reported) } else { Ok(out) }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_record_is_the_first_pointer_present_and_a_list_gives_its_latest_item() {
        let at = vec!["/result".to_owned(), String::new()];
        let one = json!({"result": {"id": 1, "customer_name": "A"}});
        assert_eq!(
            record(&one, &at),
            Some(&json!({"id": 1, "customer_name": "A"}))
        );
        let many = json!({"result": [{"id": 1}, {"id": 2}]});
        assert_eq!(record(&many, &at), Some(&json!({"id": 2})));
        let flat = json!({"id": 3, "name": "C"});
        assert_eq!(record(&flat, &at), Some(&flat));
        let none = json!({"result": []});
        assert_eq!(record(&none, &["/result".to_owned()]), None);
        assert_eq!(record(&flat, &[]), Some(&flat));
    }

    #[test]
    fn pointers_that_can_never_match_are_named() {
        for ok in ["", "/result", "/result/0/id", "/a~1b/c~0d", "/-x"] {
            assert_eq!(pointer_problem(ok), None, "{ok}");
        }
        for bad in ["/result/-1/id", "/result/-", "result/id", "/a~2"] {
            assert!(pointer_problem(bad).is_some(), "{bad}");
        }
        assert!(looks_like_pointer("/result/-1/id"));
        assert!(!looks_like_pointer("{{ record.id }}") && !looks_like_pointer("/"));
    }
}
