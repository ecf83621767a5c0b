//! `POST /api/chat`, `GET /api/chat/{id}/stream`, `POST /api/chat/{id}/stop`
//! and the chat history endpoints.

use crate::server::Code;
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
use crate::runs::turn::PausedAnswer;
use crate::runs::{TurnError, TurnRequest};
use crate::store::ChatRecord;

/// Reads the body, mapping an oversized one to 413.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(Code::PayloadTooLarge, "request body is too large")
        }
        status => ApiError::framework(status, e.body_text()),
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
        Code::UnsupportedMediaType,
        format!(
            "the body must be application/json (got {})",
            if ct.is_empty() { "no Content-Type" } else { ct }
        ),
    ))
}

/// The chat if it exists and belongs to `user`; another user's chat is
/// indistinguishable from a missing one.
pub(super) async fn owned_chat(
    state: &AppState,
    user: &User,
    id: &str,
) -> Result<ChatRecord, ApiError> {
    match state.runs.owned_chat(&user.0, id).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) | Err(TurnError::NotOwner) => Err(ApiError::not_found(format!("no chat `{id}`"))),
        Err(e) => Err(e.into()),
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
    let (body, trigger) = ui::parse(&bytes)?;
    state.limits.check_daily(&*state.store, &user.0).await?;
    // A chat whose run waits for a person: this request answers it, or
    // sets it aside (see `runs::turn::PausedAnswer`).
    let paused = PausedAnswer {
        chat_id: &body.id,
        user_id: &user.0,
        request_id: &request_id.0,
        messages: &body.messages,
        message_id: body.message_id.as_deref(),
        submit: trigger == ui::Trigger::Submit,
    };
    let answered = state.runs.answer_paused(&paused).await;
    if let Some(started) = answered.map_err(super::paused::paused_error)? {
        let after = started.hub.resumed;
        return Ok(stream::response(
            Arc::clone(&state),
            started.hub,
            after,
            true,
        ));
    }
    let regenerates = match trigger {
        ui::Trigger::Regenerate => body.message_id.clone(),
        ui::Trigger::Submit => None,
    };
    let graph = body
        .graph
        .clone()
        .unwrap_or_else(|| state.config.server.default_graph.clone());
    let request = TurnRequest {
        chat_id: body.id,
        user_id: user.0.clone(),
        request_id: request_id.0.clone(),
        graph,
        messages: body.messages,
        extra: body.extra,
        regenerates,
        breakpoints: body.breakpoints,
    };
    let started = state.runs.answer(request).await?;
    Ok(stream::response(Arc::clone(&state), started.hub, 0, true))
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
                ApiError::new(
                    Code::InvalidLastEventId,
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
        Code::NoActiveRun,
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
