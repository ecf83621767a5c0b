//! Arguments filled from the state when the model leaves them out
//! (`fill_args:` on `agent` nodes): "show their invoices" calls
//! `list_invoices` with the active customer's id even if the model forgot
//! to pass it.
//!
//! ```yaml
//! fill_args:
//!   customer_id: "{{ entities | selectattr('kind', 'eq', 'customer') | map(attribute='id') | last }}"
//! ```
//!
//! An argument is filled only for a tool whose input schema has a property
//! of that name, only when the model's arguments lack it (absent, `null` or
//! empty text), and only with a value (an expression coming out `null` or
//! empty fills nothing). Expressions read the state, `args` (the model's
//! arguments) and `tool` (the tool's name). What was filled is logged, and
//! the stream's tool input shows the arguments the tool ran with.

use serde_json::Value;

use super::BuildCx;
use crate::graph::expr::{ValueExpr, from_json};
use crate::graph::value::SpValue;
use crate::graph::{Reported, SettingDoc};
use crate::llm::ToolDef;
use crate::state::DynState;

/// The setting.
pub(super) const SETTING: SettingDoc = SettingDoc::new(
    "fill_args",
    r#"{"type":"object","additionalProperties":{}}"#,
    "argument → value (expression) filled in when the model omits it, for tools that take that argument",
);

/// The compiled `fill_args`.
#[derive(Debug, Default)]
pub(super) struct Fill {
    args: Vec<(String, ValueExpr)>,
}

impl Fill {
    /// Reads `fill_args`.
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Result<Self, Reported> {
        let Some(v) = cx.setting("fill_args") else {
            return Ok(Self::default());
        };
        let SpValue::Map(entries) = &v.value else {
            cx.error(
                v.loc,
                "invalid-setting",
                "`fill_args` is a mapping: argument name → value",
                None,
            );
            return Err(Reported);
        };
        let mut args = Vec::new();
        let mut bad = false;
        for (k, value) in entries {
            match cx.value_expr(value, "`fill_args`", &["args", "tool"]) {
                Ok(e) => args.push((k.value.clone(), e)),
                Err(Reported) => bad = true,
            }
        }
        if bad {
            Err(Reported)
        } else {
            Ok(Self { args })
        }
    }

    /// Fills what the model left out of `args` for a call of `def`;
    /// returns the names filled.
    pub(super) fn apply(
        &self,
        state: &dyn DynState,
        def: Option<&ToolDef>,
        args: &mut Value,
    ) -> Vec<String> {
        let (Some(def), Value::Object(map)) = (def, &mut *args) else {
            return Vec::new();
        };
        let mut filled = Vec::new();
        for (name, expr) in &self.args {
            let takes = def.parameters["properties"].get(name).is_some();
            if !takes || map.get(name).is_some_and(|v| !empty(v)) {
                continue;
            }
            let extra = [
                ("args", from_json(&Value::Object(map.clone()))),
                ("tool", minijinja::Value::from(def.name.as_str())),
            ];
            match expr.eval(state, &extra) {
                Ok(v) if !empty(&v) => {
                    map.insert(name.clone(), v);
                    filled.push(name.clone());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(tool = %def.name, arg = %name, error = %e, "fill_args expression failed")
                }
            }
        }
        filled
    }
}

/// Checks that each `fill_args` argument is one some tool of the node
/// takes (`tools`: its entries), when `check` knows every offered tool's
/// schema (registered or locked): a fill no tool takes never happens.
///
/// # Errors
/// An argument no offered tool takes (reported).
pub(super) fn check_against(cx: &mut BuildCx<'_>, tools: &[String]) -> Result<(), Reported> {
    let Some(v) = cx.setting("fill_args") else {
        return Ok(());
    };
    let SpValue::Map(entries) = &v.value else {
        return Ok(());
    };
    let Some(offered) = tools
        .iter()
        .map(|t| cx.tools.members_at_check(t))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(());
    };
    let mut takes: Vec<String> = Vec::new();
    for name in offered.into_iter().flatten() {
        let Some(schema) = cx.tools.schema_at_check(&name) else {
            return Ok(());
        };
        if let Some(props) = schema["properties"].as_object() {
            takes.extend(props.keys().cloned());
        }
    }
    takes.sort();
    takes.dedup();
    let mut ok = true;
    for (k, _) in entries {
        if takes.contains(&k.value) {
            continue;
        }
        let hint =
            crate::graph::diagnostic::did_you_mean(&k.value, takes.iter().map(String::as_str))
                .or_else(|| Some(format!("the node's tools take {}", takes.join(", "))));
        cx.error(
            k.loc,
            "unknown-argument",
            format!(
                "`fill_args` fills `{}`, which none of the node's tools takes",
                k.value
            ),
            hint,
        );
        ok = false;
    }
    if ok { Ok(()) } else { Err(Reported) }
}

/// `null` or empty text.
fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}
