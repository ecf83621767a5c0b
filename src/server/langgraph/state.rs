//! A thread's state and history: `GET /threads/{id}/state`, `GET
//! /threads/{id}/state/{checkpoint_id}`, `POST|GET /threads/{id}/history`.
//!
//! A thread's state is the state its newest run reached (its last
//! checkpoint); its history is every checkpoint of every run of the chat,
//! newest first, each step's parent the step before it (a run's first
//! checkpoint's parent: the previous run's last). Checkpoint ids are
//! `RUN-STEP` (`ids::checkpoint_id`), which sort by time.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::AppState;
use super::super::auth::User;
use super::super::error::ApiError;
use super::{Body, ids, iso, messages, owned_thread, wire};
use crate::events::Interrupt;
use crate::nodes::Graph;
use crate::runtime::RunStatus;
use crate::store::{CheckpointRecord, RunQuery, RunRecord};

/// How many of a thread's runs its history reads.
const HISTORY_RUNS: usize = 100;

/// The newest run of a chat.
pub(super) async fn latest_run(
    state: &AppState,
    chat: &str,
) -> Result<Option<RunRecord>, ApiError> {
    Ok(state
        .store
        .list_runs(&RunQuery::newest(1).of_chat(chat))
        .await?
        .into_iter()
        .next())
}

/// A run's state after `step` (our JSON), or its input when it cannot be
/// rebuilt (a run that failed before its first checkpoint; a graph no
/// longer served).
pub(super) async fn values_at(state: &AppState, run: &RunRecord, step: u32) -> Value {
    let Some(graph) = state.graphs.get(&run.graph) else {
        return run.input.clone();
    };
    match crate::replay::state_at(&*state.store, &graph, run.id, step).await {
        Ok(s) => {
            let mut values = s.to_json();
            messages::with_answer(&graph, &mut values, &answer_id(run));
            values
        }
        Err(e) => {
            tracing::debug!(run = %run.id, error = %e, "no state to show; showing the run's input");
            run.input.clone()
        }
    }
}

/// The id of a run's answer message: its chat message's.
pub(super) fn answer_id(run: &RunRecord) -> String {
    crate::runs::turn::answer_message_id(run.id, run.message_id.as_deref())
}

/// What a paused run waits for (none when it does not wait).
pub(super) async fn waiting(state: &AppState, run: &RunRecord) -> Result<Vec<Interrupt>, ApiError> {
    if run.status != RunStatus::Interrupted {
        return Ok(Vec::new());
    }
    state.runs.waiting_at(run).await.map_err(ApiError::internal)
}

/// One checkpoint as LangGraph's `ThreadState`.
struct Checkpoint<'a> {
    thread: &'a str,
    run: &'a RunRecord,
    step: u32,
    values: Value,
    next: Vec<String>,
    parent: Option<String>,
    interrupts: &'a [Interrupt],
}

fn config(thread: &str, checkpoint: Option<&str>) -> Value {
    json!({"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint, "checkpoint_map": null})
}

fn state_json(graph: Option<&Graph>, c: Checkpoint<'_>) -> Value {
    let id = ids::checkpoint_id(c.run.id, c.step);
    let values = match graph {
        Some(g) => messages::values_out(&g.state.schema, &c.values),
        None => c.values,
    };
    let interrupts: Vec<Value> = wire::asked(c.interrupts)
        .map(wire::interrupt_json)
        .collect();
    let tasks: Vec<Value> = c
        .next
        .iter()
        .map(|node| {
            let mine: Vec<Value> = wire::asked(c.interrupts)
                .filter(|i| &i.node == node)
                .map(wire::interrupt_json)
                .collect();
            json!({"id": format!("{}:{node}", c.step), "name": node, "path": ["__pregel_pull", node],
                   "error": null, "interrupts": mine, "checkpoint": null, "state": null, "result": null})
        })
        .collect();
    json!({
        "values": values,
        "next": c.next,
        "tasks": tasks,
        "metadata": {
            "source": match (c.step, &c.run.parent) {
                (0, Some(_)) => "update",
                (0, None) => "input",
                _ => "loop",
            },
            "step": c.step,
            "run_id": c.run.id,
            "graph_id": c.run.graph,
            "assistant_id": ids::assistant_id(&c.run.graph),
            "thread_id": c.thread,
        },
        "created_at": iso(c.run.finished_at.unwrap_or(c.run.created_at)),
        "checkpoint": config(c.thread, Some(&id)),
        "parent_checkpoint": c.parent.as_deref().map(|p| config(c.thread, Some(p))),
        "checkpoint_id": id,
        "parent_checkpoint_id": c.parent,
        "interrupts": interrupts,
    })
}

/// The state of an empty thread (no run yet).
fn empty(thread: &str) -> Value {
    json!({
        "values": {}, "next": [], "tasks": [], "metadata": {}, "created_at": null,
        "checkpoint": config(thread, None), "parent_checkpoint": null, "interrupts": [],
    })
}

/// The thread's current state (that of its newest run).
pub(super) async fn current(state: &AppState, thread: &str) -> Result<Value, ApiError> {
    let Some(run) = latest_run(state, thread).await? else {
        return Ok(empty(thread));
    };
    at(state, thread, &run, run.last_step, None).await
}

/// Run `run`'s state after `step`.
async fn at(
    state: &AppState,
    thread: &str,
    run: &RunRecord,
    step: u32,
    parent: Option<String>,
) -> Result<Value, ApiError> {
    let graph = state.graphs.get(&run.graph);
    let values = values_at(state, run, step).await;
    let last = step == run.last_step;
    let interrupts = if last {
        waiting(state, run).await?
    } else {
        Vec::new()
    };
    let next = wire::next_of(&interrupts);
    let parent = match parent {
        Some(p) => Some(p),
        None if step > 0 => Some(ids::checkpoint_id(run.id, step - 1)),
        None => forked_from(run),
    };
    Ok(state_json(
        graph.as_deref(),
        Checkpoint {
            thread,
            run,
            step,
            values,
            next,
            parent,
            interrupts: &interrupts,
        },
    ))
}

/// `GET /threads/{id}/state`.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(tid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    owned_thread(&state, &user, &tid).await?;
    Ok(Json(current(&state, &tid).await?))
}

/// `GET /threads/{id}/state/{checkpoint_id}`.
pub(super) async fn get_at(
    State(state): State<Arc<AppState>>,
    user: User,
    Path((tid, cid)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    owned_thread(&state, &user, &tid).await?;
    let missing = || ApiError::not_found(format!("Checkpoint {cid} not found"));
    let (run_id, step) = ids::parse_checkpoint(&cid).ok_or_else(missing)?;
    let run = state
        .store
        .get_run(run_id)
        .await?
        .filter(|r| r.chat_id.as_deref() == Some(&tid) && step <= r.last_step)
        .ok_or_else(missing)?;
    Ok(Json(at(&state, &tid, &run, step, None).await?))
}

/// `POST /threads/{id}/history` body (LangGraph's `ThreadStateSearch`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct HistoryQuery {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    before: Option<Value>,
    #[serde(default)]
    checkpoint: Option<Value>,
}

/// `POST /threads/{id}/history`.
pub(super) async fn history(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(tid): Path<String>,
    body: Body<HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    owned_thread(&state, &user, &tid).await?;
    Ok(Json(
        history_of(&state, &tid, &body.0.unwrap_or_default()).await?,
    ))
}

/// `GET /threads/{id}/history?limit=N`.
pub(super) async fn history_get(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(tid): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    owned_thread(&state, &user, &tid).await?;
    let query = HistoryQuery {
        limit: q.get("limit").and_then(|l| l.parse().ok()),
        ..HistoryQuery::default()
    };
    Ok(Json(history_of(&state, &tid, &query).await?))
}

fn checkpoint_in(v: Option<&Value>) -> Option<String> {
    v.and_then(|c| c["checkpoint_id"].as_str())
        .map(str::to_owned)
}

async fn history_of(state: &AppState, tid: &str, q: &HistoryQuery) -> Result<Value, ApiError> {
    let limit = q.limit.unwrap_or(10).clamp(1, 1000);
    let before = checkpoint_in(q.before.as_ref());
    let only_upto = checkpoint_in(q.checkpoint.as_ref());
    let mut runs = state
        .store
        .list_runs(&RunQuery::newest(HISTORY_RUNS).of_chat(tid))
        .await?;
    runs.reverse(); // oldest first: each run's parent is the one before
    let mut all: Vec<Value> = Vec::new();
    let mut parent: Option<String> = None;
    for run in &runs {
        let cps = state.store.checkpoints(run.id, u32::MAX).await?;
        parent = checkpoints_of(state, tid, run, &cps, parent, &mut all).await?;
    }
    all.reverse();
    let out: Vec<Value> = all
        .into_iter()
        .filter(|s| {
            let id = s["checkpoint"]["checkpoint_id"].as_str().unwrap_or("");
            before.as_deref().is_none_or(|b| id < b) && only_upto.as_deref().is_none_or(|c| id <= c)
        })
        .take(limit)
        .collect();
    Ok(Value::Array(out))
}

/// The checkpoint a run that starts from another's state (a state edit,
/// `goto`, a run from a checkpoint) started from: its first checkpoint's
/// parent.
fn forked_from(run: &RunRecord) -> Option<String> {
    run.parent
        .as_ref()
        .map(|o| ids::checkpoint_id(o.run_id, o.step))
}

/// Appends the states of a run's checkpoints (oldest first); returns the
/// id of its last.
async fn checkpoints_of(
    state: &AppState,
    tid: &str,
    run: &RunRecord,
    cps: &[CheckpointRecord],
    mut parent: Option<String>,
    out: &mut Vec<Value>,
) -> Result<Option<String>, ApiError> {
    let graph = state.graphs.get(&run.graph);
    let batches: Vec<_> = cps.iter().map(|c| c.to_batch(run.id)).collect();
    let interrupts = waiting(state, run).await?;
    if let Some(origin) = forked_from(run) {
        parent = Some(origin);
    }
    for cp in cps {
        let values = match graph.as_ref().and_then(|g| {
            crate::runtime::rebuild_state(&batches, &g.state, cp.step)
                .ok()
                .map(|s| (g, s))
        }) {
            Some((g, s)) => {
                let mut v = s.to_json();
                messages::with_answer(g, &mut v, &answer_id(run));
                v
            }
            None => run.input.clone(),
        };
        let last = cp.step == run.last_step;
        let mut next: Vec<String> = if last && !interrupts.is_empty() {
            wire::next_of(&interrupts)
        } else {
            cp.next.iter().map(|t| t.node.clone()).collect()
        };
        next.dedup();
        let id = ids::checkpoint_id(run.id, cp.step);
        let none: [Interrupt; 0] = [];
        out.push(state_json(
            graph.as_deref(),
            Checkpoint {
                thread: tid,
                run,
                step: cp.step,
                values,
                next,
                parent: parent.take(),
                interrupts: if last { &interrupts } else { &none },
            },
        ));
        parent = Some(id);
    }
    Ok(parent)
}
