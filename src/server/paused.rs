//! Runs paused for a person, over HTTP: a chat's next request answers
//! them exactly as `useChat` sends it, and `POST /api/runs/{id}/resume`
//! answers them for non-chat use.
//!
//! A chat whose active run is `interrupted` reads its next `POST /api/chat`
//! as follows:
//! - `submit-message` with `messageId` = the paused answer's id (the AI
//!   SDK's automatic resend after `addToolApprovalResponse` /
//!   `addToolOutput`): the tool parts of that message carry the answers —
//!   `approval-responded` parts their `approval {id, approved, reason}`,
//!   client tools' parts in `output-available` / `output-error` their
//!   output. The run continues into the same message; the response streams
//!   only what is new.
//! - a new user message while the run waits for a question: its text is
//!   the answer (a string field takes it as it is; other types accept an
//!   option or JSON). The run continues into a new assistant message.
//! - anything else (a new message while an approval waits, a regenerate,
//!   an edit): the paused run is set aside (`cancelled`) and the turn
//!   starts afresh.
//!
//! Answers are checked before anything changes: an assistant message sent
//! back when no run waits is 409 `not_interrupted`; an unknown id is 400
//! `unknown_interrupt`, a missing one 400
//! `unanswered_interrupt`, a value of the wrong type 422 `invalid_answer`,
//! a run that does not wait (any more) 409 `not_interrupted`, a lapsed wait
//! 410 `interrupt_expired`.

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
use super::{AppState, RequestId, stream, ui};
use crate::events::{Ask, Interrupt};
use crate::runs::resume::pending;
use crate::runs::{ChatLink, ResumeError, ResumeRequest, turn};
use crate::runtime::RunStatus;
use crate::store::{MessageRecord, RunRecord};

/// The chat's paused run, if its active run waits for a person.
///
/// # Errors
///
/// Another user's chat is 404, as it is for a new turn: an answer to
/// someone else's run must not learn whether (or how) it waits.
async fn paused_run(
    state: &AppState,
    user: &User,
    chat_id: &str,
) -> Result<Option<RunRecord>, ApiError> {
    let chat = match state.runs.owned_chat(&user.0, chat_id).await {
        Ok(Some(chat)) => chat,
        Ok(None) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(run_id) = chat.active_run else {
        return Ok(None);
    };
    Ok(state
        .store
        .get_run(run_id)
        .await?
        .filter(|r| r.status == RunStatus::Interrupted))
}

/// A chat request for a chat with a paused run: continues it (the
/// response), or sets it aside (`None`: start the turn as usual).
pub(super) async fn continue_chat(
    state: &Arc<AppState>,
    user: &User,
    request_id: &RequestId,
    body: &ui::ChatBody,
    trigger: ui::Trigger,
) -> Result<Option<Response>, ApiError> {
    let Some(run) = paused_run(state, user, &body.id).await? else {
        // Sending an assistant message back is how `useChat` answers a
        // pause; with none waiting, the answer is stale (answered already)
        // or forged.
        if trigger == ui::Trigger::Submit
            && body.messages.last().is_some_and(|m| m.role == "assistant")
        {
            return Err(ApiError::new(
                Code::NotInterrupted,
                "no run of this chat waits for an answer (it was answered already, or never asked)",
            ));
        }
        return Ok(None);
    };
    let (_, events) = crate::replay::load(&*state.store, run.id)
        .await
        .map_err(ApiError::internal)?;
    let waiting = pending(&events);
    let last = body.messages.last();
    let continues_message = trigger == ui::Trigger::Submit
        && run.message_id.is_some()
        && body.message_id == run.message_id
        && last.is_some_and(|m| m.role == "assistant" && Some(&m.id) == run.message_id.as_ref());
    let question = waiting
        .iter()
        .find(|i| matches!(i.ask, Ask::Question { .. }));
    let mut req = ResumeRequest {
        run_id: run.id,
        user_id: user.0.clone(),
        request_id: request_id.0.clone(),
        answers: BTreeMap::new(),
        new_message: None,
        messages: Vec::new(),
        breakpoints: None,
    };
    if continues_message && let Some(m) = last {
        req.answers = answers_in(&m.parts, &waiting)?;
    } else if let (Some(q), true, Some(m)) = (
        question,
        trigger == ui::Trigger::Submit && body.message_id.is_none(),
        last.filter(|m| m.role == "user"),
    ) {
        req.answers
            .insert(q.id.clone(), answer_from_text(q, &turn::text_of(m)));
        let (link, messages) = answer_message(body);
        req.new_message = Some(link);
        req.messages = messages;
    } else {
        let reason = "the chat moved on before the run's question was answered";
        if state.runs.set_aside(&run, reason).await? {
            tracing::info!(run_id = %run.id, "a paused run was set aside by a new turn");
        }
        return Ok(None);
    }
    let started = state.runs.resume(req).await.map_err(resume_error)?;
    let after = started.hub.resumed;
    Ok(Some(stream::response(
        Arc::clone(state),
        started.hub,
        after,
        true,
    )))
}

/// The answers a resent assistant message carries in its tool parts.
fn answers_in(parts: &[Value], waiting: &[Interrupt]) -> Result<BTreeMap<String, Value>, ApiError> {
    let mut answers = BTreeMap::new();
    for p in parts {
        let ty = p["type"].as_str().unwrap_or("");
        if ty != "dynamic-tool" && !ty.starts_with("tool-") {
            continue;
        }
        let call_id = p["toolCallId"].as_str().unwrap_or("");
        match p["state"].as_str().unwrap_or("") {
            "approval-responded" => {
                let approval = &p["approval"];
                let Some(id) = approval["id"].as_str() else {
                    return Err(ApiError::new(
                        Code::InvalidAnswer,
                        format!("the approval of tool call `{call_id}` has no `approval.id`"),
                    ));
                };
                let mut v = json!({ "approved": approval["approved"] });
                if let Some(r) = approval.get("reason").filter(|r| !r.is_null()) {
                    v["reason"] = r.clone();
                }
                answers.insert(id.to_owned(), v);
            }
            // A client tool's output (older outputs in the message are of
            // calls answered before, or of server tools).
            s @ ("output-available" | "output-error") => {
                let is_client = waiting
                    .iter()
                    .any(|i| i.id == call_id && matches!(i.ask, Ask::ClientTool { .. }));
                if is_client {
                    let v = if s == "output-available" {
                        json!({ "output": p["output"] })
                    } else {
                        json!({ "error": p["errorText"].as_str().unwrap_or("the tool failed") })
                    };
                    answers.insert(call_id.to_owned(), v);
                }
            }
            _ => {}
        }
    }
    Ok(answers)
}

/// A question's answer from a chat message's text: a string field takes
/// the text; other types an option written the same way, or JSON.
fn answer_from_text(q: &Interrupt, text: &str) -> Value {
    let Ask::Question {
        schema, options, ..
    } = &q.ask
    else {
        return Value::String(text.to_owned());
    };
    let text = text.trim();
    let takes_string = schema["type"] == "string"
        || schema["type"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == "string"));
    if takes_string {
        return Value::String(text.to_owned());
    }
    let spelled = |o: &Value| match o {
        Value::String(s) => s.eq_ignore_ascii_case(text),
        other => other.to_string().eq_ignore_ascii_case(text),
    };
    if let Some(o) = options.iter().find(|o| spelled(o)) {
        return o.clone();
    }
    match text.to_ascii_lowercase().as_str() {
        "yes" | "y" if schema["type"] == "boolean" => return Value::Bool(true),
        "no" | "n" if schema["type"] == "boolean" => return Value::Bool(false),
        _ => {}
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The chat as the client has it (its answer included), to store once the
/// run is claimed, and where the continuation's new assistant message goes.
fn answer_message(body: &ui::ChatBody) -> (ChatLink, Vec<MessageRecord>) {
    let messages = turn::message_records(&body.id, &body.messages);
    let link = ChatLink {
        chat_id: body.id.clone(),
        message_id: turn::new_message_id(),
        position: messages.len() as i64,
    };
    (link, messages)
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
