//! `POST /api/chat`, `GET /api/chat/{id}/stream`, `POST /api/chat/{id}/stop`
//! and the chat history endpoints.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use super::auth::User;
use super::error::ApiError;
use super::runs::{Begin, RunStart, StartError};
use super::{AppState, RequestId, stream, ui};
use crate::events::now_micros;
use crate::runtime::RunStatus;
use crate::store::{ChatRecord, MessageRecord, RunRecord};

/// Reads the body, mapping an oversized one to 413.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "request body is too large",
        ),
        status => ApiError::new(status, "invalid_request", e.body_text()),
    })
}

/// The chat if it exists and belongs to `user`; another user's chat is
/// indistinguishable from a missing one.
async fn owned_chat(state: &AppState, user: &User, id: &str) -> Result<ChatRecord, ApiError> {
    match state.store.get_chat(id).await? {
        Some(c) if c.user_id == user.0 => Ok(c),
        _ => Err(ApiError::not_found(format!("no chat `{id}`"))),
    }
}

/// `POST /api/chat`: stores the conversation, starts the graph and streams
/// the UI message stream.
pub(super) async fn post(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body)?;
    let (body, _trigger) = ui::parse(&bytes)?;
    let graph_id = body.graph.clone().unwrap_or_else(|| "chat".to_owned());
    let graph = state.graphs.get(&graph_id).ok_or_else(|| {
        let known: Vec<String> = state.graphs.catalog().graphs.keys().cloned().collect();
        ApiError::bad_request(
            "unknown_graph",
            format!("no graph `{graph_id}` (available: {})", known.join(", ")),
        )
    })?;
    if let Some(existing) = state.store.get_chat(&body.id).await?
        && existing.user_id != user.0
    {
        return Err(ApiError::not_found(format!("no chat `{}`", body.id)));
    }
    if state.runs.is_busy(&body.id) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_in_progress",
            "this chat is already answering; stop it or wait",
        ));
    }
    let now = now_micros();
    let chat = state
        .store
        .ensure_chat(ChatRecord {
            id: body.id.clone(),
            user_id: user.0.clone(),
            title: ui::title(&body.messages),
            created_at: now,
            updated_at: now,
            active_run: None,
        })
        .await?;
    if chat.user_id != user.0 {
        return Err(ApiError::not_found(format!("no chat `{}`", body.id)));
    }
    // The conversation as the client has it (this also drops the old
    // answer on regenerate), saved before the run starts.
    let messages: Vec<MessageRecord> = body
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| MessageRecord {
            chat_id: chat.id.clone(),
            id: m.id.clone(),
            role: m.role.clone(),
            parts: Value::Array(m.parts.clone()),
            metadata: m.metadata.clone().unwrap_or(Value::Null),
            position: i as i64,
            created_at: now,
        })
        .collect();
    let position = messages.len() as i64;
    state
        .store
        .replace_messages_from(&chat.id, 0, messages)
        .await?;

    let run_id = Uuid::now_v7();
    let message_id = format!("msg_{}", Uuid::now_v7().simple());
    let mut input = ui::input_state(&graph.chat, &body);
    if !graph.chat.carry.is_empty()
        && let Some(previous) = previous_state(&state, &graph, &chat.id, &body).await?
    {
        ui::carry_into(&mut input, &previous, &graph.chat.carry);
    }
    let metadata = stream_metadata(&state, run_id, &request_id.0, &chat.id, &graph);
    state
        .store
        .create_leased_run(
            RunRecord {
                id: run_id,
                chat_id: Some(chat.id.clone()),
                user_id: user.0.clone(),
                graph: graph.id.to_string(),
                graph_version: graph.version.clone(),
                status: RunStatus::Running,
                input: input.clone(),
                created_at: now,
                finished_at: None,
                error: None,
                usage: Default::default(),
                parent: None,
                request_id: Some(request_id.0.clone()),
                message_id: Some(message_id.clone()),
                last_seq: 0,
                last_step: 0,
            },
            &state.instance,
            now_micros() + state.config.server.lease.0.as_micros() as u64,
        )
        .await?;
    state.store.set_active_run(&chat.id, Some(run_id)).await?;
    let start = RunStart {
        run_id,
        chat_id: chat.id.clone(),
        user_id: user.0.clone(),
        request_id: request_id.0.clone(),
        message_id,
        position,
        metadata,
        graph,
        begin: Begin::Fresh(input),
    };
    let hub = match state.runs.start(&state, start) {
        Ok(hub) => hub,
        Err(e) => {
            let _ = state
                .store
                .finish_run(run_id, RunStatus::Cancelled, None, Default::default())
                .await;
            let _ = state.store.set_active_run(&chat.id, None).await;
            return Err(match e {
                StartError::Busy => ApiError::new(
                    StatusCode::CONFLICT,
                    "run_in_progress",
                    "this chat is already answering",
                ),
                StartError::Full => ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_runs",
                    "the server is at its run limit; retry shortly",
                ),
                StartError::ShuttingDown => ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shutting_down",
                    "the server is shutting down",
                ),
            });
        }
    };
    Ok(stream::response(Arc::clone(&state), hub, 0, true))
}

/// How many of a chat's newest runs are searched for the turn a request
/// continues (a turn has one run, plus one per regeneration or failure).
const CARRY_LOOKBACK: usize = 50;

/// The final state of the turn this request continues, for the graph's
/// `carry:` fields: that of the newest *finished* run of `graph` whose
/// answer the request still shows. Matching by answer rather than taking
/// the chat's newest run means a regenerated or edited turn continues from
/// the turn before it, not from the answer it replaces. Failed, cancelled
/// and running runs contribute nothing (an older finished turn does), and
/// so does a run whose checkpoints no longer rebuild (logged).
async fn previous_state(
    state: &AppState,
    graph: &crate::nodes::Graph,
    chat_id: &str,
    body: &ui::ChatBody,
) -> Result<Option<Value>, ApiError> {
    let answered = ui::answered(body);
    if answered.is_empty() {
        return Ok(None);
    }
    let runs = state.store.list_runs(Some(chat_id), CARRY_LOOKBACK).await?;
    let run = answered.iter().find_map(|id| {
        runs.iter().find(|r| {
            r.message_id.as_deref() == Some(*id)
                && r.status == RunStatus::Finished
                && r.graph == *graph.id
        })
    });
    let Some(run) = run else {
        return Ok(None);
    };
    match crate::replay::state_at(&*state.store, graph, run.id, run.last_step).await {
        Ok(s) => Ok(Some(s.to_json())),
        Err(e) => {
            tracing::warn!(run = %run.id, error = %e, "cannot rebuild the previous turn's state; carrying nothing");
            Ok(None)
        }
    }
}

/// `GET /api/chat/{id}/stream`: the active run's stream from its start (or
/// after `Last-Event-ID`), 204 when nothing is active.
pub(super) async fn resume(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let chat = owned_chat(&state, &user, &id).await?;
    let hub = match state.runs.for_chat(&id) {
        Some(hub) => hub,
        None => match follow_elsewhere(&state, &chat).await? {
            Some(hub) => hub,
            None => return Ok(StatusCode::NO_CONTENT.into_response()),
        },
    };
    let mut after = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_last_event_id",
                    "Last-Event-ID must be an event sequence number",
                )
            })?,
    };
    if hub.recovered_at.is_some_and(|at| after > at) {
        after = 0;
    }
    Ok(stream::response(Arc::clone(&state), hub, after, false))
}

/// `start.messageMetadata` of a chat response.
pub(super) fn stream_metadata(
    state: &AppState,
    run_id: Uuid,
    request_id: &str,
    chat_id: &str,
    graph: &crate::nodes::Graph,
) -> Value {
    let offline = state.services.models.any_offline();
    let mut metadata = json!({
        "runId": run_id,
        "requestId": request_id,
        "chatId": chat_id,
        "graph": graph.id.as_ref(),
        "graphVersion": graph.version,
        "offlineModel": offline,
    });
    if offline {
        metadata["notice"] =
            json!("answered by stategraph's built-in offline model, not a real LLM");
    }
    metadata
}

/// The stream settings of a stored run: as recorded in its `run_started`,
/// or (if it never got that far) as its chat response began them.
pub(super) async fn run_bridge(
    state: &AppState,
    run: &crate::store::RunRecord,
) -> Result<Option<crate::sse::BridgeConfig>, ApiError> {
    let first = state.store.events(run.id, 0, 1).await?;
    if let Some(b) = first.iter().find_map(|e| match &e.event {
        crate::events::EventKind::RunStarted {
            stream: Some(s), ..
        } => crate::sse::BridgeConfig::from_json(s),
        _ => None,
    }) {
        return Ok(Some(b));
    }
    let (Some(graph), Some(message_id), Some(chat)) =
        (state.graphs.get(&run.graph), &run.message_id, &run.chat_id)
    else {
        return Ok(None);
    };
    let metadata = stream_metadata(
        state,
        run.id,
        run.request_id.as_deref().unwrap_or(""),
        chat,
        &graph,
    );
    Ok(Some(crate::sse::BridgeConfig::for_graph(
        &graph,
        message_id.clone(),
        metadata,
    )))
}

/// The chat's run when it executes on another instance (or awaits
/// recovery): a hub that follows it through the event log.
async fn follow_elsewhere(
    state: &Arc<AppState>,
    chat: &ChatRecord,
) -> Result<Option<Arc<super::runs::RunHub>>, ApiError> {
    let Some(run_id) = chat.active_run else {
        return Ok(None);
    };
    let Some(run) = state.store.get_run(run_id).await? else {
        return Ok(None);
    };
    if run.status != RunStatus::Running {
        return Ok(None);
    }
    let bridge = run_bridge(state, &run).await?;
    Ok(bridge.map(|b| state.runs.follow(state, &chat.id, run_id, b)))
}

/// `POST /api/chat/{id}/stop`: cancels the active run — here, or, when
/// another instance executes it, through a stop request in the store that
/// instance acts on within a fraction of a second. Either way the run's
/// streams end with `abort`.
pub(super) async fn stop(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let chat = owned_chat(&state, &user, &id).await?;
    if let Some(hub) = state
        .runs
        .for_chat(&id)
        .filter(|h| !h.is_done() && !h.follower)
    {
        hub.cancel.cancel();
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({"stopped": true, "runId": hub.run_id})),
        )
            .into_response());
    }
    if let Some(run_id) = chat.active_run
        && state.store.request_stop(run_id).await?
    {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({"stopped": true, "runId": run_id, "elsewhere": true})),
        )
            .into_response());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "no_active_run",
        "this chat has no run to stop",
    ))
}

fn chat_json(c: &ChatRecord) -> Value {
    json!({
        "id": c.id,
        "title": c.title,
        "createdAt": c.created_at / 1000,
        "updatedAt": c.updated_at / 1000,
        "activeRun": c.active_run,
    })
}

/// `GET /api/chats`: the user's chats, newest first.
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    user: User,
) -> Result<Json<Value>, ApiError> {
    let chats = state.store.list_chats(&user.0, 200).await?;
    Ok(Json(
        json!({ "chats": chats.iter().map(chat_json).collect::<Vec<_>>() }),
    ))
}

/// `GET /api/chat/{id}`: a chat with its messages (UI parts).
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let chat = owned_chat(&state, &user, &id).await?;
    let messages = state.store.messages(&id).await?;
    let mut v = chat_json(&chat);
    v["messages"] = messages
        .iter()
        .map(|m| {
            let mut msg = json!({"id": m.id, "role": m.role, "parts": m.parts});
            if !m.metadata.is_null() {
                msg["metadata"] = m.metadata.clone();
            }
            msg
        })
        .collect();
    Ok(Json(v))
}

/// `DELETE /api/chat/{id}`: stops its run and deletes it with its messages.
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    owned_chat(&state, &user, &id).await?;
    if let Some(hub) = state.runs.for_chat(&id) {
        hub.cancel.cancel();
    }
    state.store.delete_chat(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
