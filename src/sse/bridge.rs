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
//!
//! This file holds the state machine and the answer's text; the rest is
//! split by what it puts on the wire: `config` (what the bridge knows of
//! the graph), `thinking` (the thinking panel), `tools` (tool parts),
//! `usage` (`data-usage`), `pause` (interrupts and resumes), `failed`
//! (a failed run) and `metadata` (`finish.messageMetadata`).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::chunk::Chunk;
use crate::events::{
    CustomData, Event, EventKind, LlmFinish, LlmStart, SourceRef, ToolDenial, Usage,
};
use crate::graph::spec::Surface;

mod config;
mod failed;
mod metadata;
mod pause;
mod thinking;
mod tools;
mod usage;

pub use config::BridgeConfig;
use thinking::{Thinking, emit};
use tools::ToolOwner;

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
    inputs: HashSet<String>,
    /// Per node: the model that answered its newest call, and its tokens.
    usage: BTreeMap<String, (String, Usage)>,
    finish_reason: &'static str,
    done: bool,
    /// Whether answer text was sent (streamed or passed through).
    answered: bool,
    /// The tasks (node, step, task) whose model refused under its content
    /// policy: their answer is the refusal, sent as they finish.
    refused: HashSet<String>,
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
            inputs: HashSet::new(),
            usage: BTreeMap::new(),
            finish_reason: "stop",
            done: false,
            answered: false,
            refused: HashSet::new(),
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
            EventKind::RunStarted(_) => out.push(Chunk::Start {
                message_id: self.cfg.message_id.clone(),
                message_metadata: self.cfg.metadata.clone(),
            }),
            EventKind::NodeStarted { .. }
            | EventKind::NodeRetrying { .. }
            | EventKind::NodeFinished { .. }
            | EventKind::NodeFailed { .. }
            | EventKind::Thinking { .. } => self.on_node(&at, out),
            EventKind::LlmStarted(_)
            | EventKind::TextDelta { .. }
            | EventKind::ReasoningDelta { .. }
            | EventKind::LlmFinished(_) => self.on_model(&at, out),
            EventKind::ToolCallStarted { .. }
            | EventKind::ToolCallDelta { .. }
            | EventKind::ToolCallReady(_)
            | EventKind::ToolError(_) => self.on_tool_call(&at, out),
            EventKind::ToolResult(_) => self.on_tool_result(&at, out),
            EventKind::Custom(_) | EventKind::Source(_) => self.on_data(&at, out),
            EventKind::RunFinished { .. }
            | EventKind::RunFailed { .. }
            | EventKind::RunCancelled { .. } => self.on_end(&at, out),
            EventKind::RunInterrupted { interrupts } => self.on_pause(ev, interrupts, out),
            EventKind::RunResumed { .. } => self.on_resume(out),
            EventKind::ToolDenied(tool_denial) => {
                let ToolDenial { call_id, .. } = &**tool_denial;
                self.on_denied(&at, call_id, out)
            }
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
                let answer = match self.cfg.answer.as_deref().and_then(|f| patch.get(f)) {
                    Some(Value::String(text)) => Some(text.clone()),
                    _ => None,
                };
                if answer.is_some() {
                    self.answer.clone_from(&answer);
                }
                match surface {
                    Surface::Answer => {
                        self.close_parts(out);
                        self.close_step(out);
                        self.answer_refused(ev, &key(), answer, out);
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

    /// An answering node that refused (its provider's content policy)
    /// finished with the refusal as its answer: sent now, where its
    /// answer would have streamed and before what later nodes send (the
    /// follow-ups) — not at the end of the run.
    fn answer_refused(
        &mut self,
        ev: &Event,
        key: &str,
        answer: Option<String>,
        out: &mut Vec<Chunk>,
    ) {
        let Some(text) = answer.filter(|t| !t.is_empty()) else {
            return;
        };
        if !self.refused.remove(key) {
            return;
        }
        text_part(format!("text-{}", ev.seq), text, out);
        self.answered = true;
        self.answer = None;
    }

    /// A model call's stream: steps, text and reasoning, usage.
    fn on_model(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let (ev, node, surface) = (at.ev, at.node, at.surface);
        let key = || at.key();
        if let EventKind::LlmStarted(llm_start) = &ev.event {
            let LlmStart { model, .. } = &**llm_start;
            model.clone_into(&mut self.usage.entry(node.to_owned()).or_default().0);
        }
        match &ev.event {
            EventKind::LlmStarted(_) if surface == Surface::Answer => {
                self.close_parts(out);
                if !(std::mem::take(&mut self.resume_step) && self.step_open) {
                    self.close_step(out);
                    out.push(Chunk::StartStep);
                    self.step_open = true;
                }
            }
            EventKind::LlmStarted(_) if surface == Surface::Hidden => {
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
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish { output, usage, .. } = &**llm_finish;
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

    /// Custom data and cited sources: they reach the UI whatever the
    /// node's surface.
    fn on_data(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let (ev, node) = (at.ev, at.node);
        match &ev.event {
            EventKind::Custom(custom_data) => {
                let CustomData {
                    name,
                    data,
                    id,
                    transient,
                } = &**custom_data;
                if name == crate::events::TRUNCATED {
                    self.finish_reason = "length";
                } else if name == crate::events::REFUSAL {
                    self.finish_reason = "content-filter";
                    self.refused.insert(at.key());
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
            EventKind::Source(source_ref) => {
                let SourceRef {
                    source_id,
                    url,
                    title,
                } = &**source_ref;
                out.push(Chunk::SourceUrl {
                    source_id: source_id.clone(),
                    url: url.clone(),
                    title: title.clone(),
                })
            }
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
                if let Some(text) = self
                    .answer
                    .take()
                    .filter(|t| !self.answered && !t.is_empty())
                {
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

/// A whole text part.
pub(super) fn text_part(id: String, text: String, out: &mut Vec<Chunk>) {
    out.push(Chunk::TextStart { id: id.clone() });
    out.push(Chunk::TextDelta {
        id: id.clone(),
        delta: text,
    });
    out.push(Chunk::TextEnd { id });
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
