//! The bridge: run events → UI message stream chunks, as a pure state
//! machine.
//!
//! Given the same events it always produces the same chunks — live, on
//! resume and in `stategraph replay --sse` — because it reads nothing but the
//! events and its configuration (throttling uses the events' own
//! timestamps). Which node streams where is graph configuration:
//! - `answer` nodes: each model call is a step (`start-step` …
//!   `finish-step`); text streams as `text-*`, reasoning as `reasoning-*`,
//!   tool calls as `tool-*` chunks (dynamic tools);
//! - `thinking` nodes: one `data-thinking` part per task, updated in place
//!   (same id) with its text, tool calls and status — text-only updates at
//!   most every [`BridgeConfig::thinking_interval_us`] of event time;
//! - `hidden` nodes: nothing, except their explicit `thinking` notes (the
//!   router's reasoning) and custom data, which always reach the UI.
//!
//! Every node's token usage is kept in one `data-usage` part; follow-up
//! questions and other custom data become `data-<name>` parts, cited sources
//! `source-url` parts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use super::chunk::Chunk;
use crate::events::{Event, EventKind, ToolFailure, Usage};
use crate::graph::spec::Surface;

mod failed;
mod metadata;
mod pause;

/// What the bridge needs to know about the graph and the response.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// The assistant message id (fresh per response).
    pub message_id: String,
    /// `start.messageMetadata`: run id, request id, graph, model facts.
    pub metadata: Value,
    /// Surface by node id (shared with the graph and its other runs).
    pub surfaces: Arc<HashMap<String, Surface>>,
    /// Kind by node id (shown in thinking parts).
    pub kinds: Arc<HashMap<String, String>>,
    /// Minimum event time between text-only updates of a thinking part.
    pub thinking_interval_us: u64,
    /// The field holding the answer (`chat.answer`). When the run streamed
    /// no answer text (the answer was computed, not generated), its final
    /// value is sent as one text part before `finish`, so the user sees it.
    pub answer: Option<String>,
    /// Client-side tools (the front end runs them): their parts are
    /// `tool-<name>`, not `dynamic-tool`, so `onToolCall` / `addToolOutput`
    /// address them by name.
    pub client_tools: Vec<String>,
}

impl BridgeConfig {
    /// Surfaces and kinds taken from a compiled graph.
    pub fn for_graph(graph: &crate::nodes::Graph, message_id: String, metadata: Value) -> Self {
        Self {
            message_id,
            metadata,
            surfaces: Arc::clone(&graph.node_surfaces),
            kinds: Arc::clone(&graph.node_kinds),
            thinking_interval_us: 250_000,
            answer: graph.chat.answer.as_deref().map(str::to_owned),
            client_tools: graph
                .nodes
                .iter()
                .flat_map(|n| n.client_tools.iter().cloned())
                .collect(),
        }
    }

    /// The settings as recorded in `run_started.stream`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "messageId": self.message_id,
            "metadata": self.metadata,
            "surfaces": self.surfaces,
            "kinds": self.kinds,
            "thinkingIntervalUs": self.thinking_interval_us,
        });
        // Absent in runs recorded before answers were sent, which then
        // replay as they streamed.
        if let Some(a) = &self.answer {
            v["answer"] = json!(a);
        }
        if !self.client_tools.is_empty() {
            v["clientTools"] = json!(self.client_tools);
        }
        v
    }

    /// Settings recorded with [`BridgeConfig::to_json`].
    pub fn from_json(v: &Value) -> Option<Self> {
        Some(Self {
            message_id: v["messageId"].as_str()?.to_owned(),
            metadata: v["metadata"].clone(),
            surfaces: serde_json::from_value(v["surfaces"].clone()).ok()?,
            kinds: serde_json::from_value(v["kinds"].clone()).ok()?,
            thinking_interval_us: v["thinkingIntervalUs"].as_u64().unwrap_or(250_000),
            answer: v["answer"].as_str().map(str::to_owned),
            client_tools: serde_json::from_value(v["clientTools"].clone()).unwrap_or_default(),
        })
    }

    /// A node's surface; nested subgraph nodes (`parent/child`) take their
    /// parent's.
    fn surface(&self, node: &str) -> Surface {
        let top = node.split('/').next().unwrap_or(node);
        self.surfaces.get(top).copied().unwrap_or(Surface::Hidden)
    }

    /// Whether a tool's parts are `dynamic-tool` (it runs on the server).
    fn dynamic(&self, tool: &str) -> bool {
        !self.client_tools.iter().any(|t| t == tool)
    }

    fn kind(&self, node: &str) -> &str {
        let top = node.split('/').next().unwrap_or(node);
        self.kinds.get(top).map_or("node", String::as_str)
    }
}

/// A thinking-panel part being built.
#[derive(Debug)]
struct Thinking {
    id: String,
    node: String,
    kind: String,
    status: &'static str,
    text: String,
    notes: Vec<String>,
    tools: Vec<Value>,
    started_at: u64,
    finished_at: Option<u64>,
    last_emit: u64,
    dirty: bool,
}

impl Thinking {
    fn payload(&self) -> Value {
        let mut v = json!({
            "node": self.node,
            "kind": self.kind,
            "status": self.status,
            "text": self.text,
            "notes": self.notes,
            "toolCalls": self.tools,
            "startedAt": self.started_at / 1000,
        });
        if let Some(end) = self.finished_at {
            v["durationMs"] = json!(end.saturating_sub(self.started_at) / 1000);
        }
        v
    }

    fn tool(&mut self, call_id: &str) -> Option<&mut Value> {
        self.tools.iter_mut().find(|t| t["toolCallId"] == call_id)
    }
}

/// Which UI surface a tool call was shown on.
#[derive(Debug, Clone)]
enum ToolOwner {
    Answer,
    Thinking(String),
}

/// One event with what the bridge derives from it.
struct At<'a> {
    ev: &'a Event,
    node: &'a str,
    surface: Surface,
}

impl At<'_> {
    /// The thinking part's key: node, step and task.
    fn key(&self) -> String {
        format!("{}#{}#{}", self.node, self.ev.step, self.ev.task)
    }
}

/// The event → chunk state machine for one assistant message.
#[derive(Debug)]
pub struct Bridge {
    cfg: BridgeConfig,
    step_open: bool,
    text: Option<String>,
    reasoning: Option<String>,
    thinking: HashMap<String, Thinking>,
    tools: HashMap<String, ToolOwner>,
    /// Answer tool calls whose `tool-input-available` was sent.
    inputs: std::collections::HashSet<String>,
    /// Per node: the model that answered its newest call, and its tokens.
    usage: BTreeMap<String, (String, Usage)>,
    finish_reason: &'static str,
    done: bool,
    /// Whether answer text was sent (streamed or passed through).
    answered: bool,
    /// The answer field's newest value (see [`BridgeConfig::answer`]).
    answer: Option<String>,
    /// The node that failed last, named when the run fails.
    failed_node: Option<String>,
    /// Whether that node answers (its surface is `answer`): then the
    /// answer it was writing is half an answer (see `failed`).
    answer_failed: bool,
    /// Pauses up to this seq were followed by a resume: the message stays
    /// open through them (see [`Bridge::resumed_after`]).
    resumed: u64,
    /// The open step was opened by a resume and no model call has started
    /// in it yet: what it holds so far (an approved call's output, a
    /// denial) updates parts the message already has, so the next answer
    /// call continues in it instead of leaving it empty — an empty step is
    /// a lone `step-start` part in the stored message.
    resume_step: bool,
}

impl Bridge {
    /// A bridge for one response.
    pub fn new(cfg: BridgeConfig) -> Self {
        Self {
            cfg,
            step_open: false,
            text: None,
            reasoning: None,
            thinking: HashMap::new(),
            tools: HashMap::new(),
            inputs: std::collections::HashSet::new(),
            usage: BTreeMap::new(),
            finish_reason: "stop",
            done: false,
            answered: false,
            answer: None,
            failed_node: None,
            answer_failed: false,
            resumed: 0,
            resume_step: false,
        }
    }

    /// Says that the run continued after its events up to `seq`: a pause
    /// among them does not close the message (a continuation's stream, or
    /// a replay of the whole run, carries on into what came after).
    pub fn resumed_after(&mut self, seq: u64) {
        self.resumed = seq;
    }

    /// Whether the message has been closed (finish, error or abort sent).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The chunks for one event, appended to `out`.
    pub fn on_event(&mut self, ev: &Event, out: &mut Vec<Chunk>) {
        if self.done {
            return;
        }
        let node = ev.node.as_deref().unwrap_or("");
        let surface = if node.is_empty() {
            Surface::Hidden
        } else {
            self.cfg.surface(node)
        };
        let at = At { ev, node, surface };
        match &ev.event {
            EventKind::RunStarted { .. } => out.push(Chunk::Start {
                message_id: self.cfg.message_id.clone(),
                message_metadata: self.cfg.metadata.clone(),
            }),
            EventKind::NodeStarted { .. }
            | EventKind::NodeRetrying { .. }
            | EventKind::NodeFinished { .. }
            | EventKind::NodeFailed { .. }
            | EventKind::Thinking { .. } => self.on_node(&at, out),
            EventKind::LlmStarted { .. }
            | EventKind::TextDelta { .. }
            | EventKind::ReasoningDelta { .. }
            | EventKind::LlmFinished { .. } => self.on_model(&at, out),
            EventKind::ToolCallStarted { .. }
            | EventKind::ToolCallDelta { .. }
            | EventKind::ToolCallReady { .. }
            | EventKind::ToolError { .. } => self.on_tool_call(&at, out),
            EventKind::ToolResult { .. } => self.on_tool_result(&at, out),
            EventKind::Custom { .. } | EventKind::Source { .. } => self.on_data(&at, out),
            EventKind::RunFinished { .. }
            | EventKind::RunFailed { .. }
            | EventKind::RunCancelled { .. } => self.on_end(&at, out),
            EventKind::RunInterrupted { interrupts } => self.on_pause(ev, interrupts, out),
            EventKind::RunResumed { .. } => self.on_resume(out),
            EventKind::ToolDenied { call_id, .. } => self.on_denied(&at, call_id, out),
            _ => {}
        }
    }

    /// A node's progress: its thinking part, or the answer's steps.
    fn on_node(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let (ev, node, surface) = (at.ev, at.node, at.surface);
        let key = || at.key();
        match &ev.event {
            EventKind::NodeStarted { attempt, .. } if surface == Surface::Thinking => {
                let k = key();
                if *attempt > 1 {
                    if let Some(t) = self.thinking.get_mut(&k) {
                        t.status = "running";
                        t.text.clear();
                        t.tools.clear();
                        out.push(emit(t, ev.at));
                    }
                } else {
                    let t = self.thinking_part(&k, node, ev);
                    out.push(emit(t, ev.at));
                }
            }
            EventKind::NodeRetrying { attempt, .. } => match surface {
                Surface::Answer => {
                    self.close_parts(out);
                    self.close_step(out);
                }
                Surface::Thinking => {
                    if let Some(t) = self.thinking.get_mut(&key()) {
                        t.status = "retrying";
                        t.notes.push(format!("attempt {attempt} failed; retrying"));
                        out.push(emit(t, ev.at));
                    }
                }
                Surface::Hidden => {}
            },
            EventKind::NodeFinished { patch, .. } => {
                let answer = self.cfg.answer.as_deref().and_then(|f| patch.get(f));
                if let Some(Value::String(text)) = answer {
                    self.answer = Some(text.clone());
                }
                match surface {
                    Surface::Answer => {
                        self.close_parts(out);
                        self.close_step(out);
                    }
                    Surface::Thinking => {
                        if let Some(t) = self.thinking.get_mut(&key()) {
                            t.status = "done";
                            t.finished_at = Some(ev.at);
                            out.push(emit(t, ev.at));
                        }
                    }
                    Surface::Hidden => {
                        if let Some(t) = self
                            .thinking
                            .get_mut(&key())
                            .filter(|t| t.status == "running")
                        {
                            t.status = "done";
                            t.finished_at = Some(ev.at);
                            out.push(emit(t, ev.at));
                        }
                    }
                }
            }
            EventKind::NodeFailed { .. } => {
                self.failed_node = Some(node.to_owned());
                self.answer_failed = surface == Surface::Answer;
                if let Some(t) = self.thinking.get_mut(&key()) {
                    t.status = "failed";
                    t.finished_at = Some(ev.at);
                    out.push(emit(t, ev.at));
                }
            }
            EventKind::Thinking { text } => {
                let k = key();
                let t = self.thinking_part(&k, node, ev);
                if t.status == "running" && surface == Surface::Thinking {
                    t.notes.push(text.clone());
                } else {
                    // A note from a node without a thinking surface (the
                    // router's reasoning): a finished part of its own.
                    t.status = "done";
                    t.text = text.clone();
                    t.finished_at = Some(ev.at);
                }
                out.push(emit(t, ev.at));
            }
            _ => {}
        }
    }

    /// A model call's stream: steps, text and reasoning, usage.
    fn on_model(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let (ev, node, surface) = (at.ev, at.node, at.surface);
        let key = || at.key();
        if let EventKind::LlmStarted { model, .. } = &ev.event {
            model.clone_into(&mut self.usage.entry(node.to_owned()).or_default().0);
        }
        match &ev.event {
            EventKind::LlmStarted { .. } if surface == Surface::Answer => {
                self.close_parts(out);
                if !(std::mem::take(&mut self.resume_step) && self.step_open) {
                    self.close_step(out);
                    out.push(Chunk::StartStep);
                    self.step_open = true;
                }
            }
            EventKind::LlmStarted { .. } if surface == Surface::Hidden => {
                // A hidden node waiting on a model (a router on a slow
                // model) shows as working from its first call, so the
                // panel is never silent while it thinks.
                let k = key();
                if !self.thinking.contains_key(&k) {
                    let t = self.thinking_part(&k, node, ev);
                    out.push(emit(t, ev.at));
                }
            }
            EventKind::TextDelta { delta, .. } => self.on_text(at, delta, out),
            EventKind::ReasoningDelta { delta, .. } => self.on_reasoning(at, delta, out),
            EventKind::LlmFinished { output, usage, .. } => {
                self.usage.entry(node.to_owned()).or_default().1 += *usage;
                if surface == Surface::Answer {
                    self.close_parts(out);
                    self.finish_reason = match output.finish_reason.as_str() {
                        "length" => "length",
                        "content_filter" => "content-filter",
                        _ => "stop",
                    };
                }
                out.push(self.usage_chunk());
            }
            _ => {}
        }
    }

    /// Answer text: a `text` part per model call; in a thinking part,
    /// its text, sent at most every `thinking_interval_us`.
    fn on_text(&mut self, at: &At<'_>, delta: &str, out: &mut Vec<Chunk>) {
        let ev = at.ev;
        match at.surface {
            Surface::Answer => {
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("text-{}", ev.seq);
                        out.push(Chunk::TextStart { id: id.clone() });
                        self.text = Some(id.clone());
                        self.answered = true;
                        id
                    }
                };
                out.push(Chunk::TextDelta {
                    id,
                    delta: delta.to_owned(),
                });
            }
            Surface::Thinking => {
                let interval = self.cfg.thinking_interval_us;
                if let Some(t) = self.thinking.get_mut(&at.key()) {
                    t.text.push_str(delta);
                    t.dirty = true;
                    if ev.at >= t.last_emit + interval {
                        out.push(emit(t, ev.at));
                    }
                }
            }
            Surface::Hidden => {}
        }
    }

    /// Reasoning: a `reasoning` part per model call; in a thinking part,
    /// its text (sent with the next update).
    fn on_reasoning(&mut self, at: &At<'_>, delta: &str, out: &mut Vec<Chunk>) {
        match at.surface {
            Surface::Answer => {
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("reasoning-{}", at.ev.seq);
                        out.push(Chunk::ReasoningStart { id: id.clone() });
                        self.reasoning = Some(id.clone());
                        id
                    }
                };
                out.push(Chunk::ReasoningDelta {
                    id,
                    delta: delta.to_owned(),
                });
            }
            Surface::Thinking => {
                if let Some(t) = self.thinking.get_mut(&at.key()) {
                    t.text.push_str(delta);
                    t.dirty = true;
                }
            }
            Surface::Hidden => {}
        }
    }

    /// A tool call's input and failure.
    fn on_tool_call(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let (ev, surface) = (at.ev, at.surface);
        let key = || at.key();
        match &ev.event {
            EventKind::ToolCallStarted { call_id, tool } => {
                self.tool_started(surface, &key(), call_id, tool, out)
            }
            EventKind::ToolCallDelta { call_id, delta } => {
                if let Some(ToolOwner::Answer) = self.tools.get(call_id) {
                    out.push(Chunk::ToolInputDelta {
                        tool_call_id: call_id.clone(),
                        input_text_delta: delta.clone(),
                    });
                }
            }
            EventKind::ToolCallReady {
                call_id,
                tool,
                args,
            } => {
                if !self.tools.contains_key(call_id) {
                    self.tool_started(surface, &key(), call_id, tool, out);
                }
                match self.tools.get(call_id).cloned() {
                    Some(ToolOwner::Answer) => {
                        self.inputs.insert(call_id.clone());
                        out.push(Chunk::ToolInputAvailable {
                            tool_call_id: call_id.clone(),
                            tool_name: tool.clone(),
                            input: args.clone(),
                            dynamic: self.cfg.dynamic(tool),
                        });
                    }
                    Some(ToolOwner::Thinking(k)) => {
                        self.update_tool(&k, call_id, ev.at, out, |v| {
                            v["state"] = json!("input-available");
                            v["input"] = args.clone();
                        })
                    }
                    None => {}
                }
            }
            EventKind::ToolError {
                call_id,
                tool,
                error,
            } => {
                if !self.tools.contains_key(call_id) {
                    self.tool_started(surface, &key(), call_id, tool, out);
                }
                match self.tools.get(call_id).cloned() {
                    // Failed before its input was complete (cut off, not
                    // JSON): the AI SDK wants an input error then.
                    Some(ToolOwner::Answer) if !self.inputs.contains(call_id) => {
                        out.push(Chunk::ToolInputError {
                            tool_call_id: call_id.clone(),
                            tool_name: tool.clone(),
                            input: Value::Null,
                            error_text: tool_error_text(error),
                            dynamic: self.cfg.dynamic(tool),
                        });
                    }
                    Some(ToolOwner::Answer) => out.push(Chunk::ToolOutputError {
                        tool_call_id: call_id.clone(),
                        error_text: tool_error_text(error),
                        dynamic: self.cfg.dynamic(tool),
                    }),
                    Some(ToolOwner::Thinking(k)) => {
                        self.update_tool(&k, call_id, ev.at, out, |v| {
                            v["state"] = json!("output-error");
                            v["errorText"] = json!(tool_error_text(error));
                        })
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// A tool's result; a pass-through result is also answer text.
    fn on_tool_result(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let ev = at.ev;
        let EventKind::ToolResult {
            call_id,
            tool,
            output,
            display,
            cached,
            ..
        } = &ev.event
        else {
            return;
        };
        // A cache hit says so: on the answer's tool part as provider
        // metadata, in the thinking panel's tool entry as `cached`.
        match self.tools.get(call_id).cloned() {
            Some(ToolOwner::Answer) => out.push(Chunk::ToolOutputAvailable {
                tool_call_id: call_id.clone(),
                output: output.clone(),
                dynamic: self.cfg.dynamic(tool),
                provider_metadata: cached.then(|| json!({"stategraph": {"cached": true}})),
            }),
            Some(ToolOwner::Thinking(k)) => self.update_tool(&k, call_id, ev.at, out, |v| {
                v["state"] = json!("output-available");
                v["output"] = output.clone();
                if *cached {
                    v["cached"] = json!(true);
                }
            }),
            None => {}
        }
        if *display {
            // Pass-through: the result is part of the answer, verbatim,
            // whichever surface the node streams to.
            self.close_parts(out);
            let text = match output {
                Value::String(s) => s.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            text_part(format!("text-{}", ev.seq), text, out);
            self.answered = true;
        }
    }

    /// Custom data and cited sources: they reach the UI whatever the
    /// node's surface.
    fn on_data(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let (ev, node) = (at.ev, at.node);
        match &ev.event {
            EventKind::Custom {
                name,
                data,
                id,
                transient,
            } => {
                if name == crate::events::TRUNCATED {
                    self.finish_reason = "length";
                } else if name == crate::events::REFUSAL {
                    self.finish_reason = "content-filter";
                }
                out.push(Chunk::Data {
                    name: data_name(name),
                    id: Some(id.clone().unwrap_or_else(|| {
                        format!("{}-{}-{}", node.replace('/', "-"), ev.step, ev.task)
                    })),
                    data: data.clone(),
                    transient: *transient,
                })
            }
            // Cited sources reach the UI whatever the node's surface, like custom data.
            EventKind::Source {
                source_id,
                url,
                title,
            } => out.push(Chunk::SourceUrl {
                source_id: source_id.clone(),
                url: url.clone(),
                title: title.clone(),
            }),
            _ => {}
        }
    }

    /// The end of the run: the message closes.
    fn on_end(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let ev = at.ev;
        match &ev.event {
            EventKind::RunFinished { steps, usage } => {
                self.flush(out);
                self.close_parts(out);
                self.close_step(out);
                if let Some(text) = self.answer.take().filter(|_| !self.answered) {
                    text_part(format!("text-{}", ev.seq), text, out);
                }
                out.push(Chunk::Finish {
                    finish_reason: self.finish_reason.to_owned(),
                    message_metadata: metadata::finish(*steps, usage),
                });
                self.done = true;
            }
            EventKind::RunFailed { .. } => self.on_failed(at, out),
            EventKind::RunCancelled { reason } => {
                self.flush(out);
                self.close_parts(out);
                self.close_step(out);
                out.push(Chunk::Abort {
                    reason: reason.clone(),
                });
                self.done = true;
            }
            _ => {}
        }
    }

    fn thinking_part(&mut self, key: &str, node: &str, ev: &Event) -> &mut Thinking {
        let kind = self.cfg.kind(node).to_owned();
        self.thinking
            .entry(key.to_owned())
            .or_insert_with(|| Thinking {
                id: format!(
                    "thinking-{}-{}-{}",
                    node.replace('/', "-"),
                    ev.step,
                    ev.task
                ),
                node: node.to_owned(),
                kind,
                status: "running",
                text: String::new(),
                notes: Vec::new(),
                tools: Vec::new(),
                started_at: ev.at,
                finished_at: None,
                last_emit: 0,
                dirty: false,
            })
    }

    fn tool_started(
        &mut self,
        surface: Surface,
        key: &str,
        call_id: &str,
        tool: &str,
        out: &mut Vec<Chunk>,
    ) {
        match surface {
            Surface::Answer => {
                self.tools.insert(call_id.to_owned(), ToolOwner::Answer);
                out.push(Chunk::ToolInputStart {
                    tool_call_id: call_id.to_owned(),
                    tool_name: tool.to_owned(),
                    dynamic: self.cfg.dynamic(tool),
                });
            }
            Surface::Thinking => {
                if let Some(t) = self.thinking.get_mut(key) {
                    t.tools.push(json!({"toolCallId": call_id, "toolName": tool, "state": "input-streaming", "input": null}));
                    t.dirty = true;
                    self.tools
                        .insert(call_id.to_owned(), ToolOwner::Thinking(key.to_owned()));
                }
            }
            Surface::Hidden => {}
        }
    }

    fn update_tool(
        &mut self,
        key: &str,
        call_id: &str,
        at: u64,
        out: &mut Vec<Chunk>,
        f: impl FnOnce(&mut Value),
    ) {
        if let Some(t) = self.thinking.get_mut(key) {
            if let Some(v) = t.tool(call_id) {
                f(v);
            }
            out.push(emit(t, at));
        }
    }

    /// `data-usage`: per node the model id, its cost and its prompt, completion,
    /// cached-prompt and reasoning tokens; and the totals.
    fn usage_chunk(&self) -> Chunk {
        let counts = |u: &Usage| {
            json!({"promptTokens": u.prompt_tokens, "completionTokens": u.completion_tokens,
                "cachedTokens": u.cached_tokens, "reasoningTokens": u.reasoning_tokens,
                "cacheWriteTokens": u.cache_write_tokens, "cost": dollars(u)})
        };
        let nodes: serde_json::Map<String, Value> = self
            .usage
            .iter()
            .map(|(n, (model, u))| {
                let mut v = counts(u);
                v["model"] = json!(model);
                (n.clone(), v)
            })
            .collect();
        let mut total = Usage::default();
        let mut models: Vec<&str> = Vec::new();
        for (model, u) in self.usage.values() {
            total += *u;
            if !models.contains(&model.as_str()) {
                models.push(model);
            }
        }
        let mut total = counts(&total);
        total["models"] = json!(models);
        Chunk::Data {
            name: "usage".into(),
            id: Some("usage".into()),
            data: json!({"nodes": nodes, "total": total}),
            transient: false,
        }
    }

    /// Sends thinking parts with unsent text, in a stable order.
    fn flush(&mut self, out: &mut Vec<Chunk>) {
        let mut dirty: Vec<&mut Thinking> =
            self.thinking.values_mut().filter(|t| t.dirty).collect();
        dirty.sort_by(|a, b| a.id.cmp(&b.id));
        for t in dirty {
            let at = t.last_emit;
            out.push(emit(t, at));
        }
    }

    fn close_parts(&mut self, out: &mut Vec<Chunk>) {
        if let Some(id) = self.reasoning.take() {
            out.push(Chunk::ReasoningEnd { id });
        }
        if let Some(id) = self.text.take() {
            out.push(Chunk::TextEnd { id });
        }
    }

    fn close_step(&mut self, out: &mut Vec<Chunk>) {
        if std::mem::take(&mut self.step_open) {
            out.push(Chunk::FinishStep);
        }
    }
}

fn emit(t: &mut Thinking, at: u64) -> Chunk {
    t.last_emit = at;
    t.dirty = false;
    Chunk::Data {
        name: "thinking".into(),
        id: Some(t.id.clone()),
        data: t.payload(),
        transient: false,
    }
}

/// A whole text part.
pub(super) fn text_part(id: String, text: String, out: &mut Vec<Chunk>) {
    out.push(Chunk::TextStart { id: id.clone() });
    out.push(Chunk::TextDelta {
        id: id.clone(),
        delta: text,
    });
    out.push(Chunk::TextEnd { id });
}

fn tool_error_text(e: &ToolFailure) -> String {
    format!("{}: {}", e.kind, e.message)
}

/// A custom event name as a data part name: ASCII letters (case kept, so
/// a front end's `data-quickAnswerCard` renderer matches), digits, `-`.
fn data_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() { "custom".into() } else { s }
}

/// A cost in US dollars as JSON: a whole number written as an integer, as
/// JavaScript writes it back (the stored message and the client's agree).
fn dollars(u: &Usage) -> Value {
    let d = u.cost_usd();
    if d.fract() == 0.0 && d < 9e15 {
        json!(d as u64)
    } else {
        json!(d)
    }
}
