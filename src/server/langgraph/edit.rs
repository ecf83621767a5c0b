//! `POST /threads/{id}/state` (LangGraph's `update_state`): the thread's
//! state with `values` written over it becomes its newest checkpoint.
//!
//! Our checkpoints belong to runs, so the edit is a run: a chat turn that
//! starts from the edited state with nothing to do (a fork of the run it
//! edits, naming the fields set and `as_node`), whose one checkpoint is
//! the edited state. It shows in `/state` and `/history` (its parent the
//! checkpoint it edits), the next run starts from it, and it re-executes
//! like any run (to the same state, doing nothing). A thread paused at an
//! interrupt or a breakpoint stays paused: the edit run waits before the
//! paused node(s) (a breakpoint), and `input: null` continues from there.
//! An edit `as_node` routes from that node on the edited state, as if it
//! had just run (paused or not: a question it asked is then answered by
//! the edit): the edit run waits before the nodes it routes to (the
//! thread's `next`, as LangGraph's), and `input: null` runs them.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::auth::User;
use super::super::error::ApiError;
use super::super::{AppState, RequestId};
use super::start::{Turn, input_state, make_way, start_turn};
use super::{Body, frontier, ids, invalid, messages, owned_thread, wire};
use crate::events::{Breakpoints, ForkMode, ForkOrigin, PendingTask};
use crate::nodes::Graph;

/// How long the edit's run may take (it runs no node).
const EDIT_WAIT: Duration = Duration::from_secs(10);

/// The body (LangGraph's `ThreadStateUpdate`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Update {
    #[serde(default)]
    values: Option<Value>,
    #[serde(default)]
    as_node: Option<String>,
    #[serde(default)]
    checkpoint: Option<Value>,
    #[serde(default)]
    checkpoint_id: Option<String>,
}

/// `POST /threads/{id}/state`.
pub(super) async fn update(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    Path(tid): Path<String>,
    body: Body<Update>,
) -> Result<Json<Value>, ApiError> {
    let chat = owned_thread(&state, &user, &tid).await?;
    let b = body.0.unwrap_or_default();
    let (graph, at) = edited(&state, &user, &tid, &b).await?;
    if let Some(n) = &b.as_node
        && graph.node_index(n).is_none()
    {
        return Err(invalid(format!(
            "as_node: graph `{}` has no node `{n}`",
            graph.id
        )));
    }
    let set = messages::values_in(
        &graph.state.schema,
        b.values.as_ref().unwrap_or(&Value::Null),
    )
    .map_err(invalid)?;
    let base = match &at {
        Some(at) => frontier::base_at(&state, &graph, &at.run, at.step).await,
        None => serde_json::Map::new(),
    };
    let input = input_state(&graph, base, b.values.as_ref(), None)?;
    // Edited `as_node`, the thread waits before what that node routes to
    // (as if it had just run, paused or not); otherwise a paused thread
    // stays paused before the node(s) it waits at.
    let (paused, next) = match &b.as_node {
        Some(node) => {
            let next = routed_from(&graph, &input, node)?;
            let mut names: Vec<String> = next.iter().map(|t| t.node.clone()).collect();
            names.dedup();
            (names, next)
        }
        None => {
            let paused = match &at {
                Some(at) => wire::next_of(&super::state::waiting(&state, &at.run).await?),
                None => Vec::new(),
            };
            let next = frontier::tasks(&paused);
            (paused, next)
        }
    };
    let origin = at.map(|at| ForkOrigin {
        run_id: at.run.id,
        step: at.step,
        mode: Some(ForkMode::After),
        nodes: b.as_node.clone().into_iter().collect(),
        set,
        alternative_of: None,
    });
    let from = frontier::from_state(&graph, &input, next, origin)?;
    make_way(&state, &chat, "reject").await?;
    let t = Turn {
        chat: &chat,
        graph,
        input,
        breakpoints: Breakpoints {
            before: paused,
            after: Vec::new(),
        },
        from: Some(from),
        run_id: None,
    };
    let begun = start_turn(&state, &user, &request_id, t).await?;
    settle(&state, &tid, begun.run_id).await?;
    let id = ids::checkpoint_id(begun.run_id, 0);
    Ok(Json(json!({
        "checkpoint": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": id, "checkpoint_map": {}},
    })))
}

/// The graph and the checkpoint an edit starts from: the one the body
/// names, else the thread's newest. A thread with no run yet has none: its
/// graph is its metadata's `graph_id` (LangGraph's `threads.create(graph_id)`
/// sets it), and the edit starts from the empty state, as LangGraph's does;
/// without one it is 422 (LangGraph: 400), there being no graph to edit.
async fn edited(
    state: &AppState,
    user: &User,
    tid: &str,
    b: &Update,
) -> Result<(Arc<Graph>, Option<frontier::At>), ApiError> {
    let at = match checkpoint_named(b) {
        Some(id) => Some(frontier::find(state, tid, &id).await?),
        None => super::state::latest_run(state, tid)
            .await?
            .map(|run| frontier::At {
                step: run.last_step,
                run,
            }),
    };
    if let Some(at) = at {
        return Ok((state.graph_of(&at.run)?, Some(at)));
    }
    let metadata = super::threads::metadata_of(state, user, tid).await?;
    let Some(graph_id) = metadata["graph_id"].as_str() else {
        return Err(invalid(format!(
            "thread {tid} has no run and no `graph_id` in its metadata: \
             create it with a graph_id or start it with a run first"
        )));
    };
    Ok((super::assistants::graph_of(state, graph_id)?, None))
}

/// What runs after `node` on state `input`: the graph's edges and routes
/// from it, as the executor routes after a step (LangGraph's
/// `update_state(as_node=…)` sets the thread's `next` so). A route that
/// finds no target for the edited state is 422.
fn routed_from(graph: &Graph, input: &Value, node: &str) -> Result<Vec<PendingTask>, ApiError> {
    let s = graph
        .state
        .from_json(input)
        .map_err(|e| invalid(format!("invalid state: {e}")))?;
    let ran = [PendingTask {
        node: node.to_owned(),
        item: None,
    }];
    let routed = crate::runtime::next_after(graph, &*s, &ran, &[])
        .map_err(|e| invalid(format!("as_node `{node}`: {e}")))?;
    Ok(routed.next)
}

/// The checkpoint the body names, if any.
fn checkpoint_named(b: &Update) -> Option<String> {
    b.checkpoint_id.clone().or_else(|| {
        b.checkpoint
            .as_ref()
            .and_then(|c| c["checkpoint_id"].as_str())
            .map(str::to_owned)
    })
}

/// Waits for the edit's run to end (or pause) and takes out the empty
/// assistant message its turn stored: an edit answers nothing.
async fn settle(state: &AppState, tid: &str, run_id: uuid::Uuid) -> Result<(), ApiError> {
    let ended = tokio::time::timeout(EDIT_WAIT, async {
        loop {
            match state.store.get_run(run_id).await {
                Ok(Some(r)) if r.status == crate::runtime::RunStatus::Running => {}
                _ => break,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    ended.map_err(|_| ApiError::internal("the state edit did not settle"))?;
    let run = state.store.get_run(run_id).await?;
    let stored = state.store.messages(tid).await?;
    if let Some(m) = run
        .and_then(|r| r.message_id)
        .and_then(|id| stored.iter().find(|m| m.id == id))
        && m.parts.as_array().is_none_or(Vec::is_empty)
    {
        let keep: Vec<_> = stored
            .iter()
            .filter(|s| s.position > m.position)
            .cloned()
            .collect();
        state
            .store
            .replace_messages_from(tid, m.position, keep)
            .await?;
    }
    Ok(())
}
