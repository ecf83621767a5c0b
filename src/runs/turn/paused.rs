//! A chat request for a chat whose run is paused for a person: whether it
//! answers that run, and the continuation it starts.
//!
//! A chat whose active run is `interrupted` reads its next request as
//! follows:
//! - `submit-message` with `messageId` = the paused answer's id (the AI
//!   SDK's automatic resend after `addToolApprovalResponse` /
//!   `addToolOutput`): the tool parts of that message carry the answers —
//!   `approval-responded` parts their `approval {id, approved, reason}`,
//!   client tools' parts in `output-available` / `output-error` their
//!   output. The run continues into the same message.
//! - a new user message while the run waits for a question: its text is
//!   the answer (a string field takes it as it is; other types accept an
//!   option or JSON). The run continues into a new assistant message.
//! - anything else (a new message while an approval waits, a regenerate,
//!   an edit): the paused run is set aside (`cancelled`) and the turn
//!   starts afresh.
//!
//! Answers are checked before anything changes (see [`PausedError`] and
//! [`ResumeError`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{TurnError, TurnMessage, input, new_message_id};
use crate::events::{Ask, Interrupt};
use crate::runs::resume::pending;
use crate::runs::{ChatLink, ResumeError, ResumeRequest, Runs, Started};
use crate::runtime::RunStatus;
use crate::store::{MessageRecord, RunRecord};

/// A chat request as the paused run's decision needs it (borrowed from the
/// transport's parsed body).
#[derive(Debug)]
pub struct PausedAnswer<'a> {
    /// The chat.
    pub chat_id: &'a str,
    /// Its user.
    pub user_id: &'a str,
    /// The request's correlation id.
    pub request_id: &'a str,
    /// The conversation as the client has it.
    pub messages: &'a [TurnMessage],
    /// The message the request continues or edits (`messageId`).
    pub message_id: Option<&'a str>,
    /// A submitted message (`submit-message`), not a regenerate.
    pub submit: bool,
}

/// Why a chat request could not answer its chat's paused run (nothing
/// changed).
#[derive(Debug, thiserror::Error)]
pub enum PausedError {
    /// An assistant message was sent back but no run of the chat waits:
    /// the answer is stale (answered already) or forged.
    #[error("no run of this chat waits for an answer (it was answered already, or never asked)")]
    NotInterrupted,
    /// An `approval-responded` tool part has no `approval.id`.
    #[error("the approval of tool call `{0}` has no `approval.id`")]
    NoApprovalId(String),
    /// The chat is another user's, or could not be read.
    #[error(transparent)]
    Turn(#[from] TurnError),
    /// The run refused the answers, or could not continue.
    #[error(transparent)]
    Resume(#[from] ResumeError),
}

impl Runs {
    /// Answers the chat's paused run with this request, if it does:
    /// `Some` is the continued run, `None` means no run waits (or it was
    /// set aside) and the request starts a turn as usual.
    ///
    /// # Errors
    /// Another user's chat ([`TurnError::NotOwner`], as for a new turn: an
    /// answer to someone else's run must not learn whether it waits), an
    /// answer refused, or the store failed.
    pub async fn answer_paused(
        self: &Arc<Self>,
        req: &PausedAnswer<'_>,
    ) -> Result<Option<Started>, PausedError> {
        let Some(run) = self.paused_run(req.user_id, req.chat_id).await? else {
            // Sending an assistant message back is how `useChat` answers
            // a pause; with none waiting, the answer is stale or forged.
            if req.submit && req.messages.last().is_some_and(|m| m.role == "assistant") {
                return Err(PausedError::NotInterrupted);
            }
            return Ok(None);
        };
        let (_, events) = crate::replay::load(&*self.store, run.id)
            .await
            .map_err(ResumeError::from)?;
        let Some(resume) = continuation(req, &run, &pending(&events))? else {
            let reason = "the chat moved on before the run's question was answered";
            if self
                .set_aside(&run, reason)
                .await
                .map_err(ResumeError::from)?
            {
                tracing::info!(run_id = %run.id, "a paused run was set aside by a new turn");
            }
            return Ok(None);
        };
        Ok(Some(self.resume(resume).await?))
    }

    /// The chat's paused run, if its active run waits for a person.
    async fn paused_run(
        &self,
        user_id: &str,
        chat_id: &str,
    ) -> Result<Option<RunRecord>, PausedError> {
        let Some(chat) = self.owned_chat(user_id, chat_id).await? else {
            return Ok(None);
        };
        let Some(run_id) = chat.active_run else {
            return Ok(None);
        };
        Ok(self
            .store
            .get_run(run_id)
            .await
            .map_err(ResumeError::from)?
            .filter(|r| r.status == RunStatus::Interrupted))
    }
}

/// The resume this request makes of the paused `run` (waiting at
/// `waiting`), or `None` when it does not answer it (the run is set aside).
fn continuation(
    req: &PausedAnswer<'_>,
    run: &RunRecord,
    waiting: &[Interrupt],
) -> Result<Option<ResumeRequest>, PausedError> {
    let last = req.messages.last();
    let continues_message = req.submit
        && run.message_id.is_some()
        && req.message_id == run.message_id.as_deref()
        && last.is_some_and(|m| m.role == "assistant" && Some(&m.id) == run.message_id.as_ref());
    let question = waiting
        .iter()
        .find(|i| matches!(i.ask, Ask::Question { .. }));
    let mut resume = ResumeRequest {
        run_id: run.id,
        user_id: req.user_id.to_owned(),
        request_id: req.request_id.to_owned(),
        answers: BTreeMap::new(),
        new_message: None,
        messages: Vec::new(),
        breakpoints: None,
    };
    if continues_message && let Some(m) = last {
        resume.answers = answers_in(&m.parts, waiting)?;
    } else if let (Some(q), true, Some(m)) = (
        question,
        req.submit && req.message_id.is_none(),
        last.filter(|m| m.role == "user"),
    ) {
        resume
            .answers
            .insert(q.id.clone(), answer_from_text(q, &input::text_of(m)));
        let (link, messages) = answer_message(req.chat_id, req.messages);
        resume.new_message = Some(link);
        resume.messages = messages;
    } else {
        return Ok(None);
    }
    Ok(Some(resume))
}

/// The answers a resent assistant message carries in its tool parts.
fn answers_in(
    parts: &[Value],
    waiting: &[Interrupt],
) -> Result<BTreeMap<String, Value>, PausedError> {
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
                    return Err(PausedError::NoApprovalId(call_id.to_owned()));
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
fn answer_message(chat_id: &str, messages: &[TurnMessage]) -> (ChatLink, Vec<MessageRecord>) {
    let messages = input::message_records(chat_id, messages);
    let link = ChatLink {
        chat_id: chat_id.to_owned(),
        message_id: new_message_id(),
        position: messages.len() as i64,
    };
    (link, messages)
}
