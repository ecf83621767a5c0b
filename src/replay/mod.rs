//! Replay for debugging: re-stream, re-execute, fork.
//!
//! A run's events are the source of truth. [`load`] reads them from the
//! store; [`timeline`] prints what happened, [`task_timeline`] gives it as
//! data (steps × tasks); [`sse()`] reproduces the exact
//! bytes the client received (the stream settings are in `run_started`);
//! [`reexecute`] runs the graph again with every model and tool result served
//! from the recording and reports the first event that differs; [`fork_point`]
//! gives the edited state and frontier a forked run starts from (after a
//! node, routed again; or before one, to run it again); [`calls`] lists
//! the model calls with what each was asked and answered.

#[cfg(feature = "server")]
mod calls;
mod fork;
mod recording;
#[cfg(feature = "server")]
mod tasks;
#[cfg(feature = "server")]
mod timing;

use std::fmt::Write;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::events::{
    Event, EventKind, LlmFailure, LlmFinish, LlmStart, ToolDenial, ToolFault, ToolReady, ToolReturn,
};
use crate::nodes::Graph;
use crate::runtime::{self, Resume, RunError, RunOptions, Services, rebuild_state};
use crate::sse::{self, BridgeConfig};
use crate::state::DynState;
use crate::store::{RunRecord, Store, StoreError};

#[cfg(feature = "server")]
pub(crate) use calls::{CallView, Parts, calls, calls_text, expand};
#[cfg(feature = "server")]
pub(crate) use fork::replaced;
pub use fork::{Edit, EditError, fork_point};
pub(crate) use recording::Recording;
#[cfg(feature = "server")]
pub(crate) use tasks::{TaskTimeline, task_timeline};
#[cfg(feature = "server")]
pub(crate) use timing::timing;

/// Why a replay operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// No such run.
    #[error("no run {0}")]
    NoRun(Uuid),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run's stream settings were not recorded (not a chat run).
    #[error("run {0} was not streamed to a client; there are no SSE bytes to reproduce")]
    NotStreamed(Uuid),
    /// The state could not be rebuilt or edited.
    #[error("{0}")]
    State(String),
    /// The graph the run used is not available.
    #[error("{0}")]
    Graph(String),
    /// Re-running failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A fork's step, node or edit was refused.
    #[error(transparent)]
    Edit(#[from] EditError),
}

/// Events per store query. Large: `load` keeps every event anyway, and on
/// PostgreSQL, whose log is stored a superstep per row, a smaller limit
/// would decode a big step's row once per query that touches it.
const PAGE: usize = 100_000;

/// A run and all its events, in order.
///
/// # Errors
/// The run does not exist or the store failed.
pub async fn load(store: &dyn Store, run: Uuid) -> Result<(RunRecord, Vec<Event>), ReplayError> {
    let record = store.get_run(run).await?.ok_or(ReplayError::NoRun(run))?;
    let mut events = Vec::new();
    loop {
        let after = events.last().map_or(0, |e: &Event| e.seq);
        let page = store.events(run, after, PAGE).await?;
        let done = page.len() < PAGE;
        events.extend(page);
        if done {
            break;
        }
    }
    Ok((record, events))
}

/// The exact SSE bytes the client received for these events.
///
/// # Errors
/// The run was not streamed (no stream settings in `run_started`).
pub fn sse(events: &[Event]) -> Result<String, ReplayError> {
    let cfg = events
        .iter()
        .find_map(|e| match &e.event {
            EventKind::RunStarted(start) => start.stream.as_ref().and_then(BridgeConfig::from_json),
            _ => None,
        })
        .ok_or_else(|| {
            ReplayError::NotStreamed(events.first().map_or(Uuid::nil(), |e| e.run_id))
        })?;
    Ok(sse::render(cfg, events, 0))
}

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

/// A readable timeline: steps, nodes, durations, tokens, tool calls, errors.
pub fn timeline(run: &RunRecord, events: &[Event]) -> String {
    let mut out = header(run);
    let t0 = events.first().map_or(0, |e| e.at);
    let mut tokens = 0usize;
    for ev in events {
        if matches!(
            ev.event,
            EventKind::TextDelta { .. } | EventKind::ReasoningDelta { .. }
        ) {
            tokens += 1;
        } else if let Some(l) = line(ev) {
            let at = ms(ev.at.saturating_sub(t0));
            let _ = writeln!(out, "{at:>10}  {l}");
        }
    }
    let _ = writeln!(out, "{} events, {tokens} streamed tokens", events.len());
    out
}

/// The timeline's first lines: the run, its chat, where it was forked.
fn header(run: &RunRecord) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {}  graph {} ({})  status {:?}",
        run.id, run.graph, run.graph_version, run.status
    );
    if let Some(chat) = &run.chat_id {
        let _ = writeln!(
            out,
            "chat {chat}  user {}  request {}",
            run.user_id,
            run.request_id.as_deref().unwrap_or("-")
        );
    }
    if let Some(p) = &run.parent {
        let place = match (p.mode, p.nodes.as_slice()) {
            (_, []) => String::new(),
            (Some(crate::events::ForkMode::Before), n) => format!(", before {}", n.join(", ")),
            (_, n) => format!(", after {}", n.join(", ")),
        };
        let edit = if p.set.is_empty() {
            String::new()
        } else {
            format!(", set {}", Value::Object(p.set.clone()))
        };
        let _ = writeln!(
            out,
            "forked from run {} at step {}{place}{edit}",
            p.run_id, p.step
        );
    }
    out
}

/// A node's event as a timeline line (`None`: not shown).
fn line(ev: &Event) -> Option<String> {
    let node = ev.node.as_deref().unwrap_or("");
    match &ev.event {
        EventKind::NodeStarted { attempt, item } => {
            let item = item
                .as_ref()
                .map(|i| format!(" item {i}"))
                .unwrap_or_default();
            let attempt = if *attempt > 1 {
                format!(" (attempt {attempt})")
            } else {
                String::new()
            };
            Some(format!(
                "step {:>2}  {node} started{attempt}{item}",
                ev.step
            ))
        }
        EventKind::NodeFinished { patch, duration_us } => {
            let fields: Vec<&str> = patch.iter().map(|(f, _)| f).collect();
            Some(format!(
                "step {:>2}  {node} finished in {}  wrote [{}]",
                ev.step,
                ms(*duration_us),
                fields.join(", ")
            ))
        }
        EventKind::NodeRetrying {
            attempt,
            error,
            delay_ms,
        } => Some(format!(
            "step {:>2}  {node} attempt {attempt} failed: {error}; retry in {delay_ms} ms",
            ev.step
        )),
        EventKind::NodeFailed { error, attempts } => Some(format!(
            "step {:>2}  {node} FAILED after {attempts} attempt(s): {error}",
            ev.step
        )),
        EventKind::LlmStarted(llm_start) => {
            let LlmStart {
                call, role, model, ..
            } = &**llm_start;
            Some(format!(
                "          {node} model call {call}: {model} (role {role})"
            ))
        }
        EventKind::LlmFinished(llm_finish) => {
            let LlmFinish {
                usage,
                duration_us,
                output,
                ..
            } = &**llm_finish;
            Some(format!(
                "          {node} model done in {}: {} prompt + {} completion tokens, {} tool call(s), {}",
                ms(*duration_us),
                usage.prompt_tokens,
                usage.completion_tokens,
                output.tool_calls.len(),
                output.finish_reason
            ))
        }
        EventKind::LlmFailed(llm_failure) => {
            let LlmFailure { error, .. } = &**llm_failure;
            Some(format!("          {node} model call FAILED: {error}"))
        }
        EventKind::ToolCallReady(tool_ready) => {
            let ToolReady { tool, args, .. } = &**tool_ready;
            Some(format!("          {node} tool {tool}({args})"))
        }
        EventKind::ToolResult(tool_return) => {
            let ToolReturn {
                tool,
                duration_us,
                cached,
                ..
            } = &**tool_return;
            Some(format!(
                "          {node} tool {tool} ok in {}{}",
                ms(*duration_us),
                if *cached { " (cached)" } else { "" }
            ))
        }
        EventKind::ToolError(tool_fault) => {
            let ToolFault { tool, error, .. } = &**tool_fault;
            Some(format!(
                "          {node} tool {tool} error [{}]: {}",
                error.kind, error.message
            ))
        }
        EventKind::Thinking { text } => Some(format!("          {node}: {text}")),
        EventKind::ToolDenied(tool_denial) => {
            let ToolDenial { tool, reason, .. } = &**tool_denial;
            Some(format!(
                "          {node} tool {tool} DENIED by the user{}",
                reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ))
        }
        _ => run_line(&ev.event),
    }
}

/// A run-level event as a timeline line.
fn run_line(event: &EventKind) -> Option<String> {
    match event {
        EventKind::RunFinished { steps, usage } => Some(format!(
            "finished after {steps} steps, {} tokens ({} in, {} out)",
            usage.total(),
            usage.prompt_tokens,
            usage.completion_tokens
        )),
        EventKind::RunFailed { error } => {
            Some(format!("FAILED [{}]: {}", error.code, error.message))
        }
        EventKind::RunCancelled { reason } => Some(format!("cancelled: {reason}")),
        EventKind::RunInterrupted { interrupts } => Some(format!(
            "paused, waiting for {}",
            interrupts
                .iter()
                .map(crate::events::Interrupt::summary)
                .collect::<Vec<_>>()
                .join("; ")
        )),
        EventKind::RunResumed { answers } => Some(format!(
            "resumed with {}",
            serde_json::to_string(answers).unwrap_or_default()
        )),
        EventKind::BreakpointsSet { breakpoints } => Some(format!(
            "breakpoints: before [{}], after [{}]",
            breakpoints.before.join(", "),
            breakpoints.after.join(", ")
        )),
        _ => None,
    }
}

/// An event reduced to what must be the same when a run is re-executed:
/// no timestamps, durations or ids of the run.
fn comparable(ev: &Event) -> Option<Value> {
    let mut kind = serde_json::to_value(&ev.event).ok()?;
    match &ev.event {
        // A pause and its answers are the person's part: a re-execution
        // passes through them (the answers come from the recording).
        EventKind::CheckpointSaved { .. }
        | EventKind::RunInterrupted { .. }
        | EventKind::RunResumed { .. }
        | EventKind::BreakpointsSet { .. } => return None,
        EventKind::RunStarted(_) => {
            if let Some(o) = kind.as_object_mut() {
                o.remove("stream");
                o.remove("graph_version");
            }
        }
        _ => {}
    }
    if let Some(o) = kind.as_object_mut() {
        // Timing, not behaviour (retry delays carry jitter).
        o.remove("duration_us");
        o.remove("delay_ms");
    }
    Some(serde_json::json!({"step": ev.step, "node": ev.node, "task": ev.task, "event": kind}))
}

/// The comparable events of a run (with their indexes), in an order that
/// does not depend on timing: tasks of one superstep run concurrently, so
/// their events interleave differently from run to run; within a step,
/// each task's events are kept in order and the tasks are taken by node id
/// and task index, between the step's own events before and after them.
fn canonical(events: &[Event]) -> Vec<(usize, Value)> {
    // (step, phase, node, task) where phase 0 = the step's events before any
    // task's, 1 = tasks', 2 = after; a stable sort keeps each task's order.
    type Key<'a> = (u32, u8, Option<&'a str>, u32);
    let mut keyed: Vec<(Key<'_>, usize, Value)> = Vec::new();
    let mut step = None;
    let mut phase = 0u8;
    for (i, e) in events.iter().enumerate() {
        let Some(c) = comparable(e) else { continue };
        if step != Some(e.step) {
            step = Some(e.step);
            phase = 0;
        }
        let node = e.node.as_deref();
        if node.is_some() {
            phase = 1;
        } else if phase == 1 {
            phase = 2;
        }
        let key = match node {
            Some(_) => (e.step, 1, node, e.task),
            None => (e.step, phase, None, 0),
        };
        keyed.push((key, i, c));
    }
    keyed.sort_by(|x, y| x.0.cmp(&y.0));
    keyed.into_iter().map(|(_, i, c)| (i, c)).collect()
}

/// The outcome of a re-execution.
#[derive(Debug)]
pub struct Reexecution {
    /// Events of the new run.
    pub events: Vec<Event>,
    /// The first difference: (index, recorded, re-executed), either side
    /// `None` when one stream is longer. Indexes count comparable events in
    /// a timing-independent order (concurrent tasks' events by node and
    /// task, each task's in order).
    pub divergence: Option<(usize, Option<Event>, Option<Event>)>,
    /// The graph version that ran, and whether it is the recorded one.
    pub same_version: bool,
}

impl Reexecution {
    /// A readable report.
    pub fn report(&self) -> String {
        let version = if self.same_version {
            "same graph version"
        } else {
            "CURRENT graph files (a different version than recorded)"
        };
        match &self.divergence {
            None => format!(
                "no divergence: {} events identical ({version})",
                self.events.len()
            ),
            Some((i, a, b)) => {
                let show = |e: &Option<Event>| {
                    e.as_ref().map_or_else(
                        || "(none)".to_owned(),
                        |e| serde_json::to_string(e).unwrap_or_default(),
                    )
                };
                format!(
                    "first divergence at event #{} ({version}):\n  recorded:    {}\n  re-executed: {}",
                    i + 1,
                    show(a),
                    show(b)
                )
            }
        }
    }
}

/// Runs `graph` again on the recorded input with every model call and tool
/// call served from the recording (no network), and compares the events.
/// A fork starts again where it started: its recorded state and frontier.
///
/// # Errors
/// The recording has no `run_started`.
pub async fn reexecute(
    graph: Arc<Graph>,
    tools: Services,
    recorded: &[Event],
) -> Result<Reexecution, ReplayError> {
    let (input, version, forked_from, frontier, user) = recorded
        .iter()
        .find_map(|e| match &e.event {
            EventKind::RunStarted(start) => Some((
                Arc::clone(&start.input),
                start.graph_version.clone(),
                start.forked_from.clone(),
                start.frontier.clone(),
                start.user.clone(),
            )),
            _ => None,
        })
        .ok_or_else(|| ReplayError::State("the recording has no run_started event".into()))?;
    let mut services = tools;
    services.playback = Some(Arc::new(Recording::from_events(recorded)));
    services.user = user.map(Arc::from);
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(1024);
    let collect = tokio::spawn(async move {
        let mut v = Vec::new();
        while let Some(e) = rx.recv().await {
            v.push((*e).clone());
        }
        v
    });
    let same_version = version == graph.version;
    let opts = RunOptions {
        events: Some(tx),
        forked_from: forked_from.clone(),
        ..Default::default()
    };
    match (frontier, forked_from.as_ref()) {
        (Some(f), _) => {
            let state = graph
                .state
                .from_json(&input)
                .map_err(|e| ReplayError::State(e.to_string()))?;
            let from = Resume {
                state,
                step: f.step,
                next: f.next,
                joins: f.joins,
                last_seq: 0,
            };
            let _ = runtime::resume(graph, Arc::new(services), from, opts).await;
        }
        _ => {
            let _ = runtime::run(graph, Arc::new(services), input, opts).await;
        }
    }
    let events = collect.await.unwrap_or_default();
    let a = canonical(recorded);
    let b = canonical(&events);
    let mut divergence = None;
    for k in 0..a.len().max(b.len()) {
        match (a.get(k), b.get(k)) {
            (Some((_, x)), Some((_, y))) if x == y => continue,
            (x, y) => {
                divergence = Some((
                    k,
                    x.map(|(i, _)| recorded[*i].clone()),
                    y.map(|(i, _)| events[*i].clone()),
                ));
                break;
            }
        }
    }
    Ok(Reexecution {
        events,
        divergence,
        same_version,
    })
}

/// The state of a run after `step` (snapshot + patches).
///
/// # Errors
/// No checkpoint, or the state cannot be rebuilt.
pub async fn state_at(
    store: &dyn Store,
    graph: &Graph,
    run: Uuid,
    step: u32,
) -> Result<Box<dyn DynState>, ReplayError> {
    let cps = store.checkpoints(run, step).await?;
    let batches: Vec<_> = cps.iter().map(|c| c.to_batch(run)).collect();
    rebuild_state(&batches, &graph.state, step).map_err(|e| ReplayError::State(e.to_string()))
}
