//! Runs that do not start at the graph's entry: `command.goto` (at the
//! nodes named), a run from a checkpoint (`checkpoint_id` / `checkpoint`:
//! the thread goes on from that point), and `POST /threads/{id}/state`
//! (`edit`: a run that starts with nothing to do).
//!
//! Each is a chat turn begun from a state and a frontier of its own
//! ([`TurnFrom`]), recorded as a fork of the run whose state it starts
//! from (docs/langgraph-api.md says why): its `run_started` event carries
//! the state and the frontier, so it re-executes as it ran, and the
//! studio shows where it came from.

use serde_json::{Map, Value};

use super::super::AppState;
use super::super::error::ApiError;
use super::start::RunBody;
use super::{ids, invalid};
use crate::events::{ForkMode, ForkOrigin, PendingTask};
use crate::nodes::Graph;
use crate::runs::TurnFrom;
use crate::runtime::Resume;
use crate::store::{ChatRecord, RunRecord};

/// `command.goto`: a node name, a `Send` (`{node, input}`, as the SDKs
/// send LangGraph's `Send(node, arg)`), or a list of them; an unknown node
/// is 422. A `Send`'s `input` is the task's own input, as LangGraph gives
/// `arg` to the node: here the task's item, which a map edge's target
/// reads as `item` (with the state; our nodes always read the state). A
/// node that no map edge leads to has no `item` in its expressions and
/// prompt (they are compiled without it), so a `Send` with `input` to it
/// is 422 rather than its input silently dropped.
pub(super) fn goto_of(
    graph: &Graph,
    goto: Option<&Value>,
) -> Result<Option<Vec<PendingTask>>, ApiError> {
    let task = |v: &Value| -> Option<PendingTask> {
        match v {
            Value::String(s) => Some(PendingTask {
                node: s.clone(),
                item: None,
            }),
            Value::Object(m) => Some(PendingTask {
                node: m.get("node")?.as_str()?.to_owned(),
                item: m.get("input").filter(|i| !i.is_null()).cloned(),
            }),
            _ => None,
        }
    };
    let tasks: Vec<PendingTask> = match goto {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items.iter().map(task).collect::<Option<_>>(),
        Some(one) => task(one).map(|t| vec![t]),
    }
    .ok_or_else(|| {
        invalid("command.goto must be a node name, a Send {node, input} or a list of them")
    })?;
    if tasks.is_empty() {
        return Err(invalid("command.goto names no node"));
    }
    for t in &tasks {
        let Some(idx) = graph.node_index(&t.node) else {
            return Err(invalid(format!(
                "command.goto: graph `{}` has no node `{}`",
                graph.id, t.node
            )));
        };
        if t.item.is_some() && !is_map_target(graph, idx) {
            return Err(invalid(format!(
                "command.goto: a Send's input goes to its node as its map item, and no map edge \
                 leads to `{}`, so it has none to read (send it without input)",
                t.node
            )));
        }
    }
    Ok(Some(tasks))
}

/// Whether a map edge leads to node `idx` (its expressions read `item`).
fn is_map_target(graph: &Graph, idx: crate::graph::NodeIdx) -> bool {
    graph
        .nodes
        .iter()
        .flat_map(|n| &n.out)
        .any(|t| matches!(t, crate::graph::Transition::Map { to, .. } if *to == idx))
}

/// A checkpoint of one of the thread's runs.
pub(super) struct At {
    pub(super) run: RunRecord,
    pub(super) step: u32,
}

/// The checkpoint a run request names (`checkpoint_id`, or `checkpoint`'s
/// `checkpoint_id`), which must be one of the thread's: 404 otherwise, as
/// LangGraph answers a checkpoint it does not have.
pub(super) async fn checkpoint_of(
    state: &AppState,
    chat: &ChatRecord,
    body: &RunBody,
) -> Result<Option<At>, ApiError> {
    let id = body.checkpoint_id.clone().or_else(|| {
        body.checkpoint
            .as_ref()
            .and_then(|c| c["checkpoint_id"].as_str())
            .map(str::to_owned)
    });
    let Some(id) = id else {
        return Ok(None);
    };
    find(state, &chat.id, &id).await.map(Some)
}

/// Checkpoint `id` of thread `tid` (404 when it is not one of its).
pub(super) async fn find(state: &AppState, tid: &str, id: &str) -> Result<At, ApiError> {
    let missing = || ApiError::not_found(format!("Checkpoint {id} not found"));
    let (run_id, step) = ids::parse_checkpoint(id).ok_or_else(missing)?;
    let run = state
        .store
        .get_run(run_id)
        .await?
        .filter(|r| r.chat_id.as_deref() == Some(tid) && step <= r.last_step)
        .ok_or_else(missing)?;
    let cps = state.store.checkpoints(run.id, u32::MAX).await?;
    if !cps.iter().any(|c| c.step == step) {
        return Err(missing());
    }
    Ok(At { run, step })
}

/// Run `run`'s state after `step` as a new run's base: the answer the
/// client sees in the messages (`with_answer`) is in them.
pub(super) async fn base_at(
    state: &AppState,
    graph: &Graph,
    run: &RunRecord,
    step: u32,
) -> Map<String, Value> {
    match super::state::values_at(state, run, step).await {
        Value::Object(mut m) => {
            if let Some(answer) = graph.chat.answer.as_deref() {
                m.remove(answer);
            }
            m
        }
        _ => Map::new(),
    }
}

/// The thread's state (its newest run's last) as a new run's base.
pub(super) async fn thread_base(
    state: &AppState,
    graph: &Graph,
    tid: &str,
) -> Result<Map<String, Value>, ApiError> {
    Ok(match super::state::latest_run(state, tid).await? {
        Some(run) => base_at(state, graph, &run, run.last_step).await,
        None => Map::new(),
    })
}

/// Where a run starts: at `goto`'s nodes; from checkpoint `at`'s frontier
/// when it has no input (with input, at the entry on the checkpoint's
/// state: either way recorded as going on from that checkpoint);
/// otherwise (`None`) at the entry, as any turn.
pub(super) async fn turn_from(
    state: &AppState,
    graph: &Graph,
    chat: &ChatRecord,
    input: &Value,
    goto: Option<Vec<PendingTask>>,
    at: Option<At>,
    given: Option<&Value>,
) -> Result<Option<TurnFrom>, ApiError> {
    let at = match at {
        Some(at) => at,
        None if goto.is_none() => return Ok(None),
        None => match super::state::latest_run(state, &chat.id).await? {
            Some(run) => At {
                step: run.last_step,
                run,
            },
            // An empty thread: the run starts at the nodes on the input
            // alone, a run of its own (no fork), as LangGraph's does.
            None => {
                let next = goto.unwrap_or_default();
                return from_state(graph, input, next, None).map(Some);
            }
        },
    };
    let next = match goto {
        Some(tasks) => tasks,
        None if given.is_none_or(Value::is_null) => {
            let cps = state.store.checkpoints(at.run.id, at.step).await?;
            cps.into_iter()
                .find(|c| c.step == at.step)
                .map(|c| c.next)
                .unwrap_or_default()
        }
        // New input on a checkpoint's state: the graph starts again.
        None => graph
            .entry
            .iter()
            .map(|&i| PendingTask {
                node: graph.nodes[i as usize].id.to_string(),
                item: None,
            })
            .collect(),
    };
    let origin = ForkOrigin {
        run_id: at.run.id,
        step: at.step,
        mode: Some(ForkMode::After),
        nodes: Vec::new(),
        set: Map::new(),
        alternative_of: None,
    };
    from_state(graph, input, next, Some(origin)).map(Some)
}

/// Tasks for `nodes`, one each.
pub(super) fn tasks(nodes: &[String]) -> Vec<PendingTask> {
    nodes
        .iter()
        .map(|n| PendingTask {
            node: n.clone(),
            item: None,
        })
        .collect()
}

/// A turn's start at `next` on state `input` (checked against the
/// declared state: 422 when it does not fit).
pub(super) fn from_state(
    graph: &Graph,
    input: &Value,
    next: Vec<PendingTask>,
    origin: Option<ForkOrigin>,
) -> Result<TurnFrom, ApiError> {
    let state = graph
        .state
        .from_json(input)
        .map_err(|e| invalid(format!("invalid state: {e}")))?;
    Ok(TurnFrom {
        resume: Resume {
            state,
            step: 0,
            next,
            joins: Vec::new(),
            last_seq: 0,
        },
        origin,
    })
}
