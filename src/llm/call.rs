//! Driving one model call and turning it into run events.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use super::record::{CallRecorder, CallStart};
use super::{ChatModel, ChatRequest, LlmChunk, LlmError};
use crate::events::{
    Event, EventKind, LlmFailure, LlmFinish, LlmOutput, LlmStart, NodeEvents, ToolCallRecord, Usage,
};

/// What a node passes to [`call_model`] besides the request.
#[derive(Debug)]
pub struct ModelCall<'a> {
    /// The task's event handle.
    pub events: &'a NodeEvents,
    /// The model role (for events and metrics).
    pub role: &'a Arc<str>,
    /// Call number within the task, from 0.
    pub call: u32,
    /// Replies that are never streamed as text (`quiet_replies`: see
    /// `llm::quiet`).
    pub quiet: &'a [String],
    /// Hears the request when the call starts (`None`: not recorded).
    pub recorder: Option<&'a dyn CallRecorder>,
    /// Where the model is served (`ChatModel::describe`), for the recorder.
    pub endpoint: &'a str,
}

/// A finished model call: its `llm_finished` event, which owns the output
/// (no copy is made for the caller).
#[derive(Debug, Clone)]
pub struct LlmReply(Arc<Event>);

impl LlmReply {
    /// What the model produced.
    pub fn output(&self) -> &LlmOutput {
        match &self.0.event {
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish { output, .. } = &**llm_finish;
                output
            }
            _ => &EMPTY_OUTPUT,
        }
    }

    /// Tokens used.
    pub fn usage(&self) -> Usage {
        match &self.0.event {
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish { usage, .. } = &**llm_finish;
                *usage
            }
            _ => Usage::default(),
        }
    }
}

static EMPTY_OUTPUT: LlmOutput = LlmOutput {
    text: String::new(),
    reasoning: String::new(),
    tool_calls: Vec::new(),
    finish_reason: String::new(),
};

/// Why a stream that ended without a finish reason failed.
const UNFINISHED: &str = "the stream ended before a finish reason (cut off)";

/// Runs one model call: emits `llm_started`, every delta and tool-call
/// fragment as it arrives, then `llm_finished` (or `llm_failed`), and returns
/// the assembled output with its token usage. A stream that ends without a
/// finish reason is a failed call, whatever text it carried.
///
/// # Errors
/// The model failed, or its stream ended without a finish reason; the
/// failure has been emitted as `llm_failed`.
pub async fn call_model(
    model: &dyn ChatModel,
    cx: ModelCall<'_>,
    request: &ChatRequest,
) -> Result<LlmReply, LlmError> {
    stream_call(model.name(), model.stream(request), cx, request).await
}

/// As [`call_model`], over an already started stream (a recorded one, when
/// re-executing or resuming).
///
/// # Errors
/// The stream failed; emitted as `llm_failed`.
pub(crate) async fn stream_call(
    model: &str,
    mut stream: super::ChunkStream,
    cx: ModelCall<'_>,
    request: &ChatRequest,
) -> Result<LlmReply, LlmError> {
    let started = Instant::now();
    let call = cx.call;
    begin(model, &cx, request).await;
    let Received {
        mut out,
        usage,
        calls,
        mut held,
    } = receive(&mut stream, &cx).await?;
    // A stream that ends without saying why the model stopped was cut off
    // (a proxy closed it, a recording or a script ended early): what it
    // carried is half an answer, and half an answer is not data. The call
    // fails like any broken stream, so the node retries or degrades.
    if out.finish_reason.is_empty() {
        return Err(failed(&cx, LlmError::Stream(UNFINISHED.into()), usage).await);
    }
    if let Some(delta) = held.finish(&out.text) {
        cx.events.note_text(&delta);
        cx.events.emit(EventKind::TextDelta { call, delta }).await;
    }
    out.tool_calls = calls.0.into_iter().map(|(_, c)| c).collect();
    let ev = cx
        .events
        .emit(EventKind::LlmFinished(Box::new(LlmFinish {
            call,
            output: out,
            usage,
            duration_us: started.elapsed().as_micros() as u64,
        })))
        .await;
    Ok(LlmReply(ev))
}

/// Announces the call: emits `llm_started` and hands the request to the
/// recorder, so a reader sees what was asked before any answer arrives.
async fn begin(model: &str, cx: &ModelCall<'_>, request: &ChatRequest) {
    let begun = cx
        .events
        .emit(EventKind::LlmStarted(Box::new(LlmStart {
            call: cx.call,
            role: Arc::clone(cx.role),
            model: model.to_owned(),
            request: request.fingerprint(),
        })))
        .await;
    if let Some(recorder) = cx.recorder {
        recorder.record(CallStart {
            run_id: begun.run_id,
            seq: begun.seq,
            step: begun.step,
            node: cx.events.node(),
            task: begun.task,
            call: cx.call,
            role: cx.role,
            model,
            endpoint: cx.endpoint,
            request,
        });
    }
}

/// What a stream delivered, assembled.
struct Received<'q> {
    out: LlmOutput,
    usage: Usage,
    calls: ToolCalls,
    /// Text still held back as a possible quiet reply.
    held: super::quiet::Held<'q>,
}

/// Streams every chunk as its event while assembling the output (text held
/// back while it may still turn out to be a quiet reply).
///
/// # Errors
/// The stream failed; emitted as `llm_failed`.
async fn receive<'q>(
    stream: &mut super::ChunkStream,
    cx: &ModelCall<'q>,
) -> Result<Received<'q>, LlmError> {
    let call = cx.call;
    let mut out = LlmOutput::default();
    let mut usage = Usage::default();
    let mut calls = ToolCalls::default();
    let mut held = super::quiet::Held::new(cx.quiet);
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(LlmChunk::Text(delta)) => {
                out.text.push_str(&delta);
                if let Some(delta) = held.pass(&out.text, delta) {
                    cx.events.note_text(&delta);
                    cx.events.emit(EventKind::TextDelta { call, delta }).await;
                }
            }
            Ok(LlmChunk::Reasoning(delta)) => {
                out.reasoning.push_str(&delta);
                cx.events
                    .emit(EventKind::ReasoningDelta { call, delta })
                    .await;
            }
            Ok(LlmChunk::ToolCallStart { index, id, name }) => {
                calls.start(cx, index, id, name).await;
            }
            Ok(LlmChunk::ToolCallArgs { index, delta }) => calls.args(cx, index, delta).await,
            Ok(LlmChunk::Usage(u)) => usage = u,
            Ok(LlmChunk::Finish(reason)) => out.finish_reason = reason,
            Err(e) => return Err(failed(cx, e, usage).await),
        }
    }
    Ok(Received {
        out,
        usage,
        calls,
        held,
    })
}

/// Emits `llm_failed` for `e`, and returns it.
async fn failed(cx: &ModelCall<'_>, e: LlmError, usage: Usage) -> LlmError {
    cx.events
        .emit(EventKind::LlmFailed(Box::new(LlmFailure {
            call: cx.call,
            error: e.to_string(),
            usage,
        })))
        .await;
    e
}

/// Tool calls by stream index: fragments after the first carry only the
/// index.
#[derive(Default)]
struct ToolCalls(Vec<(u32, ToolCallRecord)>);

impl ToolCalls {
    /// A call starts (an id the model left empty is made up from the index).
    async fn start(&mut self, cx: &ModelCall<'_>, index: u32, id: String, name: String) {
        let id = if id.is_empty() {
            format!("call_{}_{index}", cx.call)
        } else {
            id
        };
        cx.events
            .emit(EventKind::ToolCallStarted {
                call_id: id.clone(),
                tool: name.clone(),
            })
            .await;
        self.0.push((
            index,
            ToolCallRecord {
                id,
                name,
                arguments: String::new(),
            },
        ));
    }

    /// A fragment of a call's arguments.
    async fn args(&mut self, cx: &ModelCall<'_>, index: u32, delta: String) {
        let pos = match self.0.iter().position(|(i, _)| *i == index) {
            Some(pos) => pos,
            None => {
                // Arguments without a start: some servers omit it.
                self.start(cx, index, String::new(), String::new()).await;
                self.0.len() - 1
            }
        };
        let record = &mut self.0[pos].1;
        record.arguments.push_str(&delta);
        let call_id = record.id.clone();
        cx.events
            .emit(EventKind::ToolCallDelta { call_id, delta })
            .await;
    }
}
