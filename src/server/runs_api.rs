//! The debugging API over stored runs: `GET /api/runs`, `GET /api/runs/{id}`,
//! `GET /api/runs/{id}/events` (JSON, or the client's SSE bytes when asked
//! with `Accept: text/event-stream`), `GET /api/runs/{id}/state?step=N`,
//! `POST /api/runs/{id}/fork` (after or before a node, optionally attached
//! to the chat as an alternative answer), `GET /api/runs/{id}/timeline`
//! (steps × tasks) and `POST /api/runs/{id}/reexecute` (the graph run again
//! on the recording, and the first event that differs). Every run is
//! visible only to its user.

use crate::server::Code;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::AppState;
use super::auth::User;
use super::error::ApiError;
use crate::events::ForkMode;
use crate::replay::{self, Edit};
use crate::runs::{ForkError, ForkRequest};
use crate::runtime::RunStatus;
use crate::store::{RunCursor, RunQuery, RunRecord};

fn run_json(r: &RunRecord) -> Value {
    json!({
        "id": r.id,
        "chatId": r.chat_id,
        "graph": r.graph,
        "graphVersion": r.graph_version,
        "status": r.status,
        "createdAt": r.created_at / 1000,
        "finishedAt": r.finished_at.map(|t| t / 1000),
        "error": r.error,
        "usage": {
            "promptTokens": r.usage.prompt_tokens,
            "completionTokens": r.usage.completion_tokens,
            // Exact (billionths of a dollar), and in dollars for reading.
            "costNanoUsd": r.usage.cost_nano_usd,
            "costUsd": r.usage.cost_usd(),
        },
        "parent": r.parent,
        "requestId": r.request_id,
        "messageId": r.message_id,
        "lastSeq": r.last_seq,
        "lastStep": r.last_step,
    })
}

fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    id.parse()
        .map_err(|_| ApiError::not_found(format!("no run `{id}`")))
}

/// The run if it belongs to `user`.
pub(super) async fn owned_run(
    state: &AppState,
    user: &User,
    id: &str,
) -> Result<RunRecord, ApiError> {
    owned_run_id(state, user, parse_id(id)?).await
}

/// The run `id` if it belongs to `user` (another user's is 404, as a
/// missing one).
pub(super) async fn owned_run_id(
    state: &AppState,
    user: &User,
    id: Uuid,
) -> Result<RunRecord, ApiError> {
    state
        .runs
        .owned_run(&user.0, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no run `{id}`")))
}

/// `GET /api/runs` filters: `?chat=&graph=&status=&since=&until=&cursor=&limit=`.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    chat: Option<String>,
    graph: Option<String>,
    status: Option<RunStatus>,
    /// Only runs created at or after this time (ms since the epoch).
    since: Option<u64>,
    /// Only runs created before this time (ms since the epoch).
    until: Option<u64>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/runs`: the user's runs, newest first, filtered in the store and
/// paged by cursor (`next` is the cursor of the following page, or null).
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    user: User,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    if let Some(chat) = &q.chat {
        super::chat::owned_chat(&state, &user, chat).await?;
    }
    let cursor = match &q.cursor {
        None => None,
        Some(c) => Some(RunCursor::decode(c).ok_or_else(|| {
            ApiError::new(
                Code::InvalidCursor,
                "`cursor` must be a `next` this API returned",
            )
        })?),
    };
    // `until` is a position too: before every run of that ms.
    let until = q.until.map(|ms| RunCursor {
        created_at: ms.saturating_mul(1000),
        id: Uuid::nil(),
    });
    let before = match (cursor, until) {
        (Some(c), Some(u)) => Some(if (u.created_at, u.id) < (c.created_at, c.id) {
            u
        } else {
            c
        }),
        (c, u) => c.or(u),
    };
    let query = RunQuery {
        user: Some(user.0.clone()),
        chat: q.chat,
        graph: q.graph,
        status: q.status,
        since: q.since.map(|ms| ms.saturating_mul(1000)),
        before,
        limit,
    };
    let runs = state.store.list_runs(&query).await?;
    let next = (runs.len() == limit)
        .then(|| runs.last().map(|r| RunCursor::after(r).encode()))
        .flatten();
    let runs: Vec<Value> = runs.iter().map(run_json).collect();
    Ok(Json(json!({ "runs": runs, "next": next })))
}

/// `GET /api/runs/{id}`: the run, with its timing (time to the first
/// visible part, each node task's latency) read from its events.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = owned_run(&state, &user, &id).await?;
    let events = state.store.events(run.id, 0, 1_000_000).await?;
    let mut v = run_json(&run);
    v["timing"] = serde_json::to_value(replay::timing(&events)).unwrap_or(Value::Null);
    if run.status == crate::runtime::RunStatus::Interrupted {
        // What the run waits for: answer with POST /api/runs/{id}/resume.
        v["interrupts"] =
            serde_json::to_value(crate::runs::resume::pending(&events)).unwrap_or(Value::Null);
    }
    // What a judge said of its answer (`stategraph eval --criterion`, the Eval page).
    v["verdicts"] = super::eval_api::verdicts_json(&*state.store, run.id).await?;
    Ok(Json(v))
}

/// `?after=&limit=` for events.
#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

/// `GET /api/runs/{id}/events`: JSON pages, or the SSE bytes of the run.
pub(super) async fn events(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = owned_run(&state, &user, &id).await?;
    let wants_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if wants_sse {
        let (_, events) = replay::load(&*state.store, run.id)
            .await
            .map_err(ApiError::internal)?;
        let text =
            replay::sse(&events).map_err(|e| ApiError::new(Code::NotStreamed, e.to_string()))?;
        let mut resp = Bytes::from(text).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        resp.headers_mut().insert(
            "x-vercel-ai-ui-message-stream",
            HeaderValue::from_static("v1"),
        );
        return Ok(resp);
    }
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000);
    let events = state
        .store
        .events(run.id, q.after.unwrap_or(0), limit)
        .await?;
    let next = (events.len() == limit)
        .then(|| events.last().map(|e| e.seq))
        .flatten();
    Ok(Json(json!({ "events": events, "next": next })).into_response())
}

/// `?step=`.
#[derive(Debug, Deserialize)]
pub(super) struct StateQuery {
    step: Option<u32>,
}

/// `GET /api/runs/{id}/state?step=N`: the state after step N (default: the
/// last; for a paused run, the state it paused with, which an edit at a
/// breakpoint changes).
pub(super) async fn state_at(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
    Query(q): Query<StateQuery>,
) -> Result<Json<Value>, ApiError> {
    let run = owned_run(&state, &user, &id).await?;
    let graph = state
        .graphs
        .get(&run.graph)
        .ok_or_else(|| ApiError::not_found(format!("graph `{}` is no longer served", run.graph)))?;
    let paused = match (q.step, run.status) {
        (None, crate::runtime::RunStatus::Interrupted) => state
            .runs
            .waiting_at(&run)
            .await
            .map_err(ApiError::internal)?
            .first()
            .map(|i| i.step.saturating_sub(1)),
        _ => None,
    };
    let step = q.step.or(paused).unwrap_or(run.last_step);
    if step > run.last_step {
        return Err(ApiError::new(
            Code::InvalidStep,
            format!(
                "run {} has steps 0–{}; there is no step {step}",
                run.id, run.last_step
            ),
        ));
    }
    let s = replay::state_at(&*state.store, &graph, run.id, step)
        .await
        .map_err(|e| ApiError::new(Code::NoCheckpoint, e.to_string()))?;
    Ok(Json(
        json!({ "runId": run.id, "step": step, "state": s.to_json() }),
    ))
}

/// The fork request body (docs/forks.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ForkBody {
    /// The step forked (the one the node ran in); optional with a node that
    /// ran once.
    #[serde(default)]
    at: Option<u32>,
    /// The edit comes after this node: routed again from it (the default,
    /// with the step's node when it ran one).
    #[serde(default)]
    after: Option<String>,
    /// The edit comes before this node, which runs again.
    #[serde(default)]
    before: Option<String>,
    /// Fields and their values.
    #[serde(default)]
    set: serde_json::Map<String, Value>,
    /// Attach the answer to the parent's chat as an alternative of its
    /// assistant message.
    #[serde(default)]
    attach: bool,
}

/// `POST /api/runs/{id}/fork`: a new run from a step of another, with an
/// edit after or before a node. 202 with the run; 400 with a stable code
/// when the step, node or edit is refused (nothing ran).
pub(super) async fn fork(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<super::RequestId>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let parent = owned_run(&state, &user, &id).await?;
    let body: ForkBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(Code::InvalidRequest, format!("invalid fork body: {e}")))?;
    let (mode, node) = match (body.after, body.before) {
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                Code::InvalidRequest,
                "give `after` or `before`, not both",
            ));
        }
        (None, Some(n)) => (ForkMode::Before, Some(n)),
        (after, None) => (ForkMode::After, after),
    };
    state.limits.check_daily(&*state.store, &user.0).await?;
    let req = ForkRequest {
        parent: parent.clone(),
        user_id: user.0.clone(),
        edit: Edit {
            step: body.at,
            mode,
            node,
            set: body.set.into_iter().collect(),
        },
        attach: body.attach,
        request_id: request_id.0,
    };
    let started = state.runs.fork(req).await.map_err(|e| match e {
        ForkError::UnknownGraph(_) => ApiError::new(Code::UnknownGraph, e.to_string()),
        ForkError::Edit(_) | ForkError::Invalid(_) => ApiError::coded(e.code(), e.to_string()),
        ForkError::NotAttachable(_) => ApiError::coded(e.code(), e.to_string()),
        ForkError::Start(e) => e.into(),
    })?;
    let o = &started.origin;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "runId": started.run_id,
            "parent": parent.id,
            "at": o.step,
            "mode": o.mode,
            "nodes": o.nodes,
            "set": o.set,
            "alternativeOf": o.alternative_of,
        })),
    )
        .into_response())
}

/// `GET /api/runs/{id}/timeline`: the run's supersteps and their tasks
/// (duration, attempts, retries, model calls with tokens, tool calls,
/// errors), computed from its events.
pub(super) async fn timeline(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<Json<replay::TaskTimeline>, ApiError> {
    let run = owned_run(&state, &user, &id).await?;
    let (_, events) = replay::load(&*state.store, run.id)
        .await
        .map_err(replay_error)?;
    Ok(Json(replay::task_timeline(&events)))
}

/// `POST /api/runs/{id}/reexecute`: runs the graph (as it is served now)
/// again on the run's recorded input, with every model and tool result
/// served from the recording, and reports the first event that differs.
/// Nothing is stored. 409 `running` while the run has not ended.
pub(super) async fn reexecute(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = owned_run(&state, &user, &id).await?;
    if run.status == RunStatus::Running {
        return Err(ApiError::new(
            Code::Running,
            format!(
                "run {} is still running; re-execute it when it has ended",
                run.id
            ),
        ));
    }
    let graph = state
        .graphs
        .get(&run.graph)
        .ok_or_else(|| ApiError::not_found(format!("graph `{}` is no longer served", run.graph)))?;
    let (_, events) = replay::load(&*state.store, run.id)
        .await
        .map_err(replay_error)?;
    let services = (*state.services).clone();
    let r = replay::reexecute(graph, services, &events)
        .await
        .map_err(|e| match e {
            replay::ReplayError::State(m) => ApiError::new(Code::NotReexecutable, m),
            other => replay_error(other),
        })?;
    let divergence = r.divergence.as_ref().map(|(index, recorded, got)| {
        let what = |e: &Option<crate::events::Event>| {
            e.as_ref().map_or_else(
                || "nothing".to_owned(),
                |e| {
                    let kind = serde_json::to_value(&e.event)
                        .ok()
                        .and_then(|v| v["type"].as_str().map(str::to_owned))
                        .unwrap_or_default();
                    match &e.node {
                        Some(n) => format!("{kind} of {n} in step {}", e.step),
                        None => format!("{kind} in step {}", e.step),
                    }
                },
            )
        };
        json!({
            "index": index,
            "seq": recorded.as_ref().or(got.as_ref()).map(|e| e.seq),
            "message": format!("recorded {}, re-executed {}", what(recorded), what(got)),
            "expected": recorded,
            "got": got,
        })
    });
    Ok(Json(json!({
        "runId": run.id,
        "diverged": divergence.is_some(),
        "events": r.events.len(),
        "recordedEvents": events.len(),
        "sameVersion": r.same_version,
        "divergence": divergence,
    })))
}

fn replay_error(e: replay::ReplayError) -> ApiError {
    match e {
        replay::ReplayError::NoRun(id) => ApiError::not_found(format!("no run `{id}`")),
        replay::ReplayError::Store(s) => s.into(),
        other => ApiError::internal(other),
    }
}
