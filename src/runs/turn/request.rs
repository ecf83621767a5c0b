//! From a chat request to a turn: the chat's stored messages where the
//! request needs them, a regenerate's target checked, failed answers
//! restored, the graph's input built and carried over from the turn the
//! request continues, checked — all before anything is written.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{ChatTurn, TurnError, TurnMessage, TurnStarted, input};
use crate::nodes::Graph;
use crate::runs::Runs;
use crate::runtime::RunStatus;
use crate::store::{MessageRecord, RunQuery};

/// A chat request, as a transport parsed it.
#[derive(Debug)]
pub struct TurnRequest {
    /// The chat (created by its first turn).
    pub chat_id: String,
    /// Its user.
    pub user_id: String,
    /// The request's correlation id.
    pub request_id: String,
    /// The graph to answer with.
    pub graph: String,
    /// The conversation as the client has it.
    pub messages: Vec<TurnMessage>,
    /// The request's other keys (the graph's `chat.inputs` pick fields).
    pub extra: Map<String, Value>,
    /// The assistant message a regenerate replaces.
    pub regenerates: Option<String>,
    /// Where the run pauses (`{before, after}`), checked against the graph.
    pub breakpoints: Option<Value>,
}

/// How many of a chat's newest runs are searched for the turn a request
/// continues (a turn has one run, plus one per regeneration or failure).
const CARRY_LOOKBACK: usize = 50;

impl Runs {
    /// Answers a chat request: builds the turn (see the module docs) and
    /// starts it ([`Runs::begin_turn`]).
    ///
    /// # Errors
    /// The request does not fit the graph or the chat (nothing was
    /// written), or the turn could not start.
    pub async fn answer(self: &Arc<Self>, req: TurnRequest) -> Result<TurnStarted, TurnError> {
        let turn = self.prepare(req).await?;
        self.begin_turn(turn).await
    }

    async fn prepare(&self, mut req: TurnRequest) -> Result<ChatTurn, TurnError> {
        let stored = self.stored_for(&req).await?;
        if let Some(target) = &req.regenerates
            && !stored
                .as_ref()
                .is_some_and(|s| s.iter().any(|m| m.id == *target))
        {
            return Err(TurnError::UnknownMessage(target.clone()));
        }
        restore_failed_turns(&mut req.messages, stored.as_deref());
        let graph = self
            .graphs
            .get(&req.graph)
            .ok_or_else(|| TurnError::UnknownGraph(self.graphs.why_missing(&req.graph)))?;
        let mut input = input::input_state(&graph.chat, &req.messages, &req.extra);
        let io = &graph.chat;
        if (!io.carry.is_empty() || io.history.is_some())
            && let Some((previous, answer)) = self.previous_state(&graph, &req).await?
        {
            input::carry_into(&mut input, &previous, &io.carry);
            if let Some(field) = &io.history {
                input::continue_conversation(&mut input, &previous, field, &req.messages, &answer);
            }
        }
        // Refused before anything is stored: the input must be a valid state.
        graph
            .state
            .from_json(&input)
            .map_err(|e| TurnError::InvalidInput(e.to_string()))?;
        let breakpoints = match &req.breakpoints {
            Some(v) => crate::runs::breaks::parse(&graph, v)?,
            None => Default::default(),
        };
        Ok(ChatTurn {
            breakpoints,
            title: input::title(&req.messages),
            messages: input::message_records(&req.chat_id, &req.messages),
            chat_id: req.chat_id,
            user_id: req.user_id,
            request_id: req.request_id,
            graph,
            input,
        })
    }

    /// The chat's stored messages when the request needs them (it
    /// regenerates a message, or carries earlier answers, see
    /// [`restore_failed_turns`]) and the chat is the user's; `None`
    /// otherwise (another user's chat is refused when the turn is written).
    async fn stored_for(&self, req: &TurnRequest) -> Result<Option<Vec<MessageRecord>>, TurnError> {
        if req.regenerates.is_none() && !req.messages.iter().any(|m| m.role == "assistant") {
            return Ok(None);
        }
        match self.owned_chat(&req.user_id, &req.chat_id).await {
            Ok(Some(_)) => Ok(Some(self.store.messages(&req.chat_id).await?)),
            Ok(None) | Err(TurnError::NotOwner) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The final state of the turn this request continues, for the
    /// graph's `carry:` fields and its conversation's tool turns (with the
    /// id of that turn's answer message): that of the newest *finished* run
    /// of `graph` whose answer the request still shows. Matching by answer
    /// rather than taking the chat's newest run means a regenerated or
    /// edited turn continues from the turn before it, not from the answer
    /// it replaces. Failed, cancelled and running runs contribute nothing
    /// (an older finished turn does), and so does a run whose checkpoints
    /// no longer rebuild (logged).
    async fn previous_state(
        &self,
        graph: &Graph,
        req: &TurnRequest,
    ) -> Result<Option<(Value, String)>, TurnError> {
        let answered = input::answered(&req.messages);
        if answered.is_empty() {
            return Ok(None);
        }
        let runs = self
            .store
            .list_runs(&RunQuery::newest(CARRY_LOOKBACK).of_chat(&req.chat_id))
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
        match crate::replay::state_at(&*self.store, graph, run.id, run.last_step).await {
            Ok(s) => Ok(Some((s.to_json(), answer.to_owned()))),
            Err(e) => {
                tracing::warn!(run = %run.id, error = %e, "cannot rebuild the previous turn's state; carrying nothing");
                Ok(None)
            }
        }
    }
}

/// A client that saw a turn fail still holds its half answer (`useChat`
/// keeps the streamed parts next to its error) and sends it back with the
/// next message. The stored failed message wins over that copy (see
/// [`crate::sse::Assembler::stored_parts`]): the half answer is neither
/// stored again as an answer nor given to the model as one.
fn restore_failed_turns(messages: &mut [TurnMessage], stored: Option<&[MessageRecord]>) {
    let Some(stored) = stored else { return };
    for m in messages.iter_mut().filter(|m| m.role == "assistant") {
        let failed = stored
            .iter()
            .find(|s| s.id == m.id && s.role == "assistant" && crate::sse::is_failed(&s.metadata));
        if let Some(s) = failed {
            m.parts = s.parts.as_array().cloned().unwrap_or_default();
            m.metadata = Some(s.metadata.clone());
        }
    }
}
