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

/// `null` or empty text.
fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}
