//! `stategraph eval`: the user inputs of stored chats run again against the
//! graphs as they are now, and what changed, chat by chat.
//!
//! Each stored run (a chat turn) is run again on its recorded input. A
//! model call is answered from the recording while the node asks exactly
//! what it asked then (same node, step and call, same request fingerprint:
//! messages, tools, output format); a call whose request changed — a prompt
//! edit, a graph edit, an earlier answer that changed — goes to the
//! configured model, and so does every call after a route that changed. A
//! tool call the recording has (same node, step, call id) is served from
//! it; any other runs the real tool. The two runs are then compared: route,
//! nodes, tool calls and their arguments, status, answer (with a line
//! diff), tokens, cost and latency.
//!
//! A run that paused and continued is compared up to its first pause.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::matching::text_diff;
use super::observe::{Observation, observe};
use super::spec::Status;
use crate::events::{Event, EventKind, LlmStart, StepBatch};
use crate::graph::loc::{Loc, Sp};
use crate::llm::{ChatRequest, ChunkStream, Models, ToolDef};
use crate::nodes::{Graph, GraphCatalog, Playback, Services};
use crate::replay::Recording;
use crate::runtime::{self, MemoryCheckpointer, RunError, RunOptions};
use crate::sse::BridgeConfig;
use crate::tools::{ToolError, ToolOutcome, ToolRegistry};

/// What runs are evaluated against.
#[derive(Clone, Debug)]
pub(crate) struct EvalEnv {
    /// The graphs as they are now.
    pub catalog: Arc<GraphCatalog>,
    /// The configured models: they answer what the recording cannot.
    pub models: Models,
    /// The tools: they answer the calls the recording has not.
    pub tools: Arc<ToolRegistry>,
    /// The longest one run may take.
    pub timeout: Duration,
    /// The judge model of `criteria` (`eval --judge ROLE`); `None`: the
    /// criteria are reported as not judged.
    pub judge: Option<super::judge::Judge>,
    /// Criteria the judge checks each run's answer now against
    /// (`--criterion`, repeatable); empty: nothing is judged.
    pub criteria: Vec<String>,
}

/// A stored run to evaluate.
#[derive(Clone, Debug)]
pub(crate) struct StoredRun {
    /// Its id.
    pub id: Uuid,
    /// Its chat, if it answered one.
    pub chat: Option<String>,
    /// Its graph.
    pub graph: String,
    /// Its input state.
    pub input: Value,
    /// Its events.
    pub events: Vec<Event>,
    /// Its checkpoints.
    pub batches: Vec<StepBatch>,
    /// For an input from a file (no events): what it is compared with, the
    /// same input's side in an earlier report (`--baseline`); without one
    /// it is only run. Stored runs: `None` (their recording is).
    pub baseline: Option<Side>,
}

/// One side of a comparison, as reported.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Side {
    /// How it ended: completed, failed, interrupted.
    pub status: String,
    /// Its error, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The nodes run.
    pub path: Vec<String>,
    /// `router=VALUE` per routing node, in order.
    pub routes: Vec<String>,
    /// Tool calls: name and arguments.
    pub tool_calls: Vec<Value>,
    /// The answer.
    pub answer: String,
    /// Prompt plus completion tokens.
    pub tokens: u64,
    /// Cost in US dollars (0 when the configuration gives no prices).
    pub cost_usd: f64,
    /// Wall time, ms.
    pub latency_ms: f64,
    /// Model calls made.
    pub model_calls: u32,
}

/// What changed for one chat turn.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Changes {
    /// A router routed on another value.
    pub route: bool,
    /// Other nodes ran (or in another order).
    pub nodes: bool,
    /// Other tool calls, or other arguments.
    pub tool_calls: bool,
    /// It ended otherwise (e.g. it now fails).
    pub status: bool,
    /// Another answer.
    pub answer: bool,
}

impl Changes {
    /// Whether anything changed.
    pub(crate) fn any(&self) -> bool {
        self.route || self.nodes || self.tool_calls || self.status || self.answer
    }

    /// The changed aspects, by name.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        [
            (self.route, "route"),
            (self.nodes, "nodes"),
            (self.tool_calls, "tool calls"),
            (self.status, "status"),
            (self.answer, "answer"),
        ]
        .into_iter()
        .filter_map(|(b, n)| b.then_some(n))
        .collect()
    }
}

/// How one stored run fared when run again.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunEval {
    /// The stored run.
    pub run: Uuid,
    /// Its chat.
    pub chat: Option<String>,
    /// Its graph.
    pub graph: String,
    /// The user's message (what the turn answered).
    pub input: String,
    /// The recorded run.
    pub before: Side,
    /// The run now (absent when it could not run: see `error`).
    pub after: Option<Side>,
    /// Why it could not run again (its graph is gone, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What changed.
    pub changes: Changes,
    /// A line diff of the answers (`-` before, `+` now), when they differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_diff: Option<String>,
    /// Model calls answered from the recording.
    pub recorded_calls: u32,
    /// Model calls the configured model answered.
    pub live_calls: u32,
    /// Whether there was something to compare with (a recording, or a
    /// baseline for an input from a file).
    pub compared: bool,
    /// The judge's verdict on the answer now, per criterion (`skipped`
    /// without a judge model).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub judged: Vec<super::judge::Judged>,
}

impl RunEval {
    /// Whether the run now fails (or could not run) where it did not.
    pub(crate) fn now_fails(&self) -> bool {
        let failed = self.after.as_ref().is_none_or(|a| a.status == "failed");
        failed && self.before.status != "failed"
    }
}

/// Evaluates one stored run against the graphs now.
pub(crate) async fn eval_run(env: &EvalEnv, run: &StoredRun) -> RunEval {
    let first = first_segment(&run.events);
    let graph_now = env.catalog.get(&run.graph).cloned();
    let from_file = run.events.is_empty();
    let before = match &graph_now {
        _ if from_file => run.baseline.clone().unwrap_or_default(),
        Some(g) => side(&recorded(g, run, first)),
        None => Side::default(),
    };
    let mut out = RunEval {
        run: run.id,
        chat: run.chat.clone(),
        graph: run.graph.clone(),
        input: user_text(graph_now.as_deref(), &run.input),
        before,
        after: None,
        error: None,
        changes: Changes::default(),
        answer_diff: None,
        recorded_calls: 0,
        live_calls: 0,
        compared: !from_file || run.baseline.is_some(),
        judged: Vec::new(),
    };
    let Some(graph) = graph_now else {
        out.error = Some(format!("graph `{}` is no longer served", run.graph));
        out.changes.status = true;
        return out;
    };
    let playback = Arc::new(Asked::new(first));
    let started = Instant::now();
    let now = match rerun(env, &graph, run.input.clone(), Arc::clone(&playback)).await {
        Ok(mut obs) => {
            obs.duration_us = started.elapsed().as_micros() as u64;
            obs
        }
        Err(e) => {
            out.error = Some(e);
            out.changes.status = true;
            return out;
        }
    };
    out.recorded_calls = playback.served.load(Ordering::Relaxed);
    out.live_calls = playback.live.load(Ordering::Relaxed);
    let after = side(&now);
    if !env.criteria.is_empty() {
        let criteria: Vec<Sp<String>> = env
            .criteria
            .iter()
            .map(|c| Sp::new(c.clone(), Loc::default()))
            .collect();
        out.judged =
            super::judge::judge_turn(env.judge.as_ref(), 0, &criteria, &out.input, &after.answer)
                .await;
    }
    if !out.compared {
        out.after = Some(after);
        return out;
    }
    let b = &out.before;
    out.changes = Changes {
        route: b.routes != after.routes,
        nodes: b.path != after.path,
        tool_calls: b.tool_calls != after.tool_calls,
        status: b.status != after.status,
        answer: b.answer != after.answer,
    };
    if out.changes.answer {
        out.answer_diff = Some(text_diff(&b.answer, &after.answer));
    }
    out.after = Some(after);
    out
}

/// The input state a chat request with `message` (or the conversation
/// `messages`) would give `graph`, with `state` fields set outright — an
/// input of `stategraph eval --inputs FILE`.
///
/// # Errors
/// The graph takes no message and none of `state` was given.
pub(crate) fn input_state(
    graph: &Graph,
    message: Option<&str>,
    messages: Option<&Value>,
    state: Option<&Value>,
) -> Result<Value, String> {
    let io = &graph.chat;
    let mut input = serde_json::Map::new();
    let history: Option<Vec<Value>> = match (messages, message) {
        (Some(Value::Array(list)), _) => Some(
            list.iter()
                .enumerate()
                .map(|(i, m)| {
                    let mut m = m.clone();
                    if let Value::Object(o) = &mut m {
                        o.entry("id")
                            .or_insert_with(|| json!(format!("m{}", i + 1)));
                    }
                    m
                })
                .collect(),
        ),
        (Some(_), _) => return Err("`messages` is a list of {role, content}".into()),
        (None, Some(text)) => Some(vec![json!({"id": "m1", "role": "user", "content": text})]),
        (None, None) => None,
    };
    if let Some(h) = &history {
        if io.history.is_none() && io.text.is_none() {
            return Err(format!(
                "graph `{}` takes no message (give `state` instead)",
                graph.id
            ));
        }
        if let Some(f) = &io.history {
            input.insert(f.to_string(), Value::Array(h.clone()));
        }
        if let Some(f) = &io.text {
            let last = h
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default();
            input.insert(f.to_string(), json!(last));
        }
    }
    match state {
        None => {}
        Some(Value::Object(m)) => input.extend(m.iter().map(|(k, v)| (k.clone(), v.clone()))),
        Some(_) => return Err("`state` is a mapping of fields".into()),
    }
    if input.is_empty() {
        return Err("an input needs `message`, `messages` or `state`".into());
    }
    Ok(Value::Object(input))
}

/// Stored runs with their events and checkpoints, ready to evaluate;
/// runs still going and forks (edits of runs, not user inputs) are left
/// out.
///
/// # Errors
/// The store failed.
pub(crate) async fn stored_runs(
    store: &dyn crate::store::Store,
    records: Vec<crate::store::RunRecord>,
) -> Result<Vec<StoredRun>, String> {
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        if r.status == crate::runtime::RunStatus::Running || r.parent.is_some() {
            continue;
        }
        let (_, events) = crate::replay::load(store, r.id)
            .await
            .map_err(|e| e.to_string())?;
        let batches = store
            .checkpoints(r.id, u32::MAX)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .map(|c| c.to_batch(r.id))
            .collect();
        out.push(StoredRun {
            id: r.id,
            chat: r.chat_id,
            graph: r.graph,
            input: r.input,
            events,
            batches,
            baseline: None,
        });
    }
    Ok(out)
}

/// The events up to the run's first resume.
fn first_segment(events: &[Event]) -> &[Event] {
    let end = events
        .iter()
        .position(|e| matches!(e.event, EventKind::RunResumed { .. }))
        .unwrap_or(events.len());
    &events[..end]
}

fn user_text(graph: Option<&Graph>, input: &Value) -> String {
    graph
        .and_then(|g| g.chat.text.as_deref())
        .and_then(|f| input.get(f))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The recorded run, read as a test run is.
fn recorded(graph: &Graph, run: &StoredRun, events: &[Event]) -> Observation {
    let end = events.iter().rev().find_map(|e| match &e.event {
        EventKind::RunFinished { .. } => Some((Status::Completed, None)),
        EventKind::RunFailed { error } => Some((Status::Failed, Some(error.message.clone()))),
        EventKind::RunInterrupted { .. } => Some((Status::Interrupted, None)),
        _ => None,
    });
    let end = end.unwrap_or((Status::Failed, Some("the run did not end".into())));
    let sse = events
        .iter()
        .find_map(|e| match &e.event {
            EventKind::RunStarted(start) => start.stream.as_ref().and_then(BridgeConfig::from_json),
            _ => None,
        })
        .map(|cfg| crate::sse::render(cfg, events, 0))
        .unwrap_or_default();
    let own: Vec<&Event> = events.iter().collect();
    observe(graph, &own, &run.batches, sse, end, Vec::new())
}

fn side(o: &Observation) -> Side {
    Side {
        status: o.status.map_or("unknown", Status::as_str).to_owned(),
        error: o.error.clone(),
        path: o.path.clone(),
        routes: o
            .routes
            .iter()
            .map(|(n, v)| format!("{n}={}", v.as_deref().unwrap_or("(default)")))
            .collect(),
        tool_calls: o
            .tool_calls
            .iter()
            .map(|c| json!({"name": c.name, "args": c.args}))
            .collect(),
        answer: o.answer.clone(),
        tokens: o.usage.total(),
        cost_usd: o.usage.cost_usd(),
        latency_ms: o.duration_us as f64 / 1000.0,
        model_calls: o.model_calls,
    }
}

/// The graph run on `input` with `playback`, observed.
async fn rerun(
    env: &EvalEnv,
    graph: &Arc<Graph>,
    input: Value,
    playback: Arc<Asked>,
) -> Result<Observation, String> {
    let mut services = Services::new(env.models.clone(), Arc::clone(&env.tools));
    services.playback = Some(playback);
    let bridge = BridgeConfig::for_graph(graph, "msg_eval".into(), json!({"eval": true}));
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(1024);
    let cp = Arc::new(MemoryCheckpointer::new());
    let opts = RunOptions {
        events: Some(tx),
        stream: Some(bridge.to_json()),
        checkpointer: Some(cp.clone()),
        ..RunOptions::default()
    };
    let run = runtime::run(Arc::clone(graph), Arc::new(services), input, opts);
    let collect = async {
        let mut out = Vec::new();
        while let Some(ev) = rx.recv().await {
            out.push(ev);
        }
        out
    };
    let (outcome, events) = tokio::time::timeout(env.timeout, async { tokio::join!(run, collect) })
        .await
        .map_err(|_| format!("the run did not finish within {:?}", env.timeout))?;
    let run_id = events.first().map_or(Uuid::nil(), |e| e.run_id);
    let owned: Vec<Event> = events.iter().map(|e| (**e).clone()).collect();
    let sse = crate::sse::render(bridge, &owned, 0);
    let end = match &outcome {
        Ok(_) => (Status::Completed, None),
        Err(RunError::Interrupted(_)) => (Status::Interrupted, None),
        Err(e) => (Status::Failed, Some(e.to_string())),
    };
    let own: Vec<&Event> = owned.iter().collect();
    Ok(observe(
        graph,
        &own,
        &cp.batches(run_id),
        sse,
        end,
        Vec::new(),
    ))
}

type CallKey = (String, u32, u32, u32);

/// The recording, served while a node asks what it asked then.
#[derive(Debug)]
struct Asked {
    recording: Recording,
    /// The recorded request fingerprints, per call.
    requests: Mutex<HashMap<CallKey, VecDeque<String>>>,
    served: AtomicU32,
    live: AtomicU32,
}

impl Asked {
    fn new(events: &[Event]) -> Self {
        let mut requests: HashMap<CallKey, VecDeque<String>> = HashMap::new();
        for e in events {
            if let EventKind::LlmStarted(llm_start) = &e.event {
                let LlmStart { call, request, .. } = &**llm_start;
                let node = e.node.as_deref().unwrap_or("").to_owned();
                requests
                    .entry((node, e.step, e.task, *call))
                    .or_default()
                    .push_back(request.clone());
            }
        }
        Self {
            recording: Recording::from_events(events),
            requests: Mutex::new(requests),
            served: AtomicU32::new(0),
            live: AtomicU32::new(0),
        }
    }
}

impl Playback for Asked {
    fn llm(&self, _: &str, _: u32, _: u32, _: u32) -> Option<(String, ChunkStream)> {
        None
    }

    fn llm_for(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call: u32,
        request: &ChatRequest,
    ) -> Option<(String, ChunkStream)> {
        let key = (node.to_owned(), step, task, call);
        let asked = self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&key)
            .and_then(VecDeque::pop_front);
        // The recorded stream is taken either way, so a retried call
        // lines up with the next recorded attempt.
        let recorded = asked
            .as_ref()
            .and_then(|_| self.recording.llm(node, step, task, call));
        match (asked, recorded) {
            (Some(fp), Some(r)) if fp == request.fingerprint() => {
                self.served.fetch_add(1, Ordering::Relaxed);
                Some(r)
            }
            _ => {
                self.live.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn tool(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call_id: &str,
    ) -> Option<Result<ToolOutcome, ToolError>> {
        self.recording.tool(node, step, task, call_id)
    }

    fn past_budget(&self, node: &str, step: u32, task: u32, call: u32) -> bool {
        Playback::past_budget(&self.recording, node, step, task, call)
    }

    fn tools_offered(&self, node: &str, step: u32, task: u32) -> Option<Vec<ToolDef>> {
        Playback::tools_offered(&self.recording, node, step, task)
    }

    fn answer(&self, id: &str) -> Option<Value> {
        Playback::answer(&self.recording, id)
    }
}

/// Evaluates `runs`, at most `jobs` at a time, in their order.
pub(crate) async fn eval_all(env: Arc<EvalEnv>, runs: Vec<StoredRun>, jobs: usize) -> Vec<RunEval> {
    let permits = Arc::new(tokio::sync::Semaphore::new(jobs.max(1)));
    let mut handles = Vec::with_capacity(runs.len());
    for run in runs {
        let (env, permits) = (Arc::clone(&env), Arc::clone(&permits));
        let what = (run.id, run.chat.clone(), run.graph.clone());
        handles.push((
            what,
            tokio::spawn(async move {
                let _permit = permits.acquire_owned().await;
                eval_run(&env, &run).await
            }),
        ));
    }
    let mut out = Vec::with_capacity(handles.len());
    for ((run, chat, graph), h) in handles {
        out.push(match h.await {
            Ok(r) => r,
            // A run whose evaluation panicked is reported, not dropped.
            Err(e) => RunEval {
                run,
                chat,
                graph,
                input: String::new(),
                before: Side::default(),
                after: None,
                error: Some(format!("its evaluation failed: {e}")),
                changes: Changes {
                    status: true,
                    ..Changes::default()
                },
                answer_diff: None,
                recorded_calls: 0,
                live_calls: 0,
                compared: true,
                judged: Vec::new(),
            },
        });
    }
    out
}
