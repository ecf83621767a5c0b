//! Runs paused for a person, over HTTP: `POST /api/runs/{id}/resume`
//! answers them for non-chat use; a chat's next request answers them as
//! `useChat` sends it (decided in [`crate::runs::turn`], see
//! `Runs::answer_paused`), refused here with the same codes.
//!
//! Answers are checked before anything changes: an assistant message sent
//! back when no run waits is 409 `not_interrupted`; an unknown id is 400
//! `unknown_interrupt`, a missing one 400
//! `unanswered_interrupt`, a value of the wrong type (or an approval
//! without `approval.id`) 422 `invalid_answer`, a run that does not wait
//! (any more) 409 `not_interrupted`, a lapsed wait 410 `interrupt_expired`.

use crate::server::Code;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::User;
use super::error::ApiError;
use super::{AppState, RequestId};
use crate::events::{Ask, Interrupt};
use crate::runs::turn::PausedError;
use crate::runs::{ResumeError, ResumeRequest};
use crate::runtime::RunStatus;
use crate::store::RunRecord;

/// A chat request that could not answer its chat's paused run, as the
/// API answers it.
pub(super) fn paused_error(e: PausedError) -> ApiError {
    match e {
        PausedError::NotInterrupted => ApiError::new(Code::NotInterrupted, e.to_string()),
        PausedError::NoApprovalId(_) => ApiError::new(Code::InvalidAnswer, e.to_string()),
        PausedError::Turn(e) => e.into(),
        PausedError::Resume(e) => resume_error(e),
    }
}

/// A refused resume as the API answers it.
pub(super) fn resume_error(e: ResumeError) -> ApiError {
    let message = e.to_string();
    match e {
        ResumeError::NotFound(_) => ApiError::not_found(message),
        ResumeError::NotWaiting { .. } => ApiError::new(Code::NotInterrupted, message),
        ResumeError::Unknown(_) => ApiError::new(Code::UnknownInterrupt, message),
        ResumeError::Unanswered(_) => ApiError::new(Code::UnansweredInterrupt, message),
        ResumeError::Invalid { .. } => ApiError::new(Code::InvalidAnswer, message),
        ResumeError::Expired(_) => ApiError::new(Code::InterruptExpired, message),
        ResumeError::Edit(e) => ApiError::coded(e.code(), message),
        ResumeError::Breakpoints(e) => ApiError::coded(e.code(), message),
        ResumeError::UnknownGraph(_) => ApiError::new(Code::UnknownGraph, message),
        ResumeError::Start(e) => e.into(),
        ResumeError::Store(e) => e.into(),
        ResumeError::Replay(e) => ApiError::internal(e),
        ResumeError::Checkpoint(e) => ApiError::internal(e),
    }
}

/// `POST /api/runs/{id}/resume` body: `{"value": …}` answers the only
/// interrupt the run waits at; `{"answers": {id: …}}` names them; at a
/// breakpoint `{"action": "continue"|"step", "set": {…}}` answers it, and
/// `{"action": "abort"}` ends any paused run; `breakpoints` replaces the
/// run's (docs/breakpoints.md).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResumeBody {
    #[serde(default)]
    value: Option<Value>,
    #[serde(default)]
    answers: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    set: Option<Value>,
    #[serde(default)]
    breakpoints: Option<Value>,
}

/// The answers a resume body gives at a breakpoint (`action`, `set`), if it
/// uses that form: `None` when it gives `value`/`answers` instead.
///
/// # Errors
/// The forms mixed, an unknown action, or the run is not at a breakpoint.
fn breakpoint_answers(
    body: &mut ResumeBody,
    waiting: &[Interrupt],
) -> Result<Option<BTreeMap<String, Value>>, ApiError> {
    if body.action.is_none() && body.set.is_none() {
        return Ok(None);
    }
    if body.value.is_some() || body.answers.is_some() {
        return Err(ApiError::new(
            Code::InvalidBody,
            "give `action`/`set` (at a breakpoint) or `value`/`answers`, not both",
        ));
    }
    let action = body.action.take().unwrap_or_else(|| "continue".into());
    if action != "continue" && action != "step" {
        return Err(ApiError::new(
            Code::InvalidBody,
            format!("`action` is \"continue\", \"step\" or \"abort\", not {action:?}"),
        ));
    }
    let Some(at) = waiting
        .iter()
        .find(|i| matches!(i.ask, Ask::Breakpoint { .. }))
    else {
        return Err(ApiError::new(
            Code::NotAtBreakpoint,
            "the run is not paused at a breakpoint: answer what it waits for with `value` or `answers`",
        ));
    };
    let set = body.set.take().unwrap_or_else(|| json!({}));
    Ok(Some(BTreeMap::from([(
        at.id.clone(),
        json!({ "action": action, "set": set }),
    )])))
}

/// `{"action": "abort"}`: ends a paused run (`cancelled`).
async fn abort(
    state: &AppState,
    user: &User,
    run_id: uuid::Uuid,
    body: &ResumeBody,
) -> Result<Response, ApiError> {
    if body.set.is_some()
        || body.value.is_some()
        || body.answers.is_some()
        || body.breakpoints.is_some()
    {
        return Err(ApiError::new(
            Code::InvalidBody,
            "`action: abort` takes nothing else",
        ));
    }
    let run = super::runs_api::owned_run_id(state, user, run_id).await?;
    if run.status != RunStatus::Interrupted
        || !state.runs.set_aside(&run, "aborted while paused").await?
    {
        return Err(ApiError::new(
            Code::NotInterrupted,
            format!("run {run_id} is not paused (it is {})", run.status.as_str()),
        ));
    }
    Ok(Json(json!({ "runId": run_id, "status": "cancelled" })).into_response())
}

/// A resume's new breakpoints, checked against the run's graph.
fn new_breakpoints(
    state: &AppState,
    run: &RunRecord,
    v: &Value,
) -> Result<crate::events::Breakpoints, ApiError> {
    let graph = state.graph_of(run)?;
    crate::runs::breaks::parse(&graph, v).map_err(|e| ApiError::coded(e.code(), e.to_string()))
}

/// `POST /api/runs/{id}/resume`: continues a paused run; 202 with the run
/// id and what it continues from (stream it as usual: the chat's stream,
/// or the run's events).
pub(super) async fn resume(
    State(state): State<Arc<AppState>>,
    user: User,
    axum::Extension(request_id): axum::Extension<RequestId>,
    Path(id): Path<String>,
    body: Result<Json<ResumeBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let run_id = uuid::Uuid::parse_str(&id)
        .map_err(|_| ApiError::new(Code::InvalidRunId, format!("`{id}` is not a run id")))?;
    let Json(mut body) = body.map_err(|e| ApiError::new(Code::InvalidBody, e.body_text()))?;
    if body.action.as_deref() == Some("abort") {
        return abort(&state, &user, run_id, &body).await;
    }
    let run = super::runs_api::owned_run_id(&state, &user, run_id).await?;
    let waiting = state
        .runs
        .waiting_at(&run)
        .await
        .map_err(ApiError::internal)?;
    let breakpoints = match &body.breakpoints {
        Some(v) => Some(new_breakpoints(&state, &run, v)?),
        None => None,
    };
    let at_break = breakpoint_answers(&mut body, &waiting)?;
    let answers = match (body.value, body.answers) {
        _ if at_break.is_some() => at_break.unwrap_or_default(),
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                Code::InvalidBody,
                "give `value` or `answers`, not both",
            ));
        }
        (None, Some(a)) => a,
        (value, None) => match (waiting.as_slice(), value) {
            ([one], Some(v)) => BTreeMap::from([(one.id.clone(), v)]),
            (_, None) => {
                return Err(ApiError::new(
                    Code::InvalidBody,
                    "give `value` (one interrupt) or `answers` ({id: answer})",
                ));
            }
            ([], Some(_)) => BTreeMap::new(),
            (many, Some(_)) => {
                let ids: Vec<&str> = many.iter().map(|i| i.id.as_str()).collect();
                return Err(ApiError::new(
                    Code::UnansweredInterrupt,
                    format!(
                        "the run waits at {} interrupts ({}); answer them with `answers`",
                        many.len(),
                        ids.join(", ")
                    ),
                ));
            }
        },
    };
    let req = ResumeRequest {
        run_id,
        user_id: user.0.clone(),
        request_id: request_id.0.clone(),
        answers,
        new_message: None,
        messages: Vec::new(),
        breakpoints,
    };
    let started = state.runs.resume(req).await.map_err(resume_error)?;
    let resumed = started.hub.resumed;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "runId": started.run_id, "status": "running", "resumedAfter": resumed })),
    )
        .into_response())
}
