//! Bound tool arguments: arguments of an agent's tools that come from the
//! run, never from the model — the way to scope tools in a multi-user app.
//!
//! ```yaml
//! tools:
//!   - search_flights
//!   - name: cancel_ticket
//!     args: { passenger_id: "{{ user.id }}" }       # or "{{ state.passenger_id }}"
//! ```
//!
//! A bound argument is removed from the schema the model is offered (it
//! cannot see or fill it), and whatever the model sends for it is
//! replaced by the bound value before the call is approved, streamed or
//! run. So a model that is told, or tricked into, another user's id still
//! calls the tool with the signed-in user's. Values follow the value rule
//! (literal, `{{ expression }}`, template) and read `state` (the whole
//! state: `state.passenger_id`; bare field names work too), `user` (`user.id`,
//! the API key's user of the chat request), `config` (the graph file's
//! `config:` values: `config.tenant`) and `tool` (the tool's name). None of
//! them comes from the request's body, so the client cannot set one.
//! `check` types them all: `state.pasenger`, `user.name` or a `config`
//! name the graph does not declare is a diagnostic.
//! A value that comes out empty fails the call (`validation_error`): a
//! bound argument never falls back to the model's.
//!
//! This is the agent's side only, so it works for every tool alike:
//! built-in, MCP, HTTP and Rust.

use serde_json::Value;

use super::{BuildCx, NodeContext};
use crate::graph::expr::{ValueExpr, from_json};
use crate::graph::loc::Sp;
use crate::graph::typecheck::{state_type, value_type};
use crate::graph::value::SpValue;
use crate::graph::{Reported, SettingDoc};
use crate::llm::ToolDef;
use crate::state::{TypeKind, TypeSpec};
use crate::tools::ToolError;

/// The `tools` setting of an agent: names, or `{name, args}` mappings.
pub(super) const SETTING: SettingDoc = SettingDoc::new(
    "tools",
    r#"{"oneOf":[{"type":"string"},{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"args":{"type":"object"}},"additionalProperties":false}]}}]}"#,
    "tools and tool partitions it may call; `{name, args}` binds arguments the model cannot see or change",
);

/// Names a bound value may read besides state fields.
const SCOPE: [&str; 4] = ["state", "user", "config", "tool"];

/// One tool's bound arguments.
#[derive(Debug)]
struct Bound {
    tool: String,
    args: Vec<(String, ValueExpr)>,
}

/// The compiled bindings of a node.
#[derive(Debug, Default)]
pub(super) struct Bindings {
    tools: Vec<Bound>,
    /// The graph's `config:` values (`config.NAME`).
    config: Value,
}

/// Reads `tools`: the names as written (for the usual checks) and the
/// bindings.
///
/// # Errors
/// A malformed entry or value (reported).
pub(super) fn read(cx: &mut BuildCx<'_>) -> Result<(Vec<Sp<String>>, Bindings), Reported> {
    let Some(v) = cx.setting("tools") else {
        return Ok((Vec::new(), Bindings::default()));
    };
    let items: Vec<&Sp<SpValue>> = match &v.value {
        SpValue::Seq(items) => items.iter().collect(),
        _ => vec![v],
    };
    let mut names = Vec::new();
    let mut bindings = Bindings {
        config: cx
            .config
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default())),
        ..Bindings::default()
    };
    let mut ok = true;
    for item in items {
        match &item.value {
            SpValue::Map(entries) => match entry(cx, item, entries) {
                Ok((name, bound)) => {
                    names.push(name);
                    bindings.tools.extend(bound);
                }
                Err(Reported) => ok = false,
            },
            other => match other.as_name() {
                Some(n) => names.push(Sp::new(n, item.loc)),
                None => {
                    cx.error(
                        item.loc,
                        "invalid-setting",
                        format!(
                            "`tools` lists tool names or {{name, args}} mappings, not {}",
                            other.kind()
                        ),
                        None,
                    );
                    ok = false;
                }
            },
        }
    }
    if ok {
        Ok((names, bindings))
    } else {
        Err(Reported)
    }
}

/// One `{name, args}` entry.
fn entry(
    cx: &mut BuildCx<'_>,
    item: &Sp<SpValue>,
    entries: &[crate::graph::value::SpEntry],
) -> Result<(Sp<String>, Option<Bound>), Reported> {
    let mut name = None;
    let mut args = None;
    for (k, v) in entries {
        match (k.value.as_str(), &v.value) {
            ("name", SpValue::Str(n)) => name = Some(Sp::new(n.clone(), v.loc)),
            ("args", SpValue::Map(a)) => args = Some(a),
            (key @ ("name" | "args"), other) => {
                let expected = if key == "name" {
                    "a tool name"
                } else {
                    "a mapping: argument → value"
                };
                cx.error(
                    v.loc,
                    "invalid-setting",
                    format!(
                        "`{key}` of a tool entry is {expected}, not {}",
                        other.kind()
                    ),
                    None,
                );
                return Err(Reported);
            }
            (key, _) => {
                cx.error(
                    k.loc,
                    "invalid-setting",
                    format!("a tool entry has no key `{key}`"),
                    Some("write `{name: TOOL, args: {ARG: VALUE}}`".into()),
                );
                return Err(Reported);
            }
        }
    }
    let Some(name) = name else {
        cx.error(
            item.loc,
            "missing-setting",
            "a tool entry needs the tool's `name`",
            None,
        );
        return Err(Reported);
    };
    let Some(args) = args else {
        return Ok((name, None));
    };
    if cx.tools.partitions().contains_key(&name.value) && cx.tools.tool(&name.value).is_none() {
        cx.error(
            name.loc,
            "invalid-setting",
            format!(
                "`{}` is a partition; arguments are bound per tool",
                name.value
            ),
            Some("list the tool by name with its `args`, and the partition beside it".into()),
        );
        return Err(Reported);
    }
    let bound = bound_args(cx, &name, args)?;
    let tool = name.value.clone();
    Ok((name, Some(Bound { tool, args: bound })))
}

/// A tool entry's `args`: each an argument the tool takes, bound to a
/// value expression; every problem is reported before the error.
fn bound_args(
    cx: &mut BuildCx<'_>,
    name: &Sp<String>,
    args: &[crate::graph::value::SpEntry],
) -> Result<Vec<(String, ValueExpr)>, Reported> {
    let mut bound = Vec::new();
    let mut ok = true;
    let schema = cx.tools.schema_at_check(&name.value);
    let properties = schema.as_deref().and_then(|s| s["properties"].as_object());
    for (arg, value) in args {
        if let Some(props) = properties
            && !props.contains_key(&arg.value)
        {
            let hint = crate::graph::diagnostic::did_you_mean(
                &arg.value,
                props.keys().map(String::as_str),
            )
            .or_else(|| {
                let takes: Vec<&str> = props.keys().map(String::as_str).collect();
                Some(format!("`{}` takes {}", name.value, takes.join(", ")))
            });
            let from = cx
                .tools
                .origin_at_check(&name.value)
                .map(|o| format!(" (from {o})"))
                .unwrap_or_default();
            cx.error(
                arg.loc,
                "unknown-argument",
                format!(
                    "`{}`{from} has no argument `{}` to bind",
                    name.value, arg.value
                ),
                hint,
            );
            ok = false;
            continue;
        }
        match cx.value_expr_typed(value, "a bound argument", &SCOPE, &scope_types(cx)) {
            Ok(e) => bound.push((arg.value.clone(), e)),
            Err(Reported) => ok = false,
        }
    }
    if !ok {
        return Err(Reported);
    }
    Ok(bound)
}

/// The declared types of the names a bound value reads: `state` (the
/// state's fields: `state.pasenger` is a diagnostic with "did you mean"),
/// `user` (`{id}`) and `config` (the graph's `config:` names).
fn scope_types(cx: &BuildCx<'_>) -> Vec<(&'static str, TypeSpec)> {
    let config = cx
        .config
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let mut out = vec![
        (
            "user",
            TypeSpec::of(TypeKind::Object {
                properties: vec![("id".into(), TypeSpec::string())],
                required: vec!["id".into()],
                additional: false,
            }),
        ),
        ("config", value_type(&config)),
    ];
    if let Some(schema) = cx.schema {
        out.push(("state", state_type(schema)));
    }
    out
}

impl Bindings {
    /// The arguments bound for `tool`.
    fn of(&self, tool: &str) -> impl Iterator<Item = &(String, ValueExpr)> {
        self.tools
            .iter()
            .filter(move |b| b.tool == tool)
            .flat_map(|b| b.args.iter())
    }

    /// Removes the bound arguments from a tool's schema (properties and
    /// `required`), so the model is never offered them.
    pub(super) fn strip(&self, def: &mut ToolDef) {
        let bound: Vec<&str> = self.of(&def.name).map(|(a, _)| a.as_str()).collect();
        if bound.is_empty() {
            return;
        }
        let mut schema = (*def.parameters).clone();
        if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            for a in &bound {
                props.remove(*a);
            }
        }
        if let Some(req) = schema.get_mut("required").and_then(Value::as_array_mut) {
            req.retain(|r| !r.as_str().is_some_and(|r| bound.contains(&r)));
        }
        def.parameters = std::sync::Arc::new(schema);
    }

    /// Sets the bound arguments of a call of `tool`, replacing whatever
    /// the model sent; returns the names it replaced a model's value of.
    ///
    /// # Errors
    /// A bound value came out empty or failed: the call must not run.
    pub(super) fn apply(
        &self,
        cx: &NodeContext<'_>,
        tool: &str,
        args: &mut Value,
    ) -> Result<Vec<String>, ToolError> {
        let mut bound = self.of(tool).peekable();
        if bound.peek().is_none() {
            return Ok(Vec::new());
        }
        if !args.is_object() {
            *args = Value::Object(serde_json::Map::new());
        }
        let user = match &cx.services.user {
            Some(id) => from_json(&serde_json::json!({ "id": &**id })),
            None => minijinja::Value::UNDEFINED,
        };
        let extra = [
            ("state", from_json(&cx.state.to_json())),
            ("user", user),
            ("config", from_json(&self.config)),
            ("tool", minijinja::Value::from(tool)),
        ];
        let mut overridden = Vec::new();
        for (name, expr) in bound {
            let value = match expr.eval(cx.state, &extra) {
                Ok(v) if !matches!(&v, Value::Null) && v != Value::String(String::new()) => v,
                Ok(_) => return Err(unbound(tool, name, "it came out empty")),
                Err(e) => return Err(unbound(tool, name, &e.to_string())),
            };
            if let Some(map) = args.as_object_mut()
                && map
                    .insert(name.clone(), value.clone())
                    .is_some_and(|sent| sent != value)
            {
                overridden.push(name.clone());
            }
        }
        Ok(overridden)
    }
}

/// The failure of a call whose bound argument has no value.
fn unbound(tool: &str, arg: &str, why: &str) -> ToolError {
    ToolError::Validation {
        message: format!(
            "argument `{arg}` of `{tool}` is bound by the graph and has no value ({why}); the call did not run"
        ),
        details: Value::Null,
    }
}
