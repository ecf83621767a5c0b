//! A run's model outputs and tool results, taken from its events, served
//! back in place of the model and the tools.
//!
//! Used to re-execute a run deterministically without the network, and to
//! resume a crashed run without repeating calls whose results were stored.
//! Model calls are keyed by (node, step, task, call number) and replayed
//! chunk for chunk as they streamed; tool calls by (node, step, task, call
//! id). A key seen several times is served in order: a retried node's
//! attempts, and a failed primary call then its fallback (same call
//! number), each with the name of the model that made it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use futures::StreamExt;

use crate::events::{Event, EventKind, LlmFailure, LlmFinish, LlmStart, ToolFault, ToolReturn};
use crate::llm::{ChunkStream, LlmChunk, LlmError, ToolDef};
use crate::tools::{ToolError, ToolOutcome};

type CallKey = (String, u32, u32, u32);
type ToolKey = (String, u32, u32, String);

/// A recorded tool result or failure.
#[derive(Clone, Debug)]
pub(crate) enum RecordedTool {
    /// It returned this.
    Ok(ToolOutcome),
    /// It failed like this.
    Err(crate::events::ToolFailure),
}

/// One recorded model call: its chunks, as the model streamed them.
type Chunks = Vec<Result<LlmChunk, LlmError>>;

/// One recorded model call: the model that made it and its chunks.
type Call = (String, Chunks);

/// Recorded model streams and tool results of one run.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    llm: Mutex<HashMap<CallKey, VecDeque<Call>>>,
    tools: Mutex<HashMap<ToolKey, VecDeque<RecordedTool>>>,
    /// Tools offered per task (node, step, task).
    offered: HashMap<(String, u32, u32), Vec<ToolDef>>,
    /// Calls made past an agent's time budget.
    past_budget: std::collections::HashSet<CallKey>,
    /// The answers the run was resumed with, by interrupt id.
    answers: HashMap<String, serde_json::Value>,
}

/// Adds the text a call produced but did not stream (a quiet reply, held
/// back from the user: see `quiet_replies`) to its recorded chunks, so a
/// re-execution is served the model's whole reply.
fn unstreamed_text(chunks: &mut Chunks, text: &str) {
    let streamed: String = chunks
        .iter()
        .filter_map(|c| match c {
            Ok(LlmChunk::Text(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    if let Some(rest) = text.strip_prefix(streamed.as_str())
        && !rest.is_empty()
    {
        chunks.push(Ok(LlmChunk::Text(rest.to_owned())));
    }
}

impl Recording {
    /// Everything the events of a run recorded.
    pub(crate) fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut reader = Reader::default();
        for ev in events {
            reader.read(ev);
        }
        reader.rec
    }

    /// The recorded stream of a model call, if there is one.
    pub(crate) fn llm(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call: u32,
    ) -> Option<(String, ChunkStream)> {
        let key = (node.to_owned(), step, task, call);
        let (model, chunks) = self
            .llm
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&key)?
            .pop_front()?;
        Some((model, futures::stream::iter(chunks).boxed()))
    }

    /// The recorded result of a tool call, if there is one.
    pub(crate) fn tool(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call_id: &str,
    ) -> Option<Result<ToolOutcome, ToolError>> {
        let key = (node.to_owned(), step, task, call_id.to_owned());
        let rec = self
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&key)?
            .pop_front()?;
        Some(match rec {
            RecordedTool::Ok(o) => Ok(o),
            RecordedTool::Err(f) => Err(ToolError::Recorded(f)),
        })
    }
}

impl crate::nodes::Playback for Recording {
    fn llm(&self, node: &str, step: u32, task: u32, call: u32) -> Option<(String, ChunkStream)> {
        Recording::llm(self, node, step, task, call)
    }

    fn tool(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call_id: &str,
    ) -> Option<Result<ToolOutcome, ToolError>> {
        Recording::tool(self, node, step, task, call_id)
    }

    fn past_budget(&self, node: &str, step: u32, task: u32, call: u32) -> bool {
        self.past_budget
            .contains(&(node.to_owned(), step, task, call))
    }

    fn tools_offered(&self, node: &str, step: u32, task: u32) -> Option<Vec<ToolDef>> {
        self.offered.get(&(node.to_owned(), step, task)).cloned()
    }

    fn answer(&self, id: &str) -> Option<serde_json::Value> {
        self.answers.get(id).cloned()
    }
}

/// A task's key in a recording: (node, step, task).
type TaskKey = (String, u32, u32);

/// A model call in progress: its key, model, chunks so far, and its tool
/// calls' ids by index.
type Open = (CallKey, String, Chunks, Vec<String>);

/// Reads a run's events into a [`Recording`] (`Recording::from_events`).
#[derive(Default)]
struct Reader {
    rec: Recording,
    /// The call in progress per task.
    open: HashMap<TaskKey, Open>,
    /// Tasks whose next call follows a time-budget note.
    budget_noted: std::collections::HashSet<TaskKey>,
}

impl Reader {
    fn read(&mut self, ev: &Event) {
        let node = ev.node.as_deref().unwrap_or("").to_owned();
        let task = (node.clone(), ev.step, ev.task);
        match &ev.event {
            EventKind::Thinking { text } if text.starts_with(crate::nodes::BUDGET_NOTE) => {
                self.budget_noted.insert(task);
            }
            EventKind::LlmStarted(llm_start) => {
                let LlmStart { call, model, .. } = &**llm_start;
                let key = (node, ev.step, ev.task, *call);
                if self.budget_noted.remove(&task) {
                    self.rec.past_budget.insert(key.clone());
                }
                self.open
                    .insert(task, (key, model.clone(), Vec::new(), Vec::new()));
            }
            EventKind::ToolsOffered { tools } => {
                self.rec.offered.insert(task, tools.clone());
            }
            EventKind::RunResumed { answers } => {
                self.rec
                    .answers
                    .extend(answers.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish { output, usage, .. } = &**llm_finish;
                if let Some((key, model, mut chunks, _)) = self.open.remove(&task) {
                    unstreamed_text(&mut chunks, &output.text);
                    chunks.push(Ok(LlmChunk::Finish(output.finish_reason.clone())));
                    chunks.push(Ok(LlmChunk::Usage(*usage)));
                    self.recorded_call(key, model, chunks);
                }
            }
            EventKind::LlmFailed(llm_failure) => {
                let LlmFailure { error, usage, .. } = &**llm_failure;
                if let Some((key, model, mut chunks, _)) = self.open.remove(&task) {
                    // The usage it reported before failing, so the
                    // re-executed call records the same spend.
                    if !usage.is_zero() {
                        chunks.push(Ok(LlmChunk::Usage(*usage)));
                    }
                    chunks.push(Err(LlmError::replayed(error)));
                    self.recorded_call(key, model, chunks);
                }
            }
            EventKind::ToolResult(tool_return) => {
                let ToolReturn {
                    call_id,
                    output,
                    cached,
                    display,
                    ..
                } = &**tool_return;
                let outcome = ToolOutcome {
                    output: output.clone(),
                    cached: *cached,
                    display: *display,
                };
                self.recorded_tool(task, call_id, RecordedTool::Ok(outcome));
            }
            EventKind::ToolError(tool_fault) => {
                let ToolFault { call_id, error, .. } = &**tool_fault;
                self.recorded_tool(task, call_id, RecordedTool::Err(error.clone()));
            }
            other => self.streamed(&task, other),
        }
    }

    /// A piece of the open call's stream: text, reasoning, tool calls.
    fn streamed(&mut self, task: &TaskKey, event: &EventKind) {
        let Some(o) = self.open.get_mut(task) else {
            return;
        };
        match event {
            EventKind::TextDelta { delta, .. } => o.2.push(Ok(LlmChunk::Text(delta.clone()))),
            EventKind::ReasoningDelta { delta, .. } => {
                o.2.push(Ok(LlmChunk::Reasoning(delta.clone())));
            }
            EventKind::ToolCallStarted { call_id, tool } => {
                let index = o.3.len() as u32;
                o.3.push(call_id.clone());
                o.2.push(Ok(LlmChunk::ToolCallStart {
                    index,
                    id: call_id.clone(),
                    name: tool.clone(),
                }));
            }
            EventKind::ToolCallDelta { call_id, delta } => {
                if let Some(index) = o.3.iter().position(|c| c == call_id) {
                    o.2.push(Ok(LlmChunk::ToolCallArgs {
                        index: index as u32,
                        delta: delta.clone(),
                    }));
                }
            }
            _ => {}
        }
    }

    fn recorded_call(&mut self, key: CallKey, model: String, chunks: Chunks) {
        self.rec
            .llm
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default()
            .push_back((model, chunks));
    }

    fn recorded_tool(&mut self, (node, step, task): TaskKey, call_id: &str, tool: RecordedTool) {
        self.rec
            .tools
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((node, step, task, call_id.to_owned()))
            .or_default()
            .push_back(tool);
    }
}
