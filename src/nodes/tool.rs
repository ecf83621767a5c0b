//! `tool`: one tool call with arguments taken from the state, no model.
//!
//! The deterministic counterpart of `agent`: the graph file says which tool
//! to call and with what, so a map fan-out can run one search or one fetch
//! per item (graphs/research.yaml), and a graph can run logic in any
//! language behind an MCP server. `args` values follow the value rule:
//! `"{{ expression }}"` is the expression's value (typed: `"{{ item }}"` is
//! the map item itself), other strings with `{{ }}` are templates, anything
//! else is passed as it is. The call goes through the registry like an agent's: only the
//! tools in `tools` (default: the tool itself), arguments checked against
//! the schema, the tool's time limit and cache, and it is recorded for
//! replay.
//!
//! The `output` field receives a record, `{tool, args, output}` or, for a
//! failure, `{tool, args, error: {error: true, type, message, details}}`,
//! so with an `append` field every map task's outcome sits next to the
//! others, failures included. `outputs` maps the result into fields
//! instead (or as well): `{total: "{{ result.total }}"}`, expressions over
//! `result` and `args`; `extract` works as on agents.
//!
//! `on_error: fail` (the default) fails the node; timeouts and execution
//! errors are transient, so `retry` repeats the call. `on_error: continue`
//! also retries transient failures while `retry` has attempts left, then
//! writes the failure record and lets the run go on: a page that cannot be
//! fetched is skipped, not fatal. The node reads its attempt budget from its
//! own `retry` setting, because only it knows that the last failure is to
//! become data rather than an error.

use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::extract::{self, Extract};
use super::{BuildCx, Kind, Node, NodeContext, NodeError};
use crate::events::{EventKind, ToolFault, ToolReady, ToolReturn};
use crate::graph::diagnostic::name_hint;
use crate::graph::expr::{ValueExpr, from_json};
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::graph::{Reported, SettingDoc};
use crate::state::{Patch, TypeSpec};
use crate::tools::{ToolError, failure_payload};

/// The kind.
pub(super) fn kind() -> Kind {
    Kind::new(
        "tool",
        "One tool call with arguments from the state; its result into fields.",
        &[
            SettingDoc::new("tool", schema::STRING, "the tool to call"),
            SettingDoc::new(
                "tools",
                schema::NAMES,
                "tools and partitions it may call (default: the tool itself)",
            ),
            SettingDoc::new(
                "args",
                schema::MAP,
                "its arguments (values under the value rule; `item` on map targets)",
            ),
            SettingDoc::new(
                "output",
                schema::FIELD,
                "list or object field receiving `{tool, args, output | error}`",
            ),
            SettingDoc::new(
                "outputs",
                schema::MAP,
                "field → value computed from `result` and `args`",
            ),
            SettingDoc::new(
                "on_error",
                r#"{"enum":["fail","continue"]}"#,
                "`fail` (default) or `continue`: the failure is written as data",
            ),
            extract::SETTING,
        ],
        Surface::Hidden,
        |cx| ToolNode::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// A node that calls one tool.
#[derive(Debug)]
struct ToolNode {
    tool: String,
    /// The `tools` entries (tools and partitions, expanded per call).
    entries: Vec<String>,
    args: Vec<(String, ValueExpr)>,
    output: Option<Arc<str>>,
    outputs: Vec<(Arc<str>, ValueExpr)>,
    extract: Extract,
    keep_going: bool,
    attempts: u32,
}

impl ToolNode {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let tool = cx.require_string("tool");
        let listed = cx.tools();
        let output = cx.optional_output("output", "a list or object field", |f| {
            f.ty.is_list() || f.ty.holds_objects()
        });
        let keep_going = match cx.string("on_error") {
            Ok(None) => Some(false),
            Ok(Some(v)) if v.value == "fail" => Some(false),
            Ok(Some(v)) if v.value == "continue" => Some(true),
            Ok(Some(v)) => {
                cx.error(
                    v.loc,
                    "invalid-setting",
                    format!("`on_error` is `{}`; write `fail` or `continue`", v.value),
                    None,
                );
                None
            }
            Err(_) => None,
        };
        let args = args(cx);
        let outputs = outputs(cx, tool.as_ref().ok().map(|t| t.value.as_str()));
        let tool = tool.ok()?;
        let mut entries = listed.ok()?;
        if entries.is_empty() {
            entries.push(tool.value.clone());
        }
        if !covers(cx, &tool.value, &entries) {
            return None;
        }
        cx.uses_tool(&tool.value);
        let extract = Extract::build(cx, &entries).ok()?;
        let (output, outputs) = (output.ok()?, outputs.ok()?);
        if output.is_none() && outputs.is_empty() && extract.is_empty() {
            let id = cx.id().to_owned();
            cx.error(
                cx.kind_loc(),
                "missing-setting",
                format!("node `{id}` of kind `tool` needs `output`, `outputs` or `extract`"),
                None,
            );
            return None;
        }
        Some(Self {
            tool: tool.value.clone(),
            entries,
            args: args.ok()?,
            output: output.map(|o| o.1),
            outputs,
            extract,
            keep_going: keep_going?,
            attempts: cx
                .node
                .retry
                .as_ref()
                .map_or(1, |r| r.value.attempts.clamp(1, 20)),
        })
    }

    /// The arguments, evaluated.
    fn render(&self, cx: &NodeContext<'_>) -> Result<Value, NodeError> {
        let extra: Vec<(&str, minijinja::Value)> = cx
            .item
            .map(|i| vec![("item", from_json(i))])
            .unwrap_or_default();
        let mut out = serde_json::Map::new();
        for (name, arg) in &self.args {
            out.insert(name.clone(), arg.eval(cx.state, &extra)?);
        }
        Ok(Value::Object(out))
    }

    /// The writes for a successful call.
    async fn success(
        &self,
        cx: &NodeContext<'_>,
        args: &Value,
        output: &Value,
    ) -> Result<Patch, NodeError> {
        let mut patch = Patch::new();
        if let Some(field) = &self.output {
            patch.insert(
                Arc::clone(field),
                json!({ "tool": self.tool, "args": args, "output": output }),
            );
        }
        let result = match output {
            Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| output.clone()),
            other => other.clone(),
        };
        let mut extra = vec![("result", from_json(&result)), ("args", from_json(args))];
        if let Some(i) = cx.item {
            extra.push(("item", from_json(i)));
        }
        for (field, value) in &self.outputs {
            patch.insert(Arc::clone(field), value.eval(cx.state, &extra)?);
        }
        let extracted = self
            .extract
            .apply(cx.state, cx.item, &self.tool, args, output);
        for (field, value) in extract::writes(extracted) {
            // Remembered values reach the UI as agents' do (`data-<field>`).
            cx.events.custom(field.to_string(), value.clone()).await;
            patch.insert(field, value);
        }
        Ok(patch)
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
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
            .emit(EventKind::ToolCallReady(Box::new(ToolReady {
                call_id: call_id.clone(),
                tool: self.tool.clone(),
                args: args.clone(),
            })))
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
                    .emit(EventKind::ToolResult(Box::new(ToolReturn {
                        call_id,
                        tool: self.tool.clone(),
                        output: outcome.output.clone(),
                        cached: outcome.cached,
                        display: outcome.display,
                        duration_us: started.elapsed().as_micros() as u64,
                    })))
                    .await;
                self.success(&cx, &args, &outcome.output).await
            }
            Err(error) => {
                let failure = error.to_failure();
                cx.events
                    .emit(EventKind::ToolError(Box::new(ToolFault {
                        call_id,
                        tool: self.tool.clone(),
                        error: failure.clone(),
                    })))
                    .await;
                let last_attempt = !is_transient(&error) || cx.attempt >= self.attempts;
                if self.keep_going && last_attempt {
                    let record = json!({ "tool": self.tool, "args": args, "error": failure_payload(&failure) });
                    Ok(self
                        .output
                        .as_ref()
                        .map_or_else(Patch::new, |f| Patch::new().set(Arc::clone(f), record)))
                } else {
                    Err(NodeError::Tool {
                        tool: self.tool.clone(),
                        error: Box::new(error),
                    })
                }
            }
        }
    }
}

impl Node for ToolNode {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
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
    let loc = cx
        .node
        .settings
        .iter()
        .find(|(k, _)| k.value == "tool")
        .map_or(cx.kind_loc(), |(_, v)| v.loc);
    if cx.external_tools.iter().any(|e| e == tool) {
        return true;
    }
    // A registered tool, or one known only from the tool lock (an MCP
    // server `check` did not start): either is held to the node's `tools`.
    let partition = match cx.tools.spec(tool) {
        Some(spec) => Some(spec.partition.clone()),
        None => cx.tools.locked_partition(tool),
    };
    match partition {
        Some(partition) => {
            if entries.iter().any(|e| e == tool || *e == partition) {
                return true;
            }
            cx.error(
                loc,
                "invalid-setting",
                format!("`tool: {tool}` is not among the tools the node lists in `tools`"),
                Some(format!(
                    "add `{tool}` or its partition `{partition}` to `tools`"
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

/// `args`: each value under the value rule.
fn args(cx: &mut BuildCx<'_>) -> Result<Vec<(String, ValueExpr)>, Reported> {
    let Some(entries) = cx.mapping("args")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut ok = true;
    for (name, value) in entries {
        match cx.value_expr(value, &format!("`args.{}`", name.value), &[]) {
            Ok(v) => out.push((name.value.clone(), v)),
            Err(Reported) => ok = false,
        }
    }
    if ok { Ok(out) } else { Err(Reported) }
}

/// `outputs`: field → value over `result` and `args`. Where the tool
/// declares its output shape, `result`'s attribute reads are checked
/// against it (`result.results[0].content` of `web_search` is an error:
/// its results have `snippet`); `args` against its argument schema.
fn outputs(
    cx: &mut BuildCx<'_>,
    tool: Option<&str>,
) -> Result<Vec<(Arc<str>, ValueExpr)>, Reported> {
    let Some(entries) = cx.mapping("outputs")? else {
        return Ok(Vec::new());
    };
    let mut typed = Vec::new();
    if let Some(tool) = tool {
        let declared = |s: Option<Arc<Value>>| s.and_then(|s| TypeSpec::from_json_schema(&s).ok());
        if let Some(t) = declared(cx.tools.output_schema_at_check(tool)) {
            typed.push(("result", t));
        }
        if let Some(t) = declared(cx.tools.schema_at_check(tool)) {
            typed.push(("args", t));
        }
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (name, value) in entries {
        let field = cx.field(name, "a field", |_| true);
        let expr = cx.value_expr_typed(
            value,
            &format!("`outputs.{}`", name.value),
            &["result", "args"],
            &typed,
        );
        match (field, expr) {
            (Some(f), Ok(e)) => {
                cx.writes(f);
                out.push((Arc::<str>::from(name.value.as_str()), e));
            }
            _ => ok = false,
        }
    }
    if ok { Ok(out) } else { Err(Reported) }
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
