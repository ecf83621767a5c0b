//! Threads are chats: `POST /threads`, `GET|PATCH|DELETE /threads/{id}`,
//! `POST /threads/search`, `POST /threads/count`.
//!
//! A thread's metadata is the chat's (schema version 10); its status is
//! `busy` while a run executes, `interrupted` while one waits for an
//! answer, `error` when its newest run failed, `idle` otherwise. Another
//! key's thread is 404, as a missing one is.

use crate::server::Code;
use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::super::AppState;
use super::super::auth::User;
use super::super::error::ApiError;
use super::{Body, invalid, iso, owned_thread};
use crate::events::now_micros;
use crate::runtime::RunStatus;
use crate::store::ChatRecord;

/// Threads a search reads at most.
const SEARCH_MAX: usize = 10_000;

/// A thread's status from its chat's active (or newest) run.
pub(super) async fn status_of(
    state: &AppState,
    chat: &ChatRecord,
) -> Result<&'static str, ApiError> {
    let run = match chat.active_run {
        Some(id) => state.store.get_run(id).await?,
        None => super::state::latest_run(state, &chat.id).await?,
    };
    Ok(status_name(chat, run.map(|r| r.status)))
}

/// The status of a thread whose chat's active (or newest) run is `run`.
fn status_name(chat: &ChatRecord, run: Option<RunStatus>) -> &'static str {
    match run {
        Some(RunStatus::Running) if chat.active_run.is_some() => "busy",
        Some(RunStatus::Interrupted) => "interrupted",
        Some(RunStatus::Failed) => "error",
        _ => "idle",
    }
}

/// A thread as the API shows it (`values` when given).
pub(super) fn thread_json(
    chat: &ChatRecord,
    metadata: Value,
    status: &str,
    values: Option<Value>,
) -> Value {
    let mut t = json!({
        "thread_id": chat.id,
        "created_at": iso(chat.created_at),
        "updated_at": iso(chat.updated_at),
        "state_updated_at": iso(chat.updated_at),
        "metadata": metadata,
        "status": status,
        "config": {},
        "interrupts": {},
    });
    if let Some(v) = values {
        t["values"] = v;
    }
    t
}

pub(super) async fn metadata_of(
    state: &AppState,
    user: &User,
    id: &str,
) -> Result<Value, ApiError> {
    let mut all = state.store.chats_metadata(&user.0).await?;
    Ok(all.remove(id).unwrap_or_else(|| json!({})))
}

/// A thread with its current values.
async fn full(state: &AppState, user: &User, chat: &ChatRecord) -> Result<Value, ApiError> {
    let metadata = metadata_of(state, user, &chat.id).await?;
    let status = status_of(state, chat).await?;
    let current = super::state::current(state, &chat.id).await?;
    Ok(thread_json(
        chat,
        metadata,
        status,
        Some(current["values"].clone()),
    ))
}

/// `POST /threads` body (LangGraph's `ThreadCreate`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Create {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    if_exists: Option<String>,
    /// The graph the thread is for (LangGraph keeps it as the metadata's
    /// `graph_id`; an update or a `goto` on the thread before any run
    /// reads it).
    #[serde(default)]
    graph_id: Option<String>,
}

/// Creates the chat of a new thread (with `metadata`), or — `if_exists:
/// do_nothing` — returns the caller's existing one; 409 otherwise.
pub(super) async fn create_thread(
    state: &AppState,
    user: &User,
    id: &str,
    metadata: Option<&Map<String, Value>>,
    if_exists: &str,
) -> Result<ChatRecord, ApiError> {
    if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(invalid(format!("`{id}` is not a thread id")));
    }
    if let Some(existing) = state.store.get_chat(id).await? {
        return match if_exists {
            "do_nothing" if existing.user_id == user.0 => Ok(existing),
            _ => Err(ApiError::new(
                Code::ThreadExists,
                format!("Thread {id} already exists"),
            )),
        };
    }
    let now = now_micros();
    let chat = state
        .store
        .ensure_chat(ChatRecord {
            id: id.to_owned(),
            user_id: user.0.clone(),
            title: String::new(),
            created_at: now,
            updated_at: now,
            active_run: None,
        })
        .await?;
    if chat.user_id != user.0 {
        return Err(ApiError::new(
            Code::ThreadExists,
            format!("Thread {id} already exists"),
        ));
    }
    if let Some(m) = metadata.filter(|m| !m.is_empty()) {
        state
            .store
            .set_chat_metadata(id, Value::Object(m.clone()))
            .await?;
    }
    Ok(chat)
}

/// `POST /threads`.
pub(super) async fn create(
    State(state): State<Arc<AppState>>,
    user: User,
    body: Body<Create>,
) -> Result<Json<Value>, ApiError> {
    let b = body.0.unwrap_or_default();
    let id = b
        .thread_id
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let if_exists = b.if_exists.as_deref().unwrap_or("raise");
    if !matches!(if_exists, "raise" | "do_nothing") {
        return Err(invalid(format!(
            "if_exists must be `raise` or `do_nothing`, not `{if_exists}`"
        )));
    }
    let mut metadata = b.metadata.unwrap_or_default();
    if let Some(g) = b.graph_id {
        metadata.insert("graph_id".into(), Value::String(g));
    }
    let chat = create_thread(&state, &user, &id, Some(&metadata), if_exists).await?;
    Ok(Json(full(&state, &user, &chat).await?))
}

/// `GET /threads/{id}`.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(tid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let chat = owned_thread(&state, &user, &tid).await?;
    Ok(Json(full(&state, &user, &chat).await?))
}

/// `PATCH /threads/{id}` body.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Patch {
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

/// `PATCH /threads/{id}`: merges `metadata` into the thread's.
pub(super) async fn patch(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(tid): Path<String>,
    body: Body<Patch>,
) -> Result<Json<Value>, ApiError> {
    owned_thread(&state, &user, &tid).await?;
    if let Some(update) = body.0.and_then(|b| b.metadata) {
        let mut metadata = metadata_of(&state, &user, &tid).await?;
        if let Value::Object(m) = &mut metadata {
            m.extend(update);
        }
        state.store.set_chat_metadata(&tid, metadata).await?;
    }
    let chat = owned_thread(&state, &user, &tid).await?;
    Ok(Json(full(&state, &user, &chat).await?))
}

/// `DELETE /threads/{id}`: stops its run and deletes the chat.
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(tid): Path<String>,
) -> Result<StatusCode, ApiError> {
    let chat = owned_thread(&state, &user, &tid).await?;
    state.queue.cancel_thread(&tid);
    state.runs.stop_chat(&tid, chat.active_run).await?;
    state.store.delete_chat(&tid).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /threads/search` body (LangGraph's `ThreadSearchRequest`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Search {
    #[serde(default)]
    ids: Option<Vec<String>>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    sort_by: Option<String>,
    #[serde(default)]
    sort_order: Option<String>,
}

/// The caller's threads matching `s`, sorted as it asks.
async fn matching(state: &AppState, user: &User, s: &Search) -> Result<Vec<Value>, ApiError> {
    if let Some(st) = s.status.as_deref()
        && !matches!(st, "idle" | "busy" | "interrupted" | "error")
    {
        return Err(invalid(format!(
            "unknown status `{st}` (idle, busy, interrupted or error)"
        )));
    }
    let chats = state.store.list_chats(&user.0, SEARCH_MAX).await?;
    let mut metadata: HashMap<String, Value> = state.store.chats_metadata(&user.0).await?;
    // One query for every thread's status (the newest run is the active
    // one while a chat has one).
    let statuses = state.store.newest_run_status_by_chat(&user.0).await?;
    let mut out = Vec::new();
    for chat in &chats {
        if s.ids.as_ref().is_some_and(|ids| !ids.contains(&chat.id)) {
            continue;
        }
        let m = metadata.remove(&chat.id).unwrap_or_else(|| json!({}));
        let wanted = s
            .metadata
            .iter()
            .flatten()
            .all(|(k, v)| m.get(k) == Some(v));
        if !wanted {
            continue;
        }
        let status = status_name(chat, statuses.get(&chat.id).copied());
        if s.status.as_deref().is_some_and(|st| st != status) {
            continue;
        }
        out.push(thread_json(chat, m, status, None));
    }
    let key = match s.sort_by.as_deref() {
        Some("created_at") => "created_at",
        Some("thread_id") => "thread_id",
        _ => "updated_at",
    };
    out.sort_by(|a, b| a[key].as_str().cmp(&b[key].as_str()));
    if s.sort_order.as_deref() != Some("asc") {
        out.reverse();
    }
    Ok(out)
}

/// `POST /threads/search`.
pub(super) async fn search(
    State(state): State<Arc<AppState>>,
    user: User,
    body: Body<Search>,
) -> Result<Json<Value>, ApiError> {
    let s = body.0.unwrap_or_default();
    let all = matching(&state, &user, &s).await?;
    let page: Vec<Value> = all
        .into_iter()
        .skip(s.offset.unwrap_or(0))
        .take(s.limit.unwrap_or(10))
        .collect();
    Ok(Json(Value::Array(page)))
}

/// `POST /threads/count`.
pub(super) async fn count(
    State(state): State<Arc<AppState>>,
    user: User,
    body: Body<Search>,
) -> Result<Json<Value>, ApiError> {
    let s = body.0.unwrap_or_default();
    Ok(Json(json!(matching(&state, &user, &s).await?.len())))
}
