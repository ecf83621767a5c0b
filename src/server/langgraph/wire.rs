//! Our events as the LangGraph server's stream events.
//!
//! The shapes follow `langgraph_api` (0.16, `stream.py`, `sse.py`,
//! `serde.py`): `metadata {run_id, attempt}` first; then one SSE event per
//! stream mode — `values` (the whole state: after the input, then after
//! each superstep), `updates` (`{node: what it wrote}`), `messages`
//! (`[chunk, metadata]` for `messages-tuple`: an `AIMessageChunk` and
//! `langgraph_node`, `langgraph_step`…), `custom`, `debug` (`task`,
//! `task_result` and `checkpoint` payloads), `tasks` and `checkpoints`;
//! an interrupt is `values {"__interrupt__": [{value, id}]}` (and the same
//! under `updates`); a failure is `error {error, message}`.
//!
//! [`Wire`] makes every mode's frames for every event, whichever modes the
//! client asked for (the stream filters them): frame ids (`SEQ-N`, the
//! Nth frame made from event SEQ) are then the same for every client of a
//! run, so `Last-Event-ID` works across modes and reconnects.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::messages;
use crate::events::{CustomData, Event, EventKind, Interrupt, LlmStart};
use crate::graph::spec::Surface;
use crate::nodes::Graph;
use crate::state::DynState;

mod astream;
mod message_mode;

/// The stream modes a client asked for.
#[derive(Clone, Debug, Default)]
pub(super) struct Modes(Vec<String>);

/// The modes LangGraph's server accepts (`StreamMode` in its OpenAPI
/// schema); `events` is LangChain's `astream_events` (`wire/astream.rs`).
const KNOWN: &[&str] = &[
    "values",
    "messages",
    "messages-tuple",
    "updates",
    "events",
    "tasks",
    "checkpoints",
    "debug",
    "custom",
];

impl Modes {
    /// `stream_mode` as a request gives it: a name, a list, or nothing
    /// (`values`).
    ///
    /// # Errors
    /// An unknown mode.
    pub(super) fn parse(v: Option<&Value>) -> Result<Self, String> {
        let names: Vec<String> = match v {
            None | Some(Value::Null) => vec!["values".into()],
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|m| {
                    m.as_str()
                        .map(str::to_owned)
                        .ok_or("a stream mode is a string")
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("stream_mode is a string or a list of strings".into()),
        };
        if let Some(bad) = names.iter().find(|m| !KNOWN.contains(&m.as_str())) {
            return Err(format!(
                "unknown stream mode `{bad}` (one of {})",
                KNOWN.join(", ")
            ));
        }
        Ok(Self(names))
    }

    /// All modes (a rejoin without `stream_mode`).
    pub(super) fn all() -> Self {
        Self(KNOWN.iter().map(|m| (*m).to_owned()).collect())
    }

    fn has(&self, mode: &str) -> bool {
        self.0.iter().any(|m| m == mode)
    }

    /// Whether frames of SSE event `event` go out.
    pub(super) fn wants(&self, event: &str) -> bool {
        match event {
            "metadata" | "error" => true,
            "messages" => self.has("messages-tuple"),
            // Both asked: LangGraph sends the tuples alone (message_mode.rs).
            "messages/metadata" | "messages/partial" | "messages/complete" => {
                self.has("messages") && !self.has("messages-tuple")
            }
            e => self.0.iter().any(|m| m == e),
        }
    }
}

/// One SSE event.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Frame {
    /// The event it comes from (0: the stream's own `metadata`).
    pub(super) seq: u64,
    /// Its place among the frames of that event.
    pub(super) n: u32,
    /// The SSE event name.
    pub(super) event: &'static str,
    /// The data.
    pub(super) data: Value,
}

/// An interrupt as LangGraph shows it: `{value, id}`, the value being what
/// the run asks (`{type: question, question, field, schema, options}`, or
/// an approval or client tool call).
/// The interrupts a person answers with a value (`__interrupt__`, a task's
/// `interrupts`): not breakpoints, which LangGraph shows only as the
/// thread's `next` (its static `interrupt_before` / `interrupt_after`).
pub(super) fn asked(interrupts: &[Interrupt]) -> impl Iterator<Item = &Interrupt> {
    interrupts
        .iter()
        .filter(|i| !matches!(i.ask, crate::events::Ask::Breakpoint { .. }))
}

/// The thread's `next` while a run waits at `interrupts`: the nodes that
/// asked, and for a breakpoint the nodes of the step it stopped before.
pub(super) fn next_of(interrupts: &[Interrupt]) -> Vec<String> {
    let mut next: Vec<String> = Vec::new();
    for i in interrupts {
        let nodes = match &i.ask {
            crate::events::Ask::Breakpoint { next, .. } => next.clone(),
            _ => vec![i.node.clone()],
        };
        for n in nodes {
            if !next.contains(&n) {
                next.push(n);
            }
        }
    }
    next
}

pub(super) fn interrupt_json(i: &Interrupt) -> Value {
    json!({"value": serde_json::to_value(&i.ask).unwrap_or(Value::Null), "id": i.id, "response_schema": null})
}

/// Who the stream is for.
#[derive(Clone, Debug)]
pub(super) struct Context {
    pub(super) run_id: Uuid,
    pub(super) thread_id: String,
    pub(super) graph: Arc<Graph>,
    /// The id of the run's answer message (`messages::with_answer`).
    pub(super) message_id: String,
}

/// Turns a run's events, in order from its first, into frames.
pub(super) struct Wire {
    ctx: Context,
    state: Option<Box<dyn DynState>>,
    /// The step whose writes are applied but not yet sent as `values`.
    open: Option<u32>,
    /// The model each node's current call uses (chunk metadata).
    models: HashMap<String, String>,
    /// The newest `values` data (the result of `wait` and `join`).
    pub(super) last_values: Value,
    /// What the run waits for, when it paused.
    pub(super) interrupts: Vec<Value>,
    /// Each streamed message's text so far, by id (the `messages` mode).
    partials: HashMap<String, String>,
    /// The tasks (step, task) whose tokens were streamed.
    streamed: HashSet<(u32, u32)>,
    /// `{error, message}` when it failed.
    pub(super) error: Option<Value>,
}

impl Wire {
    /// The run's answer's message id, known once a queued run started.
    pub(super) fn set_message_id(&mut self, id: String) {
        self.ctx.message_id = id;
    }

    /// A wire for a run.
    pub(super) fn new(ctx: Context) -> Self {
        Self {
            ctx,
            state: None,
            open: None,
            models: HashMap::new(),
            last_values: json!({}),
            interrupts: Vec::new(),
            partials: HashMap::new(),
            streamed: HashSet::new(),
            error: None,
        }
    }

    /// The first frame of every stream.
    pub(super) fn metadata(&self) -> Frame {
        Frame {
            seq: 0,
            n: 0,
            event: "metadata",
            data: json!({"run_id": self.ctx.run_id, "attempt": 1}),
        }
    }

    fn values_frame(&mut self) -> Option<Value> {
        let s = self.state.as_ref()?;
        let mut ours = s.to_json();
        messages::with_answer(&self.ctx.graph, &mut ours, &self.ctx.message_id);
        let v = messages::values_out(&self.ctx.graph.state.schema, &ours);
        self.last_values = v.clone();
        Some(v)
    }

    /// The `values` (and `checkpoints`, `debug`) frames of a finished step.
    fn close_step(&mut self, out: &mut Vec<(&'static str, Value)>) {
        let Some(step) = self.open.take() else { return };
        let Some(values) = self.values_frame() else {
            return;
        };
        let at = |step: u32| {
            json!({"thread_id": self.ctx.thread_id, "checkpoint_ns": "",
                   "checkpoint_id": super::ids::checkpoint_id(self.ctx.run_id, step)})
        };
        let parent = step.checked_sub(1).map(at);
        let checkpoint = json!({
            "config": {"configurable": at(step)},
            "parent_config": parent.as_ref().map(|p| json!({"configurable": p})),
            "checkpoint": at(step),
            "parent_checkpoint": parent,
            "metadata": {"source": if step == 0 { "input" } else { "loop" }, "step": step, "run_id": self.ctx.run_id},
            "values": values,
            "next": [],
            "tasks": [],
        });
        out.push(("values", values));
        out.push(("checkpoints", checkpoint.clone()));
        out.push(("debug", self.debug("checkpoint", step, checkpoint)));
    }

    fn debug(&self, kind: &str, step: u32, payload: Value) -> Value {
        let at = crate::tools::builtin::rfc3339(crate::events::now_micros() / 1_000_000);
        json!({"type": kind, "timestamp": at, "step": step, "payload": payload})
    }

    fn apply(&mut self, patch: &crate::state::Patch) {
        let Some(s) = self.state.as_mut() else { return };
        for (field, value) in patch.iter() {
            if let Some(id) = s.schema().field(field) {
                let _ = s.apply(id, value);
            }
        }
    }

    /// The frames of one event.
    pub(super) fn feed(&mut self, ev: &Event) -> Vec<Frame> {
        let mut out: Vec<(&'static str, Value)> = Vec::new();
        if self.open.is_some_and(|s| ev.step > s)
            || matches!(ev.event, EventKind::CheckpointSaved { .. })
            || ev.event.is_terminal()
        {
            self.close_step(&mut out);
        }
        let node = ev.node.as_deref().unwrap_or("");
        let task_id = format!("{}:{node}:{}", ev.step, ev.task);
        match &ev.event {
            EventKind::RunStarted(start) if self.state.is_none() => {
                self.state = self.ctx.graph.state.from_json(&start.input).ok();
                self.open = Some(0);
                self.close_step(&mut out);
            }
            EventKind::NodeStarted { .. } => {
                let task = json!({"id": task_id, "name": node, "input": null, "metadata": {},
                                  "triggers": [format!("branch:to:{node}")]});
                out.push(("tasks", task.clone()));
                out.push(("debug", self.debug("task", ev.step, task)));
            }
            EventKind::NodeFinished { patch, .. } => {
                self.unstreamed(ev, node, patch, &mut out);
                self.apply(patch);
                self.open = Some(ev.step);
                let written = serde_json::to_value(patch).unwrap_or(Value::Null);
                let written = messages::patch_out(&self.ctx.graph.state.schema, &written);
                let result: Vec<Value> = written
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| json!([k, v])).collect())
                    .unwrap_or_default();
                let mut update = Map::new();
                update.insert(node.to_owned(), written);
                out.push(("updates", Value::Object(update)));
                let done = json!({"id": task_id, "name": node, "error": null, "result": result, "interrupts": []});
                out.push(("tasks", done.clone()));
                out.push(("debug", self.debug("task_result", ev.step, done)));
            }
            EventKind::LlmStarted(llm_start) => {
                let LlmStart { model, .. } = &**llm_start;
                self.models.insert(node.to_owned(), model.clone());
            }
            EventKind::TextDelta { call, delta }
                if self.ctx.graph.surface(node) != Surface::Hidden =>
            {
                let tuple = self.chunk(ev, node, *call, delta);
                self.streamed.insert((ev.step, ev.task));
                self.partial(&tuple, &mut out);
                out.push(("messages", tuple));
            }
            EventKind::Custom(custom_data) => {
                let CustomData { name, data, .. } = &**custom_data;
                out.push(("custom", json!({"name": name, "data": data})));
            }
            EventKind::RunInterrupted { interrupts } => {
                // As LangGraph 1.x streams a pause: the update alone under
                // `updates`, the state with it under `values`.
                // A breakpoint (`interrupt_before`/`after`) is a static
                // interrupt: `__interrupt__` is empty, as LangGraph's is.
                self.interrupts = asked(interrupts).map(interrupt_json).collect();
                out.push(("updates", json!({"__interrupt__": self.interrupts})));
                let mut values = self.values_frame().unwrap_or_else(|| json!({}));
                if !self.interrupts.is_empty() {
                    values["__interrupt__"] = Value::Array(self.interrupts.clone());
                }
                out.push(("values", values));
            }
            EventKind::RunResumed { .. } => {
                // A resumed run's stream starts with the state it resumes.
                self.interrupts.clear();
                if let Some(values) = self.values_frame() {
                    out.push(("values", values));
                }
            }
            EventKind::RunFailed { error } => {
                let e = json!({"error": error.code, "message": error.message});
                self.error = Some(e.clone());
                out.push(("error", e));
            }
            _ => {}
        }
        self.astream(ev, &mut out);
        out.into_iter()
            .enumerate()
            .map(|(n, (event, data))| Frame {
                seq: ev.seq,
                n: n as u32,
                event,
                data,
            })
            .collect()
    }

    /// A token as `[AIMessageChunk, metadata]`.
    fn chunk(&self, ev: &Event, node: &str, call: u32, delta: &str) -> Value {
        let id = format!(
            "run-{}-{}-{}-{call}",
            self.ctx.run_id.simple(),
            ev.step,
            node
        );
        let chunk = json!({
            "content": delta,
            "additional_kwargs": {},
            "response_metadata": {},
            "type": "AIMessageChunk",
            "name": null,
            "id": id,
            "tool_calls": [],
            "invalid_tool_calls": [],
            "usage_metadata": null,
            "tool_call_chunks": [],
            "chunk_position": null,
        });
        let mut meta = self.node_metadata(ev, node);
        meta["ls_provider"] = json!("stategraph");
        meta["ls_model_name"] = json!(self.models.get(node).cloned().unwrap_or_default());
        meta["ls_model_type"] = json!("chat");
        json!([chunk, meta])
    }

    /// The metadata of a message a node makes (LangGraph's node run's).
    fn node_metadata(&self, ev: &Event, node: &str) -> Value {
        json!({
            "thread_id": self.ctx.thread_id,
            "run_id": self.ctx.run_id,
            "graph_id": self.ctx.graph.id.as_ref(),
            "assistant_id": super::ids::assistant_id(&self.ctx.graph.id),
            "created_by": "system",
            "run_attempt": 1,
            "langgraph_step": ev.step,
            "langgraph_node": node,
            "langgraph_triggers": [format!("branch:to:{node}")],
            "langgraph_path": ["__pregel_pull", node],
            "langgraph_checkpoint_ns": format!("{node}:{}", ev.task),
            "checkpoint_ns": format!("{node}:{}", ev.task),
        })
    }
}

/// A frame as SSE bytes (CRLF line ends, as `langgraph_api/sse.py` writes
/// them), with its id when `with_id`.
pub(super) fn encode(f: &Frame, with_id: bool, out: &mut String) {
    out.push_str("event: ");
    out.push_str(f.event);
    out.push_str("\r\ndata: ");
    out.push_str(&f.data.to_string());
    out.push_str("\r\n");
    if with_id {
        out.push_str("id: ");
        out.push_str(&super::ids::event_id(f.seq, f.n));
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
}

/// A heartbeat (sse-starlette's comment, every few seconds of silence).
pub(super) const HEARTBEAT: &str = ": heartbeat\r\n\r\n";

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::events::{Ask, ErrorInfo};
    use crate::graph::prompts::Prompts;
    use crate::state::Patch;

    const GRAPH: &str = r#"
entry: route
state:
  fields:
    messages: { type: messages }
    answer: { type: string }
    intent: { type: string }
nodes:
  - id: route
    kind: set
    surface: hidden
    set: { intent: "x" }
  - id: reply
    kind: llm
    prompt: p.md
    messages: messages
    output: answer
edges:
  - route -> reply
  - reply -> END
"#;

    fn wire() -> Wire {
        let reg = crate::Registries::default();
        let cat = reg.from_sources(
            &[("g", GRAPH)],
            Prompts::from_sources(Path::new("p"), [("p.md", "Answer.")]),
        );
        let graph = Arc::clone(
            cat.get("g")
                .unwrap_or_else(|| panic!("{:?}", cat.diagnostics)),
        );
        Wire::new(Context {
            run_id: Uuid::nil(),
            thread_id: "t".into(),
            graph,
            message_id: "m".into(),
        })
    }

    fn ev(seq: u64, step: u32, node: Option<&str>, event: EventKind) -> Event {
        Event {
            run_id: Uuid::nil(),
            seq,
            at: 0,
            step,
            node: node.map(Into::into),
            task: 0,
            event,
        }
    }

    /// The frames' events, but `events` (the `astream_events` frames,
    /// which `astream` gives).
    fn names(frames: &[Frame]) -> Vec<&str> {
        frames
            .iter()
            .map(|f| f.event)
            .filter(|e| *e != "events")
            .collect()
    }

    /// The `astream_events` frames: `(event, name)`.
    fn astream(frames: &[Frame]) -> Vec<(String, String)> {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        frames
            .iter()
            .filter(|f| f.event == "events")
            .map(|f| (s(&f.data["event"]), s(&f.data["name"])))
            .collect()
    }

    /// The run's events, step by step: LangGraph's frames for each.
    #[test]
    fn events_become_langgraphs_stream_events() {
        let mut w = wire();
        first_step_with_a_hidden_router(&mut w);
        second_step_streams_the_answer(&mut w);
        pause_resume_and_failure(&mut w);
    }

    /// The input's values, then a hidden node's task and update.
    fn first_step_with_a_hidden_router(w: &mut Wire) {
        let input = json!({"messages": [{"id": "h", "role": "user", "content": "hi"}]});
        let started = EventKind::RunStarted(Box::new(crate::events::RunStart {
            graph: "g".into(),
            graph_version: "v".into(),
            input: Arc::new(input),
            format: 1,
            forked_from: None,
            frontier: None,
            stream: None,
            user: None,
        }));
        let f = w.feed(&ev(1, 0, None, started));
        assert_eq!(
            names(&f),
            ["values", "checkpoints", "debug"],
            "the input's values"
        );
        assert_eq!(f[0].data["messages"][0]["type"], "human");
        assert_eq!(astream(&f), [("on_chain_start".into(), "LangGraph".into())]);
        assert_eq!(f[3].data["data"]["input"]["messages"][0]["type"], "human");
        assert_eq!(f[3].data["run_id"], Uuid::nil().to_string());
        assert_eq!(
            (f[2].seq, f[2].n),
            (1, 2),
            "ids: the event and the frame's place"
        );
        let f = w.feed(&ev(
            2,
            1,
            Some("route"),
            EventKind::NodeStarted {
                attempt: 1,
                item: None,
            },
        ));
        assert_eq!(names(&f), ["tasks", "debug"]);
        assert_eq!(astream(&f), [("on_chain_start".into(), "route".into())]);
        let node_run = f[2].data["run_id"].clone();
        assert_eq!(f[2].data["parent_ids"], json!([Uuid::nil()]));
        assert_eq!(f[2].data["metadata"]["langgraph_node"], "route");
        let f = w.feed(&ev(
            3,
            1,
            Some("route"),
            EventKind::NodeFinished {
                patch: Patch::new().set("intent", "x"),
                duration_us: 1,
            },
        ));
        assert_eq!(names(&f), ["updates", "tasks", "debug"]);
        assert_eq!(f[0].data, json!({"route": {"intent": "x"}}));
        assert_eq!(f[3].data["event"], "on_chain_end");
        assert_eq!(f[3].data["run_id"], node_run, "the node's start and end");
        assert_eq!(f[3].data["data"]["output"], json!({"intent": "x"}));
        let hidden = w.feed(&ev(
            4,
            1,
            Some("route"),
            EventKind::TextDelta {
                call: 0,
                delta: "{".into(),
            },
        ));
        assert!(hidden.is_empty(), "a hidden node's tokens are not streamed");
    }

    /// A streamed reply: its tokens in `messages` and `events`.
    fn second_step_streams_the_answer(w: &mut Wire) {
        // The next step's first event closes step 1: its values first.
        let f = w.feed(&ev(
            5,
            2,
            Some("reply"),
            EventKind::TextDelta {
                call: 0,
                delta: "Hel".into(),
            },
        ));
        assert_eq!(
            names(&f),
            [
                "values",
                "checkpoints",
                "debug",
                "messages/metadata",
                "messages/partial",
                "messages"
            ]
        );
        assert_eq!(f[0].data["intent"], "x");
        assert_eq!(f[5].data[0]["content"], "Hel");
        assert_eq!(f[5].data[1]["langgraph_node"], "reply");
        assert_eq!(f[5].data[1]["langgraph_step"], 2);
        assert_eq!(f[6].data["event"], "on_chat_model_stream");
        assert_eq!(f[6].data["data"]["chunk"]["content"], "Hel");
        assert_eq!(f[6].data["data"]["chunk"]["type"], "AIMessageChunk");
        assert_eq!(f[6].data["parent_ids"].as_array().map(Vec::len), Some(2));
        let reply = json!([{"id": "reply-1", "role": "assistant", "content": "Hello"}]);
        w.feed(&ev(
            6,
            2,
            Some("reply"),
            EventKind::NodeFinished {
                patch: Patch::new().set("messages", reply),
                duration_us: 1,
            },
        ));
    }

    /// A question pauses the run, an answer resumes it, then it fails.
    fn pause_resume_and_failure(w: &mut Wire) {
        let question = Interrupt {
            id: "q1".into(),
            node: "reply".into(),
            step: 2,
            task: 0,
            expires_at: None,
            ask: Ask::Question {
                question: "Sure?".into(),
                field: "answer".into(),
                schema: json!({"type": "string"}),
                options: vec![],
            },
        };
        let f = w.feed(&ev(
            7,
            2,
            None,
            EventKind::RunInterrupted {
                interrupts: vec![question],
            },
        ));
        assert_eq!(
            names(&f),
            ["values", "checkpoints", "debug", "updates", "values"]
        );
        let paused = &f[4].data;
        assert_eq!(
            paused["messages"][1]["type"], "ai",
            "the state, with the pause"
        );
        assert_eq!(paused["__interrupt__"][0]["id"], "q1");
        assert_eq!(astream(&f), [("on_chain_end".into(), "LangGraph".into())]);
        assert_eq!(paused["__interrupt__"][0]["value"]["question"], "Sure?");
        assert_eq!(w.interrupts.len(), 1);
        let f = w.feed(&ev(
            8,
            2,
            None,
            EventKind::RunResumed {
                answers: Default::default(),
            },
        ));
        assert_eq!(
            names(&f),
            ["values"],
            "a resumed stream starts with the state"
        );
        assert!(w.interrupts.is_empty());
        let f = w.feed(&ev(
            9,
            3,
            None,
            EventKind::RunFailed {
                error: ErrorInfo {
                    code: "boom".into(),
                    message: "it broke".into(),
                },
            },
        ));
        assert_eq!(f.last().map(|f| f.event), Some("error"));
        assert_eq!(
            w.error,
            Some(json!({"error": "boom", "message": "it broke"}))
        );
    }

    /// A message a node writes without streaming it goes out whole
    /// (`messages/complete`), as LangGraph sends a node's returned message;
    /// a streamed reply's stored message and the input's do not.
    #[test]
    fn an_unstreamed_message_goes_out_complete() {
        let mut w = wire();
        first_step_with_a_hidden_router(&mut w);
        let note = json!([{"id": "note-1", "role": "assistant", "content": "noted"},
                          {"id": "h", "role": "user", "content": "hi"}]);
        let finished = EventKind::NodeFinished {
            patch: Patch::new().set("messages", note),
            duration_us: 1,
        };
        let f = w.feed(&ev(5, 2, Some("reply"), finished));
        let names = names(&f);
        assert_eq!(
            &names[3..7],
            [
                "messages",
                "messages/metadata",
                "messages/complete",
                "updates"
            ],
            "only note-1: h is the input's"
        );
        assert_eq!(f[3].data[0]["type"], "ai");
        assert_eq!(f[3].data[1]["langgraph_node"], "reply");
        assert_eq!(f[5].data[0]["id"], "note-1");
        assert_eq!(f[5].data[0]["content"], "noted");
        let both = Modes::parse(Some(&json!(["messages", "messages-tuple"]))).unwrap();
        assert!(both.wants("messages") && !both.wants("messages/complete"));
        let one = Modes::parse(Some(&json!(["messages"]))).unwrap();
        assert!(!one.wants("messages") && one.wants("messages/complete"));
    }

    #[test]
    fn frames_are_crlf_sse_and_modes_filter_them() {
        let mut out = String::new();
        let f = Frame {
            seq: 3,
            n: 1,
            event: "values",
            data: json!({"a": 1}),
        };
        encode(&f, true, &mut out);
        assert_eq!(out, "event: values\r\ndata: {\"a\":1}\r\nid: 3-1\r\n\r\n");
        let modes = Modes::parse(Some(&json!(["messages-tuple", "updates"]))).unwrap();
        assert!(modes.wants("messages") && modes.wants("updates") && modes.wants("metadata"));
        assert!(!modes.wants("values"));
        assert!(Modes::parse(Some(&json!("nope"))).is_err());
        assert!(
            Modes::parse(None).unwrap().wants("values"),
            "values by default"
        );
    }
}
