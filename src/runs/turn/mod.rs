//! A chat turn, in one place: the conversation as the client has it, the
//! graph input built from it (history and what the previous turn
//! carries), the ids of its messages, whose chat it is, and the run that
//! answers it, linked to the chat.
//!
//! Transports only translate: `POST /api/chat` parses the AI SDK body
//! into a [`PausedAnswer`] (does it answer the chat's paused run? see
//! [`Runs::answer_paused`]) and else a [`TurnRequest`], and streams the
//! started run; the LangGraph API
//! starts a [`ChatTurn`] from a thread's input; `stategraph run` builds its
//! input with the same [`input_state`]. Every chat and run lookup on
//! behalf of a user goes through [`Runs::owned_chat`] and
//! [`Runs::owned_run`]: another user's chat or run is indistinguishable
//! from a missing one.

mod input;
mod paused;
mod request;
mod start;

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::breaks::BreakpointError;
use super::{Runs, StartError};
use crate::store::{ChatRecord, RunRecord, StoreError};

pub(crate) use input::input_state;
pub(crate) use paused::{PausedAnswer, PausedError};
pub(crate) use request::TurnRequest;
pub(crate) use start::{ChatTurn, TurnFrom, TurnStarted};

/// A message of the conversation, as a client sends it (the AI SDK's UI
/// message: parts, not plain text).
#[derive(Clone, Debug, Deserialize)]
pub struct TurnMessage {
    /// Message id.
    pub id: String,
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// Parts (`text`, `file`, tool parts, …).
    #[serde(default)]
    pub parts: Vec<Value>,
    /// Client metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
}

impl TurnMessage {
    /// A user message of plain text.
    pub fn user(id: &str, text: &str) -> Self {
        Self {
            id: id.to_owned(),
            role: "user".into(),
            parts: vec![serde_json::json!({"type": "text", "text": text})],
            metadata: None,
        }
    }
}

/// A fresh id for the assistant message a turn (or a continuation of a
/// paused one into a new message) answers in. The one place such ids are
/// minted; time-ordered, so a chat's messages sort by creation.
pub(crate) fn new_message_id() -> String {
    format!("msg_{}", Uuid::now_v7().simple())
}

/// The message a run answers in: the one its chat named (`named`), or,
/// for a run without one (no chat, or stored before runs named theirs),
/// one named after the run — the same id on every instance and after a
/// restart, so a resumed or recovered run continues the same message.
pub(crate) fn answer_message_id(run_id: Uuid, named: Option<&str>) -> String {
    named.map_or_else(|| format!("msg_{}", run_id.simple()), str::to_owned)
}

/// Why a turn did not start (nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// A run of the chat is in flight.
    #[error("this chat is already answering; stop it or wait")]
    Busy,
    /// The chat belongs to another user.
    #[error("no such chat")]
    NotOwner,
    /// No such graph is served (why, for people).
    #[error("{0}")]
    UnknownGraph(String),
    /// A regenerate names a message the chat does not have.
    #[error("cannot regenerate `{0}`: this chat has no such message")]
    UnknownMessage(String),
    /// The input the conversation gives is not a valid state of the graph.
    #[error("{0}")]
    InvalidInput(String),
    /// The turn's breakpoints do not fit the graph.
    #[error(transparent)]
    Breakpoints(#[from] BreakpointError),
    /// The run could not start.
    #[error(transparent)]
    Start(#[from] StartError),
}

impl From<StoreError> for TurnError {
    fn from(e: StoreError) -> Self {
        TurnError::Start(StartError::Store(e))
    }
}

impl Runs {
    /// The chat `chat_id` of `user_id`: `None` when there is no such
    /// chat, [`TurnError::NotOwner`] when it is another user's (the one
    /// ownership check of a chat; the store checks again, atomically, when
    /// a turn is written). Answer both the same to the client: another
    /// user's chat must be indistinguishable from a missing one.
    ///
    /// # Errors
    /// Another user's chat, or the store failed.
    pub async fn owned_chat(
        &self,
        user_id: &str,
        chat_id: &str,
    ) -> Result<Option<ChatRecord>, TurnError> {
        match self.store.get_chat(chat_id).await? {
            Some(c) if c.user_id != user_id => Err(TurnError::NotOwner),
            found => Ok(found),
        }
    }

    /// The run `run_id` if it exists and is `user_id`'s (another user's is
    /// the same as none).
    ///
    /// # Errors
    /// The store failed.
    pub async fn owned_run(
        &self,
        user_id: &str,
        run_id: Uuid,
    ) -> Result<Option<RunRecord>, StoreError> {
        Ok(self
            .store
            .get_run(run_id)
            .await?
            .filter(|r| r.user_id == user_id))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;
    use crate::graph::ChatIo;

    #[test]
    fn a_run_answers_in_its_named_message_or_one_named_after_it() {
        let run = Uuid::now_v7();
        assert_eq!(answer_message_id(run, Some("m9")), "m9");
        assert_eq!(
            answer_message_id(run, None),
            format!("msg_{}", run.simple())
        );
        let (a, b) = (new_message_id(), new_message_id());
        assert!(a.starts_with("msg_") && a != b, "{a} {b}");
    }

    /// `stategraph run "hi"` builds its input with the same function as a
    /// chat request holding one user message, so the two cannot drift.
    #[test]
    fn one_user_message_is_the_history_and_the_text() {
        let io = ChatIo {
            history: Some("messages".into()),
            text: Some("query".into()),
            ..ChatIo::default()
        };
        let input = input_state(&io, &[TurnMessage::user("m1", "hi")], &Map::new());
        assert_eq!(
            input,
            json!({
                "messages": [{"id": "m1", "role": "user", "content": "hi"}],
                "query": "hi",
            })
        );
    }
}
