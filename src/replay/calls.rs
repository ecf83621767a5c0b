//! A run's model calls as people read them: each call's request as stored
//! (`store::calls`) beside its answer from the event log.
//!
//! The list comes from the events (`llm_started`), so every call is there
//! even when its request was not recorded (recording off, a run from
//! before it existed) or its content expired; [`CallView::content`] says
//! which. The answer (text, reasoning, tool calls, usage, finish reason,
//! latency) is the call's `llm_finished` event — or its `llm_failed` error.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::events::{Event, EventKind, LlmFinish, LlmStart};
use crate::store::{CallRecord, Store, StoreError};

/// One model call.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CallView {
    /// Its position among the run's calls, from 0 (`/calls/{n}`).
    pub index: usize,
    /// The seq of its `llm_started` event.
    pub seq: u64,
    /// When it started, µs since the epoch.
    pub at: u64,
    /// The superstep.
    pub step: u32,
    /// The node.
    pub node: String,
    /// The task within the step.
    pub task: u32,
    /// The call number within the task.
    pub call: u32,
    /// The model role.
    pub role: String,
    /// The model.
    pub model: String,
    /// `finished`, `failed` or `running`.
    pub status: &'static str,
    /// `recorded`, `expired` (retention passed; the answer stays) or
    /// `not_recorded`.
    pub content: &'static str,
    /// What it was asked (`null` unless recorded): endpoint, messages,
    /// tools, response format, settings, redactions.
    pub request: Option<Value>,
    /// What it answered (`null` while running): text, reasoning, tool
    /// calls, finish reason, usage, latency — or the error.
    pub response: Option<Value>,
}

/// The calls of a run, from its events and the stored records; each
/// request as stored (content by hash: see [`expand`]).
///
/// # Errors
/// The store failed.
pub(crate) async fn calls(
    store: &dyn Store,
    run: Uuid,
    events: &[Event],
) -> Result<Vec<CallView>, StoreError> {
    let records: HashMap<u64, CallRecord> = store
        .calls(run)
        .await?
        .into_iter()
        .map(|r| (r.seq, r))
        .collect();
    let mut views = started(events);
    for v in &mut views {
        if let Some(r) = records.get(&v.seq) {
            v.content = if r.expired { "expired" } else { "recorded" };
            v.request = Some(r.request.clone());
        }
    }
    Ok(views)
}

/// Content read from the store, kept across calls: a chat's calls share
/// most of it.
#[derive(Debug, Default)]
pub(crate) struct Parts(HashMap<String, Value>);

impl Parts {
    /// The parts among `hashes`, fetched once (`null` for one that is gone).
    async fn get(
        &mut self,
        store: &dyn Store,
        hashes: &[String],
    ) -> Result<Vec<Value>, StoreError> {
        let missing: Vec<String> = hashes
            .iter()
            .filter(|h| !self.0.contains_key(*h))
            .cloned()
            .collect();
        if !missing.is_empty() {
            for p in store.call_parts(missing).await? {
                let body = serde_json::from_str(&p.body).unwrap_or(Value::String(p.body));
                self.0.insert(p.hash, body);
            }
        }
        Ok(hashes
            .iter()
            .map(|h| self.0.get(h).cloned().unwrap_or(Value::Null))
            .collect())
    }

    /// The message hashes of the chain ending at `tail`, first to last.
    async fn chain(&mut self, store: &dyn Store, tail: &str) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        let mut at = tail.to_owned();
        while !at.is_empty() && out.len() < MAX_MESSAGES {
            let link = self.get(store, std::slice::from_ref(&at)).await?.remove(0);
            out.push(link["message"].as_str().unwrap_or_default().to_owned());
            at = link["prev"].as_str().unwrap_or_default().to_owned();
        }
        out.reverse();
        Ok(out)
    }
}

/// The most messages read back for one call (a broken chain ends there).
const MAX_MESSAGES: usize = 100_000;

/// Replaces a recorded call's hashes by their content: its messages, tool
/// definitions and response format (`null` for content that is gone). An
/// expired call keeps its summary and gets no content.
///
/// # Errors
/// The store failed.
pub(crate) async fn expand(
    store: &dyn Store,
    call: &mut CallView,
    parts: &mut Parts,
) -> Result<(), StoreError> {
    let Some(request) = call.request.as_mut() else {
        return Ok(());
    };
    if call.content != "recorded" {
        request["messages"] = json!([]);
        request["tools"] = json!([]);
        request["response_format"] = Value::Null;
        return Ok(());
    }
    let tail = request["messages"]["tail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let hashes = parts.chain(store, &tail).await?;
    request["messages"] = Value::Array(parts.get(store, &hashes).await?);
    let tools: Vec<String> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    request["tools"] = Value::Array(parts.get(store, &tools).await?);
    if let Some(h) = request["response_format"].as_str().map(str::to_owned) {
        request["response_format"] = parts.get(store, &[h]).await?.remove(0);
    }
    Ok(())
}

/// Every call `llm_started`, with its answer joined.
fn started(events: &[Event]) -> Vec<CallView> {
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let EventKind::LlmStarted(llm_start) = &e.event else {
            continue;
        };
        let LlmStart {
            call, role, model, ..
        } = &**llm_start;
        let (status, response) = answer(&events[i + 1..], e, *call);
        out.push(CallView {
            index: out.len(),
            seq: e.seq,
            at: e.at,
            step: e.step,
            node: e.node.as_deref().unwrap_or_default().to_owned(),
            task: e.task,
            call: *call,
            role: role.to_string(),
            model: model.clone(),
            status,
            content: "not_recorded",
            request: None,
            response,
        });
    }
    out
}

/// The answer to the call `started` among the events after it.
fn answer(after: &[Event], started: &Event, call: u32) -> (&'static str, Option<Value>) {
    let same =
        |e: &Event| e.step == started.step && e.task == started.task && e.node == started.node;
    for e in after.iter().filter(|e| same(e)) {
        match &e.event {
            EventKind::LlmFinished(f) if f.call == call => {
                let LlmFinish {
                    output,
                    usage,
                    duration_us,
                    ..
                } = &**f;
                return (
                    "finished",
                    Some(json!({
                        "text": output.text,
                        "reasoning": output.reasoning,
                        "tool_calls": output.tool_calls,
                        "finish_reason": output.finish_reason,
                        "usage": usage,
                        "latency_ms": *duration_us as f64 / 1000.0,
                    })),
                );
            }
            EventKind::LlmFailed(f) if f.call == call => {
                let usage = &f.usage;
                return ("failed", Some(json!({ "error": f.error, "usage": usage })));
            }
            // The same call number started again (a retry): this one never
            // answered.
            EventKind::LlmStarted(s) if s.call == call => break,
            _ => {}
        }
    }
    ("running", None)
}

/// A run's calls as text (`stategraph replay RUN --calls`): per call its
/// place, model and settings, the messages it was sent (each shortened to
/// `width` characters), the tools it was offered and what it answered.
pub(crate) fn calls_text(calls: &[CallView], width: usize) -> String {
    let mut out = String::new();
    for c in calls {
        write_call(&mut out, c, width);
    }
    if calls.is_empty() {
        out.push_str("no model calls\n");
    }
    out
}

fn write_call(out: &mut String, c: &CallView, width: usize) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "call {} · step {} · {} · {} ({}) · {}",
        c.index, c.step, c.node, c.model, c.role, c.status
    );
    match (&c.request, c.content) {
        (Some(r), "recorded") => {
            if let Some(e) = r["endpoint"].as_str().filter(|e| !e.is_empty()) {
                let _ = writeln!(out, "  endpoint: {e}");
            }
            for m in r["messages"].as_array().into_iter().flatten() {
                let role = m["role"].as_str().unwrap_or("?");
                let text = m["content"].as_str().unwrap_or("(content gone)");
                let _ = writeln!(out, "  [{role}] {}", shorten(text, width));
            }
            let tools: Vec<&str> = r["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str())
                .collect();
            if !tools.is_empty() {
                let _ = writeln!(out, "  tools: {}", tools.join(", "));
            }
            if let Some(f) = r["response_format"]["name"].as_str() {
                let _ = writeln!(out, "  response format: {f}");
            }
        }
        (_, "expired") => out.push_str("  request: content expired\n"),
        _ => out.push_str("  request: not recorded\n"),
    }
    write_answer(out, c, width);
}

fn write_answer(out: &mut String, c: &CallView, width: usize) {
    use std::fmt::Write as _;
    let Some(r) = &c.response else {
        return;
    };
    if let Some(e) = r["error"].as_str() {
        let _ = writeln!(out, "  → error: {}", shorten(e, width));
        return;
    }
    let text = r["text"].as_str().unwrap_or_default();
    let _ = writeln!(out, "  → {}", shorten(text, width));
    for t in r["tool_calls"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  → tool {}({})",
            t["name"].as_str().unwrap_or("?"),
            shorten(t["arguments"].as_str().unwrap_or_default(), width)
        );
    }
    let _ = writeln!(
        out,
        "  finish: {} · tokens {} in / {} out · {:.1} ms",
        r["finish_reason"].as_str().unwrap_or_default(),
        r["usage"]["prompt_tokens"],
        r["usage"]["completion_tokens"],
        r["latency_ms"].as_f64().unwrap_or_default()
    );
}

/// `text` on one line, at most `width` characters (an ellipsis marks a cut).
fn shorten(text: &str, width: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= width {
        return line;
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
