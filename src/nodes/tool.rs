//! `tool`: one tool call with arguments taken from the state, no model.
//!
//! The deterministic counterpart of `agent`: the graph file says which tool
//! to call and with what, so a map fan-out can run one search or one fetch
//! per item (graphs/research.yaml). `args` is a map whose string values may
//! be minijinja templates over the state fields and, on map targets, `item`
//! (`{query: "{{ item }}", max_results: 5}`); other values are passed as
//! they are. The call goes through the registry like an agent's: only the
//! tools in `tools` (default: the tool itself), arguments checked against
//! the schema, the tool's time limit and cache, and it is recorded for
//! replay.
//!
//! The `output` field receives a record, `{tool, args, output}` or, for a
//! failure, `{tool, args, error: {error: true, type, message, details}}`,
//! so with an `append` field every map task's outcome sits next to the
//! others, failures included.
//!
//! `on_error: fail` (the default) fails the node; timeouts and execution
//! errors are transient, so `retry` repeats the call. `on_error: continue`
//! also retries transient failures while `retry` has attempts left, then
//! writes the failure record and lets the run go on: a page that cannot be
//! fetched is skipped, not fatal. The node reads its attempt budget from its
//! own `retry` setting, because only it knows that the last failure is to
//! become data rather than an error.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::{BuildCx, NodeContext, NodeError};
use crate::events::EventKind;
use crate::graph::diagnostic::name_hint;
use crate::graph::prompts::{BUILTIN_GLOBALS, environment};
use crate::state::{FieldId, Patch};
use crate::tools::{ToolError, failure_payload};

/// Settings this kind accepts.
const SETTINGS: &[&str] = &["tool", "tools", "args", "output", "on_error"];

/// One argument: a template to render or a value to pass.
#[derive(Debug)]
enum Arg {
    Template(String),
    Value(Value),
}

/// A node that calls one tool.
pub struct ToolNode {
    tool: String,
    /// The `tools` entries (tools and partitions, expanded per call).
    entries: Vec<String>,
    args: Vec<(String, Arg)>,
    /// The argument templates, by `args.NAME`.
    templates: minijinja::Environment<'static>,
    /// State fields the templates read.
    vars: Vec<(Arc<str>, FieldId)>,
    uses_item: bool,
    output: Arc<str>,
    keep_going: bool,
    attempts: u32,
}

impl fmt::Debug for ToolNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolNode")
            .field("tool", &self.tool)
            .field("args", &self.args)
            .field("output", &self.output)
            .field("keep_going", &self.keep_going)
            .finish_non_exhaustive()
    }
}

impl ToolNode {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let n = cx.node;
        cx.accept(SETTINGS);
        let tool = cx.require(&n.tool, "tool").cloned();
        let listed = cx.tools();
        let output = cx.require(&n.output, "output").cloned();
        let output = output.and_then(|o| {
            cx.output(&Some(o.clone()), "", "a list or JSON field", |f| {
                f.ty.is_list() || f.ty.holds_objects()
            })
            .map(|_| Arc::<str>::from(o.value.as_str()))
        });
        let keep_going = match &n.on_error {
            None => Some(false),
            Some(v) if v.value == "fail" => Some(false),
            Some(v) if v.value == "continue" => Some(true),
            Some(v) => {
                cx.error(
                    v.loc,
                    "invalid-setting",
                    format!("`on_error` is `{}`; write `fail` or `continue`", v.value),
                    None,
                );
                None
            }
        };
        let args = Args::build(cx);
        let tool = tool?;
        let mut entries = listed.ok()?;
        if entries.is_empty() {
            entries.push(tool.value.clone());
        }
        if !covers(cx, &tool.value, &entries) {
            return None;
        }
        let args = args?;
        Some(Self {
            tool: tool.value.clone(),
            entries,
            args: args.args,
            templates: args.env,
            vars: args.vars,
            uses_item: args.uses_item,
            output: output?,
            keep_going: keep_going?,
            attempts: n
                .retry
                .as_ref()
                .map_or(1, |r| r.value.attempts.clamp(1, 20)),
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let args = self.render(&cx)?;
        // Unique in the run (the UI keys tool parts by it) and the same when
        // the run is re-executed (recorded results are keyed by it).
        let call_id = format!(
            "{}:{}:{}:{}",
            cx.events.node(),
            cx.events.step(),
            cx.events.task(),
            cx.attempt
        );
        cx.events
            .emit(EventKind::ToolCallReady {
                call_id: call_id.clone(),
                tool: self.tool.clone(),
                args: args.clone(),
            })
            .await;
        let started = Instant::now();
        let tools = &cx.services.tools;
        let mut allowed = tools.expand(&self.entries);
        if !allowed.contains(&self.tool) && tools.spec(&self.tool).is_none() {
            // Allowed by the graph file (a partition configured later, or
            // not at all): let the registry answer `not_found`.
            allowed.push(self.tool.clone());
        }
        match cx.tool(&call_id, &self.tool, args.clone(), &allowed).await {
            Ok(outcome) => {
                cx.events
                    .emit(EventKind::ToolResult {
                        call_id,
                        tool: self.tool.clone(),
                        output: outcome.output.clone(),
                        cached: outcome.cached,
                        display: outcome.display,
                        duration_us: started.elapsed().as_micros() as u64,
                    })
                    .await;
                let record = json!({ "tool": self.tool, "args": args, "output": outcome.output });
                Ok(Patch::new().set(Arc::clone(&self.output), record))
            }
            Err(error) => {
                let failure = error.to_failure();
                cx.events
                    .emit(EventKind::ToolError {
                        call_id,
                        tool: self.tool.clone(),
                        error: failure.clone(),
                    })
                    .await;
                let last_attempt = !is_transient(&error) || cx.attempt >= self.attempts;
                if self.keep_going && last_attempt {
                    let record = json!({ "tool": self.tool, "args": args, "error": failure_payload(&failure) });
                    Ok(Patch::new().set(Arc::clone(&self.output), record))
                } else {
                    Err(NodeError::Tool {
                        tool: self.tool.clone(),
                        error: Box::new(error),
                    })
                }
            }
        }
    }

    /// The arguments, templates rendered.
    fn render(&self, cx: &NodeContext<'_>) -> Result<Value, NodeError> {
        let mut ctx: BTreeMap<&str, minijinja::Value> = self
            .vars
            .iter()
            .map(|(n, f)| (&**n, cx.state.template_value(*f)))
            .collect();
        if self.uses_item {
            ctx.insert(
                "item",
                cx.item
                    .map(|v| minijinja::Value::from(minijinja::value::Serde(v)))
                    .unwrap_or_default(),
            );
        }
        let ctx = minijinja::Value::from(ctx);
        let mut out = serde_json::Map::new();
        for (name, arg) in &self.args {
            let value = match arg {
                Arg::Value(v) => v.clone(),
                Arg::Template(t) => Value::String(
                    self.templates
                        .get_template(t)
                        .and_then(|t| t.render(&ctx))
                        .map_err(|e| NodeError::Prompt {
                            prompt: t.clone(),
                            message: e.to_string(),
                        })?,
                ),
            };
            out.insert(name.clone(), value);
        }
        Ok(Value::Object(out))
    }
}

/// Whether calling again may succeed: timeouts and the tool's own failures
/// (a busy or unreachable service), not arguments or names that are wrong.
pub(crate) fn is_transient(e: &ToolError) -> bool {
    match e {
        ToolError::Timeout(_) | ToolError::Execution(_) => true,
        ToolError::Recorded(f) => matches!(f.kind.as_str(), "timeout" | "execution_error"),
        ToolError::Validation { .. }
        | ToolError::NotFound { .. }
        | ToolError::NotAllowed { .. } => false,
    }
}

/// Whether the node's `tools` entries let it call `tool`: the tool itself,
/// its partition, or — for a tool no registry provides yet — a declared
/// partition (whose tools come from configuration, such as `web` without
/// `[tools.search]`) or an `external_tools` entry. Reports the problem
/// otherwise.
fn covers(cx: &mut BuildCx<'_>, tool: &str, entries: &[String]) -> bool {
    let loc = cx.node.tool.as_ref().map_or(cx.node.kind.loc, |t| t.loc);
    if cx.external_tools.iter().any(|e| e == tool) {
        return true;
    }
    match cx.tools.spec(tool) {
        Some(spec) => {
            if entries.iter().any(|e| e == tool || *e == spec.partition) {
                return true;
            }
            cx.error(
                loc,
                "invalid-setting",
                format!("`tool: {tool}` is not among the tools the node lists in `tools`"),
                Some(format!(
                    "add `{tool}` or its partition `{}` to `tools`",
                    spec.partition
                )),
            );
            false
        }
        None => {
            if entries
                .iter()
                .any(|e| cx.tools.is_declared(e) || cx.external_tools.contains(e))
            {
                return true;
            }
            let names = cx.tools.names();
            let hint = name_hint(tool, names.iter().map(String::as_str)).or_else(|| {
                Some(
                    "if a partition provides it once configured, list the partition: `tools: [web]`"
                        .into(),
                )
            });
            cx.error(
                loc,
                "unknown-tool",
                format!("no tool registry provides `{tool}`"),
                hint,
            );
            false
        }
    }
}

/// `args`, checked: templates parse and read only state fields (and `item`
/// on map targets).
struct Args {
    args: Vec<(String, Arg)>,
    env: minijinja::Environment<'static>,
    vars: Vec<(Arc<str>, FieldId)>,
    uses_item: bool,
}

impl Args {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let mut out = Self {
            args: Vec::new(),
            env: environment(),
            vars: Vec::new(),
            uses_item: false,
        };
        let node = cx.node;
        let Some(map) = &node.args else {
            return Some(out);
        };
        let mut ok = true;
        for (name, value) in &map.value {
            let source = match value {
                Value::String(s) if s.contains("{{") || s.contains("{%") => s,
                other => {
                    out.args.push((name.clone(), Arg::Value(other.clone())));
                    continue;
                }
            };
            let key = format!("args.{name}");
            if let Err(e) = out.env.add_template_owned(key.clone(), source.clone()) {
                let detail = e.detail().map_or_else(|| e.to_string(), str::to_owned);
                cx.error(
                    map.loc,
                    "invalid-setting",
                    format!("`{key}` is not a valid template: {detail}"),
                    None,
                );
                ok = false;
                continue;
            }
            let vars = out
                .env
                .get_template(&key)
                .map(|t| t.undeclared_variables(false))
                .unwrap_or_default();
            for var in vars {
                if BUILTIN_GLOBALS.contains(&var.as_str()) {
                    continue;
                }
                if var == "item" {
                    if !cx.is_map_target {
                        cx.error(
                            map.loc,
                            "invalid-setting",
                            format!(
                                "`{key}` uses `item`, but node `{}` is not the target of a map edge",
                                node.id.value
                            ),
                            None,
                        );
                        ok = false;
                    }
                    out.uses_item = true;
                    continue;
                }
                let Some(schema) = cx.schema else { continue };
                match schema.field(&var) {
                    Some(id) => {
                        if !out.vars.iter().any(|(v, _)| **v == *var) {
                            out.vars.push((var.as_str().into(), id));
                        }
                    }
                    None => {
                        cx.error(
                            map.loc,
                            "invalid-setting",
                            format!(
                                "`{key}` uses `{var}`, but state `{}` has no such field",
                                schema.name
                            ),
                            name_hint(&var, schema.names().chain(["item"])),
                        );
                        ok = false;
                    }
                }
            }
            out.args.push((name.clone(), Arg::Template(key)));
        }
        ok.then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::ToolFailure;
    use std::time::Duration;

    #[test]
    fn only_timeouts_and_execution_errors_are_worth_retrying() {
        assert!(is_transient(&ToolError::Timeout(Duration::from_secs(1))));
        assert!(is_transient(&ToolError::Execution("HTTP 503".into())));
        assert!(!is_transient(&ToolError::NotFound {
            message: "no tool".into(),
            details: Value::Null,
        }));
        assert!(!is_transient(&ToolError::Validation {
            message: "bad".into(),
            details: Value::Null,
        }));
        let recorded = |kind: &str| {
            ToolError::Recorded(ToolFailure {
                kind: kind.into(),
                message: String::new(),
                details: Value::Null,
            })
        };
        assert!(is_transient(&recorded("timeout")));
        assert!(!is_transient(&recorded("not_found")));
    }
}
