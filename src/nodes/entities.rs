//! Entity memory for agents: the `entities` setting says which tool results
//! name which kind of entity, and where in the result its id and name are.
//!
//! ```yaml
//! entities:
//!   customer: { from: [find_customer, get_customer], id: /id, name: /name }
//! entity_field: entities        # default
//! ```
//!
//! Every successful result of a `from` tool (cached and recorded ones too)
//! that has an id at the `id` pointer becomes an [`Entity`], written to the
//! entity field. That field's `merge_by_id` reducer keys entities by kind,
//! so it holds the latest entity of each kind — the *active* one, which a
//! prompt renders so the model can resolve "their" — and a graph's `carry:`
//! keeps it for the next chat turn. Pointers are RFC 6901 JSON pointers
//! into the tool's result (a text result holding a JSON object counts as
//! that object); a result without an id names no entity.

use std::sync::Arc;

use serde_json::Value;

use super::BuildCx;
use super::Reported;
use crate::graph::load::valid_id;
use crate::graph::loc::Sp;
use crate::state::{Entity, Reducer};

/// The compiled `entities` setting of one agent.
#[derive(Debug)]
pub(super) struct EntityRules {
    field: Arc<str>,
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    kind: String,
    from: Vec<String>,
    id: String,
    name: Option<String>,
}

impl EntityRules {
    /// Reads and checks the node's `entities` and `entity_field`; `tools`
    /// are the node's checked `tools` entries. `Ok(None)`: no `entities`.
    pub(super) fn build(cx: &mut BuildCx<'_>, tools: &[String]) -> Result<Option<Self>, Reported> {
        let n = cx.node;
        let Some(spec) = &n.entities else {
            if let Some(f) = &n.entity_field {
                cx.error(
                    f.loc,
                    "invalid-setting",
                    "`entity_field` has no effect without `entities`",
                    Some("add `entities: {kind: {from: [tool], id: /id, name: /name}}`".into()),
                );
                return Err(Reported);
            }
            return Ok(None);
        };
        let mut ok = true;
        if spec.rules.is_empty() {
            cx.error(
                spec.loc,
                "invalid-setting",
                "`entities` names no entity kind",
                None,
            );
            ok = false;
        }
        let mut rules: Vec<Rule> = Vec::new();
        for (kind, rule) in &spec.rules {
            if !valid_id(&kind.value) {
                cx.error(
                    kind.loc,
                    "invalid-setting",
                    format!(
                        "entity kind `{}` must be a name (ASCII letters, digits, `_`, `-`)",
                        kind.value.escape_debug()
                    ),
                    None,
                );
                ok = false;
                continue;
            }
            if rules.iter().any(|r| r.kind == kind.value) {
                cx.error(
                    kind.loc,
                    "invalid-setting",
                    format!("entity kind `{}` is defined twice", kind.value),
                    None,
                );
                ok = false;
                continue;
            }
            let r = &rule.value;
            let from = r.from.items();
            if from.is_empty() {
                cx.error(
                    r.from.loc,
                    "invalid-setting",
                    format!("`from` of entity `{}` names no tool", kind.value),
                    None,
                );
                ok = false;
            }
            for tool in &from {
                ok &= source(cx, tool, tools);
            }
            ok &= pointer(cx, &r.id);
            if let Some(name) = &r.name {
                ok &= pointer(cx, name);
            }
            rules.push(Rule {
                kind: kind.value.clone(),
                from: from.into_iter().map(|t| t.value).collect(),
                id: r.id.value.clone(),
                name: r.name.as_ref().map(|p| p.value.clone()),
            });
        }
        let field = cx.output(
            &n.entity_field,
            "entities",
            "a list of entities with the merge_by_id reducer",
            |f| f.ty.is_list() && matches!(f.reducer, Reducer::MergeById { .. }),
        );
        let field = match field {
            Some(id) => holds_entities(cx, id),
            None => None,
        };
        match (ok, field) {
            (true, Some(field)) => Ok(Some(Self { field, rules })),
            _ => Err(Reported),
        }
    }

    /// The field entities are written to.
    pub(super) fn field(&self) -> &Arc<str> {
        &self.field
    }

    /// The entities a successful result of `tool` names, in rule order.
    pub(super) fn extract(&self, tool: &str, output: &Value) -> Vec<Entity> {
        let rules: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| r.from.iter().any(|t| t == tool))
            .collect();
        if rules.is_empty() {
            return Vec::new();
        }
        let parsed;
        let doc = match output {
            // MCP servers often answer JSON as text.
            Value::String(s) if s.trim_start().starts_with('{') => {
                match serde_json::from_str::<Value>(s) {
                    Ok(v) => {
                        parsed = v;
                        &parsed
                    }
                    Err(_) => output,
                }
            }
            other => other,
        };
        rules
            .into_iter()
            .filter_map(|r| {
                let id = scalar(doc.pointer(&r.id)?)?;
                if id.is_empty() {
                    return None;
                }
                let name = r
                    .name
                    .as_deref()
                    .and_then(|p| doc.pointer(p))
                    .and_then(scalar)
                    .unwrap_or_default();
                Some(Entity {
                    kind: r.kind.clone(),
                    id,
                    name,
                    source: tool.to_owned(),
                })
            })
            .collect()
    }
}

/// An id or name: strings as they are, numbers as their JSON text.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Checks a `from` entry: a tool the node may call. A name no registry
/// knows yet is accepted when one of the node's entries may still provide
/// it (an external or empty partition: an MCP server's tools).
fn source(cx: &mut BuildCx<'_>, tool: &Sp<String>, entries: &[String]) -> bool {
    let name = tool.value.as_str();
    let allowed = cx.tools.expand(entries);
    if allowed.iter().any(|t| t == name) {
        return true;
    }
    let node = cx.node.id.value.clone();
    if cx.tools.spec(name).is_some() {
        cx.error(
            tool.loc,
            "unknown-tool",
            format!("entity source `{name}` is not one of node `{node}`'s tools"),
            Some(format!("add `{name}` (or its partition) to `tools`")),
        );
        return false;
    }
    if cx.tools.partitions().contains_key(name) {
        cx.error(
            tool.loc,
            "invalid-setting",
            format!("entity source `{name}` is a partition; `from` names tools"),
            None,
        );
        return false;
    }
    let open = entries.iter().any(|e| {
        cx.external_tools.contains(e) || cx.tools.expand(std::slice::from_ref(e)).is_empty()
    });
    if !open {
        cx.error(
            tool.loc,
            "unknown-tool",
            format!("entity source `{name}` is not one of node `{node}`'s tools"),
            crate::graph::diagnostic::name_hint(name, allowed.iter().map(String::as_str)),
        );
    }
    open
}

/// Checks an RFC 6901 JSON pointer.
fn pointer(cx: &mut BuildCx<'_>, p: &Sp<String>) -> bool {
    let s = p.value.as_str();
    let mut escapes = s.split('~').skip(1);
    let valid = s.starts_with('/') && escapes.all(|rest| rest.starts_with(['0', '1']));
    if !valid {
        cx.error(
            p.loc,
            "invalid-setting",
            format!(
                "`{}` is not a JSON pointer into the tool result",
                s.escape_debug()
            ),
            Some(
                "write e.g. `/id` or `/customer/id` (`~1` for `/` and `~0` for `~` in keys)".into(),
            ),
        );
    }
    valid
}

/// The field's name if its items can be entities: a list of a type other
/// than entities (chat messages) would fail every write at run time.
fn holds_entities(cx: &mut BuildCx<'_>, id: crate::state::FieldId) -> Option<Arc<str>> {
    let schema = cx.schema?;
    let spec = schema.spec(id);
    let name = Arc::clone(&spec.name);
    let sample = Entity {
        kind: "kind".into(),
        id: "id".into(),
        name: "name".into(),
        source: "tool".into(),
    };
    let sample = serde_json::to_value(sample).unwrap_or(Value::Null);
    if spec.ty.items().is_some_and(|t| t.check(&sample).is_ok()) {
        return Some(name);
    }
    let loc = cx
        .node
        .entity_field
        .as_ref()
        .map_or(cx.node.kind.loc, |f| f.loc);
    cx.error(
        loc,
        "field-type",
        format!("field `{name}` cannot hold entities (items with `kind`, `id` and `name`)"),
        Some("use a `Vec<stategraph::state::Entity>` field with the merge_by_id reducer, such as the chat state's `entities`".into()),
    );
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> EntityRules {
        EntityRules {
            field: "entities".into(),
            rules: vec![
                Rule {
                    kind: "customer".into(),
                    from: vec!["find_customer".into(), "get_customer".into()],
                    id: "/id".into(),
                    name: Some("/name".into()),
                },
                Rule {
                    kind: "account_manager".into(),
                    from: vec!["get_customer".into()],
                    id: "/manager/id".into(),
                    name: None,
                },
            ],
        }
    }

    #[test]
    fn entities_come_from_the_listed_tools_at_the_pointers() {
        let r = rules();
        let out = json!({"id": "C-1", "name": "Acme", "manager": {"id": 7}});
        let got = r.extract("get_customer", &out);
        let pairs: Vec<(&str, &str, &str)> = got
            .iter()
            .map(|e| (e.kind.as_str(), e.id.as_str(), e.name.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [("customer", "C-1", "Acme"), ("account_manager", "7", "")]
        );
        assert_eq!(got[0].source, "get_customer");
        assert_eq!(r.extract("find_customer", &out).len(), 1);
        assert!(r.extract("list_invoices", &out).is_empty(), "not a source");
    }

    #[test]
    fn results_without_an_id_name_nothing_and_json_text_counts() {
        let r = rules();
        assert!(
            r.extract("find_customer", &json!({"name": "Acme"}))
                .is_empty()
        );
        assert!(r.extract("find_customer", &json!({"id": null})).is_empty());
        assert!(r.extract("find_customer", &json!({"id": ""})).is_empty());
        assert!(
            r.extract("find_customer", &json!([{"id": "C-1"}]))
                .is_empty()
        );
        assert!(r.extract("find_customer", &json!("no match")).is_empty());
        let text = json!("{\"id\": \"C-9\", \"name\": \"Initech\"}");
        assert_eq!(r.extract("find_customer", &text)[0].id, "C-9");
    }
}
