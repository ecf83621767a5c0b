//! What a turn did, read from its events and checkpoints: the nodes run,
//! the value each router routed on, the tool calls, the state after each
//! step, the answer, the stream as a client received it. Expectations are
//! checked against this; `--from-run` and `eval` read the same from a
//! stored run.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::aisdk::{StreamReport, check_stream};
use super::spec::Status;
use crate::events::{
    Event, EventKind, LlmFinish, StepBatch, ToolFault, ToolReady, ToolReturn, Usage,
};
use crate::graph::Transition;
use crate::nodes::Graph;
use crate::runtime::rebuild_state;

/// One tool call a run made.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Call {
    /// The node that made it.
    pub node: String,
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: Value,
    /// What it returned (or the failure given back).
    pub result: Value,
}

/// What one turn did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Observation {
    /// How it ended.
    #[serde(serialize_with = "status_str")]
    pub status: Option<Status>,
    /// The run's error, if it failed.
    pub error: Option<String>,
    /// The graph's nodes run, in order (retries counted once).
    pub path: Vec<String>,
    /// (router node, the value it routed on), in order.
    pub routes: Vec<(String, Option<String>)>,
    /// Tool calls, in order.
    pub tool_calls: Vec<Call>,
    /// The state at the end of the turn.
    pub state: Value,
    /// The state after each node's last step.
    pub after: BTreeMap<String, Value>,
    /// The answer: the `chat.answer` field, or the answer text streamed.
    pub answer: String,
    /// The interrupts it paused at.
    pub interrupts: Vec<Value>,
    /// The SSE bytes a client received.
    #[serde(skip)]
    pub sse: String,
    /// The stream checked against the AI SDK's rules.
    #[serde(skip)]
    pub stream: StreamReport,
    /// Tokens used.
    pub usage: Usage,
    /// Model calls made.
    pub model_calls: u32,
    /// Wall time, µs (first to last event).
    pub duration_us: u64,
}

fn status_str<S: serde::Serializer>(s: &Option<Status>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s.map_or("unknown", Status::as_str))
}

/// Reads a turn from its events (`events`: the turn's own), the run's
/// checkpoint batches and the SSE its client received.
pub(crate) fn observe(
    graph: &Graph,
    events: &[&Event],
    batches: &[StepBatch],
    sse: String,
    end: (Status, Option<String>),
    interrupts: Vec<Value>,
) -> Observation {
    let mut o = Observation {
        status: Some(end.0),
        error: end.1,
        interrupts,
        ..Observation::default()
    };
    let state_after = |step: u32| {
        rebuild_state(batches, &graph.state, step)
            .ok()
            .map(|s| s.to_json())
    };
    let mut started: Vec<(String, u32)> = Vec::new();
    let mut finished: Vec<(String, u32)> = Vec::new();
    let mut pending: BTreeMap<String, usize> = BTreeMap::new();
    for ev in events {
        let node = ev.node.as_deref().unwrap_or("");
        let top = !node.is_empty() && !node.contains('/');
        match &ev.event {
            EventKind::NodeStarted { attempt: 1, .. } if top => {
                o.path.push(node.to_owned());
                started.push((node.to_owned(), ev.step));
            }
            EventKind::NodeFinished { .. } if top => finished.push((node.to_owned(), ev.step)),
            EventKind::LlmStarted(_) => o.model_calls += 1,
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish { usage, .. } = &**llm_finish;
                add(&mut o.usage, usage)
            }
            EventKind::LlmFailed(f) => add(&mut o.usage, &f.usage),
            EventKind::ToolCallReady(tool_ready) => {
                let ToolReady {
                    call_id,
                    tool,
                    args,
                } = &**tool_ready;
                pending.insert(call_id.clone(), o.tool_calls.len());
                o.tool_calls.push(Call {
                    node: node.to_owned(),
                    name: tool.clone(),
                    args: args.clone(),
                    result: Value::Null,
                });
            }
            EventKind::ToolResult(tool_return) => {
                let ToolReturn {
                    call_id, output, ..
                } = &**tool_return;
                if let Some(&i) = pending.get(call_id) {
                    o.tool_calls[i].result = output.clone();
                }
            }
            EventKind::ToolError(tool_fault) => {
                let ToolFault { call_id, error, .. } = &**tool_fault;
                if let Some(&i) = pending.get(call_id) {
                    o.tool_calls[i].result = crate::tools::failure_payload(error);
                }
            }
            _ => {}
        }
    }
    if let (Some(first), Some(last)) = (events.first(), events.last()) {
        o.duration_us = last.at.saturating_sub(first.at);
    }
    let mut states: BTreeMap<u32, Option<Value>> = BTreeMap::new();
    let mut at = |step: u32| {
        states
            .entry(step)
            .or_insert_with(|| state_after(step))
            .clone()
    };
    for (node, step) in &started {
        if !finished.contains(&(node.clone(), *step)) {
            continue;
        }
        let Some(state) = at(*step) else { continue };
        o.after.insert(node.clone(), state);
        if let Some(value) = route_value(graph, node, batches, *step) {
            o.routes.push((node.clone(), value));
        }
    }
    o.state = batches
        .iter()
        .map(|b| b.step)
        .max()
        .and_then(&mut at)
        .unwrap_or(Value::Null);
    o.stream = check_stream(&sse);
    o.sse = sse;
    o.answer = answer(graph, &o.state, &o.stream.chunks);
    o
}

fn add(total: &mut Usage, u: &Usage) {
    *total += *u;
}

/// The value `node`'s conditional edge routed on after `step`, if it has
/// one (`Some(None)`: no value, the route's default).
fn route_value(
    graph: &Graph,
    node: &str,
    batches: &[StepBatch],
    step: u32,
) -> Option<Option<String>> {
    let idx = graph.node_index(node)?;
    let route = graph.nodes[idx as usize].out.iter().find_map(|t| match t {
        Transition::Route(r) => Some(r),
        _ => None,
    })?;
    let state = rebuild_state(batches, &graph.state, step).ok()?;
    route.on.key(&*state).ok()
}

/// The answer: the `chat.answer` field when it holds text, else the text
/// the stream showed.
fn answer(graph: &Graph, state: &Value, chunks: &[Value]) -> String {
    if let Some(Value::String(s)) = graph.chat.answer.as_deref().and_then(|f| state.get(f))
        && !s.is_empty()
    {
        return s.clone();
    }
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect()
}
