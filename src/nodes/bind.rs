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
//! Two more keys shape how the model uses a tool, for every tool alike:
//! - `omit: [ARG, …]`: arguments the model is not offered and whose
//!   values, if it sends them anyway, are dropped before the call (the
//!   tool's own default applies) — a `limit` that would truncate a
//!   series, say.
//! - `once: true`: the tool runs at most once per node run; a repeated
//!   call (in the same reply or a later one) is not run and its result
//!   tells the model so — one set of choices shown to the user, not two.
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

/// The `tools` setting of an agent: names, or `{name, args, omit, once}`
/// mappings.
pub(super) const SETTING: SettingDoc = SettingDoc::new(
    "tools",
    r#"{"oneOf":[{"type":"string"},{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"args":{"type":"object"},"omit":{"type":"array","items":{"type":"string"}},"once":{"type":"boolean"}},"additionalProperties":false}]}}]}"#,
    "tools and tool partitions it may call; `{name, args}` binds arguments the model cannot see or change, `omit` drops arguments, `once` runs a tool at most once per node run",
);

/// Names a bound value may read besides state fields.
const SCOPE: [&str; 4] = ["state", "user", "config", "tool"];

/// One tool's bound arguments, omitted arguments and call limit.
#[derive(Debug)]
struct Bound {
    tool: String,
    args: Vec<(String, ValueExpr)>,
    /// Arguments never offered and dropped from the model's calls.
    omit: Vec<String>,
    /// Runs at most once per node run.
    once: bool,
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

/// The keys of one `{name, args, omit, once}` entry, as written.
#[derive(Default)]
struct Keys<'a> {
    name: Option<Sp<String>>,
    args: Option<&'a [crate::graph::value::SpEntry]>,
    omit: Vec<Sp<String>>,
    once: bool,
}

/// Reads the keys of one entry.
fn keys<'a>(
    cx: &mut BuildCx<'_>,
    entries: &'a [crate::graph::value::SpEntry],
) -> Result<Keys<'a>, Reported> {
    let mut out = Keys::default();
    for (k, v) in entries {
        match (k.value.as_str(), &v.value) {
            ("name", SpValue::Str(n)) => out.name = Some(Sp::new(n.clone(), v.loc)),
            ("args", SpValue::Map(a)) => out.args = Some(a),
            ("once", SpValue::Bool(b)) => out.once = *b,
            ("omit", SpValue::Seq(items)) if items.iter().all(|i| i.value.as_name().is_some()) => {
                out.omit = items
                    .iter()
                    .filter_map(|i| i.value.as_name().map(|n| Sp::new(n, i.loc)))
                    .collect();
            }
            (key @ ("name" | "args" | "once" | "omit"), other) => {
                let expected = match key {
                    "name" => "a tool name",
                    "args" => "a mapping: argument → value",
                    "once" => "`true` or `false`",
                    _ => "a list of argument names",
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
                    Some(
                        "write `{name: TOOL, args: {ARG: VALUE}, omit: [ARG], once: true}`".into(),
                    ),
                );
                return Err(Reported);
            }
        }
    }
    Ok(out)
}

/// One `{name, args, omit, once}` entry.
fn entry(
    cx: &mut BuildCx<'_>,
    item: &Sp<SpValue>,
    entries: &[crate::graph::value::SpEntry],
) -> Result<(Sp<String>, Option<Bound>), Reported> {
    let keys = keys(cx, entries)?;
    let Some(name) = keys.name else {
        cx.error(
            item.loc,
            "missing-setting",
            "a tool entry needs the tool's `name`",
            None,
        );
        return Err(Reported);
    };
    if keys.args.is_none() && keys.omit.is_empty() && !keys.once {
        return Ok((name, None));
    }
    if cx.tools.partitions().contains_key(&name.value) && cx.tools.tool(&name.value).is_none() {
        cx.error(
            name.loc,
            "invalid-setting",
            format!(
                "`{}` is a partition; arguments are bound, omitted and limited per tool",
                name.value
            ),
            Some("list the tool by name with its settings, and the partition beside it".into()),
        );
        return Err(Reported);
    }
    let mut ok = true;
    for arg in keys
        .args
        .into_iter()
        .flatten()
        .map(|(a, _)| a)
        .chain(&keys.omit)
    {
        ok &= known_argument(cx, &name, arg);
    }
    let omit: Vec<String> = keys.omit.iter().map(|o| o.value.clone()).collect();
    let mut bound = Vec::new();
    for (arg, value) in keys.args.into_iter().flatten() {
        if omit.contains(&arg.value) {
            cx.error(
                arg.loc,
                "invalid-setting",
                format!("`{}` is both bound and omitted", arg.value),
                Some("bind it (`args`) or drop it (`omit`), not both".into()),
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
    let tool = name.value.clone();
    let bound = Bound {
        tool,
        args: bound,
        omit,
        once: keys.once,
    };
    Ok((name, Some(bound)))
}

/// Whether `tool` takes `arg` (when its schema is known at check);
/// reports it with "did you mean" when not.
fn known_argument(cx: &mut BuildCx<'_>, tool: &Sp<String>, arg: &Sp<String>) -> bool {
    let schema = cx.tools.schema_at_check(&tool.value);
    let Some(props) = schema.as_deref().and_then(|s| s["properties"].as_object()) else {
        return true;
    };
    if props.contains_key(&arg.value) {
        return true;
    }
    let hint = crate::graph::diagnostic::did_you_mean(&arg.value, props.keys().map(String::as_str))
        .or_else(|| {
            let takes: Vec<&str> = props.keys().map(String::as_str).collect();
            Some(format!("`{}` takes {}", tool.value, takes.join(", ")))
        });
    let from = cx
        .tools
        .origin_at_check(&tool.value)
        .map(|o| format!(" (from {o})"))
        .unwrap_or_default();
    cx.error(
        arg.loc,
        "unknown-argument",
        format!("`{}`{from} has no argument `{}`", tool.value, arg.value),
        hint,
    );
    false
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
    /// The entries for `tool`.
    fn entries<'a>(&'a self, tool: &'a str) -> impl Iterator<Item = &'a Bound> {
        self.tools.iter().filter(move |b| b.tool == tool)
    }

    /// The arguments bound for `tool`.
    fn of<'a>(&'a self, tool: &'a str) -> impl Iterator<Item = &'a (String, ValueExpr)> {
        self.entries(tool).flat_map(|b| b.args.iter())
    }

    /// Whether `tool` runs at most once per node run (`once: true`).
    pub(super) fn once(&self, tool: &str) -> bool {
        self.entries(tool).any(|b| b.once)
    }

    /// Removes the bound and omitted arguments from a tool's schema
    /// (properties and `required`), so the model is never offered them.
    pub(super) fn strip(&self, def: &mut ToolDef) {
        let hidden: Vec<&str> = self
            .entries(&def.name)
            .flat_map(|b| b.args.iter().map(|(a, _)| a).chain(&b.omit))
            .map(String::as_str)
            .collect();
        if hidden.is_empty() {
            return;
        }
        let mut schema = (*def.parameters).clone();
        if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            for a in &hidden {
                props.remove(*a);
            }
        }
        if let Some(req) = schema.get_mut("required").and_then(Value::as_array_mut) {
            req.retain(|r| !r.as_str().is_some_and(|r| hidden.contains(&r)));
        }
        def.parameters = std::sync::Arc::new(schema);
    }

    /// Drops the omitted arguments of a call of `tool` and sets its bound
    /// ones, replacing whatever the model sent; returns the names it
    /// replaced a model's value of.
    ///
    /// # Errors
    /// A bound value came out empty or failed: the call must not run.
    pub(super) fn apply(
        &self,
        cx: &NodeContext<'_>,
        tool: &str,
        args: &mut Value,
    ) -> Result<Vec<String>, ToolError> {
        if let Some(map) = args.as_object_mut() {
            for arg in self.entries(tool).flat_map(|b| &b.omit) {
                if let Some(sent) = map.remove(arg) {
                    tracing::info!(tool, arg = %arg, value = %sent, "dropped an omitted argument the model sent");
                }
            }
        }
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

/// The result of a repeated call of a `once` tool, which did not run.
pub(super) fn repeated(tool: &str) -> ToolError {
    ToolError::Validation {
        message: format!(
            "`{tool}` runs once per turn and has already been called; this call was not run (the first call's result stands)"
        ),
        details: Value::Null,
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
