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

use super::auth::User;
use super::error::ApiError;
use super::{AppState, RequestId, stream, ui};
use crate::runs::{ChatTurn, TurnError};
use crate::runtime::RunStatus;
use crate::store::{ChatRecord, MessageRecord, RunQuery};

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

/// 415 unless the body is declared JSON (as `DefaultChatTransport` sends
/// it): a form or text body is a client bug, not a chat message.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "the body must be application/json (got {})",
            if ct.is_empty() { "no Content-Type" } else { ct }
        ),
    ))
}

/// The chat's stored messages when the request needs them (it regenerates
/// a message, or carries earlier answers, see [`restore_failed_turns`]) and
/// the chat is `user`'s; `None` otherwise.
async fn stored_for(
    state: &AppState,
    user: &User,
    body: &ui::ChatBody,
    trigger: ui::Trigger,
) -> Result<Option<Vec<MessageRecord>>, ApiError> {
    let regenerates = trigger == ui::Trigger::Regenerate && body.message_id.is_some();
    if !regenerates && !body.messages.iter().any(|m| m.role == "assistant") {
        return Ok(None);
    }
    match state.store.get_chat(&body.id).await? {
        Some(c) if c.user_id == user.0 => Ok(Some(state.store.messages(&body.id).await?)),
        _ => Ok(None),
    }
}

/// A regenerate names the assistant message it replaces: it must be one of
/// this chat's stored messages (the client drops it from `messages`).
fn check_regenerates(stored: Option<&[MessageRecord]>, target: &str) -> Result<(), ApiError> {
    if stored.is_some_and(|s| s.iter().any(|m| m.id == target)) {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "unknown_message",
        format!("cannot regenerate `{target}`: this chat has no such message"),
    ))
}

/// A client that saw a turn fail still holds its half answer (`useChat`
/// keeps the streamed parts next to its error) and sends it back with the
/// next message. The stored failed message wins over that copy (see
/// [`crate::sse::Assembler::stored_parts`]): the half answer is neither
/// stored again as an answer nor given to the model as one.
fn restore_failed_turns(body: &mut ui::ChatBody, stored: Option<&[MessageRecord]>) {
    let Some(stored) = stored else { return };
    for m in body.messages.iter_mut().filter(|m| m.role == "assistant") {
        let failed = stored
            .iter()
            .find(|s| s.id == m.id && s.role == "assistant" && crate::sse::is_failed(&s.metadata));
        if let Some(s) = failed {
            m.parts = s.parts.as_array().cloned().unwrap_or_default();
            m.metadata = Some(s.metadata.clone());
        }
    }
}

/// The chat if it exists and belongs to `user`; another user's chat is
/// indistinguishable from a missing one.
async fn owned_chat(state: &AppState, user: &User, id: &str) -> Result<ChatRecord, ApiError> {
    match state.store.get_chat(id).await? {
        Some(c) if c.user_id == user.0 => Ok(c),
        _ => Err(ApiError::not_found(format!("no chat `{id}`"))),
    }
}

/// `POST /api/chat`: starts a turn (the conversation stored and the run
/// started in one step, see [`crate::runs::turn`]) and streams the UI
/// message stream.
pub(super) async fn post(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let bytes = body_bytes(body)?;
    let (mut body, trigger) = ui::parse(&bytes)?;
    state.limits.check_daily(&*state.store, &user.0).await?;
    // A chat whose run waits for a person: this request answers it, or
    // sets it aside (see `paused`).
    if let Some(resp) =
        super::paused::continue_chat(&state, &user, &request_id, &body, trigger).await?
    {
        return Ok(resp);
    }
    let stored = stored_for(&state, &user, &body, trigger).await?;
    if trigger == ui::Trigger::Regenerate
        && let Some(target) = &body.message_id
    {
        check_regenerates(stored.as_deref(), target)?;
    }
    restore_failed_turns(&mut body, stored.as_deref());
    let graph_id = body
        .graph
        .clone()
        .unwrap_or_else(|| state.config.server.default_graph.clone());
    let graph = state.graphs.get(&graph_id).ok_or_else(|| {
        ApiError::bad_request("unknown_graph", state.graphs.why_missing(&graph_id))
    })?;
    let mut input = ui::input_state(&graph.chat, &body);
    if (!graph.chat.carry.is_empty() || graph.chat.history.is_some())
        && let Some((previous, answer)) = previous_state(&state, &graph, &body.id, &body).await?
    {
        ui::carry_into(&mut input, &previous, &graph.chat.carry);
        if let Some(field) = &graph.chat.history {
            ui::continue_conversation(&mut input, &previous, field, &body, &answer);
        }
    }
    // Refused before anything is stored: the input must be a valid state.
    graph
        .state
        .from_json(&input)
        .map_err(|e| ApiError::bad_request("invalid_input", e.to_string()))?;
    let breakpoints = match &body.breakpoints {
        Some(v) => crate::runs::breaks::parse(&graph, v)
            .map_err(|e| ApiError::bad_request(e.code(), e.to_string()))?,
        None => Default::default(),
    };
    let messages = ui::message_records(&body);
    let turn = ChatTurn {
        breakpoints,
        chat_id: body.id.clone(),
        user_id: user.0.clone(),
        title: ui::title(&body.messages),
        request_id: request_id.0.clone(),
        graph,
        messages,
        input,
    };
    let started = state.runs.begin_turn(turn).await.map_err(turn_error)?;
    Ok(stream::response(Arc::clone(&state), started.hub, 0, true))
}

/// A refused turn as the API answers it.
fn turn_error(e: TurnError) -> ApiError {
    match e {
        TurnError::Busy => ApiError::new(StatusCode::CONFLICT, "run_in_progress", e.to_string()),
        TurnError::NotOwner => ApiError::not_found("no such chat"),
        TurnError::Start(e) => e.into(),
    }
}

/// How many of a chat's newest runs are searched for the turn a request
/// continues (a turn has one run, plus one per regeneration or failure).
const CARRY_LOOKBACK: usize = 50;

/// The final state of the turn this request continues, for the graph's
/// `carry:` fields and its conversation's tool turns (with the id of that
/// turn's answer message): that of the newest *finished* run of `graph` whose
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
) -> Result<Option<(Value, String)>, ApiError> {
    let answered = ui::answered(body);
    if answered.is_empty() {
        return Ok(None);
    }
    let runs = state
        .store
        .list_runs(&RunQuery::newest(CARRY_LOOKBACK).of_chat(chat_id))
        .await?;
    let run = answered.iter().find_map(|id| {
        runs.iter()
            .find(|r| {
                r.message_id.as_deref() == Some(*id)
                    && r.status == RunStatus::Finished
                    && r.graph == *graph.id
            })
            .map(|r| (r, *id))
    });
    let Some((run, answer)) = run else {
        return Ok(None);
    };
    match crate::replay::state_at(&*state.store, graph, run.id, run.last_step).await {
        Ok(s) => Ok(Some((s.to_json(), answer.to_owned()))),
        Err(e) => {
            tracing::warn!(run = %run.id, error = %e, "cannot rebuild the previous turn's state; carrying nothing");
            Ok(None)
        }
    }
}

/// `GET /api/chat/{id}/stream`: the active run's stream from its start (or
/// after `Last-Event-ID`), 204 when nothing is active or there is no such
/// chat of this user.
pub(super) async fn resume(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A chat that does not exist (yet) has nothing to resume: `useChat({
    // resume: true })` asks on mount for every new chat and treats anything
    // but 204 as an error. Another user's chat looks the same.
    let chat = match owned_chat(&state, &user, &id).await {
        Ok(chat) => chat,
        Err(e) if e.status == StatusCode::NOT_FOUND => {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        Err(e) => return Err(e),
    };
    let hub = match state.runs.for_chat(&id) {
        Some(hub) => hub,
        None => match state.runs.follow_chat(&chat).await? {
            Some(hub) => hub,
            None => match state.runs.finished_stream(&id).await? {
                Some(hub) => hub,
                None => return Ok(StatusCode::NO_CONTENT.into_response()),
            },
        },
    };
    let mut after = match headers.get("last-event-id") {
        None => crate::sse::After::from(0),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(crate::sse::After::parse)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_last_event_id",
                    "Last-Event-ID must be an id this stream sent (`SEQ` or `SEQ.N`)",
                )
            })?,
    };
    if hub.recovered_at.is_some_and(|at| after.seq > at) {
        after = crate::sse::After::from(0);
    }
    Ok(stream::response(Arc::clone(&state), hub, after, false))
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
    if let Some((run_id, elsewhere)) = state.runs.stop_chat(&id, chat.active_run).await? {
        let mut body = json!({"stopped": true, "runId": run_id});
        if elsewhere {
            body["elsewhere"] = json!(true);
        }
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
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
