//! The `events` stream mode: LangChain's `astream_events` (v2) events.
//!
//! `langgraph_api` streams, for `events`, what `graph.astream_events(...,
//! version="v2")` yields, each as `{event, name, run_id, tags, metadata,
//! data, parent_ids}` (the SDKs' `EventsStreamEvent`): `on_chain_start` /
//! `on_chain_end` for the graph (named `LangGraph`, the run's id) and for
//! each node (a child run, tagged `graph:step:N`), `on_chat_model_start`,
//! `on_chat_model_stream` (`data.chunk`, an `AIMessageChunk`) and
//! `on_chat_model_end` for each model call, `on_tool_start` / `on_tool_end`
//! for each tool. Our events map onto them one to one; the child runs'
//! ids are derived from the run id, the step, the task and the call, so a
//! replayed stream has the same ids.

use serde_json::{Value, json};
use uuid::Uuid;

use super::Wire;
use crate::events::{Event, EventKind, LlmFinish, LlmStart, ToolReady, ToolReturn};
use crate::graph::spec::Surface;

/// What a derived run id stands for (its low 16 bits).
#[derive(Clone, Copy)]
enum Part {
    Node,
    Model(u32),
    Tool,
}

impl Wire {
    /// The `events` frames of one event, after its other frames.
    pub(super) fn astream(&self, ev: &Event, out: &mut Vec<(&'static str, Value)>) {
        let node = ev.node.as_deref().unwrap_or("");
        let root = self.ctx.run_id.to_string();
        let (kind, name, part, data) = match &ev.event {
            EventKind::RunStarted(start) => {
                let input = super::messages::values_out(&self.ctx.graph.state.schema, &start.input);
                let e = self.event(
                    "on_chain_start",
                    "LangGraph",
                    &root,
                    &[],
                    json!({"input": input}),
                );
                out.push(("events", e));
                return;
            }
            EventKind::RunFinished { .. } | EventKind::RunInterrupted { .. } => {
                let data = json!({"output": self.last_values});
                out.push((
                    "events",
                    self.event("on_chain_end", "LangGraph", &root, &[], data),
                ));
                return;
            }
            EventKind::NodeStarted { .. } => (
                "on_chain_start",
                node.to_owned(),
                Part::Node,
                json!({"input": self.last_values}),
            ),
            EventKind::NodeFinished { patch, .. } => {
                let written = serde_json::to_value(patch).unwrap_or(Value::Null);
                let written = super::messages::patch_out(&self.ctx.graph.state.schema, &written);
                (
                    "on_chain_end",
                    node.to_owned(),
                    Part::Node,
                    json!({"output": written}),
                )
            }
            _ if self.ctx.graph.surface(node) == Surface::Hidden => return,
            EventKind::LlmStarted(llm_start) => {
                let LlmStart { call, model, .. } = &**llm_start;
                (
                    "on_chat_model_start",
                    model.clone(),
                    Part::Model(*call),
                    json!({"input": {}}),
                )
            }
            EventKind::TextDelta { call, delta } => {
                let chunk = self.chunk(ev, node, *call, delta);
                let name = self.models.get(node).cloned().unwrap_or_default();
                (
                    "on_chat_model_stream",
                    name,
                    Part::Model(*call),
                    json!({"chunk": chunk[0]}),
                )
            }
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish { call, output, .. } = &**llm_finish;
                let name = self.models.get(node).cloned().unwrap_or_default();
                let message = json!({"type": "ai", "content": output.text,
                    "id": format!("run-{}-{}-{node}-{call}", self.ctx.run_id.simple(), ev.step),
                    "response_metadata": {"finish_reason": output.finish_reason}});
                (
                    "on_chat_model_end",
                    name,
                    Part::Model(*call),
                    json!({"output": message}),
                )
            }
            EventKind::ToolCallReady(tool_ready) => {
                let ToolReady { tool, args, .. } = &**tool_ready;
                (
                    "on_tool_start",
                    tool.clone(),
                    Part::Tool,
                    json!({"input": args}),
                )
            }
            EventKind::ToolResult(tool_return) => {
                let ToolReturn { tool, output, .. } = &**tool_return;
                (
                    "on_tool_end",
                    tool.clone(),
                    Part::Tool,
                    json!({"output": output}),
                )
            }
            _ => return,
        };
        let node_run = self.sub_run(ev, Part::Node).to_string();
        let (id, parents) = match part {
            Part::Node => (node_run, vec![root]),
            _ => (self.sub_run(ev, part).to_string(), vec![root, node_run]),
        };
        let mut e = self.event(kind, &name, &id, &parents, data);
        e["tags"] = json!([format!("graph:step:{}", ev.step)]);
        e["metadata"]["langgraph_step"] = json!(ev.step);
        e["metadata"]["langgraph_node"] = json!(node);
        e["metadata"]["langgraph_triggers"] = json!([format!("branch:to:{node}")]);
        e["metadata"]["langgraph_path"] = json!(["__pregel_pull", node]);
        e["metadata"]["langgraph_checkpoint_ns"] = json!(format!("{node}:{}", ev.task));
        out.push(("events", e));
    }

    /// One event with the run's metadata.
    fn event(&self, kind: &str, name: &str, id: &str, parents: &[String], data: Value) -> Value {
        json!({
            "event": kind, "name": name, "run_id": id, "tags": [],
            "metadata": {
                "thread_id": self.ctx.thread_id,
                "run_id": self.ctx.run_id,
                "graph_id": self.ctx.graph.id.as_ref(),
                "assistant_id": super::super::ids::assistant_id(&self.ctx.graph.id),
                "run_attempt": 1,
            },
            "data": data, "parent_ids": parents,
        })
    }

    /// The id of a node's task, or of a model call or tool call in it: the
    /// run id's first half, then the step, task and part (a tool call's by
    /// the hash of its call id, which its start and its result both know).
    fn sub_run(&self, ev: &Event, part: Part) -> Uuid {
        let (hi, _) = self.ctx.run_id.as_u64_pair();
        let tag: u64 = match part {
            Part::Node => 0,
            Part::Model(call) => 1 + u64::from(call % 0x7fff),
            Part::Tool => 0x8000 | (tool_hash(&ev.event) & 0x7fff),
        };
        Uuid::from_u64_pair(
            hi,
            (u64::from(ev.step) << 32) | ((u64::from(ev.task) & 0xffff) << 16) | tag,
        )
    }
}

/// A tool call's id, hashed (FNV-1a: stable across builds).
fn tool_hash(kind: &EventKind) -> u64 {
    let id = match kind {
        EventKind::ToolCallReady(ready) => &ready.call_id,
        EventKind::ToolResult(ret) => &ret.call_id,
        _ => return 0,
    };
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
