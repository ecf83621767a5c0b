//! Runs: `POST /threads/{id}/runs/stream|wait`, `POST /threads/{id}/runs`
//! (in the background), `GET /threads/{id}/runs`, `GET
//! /threads/{id}/runs/{rid}`, `…/join`, `GET …/stream` (rejoin, with
//! `Last-Event-ID`), `POST …/cancel`; stateless `POST /runs/stream`,
//! `/runs/wait` and `/runs` (each on a new thread of its own, which stays),
//! `GET /runs/{rid}` and `GET /runs/{rid}/stream`.
//!
//! A run's status is LangGraph's: `running`, `success` (finished, or
//! paused at an interrupt: the thread is then `interrupted`), `error`,
//! `interrupted` (cancelled).

use crate::server::Code;
use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use super::super::auth::User;
use super::super::error::ApiError;
use super::super::{AppState, RequestId};
use super::ids::{self, LastEvent};
use super::pump::{self, From, Source, StreamSpec};
use super::queue::{self, Queued};
use super::start::{self, Begun, RunBody};
use super::wire::{Context, Modes, Wire};
use super::{Body, invalid, iso, owned_thread};
use crate::runs::RunHub;
use crate::runtime::RunStatus;
use crate::store::{ChatRecord, RunQuery, RunRecord};

/// A run as the API shows it.
fn run_json(r: &RunRecord, thread: &str) -> Value {
    let status = match r.status {
        RunStatus::Running => "running",
        RunStatus::Finished | RunStatus::Interrupted => "success",
        RunStatus::Failed => "error",
        RunStatus::Cancelled => "interrupted",
    };
    json!({
        "run_id": r.id,
        "thread_id": thread,
        "assistant_id": ids::assistant_id(&r.graph),
        "created_at": iso(r.created_at),
        "updated_at": iso(r.finished_at.unwrap_or(r.created_at)),
        "status": status,
        "metadata": {"graph_id": r.graph},
        "kwargs": {},
        "multitask_strategy": "reject",
    })
}

fn body_of(body: Body<RunBody>) -> Result<RunBody, ApiError> {
    body.0
        .ok_or_else(|| invalid("a run needs a body with `assistant_id`"))
}

/// The wire of a queued run (its answer's message id is known when it
/// starts).
fn queued_wire(state: &AppState, q: &Queued) -> Result<Wire, ApiError> {
    let graph = state
        .graphs
        .get(&q.graph)
        .ok_or_else(|| ApiError::internal("a queued run's graph is not served"))?;
    Ok(Wire::new(Context {
        run_id: q.run_id,
        thread_id: q.thread_id.clone(),
        graph,
        message_id: String::new(),
    }))
}

fn wire_for(b: &Begun, thread: &str) -> Wire {
    Wire::new(Context {
        run_id: b.run_id,
        thread_id: thread.to_owned(),
        graph: Arc::clone(&b.graph),
        message_id: b.hub.bridge.message_id.clone(),
    })
}

/// Starts a run and streams it.
async fn stream_on(
    state: Arc<AppState>,
    user: User,
    request_id: RequestId,
    tid: String,
    b: RunBody,
    location: impl Fn(Uuid) -> String,
) -> Result<Response, ApiError> {
    let modes = Modes::parse(b.stream_mode.as_ref()).map_err(invalid)?;
    if queue::wanted(&state, &tid, &b).await? {
        let with_ids = b.stream_resumable.unwrap_or(false);
        let q = queue::enqueue(&state, &user, &request_id, &tid, b).await?;
        let spec = StreamSpec {
            wire: queued_wire(&state, &q)?,
            source: Source::queued(Arc::clone(&state), &q),
            modes,
            from: From::Start,
            with_ids,
            location: location(q.run_id),
        };
        return Ok(pump::response(spec));
    }
    let begun = start::begin(&state, &user, &request_id, &tid, &b).await?;
    let spec = StreamSpec {
        source: Source::new(
            Arc::clone(&state),
            begun.run_id,
            Some(Arc::clone(&begun.hub)),
        ),
        wire: wire_for(&begun, &tid),
        modes,
        from: begun.from,
        with_ids: b.stream_resumable.unwrap_or(false),
        location: location(begun.run_id),
    };
    Ok(pump::response(spec))
}

/// `POST /threads/{id}/runs/stream`.
pub(super) async fn stream(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    Path(tid): Path<String>,
    body: Body<RunBody>,
) -> Result<Response, ApiError> {
    let b = body_of(body)?;
    let t = tid.clone();
    stream_on(state, user, request_id, tid, b, move |r| {
        format!("/threads/{t}/runs/{r}")
    })
    .await
}

/// `POST /runs/stream`: on a new thread.
pub(super) async fn stream_stateless(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    body: Body<RunBody>,
) -> Result<Response, ApiError> {
    let mut b = body_of(body)?;
    b.set_create();
    let tid = Uuid::new_v4().to_string();
    stream_on(state, user, request_id, tid, b, |r| format!("/runs/{r}")).await
}

/// The result of a finished (or paused, or failed) run, as `wait` and
/// `join` answer: the final values, with `__interrupt__` when it paused,
/// or `{"__error__": {error, message}}`.
fn result_of(w: &Wire) -> Value {
    if let Some(e) = &w.error {
        return json!({"__error__": e});
    }
    let mut v = w.last_values.clone();
    if !w.interrupts.is_empty()
        && let Value::Object(m) = &mut v
    {
        m.insert("__interrupt__".into(), Value::Array(w.interrupts.clone()));
    }
    v
}

async fn wait_on(
    state: Arc<AppState>,
    user: User,
    request_id: RequestId,
    tid: String,
    b: RunBody,
) -> Result<Response, ApiError> {
    let keep_alive = state.config.server.keep_alive.0;
    let (wire, source) = if queue::wanted(&state, &tid, &b).await? {
        let q = queue::enqueue(&state, &user, &request_id, &tid, b).await?;
        (
            queued_wire(&state, &q)?,
            Source::queued(Arc::clone(&state), &q),
        )
    } else {
        let begun = start::begin(&state, &user, &request_id, &tid, &b).await?;
        let wire = wire_for(&begun, &tid);
        (
            wire,
            Source::new(Arc::clone(&state), begun.run_id, Some(begun.hub)),
        )
    };
    Ok(super::patient::answer(keep_alive, async move {
        let w = pump::drain(source, wire).await.map_err(|e| e.to_string())?;
        Ok(result_of(&w))
    }))
}

/// `POST /threads/{id}/runs/wait`.
pub(super) async fn wait(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    Path(tid): Path<String>,
    body: Body<RunBody>,
) -> Result<Response, ApiError> {
    wait_on(state, user, request_id, tid, body_of(body)?).await
}

/// `POST /runs/wait`: on a new thread.
pub(super) async fn wait_stateless(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    body: Body<RunBody>,
) -> Result<Response, ApiError> {
    let mut b = body_of(body)?;
    b.set_create();
    wait_on(state, user, request_id, Uuid::new_v4().to_string(), b).await
}

async fn create_on(
    state: Arc<AppState>,
    user: User,
    request_id: RequestId,
    tid: String,
    b: RunBody,
) -> Result<Response, ApiError> {
    if queue::wanted(&state, &tid, &b).await? {
        let q = queue::enqueue(&state, &user, &request_id, &tid, b).await?;
        return Ok(with_location(
            Json(q.json()).into_response(),
            &tid,
            q.run_id,
        ));
    }
    let begun = start::begin(&state, &user, &request_id, &tid, &b).await?;
    let run = state
        .store
        .get_run(begun.run_id)
        .await?
        .ok_or_else(|| ApiError::internal("a started run has no record"))?;
    Ok(with_location(
        Json(run_json(&run, &tid)).into_response(),
        &tid,
        run.id,
    ))
}

/// `resp` with the run's `Content-Location`.
fn with_location(mut resp: Response, tid: &str, run: Uuid) -> Response {
    if let Ok(v) = format!("/threads/{tid}/runs/{run}").parse() {
        resp.headers_mut()
            .insert(axum::http::header::CONTENT_LOCATION, v);
    }
    resp
}

/// `POST /threads/{id}/runs`: starts a run in the background.
pub(super) async fn create(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    Path(tid): Path<String>,
    body: Body<RunBody>,
) -> Result<Response, ApiError> {
    create_on(state, user, request_id, tid, body_of(body)?).await
}

/// `POST /runs`: a background run on a new thread.
pub(super) async fn create_stateless(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    body: Body<RunBody>,
) -> Result<Response, ApiError> {
    let mut b = body_of(body)?;
    b.set_create();
    create_on(state, user, request_id, Uuid::new_v4().to_string(), b).await
}

/// `GET /threads/{id}/runs?limit&offset&status`.
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(tid): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    owned_thread(&state, &user, &tid).await?;
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(10);
    let offset: usize = q.get("offset").and_then(|l| l.parse().ok()).unwrap_or(0);
    let runs = state
        .store
        .list_runs(&RunQuery::newest(limit.saturating_add(offset).min(10_000)).of_chat(&tid))
        .await?;
    // Queued runs are the newest.
    let queued = state.queue.of_thread(&tid);
    let out: Vec<Value> = queued
        .iter()
        .rev()
        .filter(|q| q.user_id == user.0)
        .map(|q| q.json())
        .chain(runs.iter().map(|r| run_json(r, &tid)))
        .filter(|r| q.get("status").is_none_or(|s| r["status"] == s.as_str()))
        .skip(offset)
        .take(limit)
        .collect();
    Ok(Json(Value::Array(out)))
}

/// The thread and its run `rid`: 404 unless both are the caller's and the
/// run is the thread's.
async fn owned_run(
    state: &AppState,
    user: &User,
    tid: &str,
    rid: &str,
) -> Result<(ChatRecord, RunRecord), ApiError> {
    let chat = owned_thread(state, user, tid).await?;
    let missing = || ApiError::not_found(format!("Run {rid} not found"));
    let id = Uuid::parse_str(rid).map_err(|_| missing())?;
    let run = state
        .runs
        .owned_run(&user.0, id)
        .await?
        .filter(|r| r.chat_id.as_deref() == Some(tid))
        .ok_or_else(missing)?;
    Ok((chat, run))
}

/// The caller's run `rid` on thread `tid` while it is queued (or was,
/// and never started).
async fn queued_run(
    state: &AppState,
    user: &User,
    tid: &str,
    rid: &str,
) -> Result<Option<Arc<Queued>>, ApiError> {
    let Ok(id) = Uuid::parse_str(rid) else {
        return Ok(None);
    };
    let Some(q) = state.queue.find(user, tid, id) else {
        return Ok(None);
    };
    owned_thread(state, user, tid).await?;
    Ok((*q.watch().borrow() != queue::Status::Started).then_some(q))
}

/// `GET /threads/{id}/runs/{rid}`.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    user: User,
    Path((tid, rid)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    if let Some(q) = queued_run(&state, &user, &tid, &rid).await? {
        return Ok(Json(q.json()));
    }
    let (_, run) = owned_run(&state, &user, &tid, &rid).await?;
    Ok(Json(run_json(&run, &tid)))
}

/// The hub of run `run` when it runs (here, or followed from another
/// instance's log); `None` once it is over: the store has it all.
async fn hub_of(
    state: &AppState,
    chat: &ChatRecord,
    run: &RunRecord,
) -> Result<Option<Arc<RunHub>>, ApiError> {
    if let Some(h) = state.runs.for_chat(&chat.id).filter(|h| h.run_id == run.id) {
        return Ok(Some(h));
    }
    if run.status != RunStatus::Running {
        return Ok(None);
    }
    Ok(state
        .runs
        .follow_chat(chat)
        .await?
        .filter(|h| h.run_id == run.id))
}

fn graph_ctx(state: &AppState, run: &RunRecord, tid: &str) -> Result<Wire, ApiError> {
    let graph = state.graph_of(run)?;
    Ok(Wire::new(Context {
        run_id: run.id,
        thread_id: tid.to_owned(),
        graph,
        message_id: super::state::answer_id(run),
    }))
}

/// `GET /threads/{id}/runs/{rid}/join`: waits for the run to end; its
/// result as `wait` gives it.
pub(super) async fn join(
    State(state): State<Arc<AppState>>,
    user: User,
    Path((tid, rid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let keep_alive = state.config.server.keep_alive.0;
    let (wire, source) = if let Some(q) = queued_run(&state, &user, &tid, &rid).await? {
        (
            queued_wire(&state, &q)?,
            Source::queued(Arc::clone(&state), &q),
        )
    } else {
        let (chat, run) = owned_run(&state, &user, &tid, &rid).await?;
        let hub = hub_of(&state, &chat, &run).await?;
        (
            graph_ctx(&state, &run, &tid)?,
            Source::new(Arc::clone(&state), run.id, hub),
        )
    };
    Ok(super::patient::answer(keep_alive, async move {
        let w = pump::drain(source, wire).await.map_err(|e| e.to_string())?;
        Ok(result_of(&w))
    }))
}

/// `stream_mode` of a rejoin: `?stream_mode=a&stream_mode=b`, a JSON list,
/// or absent (every mode).
fn modes_of(query: Option<&str>) -> Result<Modes, ApiError> {
    let values: Vec<String> = query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "stream_mode")
        .map(|(_, v)| {
            v.replace("%22", "\"")
                .replace("%2C", ",")
                .replace("%5B", "[")
                .replace("%5D", "]")
        })
        .collect();
    match values.as_slice() {
        [] => Ok(Modes::all()),
        [one] if one.starts_with('[') => {
            let v: Value =
                serde_json::from_str(one).map_err(|e| invalid(format!("stream_mode: {e}")))?;
            Modes::parse(Some(&v)).map_err(invalid)
        }
        many => Modes::parse(Some(&json!(many))).map_err(invalid),
    }
}

/// `GET /threads/{id}/runs/{rid}/stream`: rejoins a run's stream — after
/// `Last-Event-ID` (`-1`: from the start), or from now without one.
pub(super) async fn join_stream(
    State(state): State<Arc<AppState>>,
    user: User,
    Path((tid, rid)): Path<(String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let modes = modes_of(uri.query())?;
    if let Some(q) = queued_run(&state, &user, &tid, &rid).await? {
        // Nothing was sent yet: all of it, whatever the `Last-Event-ID`.
        let spec = StreamSpec {
            wire: queued_wire(&state, &q)?,
            source: Source::queued(Arc::clone(&state), &q),
            modes,
            from: From::Start,
            with_ids: true,
            location: format!("/threads/{tid}/runs/{rid}"),
        };
        return Ok(pump::response(spec));
    }
    let (chat, run) = owned_run(&state, &user, &tid, &rid).await?;
    let hub = hub_of(&state, &chat, &run).await?;
    let from = match headers.get("last-event-id") {
        Some(v) => {
            let parsed = v.to_str().ok().and_then(ids::parse_last_event);
            From::After(parsed.ok_or_else(|| {
                invalid("Last-Event-ID must be an id this stream sent (`SEQ-N`) or -1")
            })?)
        }
        None => {
            let now = hub
                .as_ref()
                .map_or(run.last_seq, |h| h.watch().borrow().last_seq);
            From::After(LastEvent::After(now, u32::MAX))
        }
    };
    let spec = StreamSpec {
        source: Source::new(Arc::clone(&state), run.id, hub),
        wire: graph_ctx(&state, &run, &tid)?,
        modes,
        from,
        with_ids: true,
        location: format!("/threads/{tid}/runs/{}", run.id),
    };
    Ok(pump::response(spec))
}

/// `POST /threads/{id}/runs/{rid}/cancel?wait&action`: stops the run (202;
/// with `wait=true`, its result once it ended). 409 when it is not
/// running.
pub(super) async fn cancel(
    State(state): State<Arc<AppState>>,
    user: User,
    Path((tid, rid)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    if let Some(queued) = queued_run(&state, &user, &tid, &rid).await?
        && state.queue.cancel(&queued)
    {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    let (chat, run) = owned_run(&state, &user, &tid, &rid).await?;
    if let Some(a) = q
        .get("action")
        .filter(|a| !matches!(a.as_str(), "interrupt" | "rollback"))
    {
        return Err(invalid(format!(
            "action must be interrupt or rollback, not `{a}`"
        )));
    }
    let stoppable = chat.active_run == Some(run.id)
        && matches!(run.status, RunStatus::Running | RunStatus::Interrupted);
    if !stoppable {
        return Err(ApiError::new(
            Code::NotRunning,
            format!("Run {rid} is not running"),
        ));
    }
    if run.status == RunStatus::Interrupted {
        state
            .runs
            .set_aside(&run, "cancelled through the LangGraph API")
            .await?;
    } else {
        let hub = hub_of(&state, &chat, &run).await?;
        state.runs.stop_chat(&tid, Some(run.id)).await?;
        if matches!(
            q.get("wait").map(String::as_str),
            Some("true" | "1" | "yes")
        ) {
            let wire = graph_ctx(&state, &run, &tid)?;
            let w = pump::drain(Source::new(Arc::clone(&state), run.id, hub), wire)
                .await
                .map_err(ApiError::internal)?;
            return Ok(Json(result_of(&w)).into_response());
        }
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

impl RunBody {
    /// A stateless run makes its thread.
    fn set_create(&mut self) {
        self.if_not_exists = Some("create".into());
    }
}

/// The thread of the caller's run `rid` (a stateless run's own thread).
async fn thread_of(state: &AppState, user: &User, rid: &str) -> Result<String, ApiError> {
    let missing = || ApiError::not_found(format!("Run {rid} not found"));
    let id = Uuid::parse_str(rid).map_err(|_| missing())?;
    state
        .runs
        .owned_run(&user.0, id)
        .await?
        .and_then(|r| r.chat_id)
        .ok_or_else(missing)
}

/// `GET /runs/{rid}`: a run by id alone (where a stateless run's
/// `Content-Location` points).
pub(super) async fn get_stateless(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(rid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tid = thread_of(&state, &user, &rid).await?;
    get(State(state), user, Path((tid, rid))).await
}

/// `GET /runs/{rid}/stream`: rejoins a run by id alone (where the SDKs
/// reconnect a stateless run's stream).
pub(super) async fn join_stream_stateless(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(rid): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tid = thread_of(&state, &user, &rid).await?;
    join_stream(State(state), user, Path((tid, rid)), uri, headers).await
}
