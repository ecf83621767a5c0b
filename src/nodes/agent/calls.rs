//! An agent's tool calls: run concurrently, each checked, filled, bound
//! and gated (approval, client-side) before it runs, its result or
//! failure streamed and traced; a `once` tool's repeats are not run.

use std::time::Instant;

use serde_json::{Value, json};

use super::super::bind;
use super::super::pauses::{self, Gate};
use super::{Agent, NodeContext};
use crate::events::{
    EventKind, Interrupt, ToolCallRecord, ToolDenial, ToolFault, ToolReady, ToolReturn,
};
use crate::llm::{ToolDef, strict};
use crate::tools::{ToolError, ToolOutcome, failure_payload, parse_arguments};

impl Agent {
    /// Runs a reply's tool calls concurrently. A `once` tool's calls after
    /// its first (`ran_once` holds the tools that ran) are not run; they
    /// are answered after the others, so the events come in the same order
    /// live and re-executed.
    pub(super) async fn run_calls(
        &self,
        cx: &NodeContext<'_>,
        calls: &[ToolCallRecord],
        allowed: &[String],
        offered: &[ToolDef],
        ran_once: &mut std::collections::HashSet<String>,
    ) -> Vec<Result<(String, Value, Option<String>), Interrupt>> {
        let repeats: Vec<bool> = calls
            .iter()
            .map(|tc| self.bindings.once(&tc.name) && !ran_once.insert(tc.name.clone()))
            .collect();
        let mut results = futures::future::join_all(
            calls
                .iter()
                .zip(&repeats)
                .filter(|(_, repeat)| !**repeat)
                .map(|(tc, _)| self.execute(cx, tc, allowed, offered)),
        )
        .await;
        for (i, tc) in calls.iter().enumerate() {
            if repeats[i] {
                results.insert(i, Ok(self.not_run(cx, tc).await));
            }
        }
        results
    }

    /// Runs one tool call; returns the content for the model, a trace
    /// record and, for a pass-through result, the text shown to the user —
    /// or the interrupt the call waits at.
    async fn execute(
        &self,
        cx: &NodeContext<'_>,
        tc: &ToolCallRecord,
        allowed: &[String],
        offered: &[ToolDef],
    ) -> Result<(String, Value, Option<String>), Interrupt> {
        let started = Instant::now();
        tracing::info!(tool = %tc.name, call_id = %tc.id, "executing tool");
        let result = match parse_arguments(&tc.arguments) {
            Ok(mut args) => {
                let def = offered.iter().find(|d| d.name == tc.name);
                if let Some(def) = def {
                    // A model answering a strict tool sends `null` for an
                    // optional parameter; the tool (and `fill_args`) expects
                    // it absent.
                    strict::restore_absent(&def.parameters, &mut args);
                }
                let filled = self.fill.apply(cx.state, def, &mut args);
                match self.bindings.apply(cx, &tc.name, &mut args) {
                    Ok(overridden) if !overridden.is_empty() => {
                        tracing::warn!(tool = %tc.name, call_id = %tc.id, args = ?overridden, "the model sent bound arguments; the bound values replace them");
                    }
                    Ok(_) => {}
                    Err(e) => return Ok(self.report(cx, tc, Err(e), started).await),
                }
                tracing::info!(tool = %tc.name, call_id = %tc.id, filled = ?filled, "tool arguments parsed");
                cx.events
                    .emit(EventKind::ToolCallReady(Box::new(ToolReady {
                        call_id: tc.id.clone(),
                        tool: tc.name.clone(),
                        args: args.clone(),
                    })))
                    .await;
                match self.pauses.gate(cx, tc, &args, offered) {
                    Gate::Run => cx
                        .tool(&tc.id, &tc.name, args.clone(), allowed)
                        .await
                        .map(|out| (args, out)),
                    Gate::Wait(interrupt) => {
                        tracing::info!(tool = %tc.name, call_id = %tc.id, interrupt = %interrupt.id, "tool call waits for a person");
                        return Err(interrupt);
                    }
                    Gate::Denied(reason) => return Ok(denied(cx, tc, args, reason).await),
                    Gate::Client(Ok(output)) => Ok((
                        args,
                        ToolOutcome {
                            output,
                            cached: false,
                            display: false,
                        },
                    )),
                    Gate::Client(Err(message)) => Err(ToolError::Execution(message)),
                }
            }
            Err(e) => {
                tracing::warn!(tool = %tc.name, call_id = %tc.id, error = %e, "tool arguments are not valid JSON");
                Err(e)
            }
        };
        Ok(self.report(cx, tc, result, started).await)
    }

    /// A repeated call of a `once` tool: shown with its input, not run,
    /// and answered with an error the model can read.
    async fn not_run(
        &self,
        cx: &NodeContext<'_>,
        tc: &ToolCallRecord,
    ) -> (String, Value, Option<String>) {
        tracing::info!(tool = %tc.name, call_id = %tc.id, "a `once` tool called again; not run");
        if let Ok(args) = parse_arguments(&tc.arguments) {
            cx.events
                .emit(EventKind::ToolCallReady(Box::new(ToolReady {
                    call_id: tc.id.clone(),
                    tool: tc.name.clone(),
                    args,
                })))
                .await;
        }
        let started = Instant::now();
        self.report(cx, tc, Err(bind::repeated(&tc.name)), started)
            .await
    }

    /// Streams a call's result or failure; returns the content for the
    /// model, the trace record and, for a pass-through result, the text
    /// shown to the user.
    async fn report(
        &self,
        cx: &NodeContext<'_>,
        tc: &ToolCallRecord,
        result: Result<(Value, ToolOutcome), ToolError>,
        started: Instant,
    ) -> (String, Value, Option<String>) {
        match result {
            Ok((args, outcome)) => {
                // The content decides too; the text shown (marker removed)
                // is the result recorded.
                let shown = self.pass_through.shown(&outcome.output);
                let output = shown.clone().map_or(outcome.output, Value::String);
                let content = output.to_string();
                let display = (outcome.display || shown.is_some()).then(|| match &output {
                    Value::String(s) => s.clone(),
                    other => serde_json::to_string_pretty(other).unwrap_or_default(),
                });
                cx.events
                    .emit(EventKind::ToolResult(Box::new(ToolReturn {
                        call_id: tc.id.clone(),
                        tool: tc.name.clone(),
                        output: output.clone(),
                        cached: outcome.cached,
                        display: display.is_some(),
                        duration_us: started.elapsed().as_micros() as u64,
                    })))
                    .await;
                let record = json!({ "node": &**cx.events.node(), "tool": tc.name, "args": args, "output": output });
                (content, record, display)
            }
            Err(e) => {
                let failure = e.to_failure();
                let payload = failure_payload(&failure);
                cx.events
                    .emit(EventKind::ToolError(Box::new(ToolFault {
                        call_id: tc.id.clone(),
                        tool: tc.name.clone(),
                        error: failure,
                    })))
                    .await;
                (
                    payload.to_string(),
                    json!({ "node": &**cx.events.node(), "tool": tc.name, "error": payload }),
                    None,
                )
            }
        }
    }
}

/// A call a person denied: said on the stream, told to the model, traced.
async fn denied(
    cx: &NodeContext<'_>,
    tc: &ToolCallRecord,
    args: Value,
    reason: Option<String>,
) -> (String, Value, Option<String>) {
    tracing::info!(tool = %tc.name, call_id = %tc.id, "tool call denied by the user");
    let content = pauses::denied_content(reason.as_deref());
    cx.events
        .emit(EventKind::ToolDenied(Box::new(ToolDenial {
            call_id: tc.id.clone(),
            tool: tc.name.clone(),
            reason,
        })))
        .await;
    let record = json!({ "node": &**cx.events.node(), "tool": tc.name, "args": args, "denied": true, "error": content["error"] });
    (content.to_string(), record, None)
}
