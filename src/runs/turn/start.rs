//! Starting a turn: the conversation stored and the run started together.
//!
//! The order makes refusals free: a concurrency slot is taken first (at the
//! limit nothing is written), then the store starts the turn in one
//! transaction — the chat's messages, the run record with this process's
//! lease, the chat's active run — or refuses it (a run of the chat is in
//! flight, here or on another instance; the chat is another user's) having
//! written nothing. Only then does the run execute.
//!
//! Writing the turn and launching its run happen in a task of their own
//! (`Runs::whole`): a client that goes away mid-request drops the HTTP
//! handler, and with it anything the handler awaits — had it awaited the
//! store write itself, a turn could be stored with its run `running` and
//! never executed, wedging the chat.

use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use super::super::held::Hold;
use super::super::{Begin, ChatLink, Launch, RunHub, Runs};
use super::{TurnError, new_message_id};
use crate::events::{ForkOrigin, now_micros};
use crate::nodes::Graph;
use crate::runtime::Resume;
use crate::store::{ChatRecord, MessageRecord, TurnOutcome, TurnStart};

/// A chat request to answer.
#[derive(Debug)]
pub struct ChatTurn {
    /// The chat (created by its first turn).
    pub chat_id: String,
    /// Its user.
    pub user_id: String,
    /// The chat's title if it is new.
    pub title: String,
    /// The request's correlation id.
    pub request_id: String,
    /// The graph answering.
    pub graph: Arc<Graph>,
    /// The conversation as the client has it (replaces what is stored:
    /// appending, editing and regenerating are all this).
    pub messages: Vec<MessageRecord>,
    /// The graph's input state.
    pub input: Value,
    /// Where the run pauses between steps (checked: see
    /// [`crate::runs::breaks::check`]).
    pub breakpoints: crate::events::Breakpoints,
    /// The run's id when it was given out before the run started (the
    /// LangGraph API's queued runs); a new one otherwise.
    pub run_id: Option<Uuid>,
}

/// Where a turn starts when not at its graph's entry: a state and a
/// frontier of its own (the LangGraph API's state edits, `command.goto`,
/// runs from a checkpoint). The run is recorded as a fork of `origin` —
/// its `run_started` event carries the state and the frontier — so a
/// re-execution starts where it did and the studio shows where it came
/// from.
#[derive(Debug)]
pub struct TurnFrom {
    /// The state and the tasks to run first (none: the run ends at once,
    /// having recorded the state as its one checkpoint).
    pub resume: Resume,
    /// The run (and step) it continues from, and the edit (none: a start
    /// at given nodes of a thread with no run yet).
    pub origin: Option<ForkOrigin>,
}

/// A started turn.
#[derive(Debug)]
pub struct TurnStarted {
    /// The run's hub (stream it).
    pub hub: Arc<RunHub>,
    /// The chat as stored now.
    pub chat: ChatRecord,
}

impl Runs {
    /// Starts a chat turn (see the module docs).
    ///
    /// # Errors
    /// The chat is busy or another user's, the server is full or shutting
    /// down, or the store failed; nothing was written.
    pub async fn begin_turn(self: &Arc<Self>, turn: ChatTurn) -> Result<TurnStarted, TurnError> {
        let runs = Arc::clone(self);
        self.whole(async move { runs.start_turn(turn, None).await })
            .await
    }

    /// Starts a chat turn from a state and frontier of its own (see
    /// [`TurnFrom`]); otherwise as [`Runs::begin_turn`].
    ///
    /// # Errors
    /// As [`Runs::begin_turn`].
    pub async fn begin_turn_from(
        self: &Arc<Self>,
        turn: ChatTurn,
        from: TurnFrom,
    ) -> Result<TurnStarted, TurnError> {
        let runs = Arc::clone(self);
        self.whole(async move { runs.start_turn(turn, Some(from)).await })
            .await
    }

    async fn start_turn(
        self: &Arc<Self>,
        turn: ChatTurn,
        from: Option<TurnFrom>,
    ) -> Result<TurnStarted, TurnError> {
        // Whether the chat is busy is the store's to say (`begin_turn` is
        // atomic on the chat's active run). This process's hub of the
        // chat's last run may not be done yet although its end is stored:
        // the run's task resumes after its last write only when the
        // runtime polls it again, and a turn refused then would be a 409
        // for a chat the store shows idle. A new hub replaces it (`launch`);
        // its streams keep following it.
        let permit = self.permit()?;
        let run_id = turn.run_id.unwrap_or_else(Uuid::now_v7);
        let hold = self.hold(run_id)?;
        let (launch, step) = self.turn_launch(&turn, from, run_id, hold);
        let now = now_micros();
        let start = TurnStart {
            chat: ChatRecord {
                id: turn.chat_id.clone(),
                user_id: turn.user_id,
                title: turn.title,
                created_at: now,
                updated_at: now,
                active_run: None,
            },
            messages: turn.messages,
            run: self.record(&launch, turn.input, launch.forked_from.clone(), step),
            owner: self.instance.clone(),
            lease_until: self.lease_until(),
        };
        let chat = match self.store.begin_turn(start).await? {
            TurnOutcome::Started(chat) => {
                launch.hold.leased();
                chat
            }
            TurnOutcome::Busy(_) => return Err(TurnError::Busy),
            TurnOutcome::NotOwner => return Err(TurnError::NotOwner),
        };
        match self.launch(launch, permit) {
            Ok(hub) => Ok(TurnStarted { hub, chat }),
            Err(e) => {
                self.abandon(run_id, &chat.id).await;
                Err(e.into())
            }
        }
    }

    /// The run a turn launches: from the graph's entry with the turn's
    /// input, or from `from`'s state and frontier (recorded as a fork of its
    /// origin, at its step). Returns the launch and the step it starts at.
    fn turn_launch(
        &self,
        turn: &ChatTurn,
        from: Option<TurnFrom>,
        run_id: Uuid,
        hold: Hold,
    ) -> (Launch, u32) {
        let chat = ChatLink {
            chat_id: turn.chat_id.clone(),
            message_id: new_message_id(),
            position: turn.messages.len() as i64,
        };
        let (begin, origin, step) = match from {
            Some(f) => {
                let step = f.resume.step;
                let begin = Begin::Resumed {
                    from: f.resume,
                    history: Vec::new(),
                };
                (begin, f.origin, step)
            }
            None => (Begin::Fresh(turn.input.clone()), None, 0),
        };
        let launch = Launch {
            run_id,
            user_id: turn.user_id.clone(),
            request_id: turn.request_id.clone(),
            metadata: super::super::stream_metadata(
                &self.services,
                run_id,
                &turn.request_id,
                &turn.chat_id,
                &turn.graph,
            ),
            graph: Arc::clone(&turn.graph),
            chat: Some(chat),
            begin,
            alternative: None,
            forked_from: origin,
            tap: None,
            hold,
            admitted: true,
            breakpoints: (turn.breakpoints.clone(), !turn.breakpoints.is_empty()),
        };
        (launch, step)
    }

    /// Ends a turn that was stored but not started (a shutdown began):
    /// its run cancelled, its chat free again.
    async fn abandon(&self, run_id: Uuid, chat_id: &str) {
        let _ = self
            .store
            .finish_run(
                run_id,
                crate::runtime::RunStatus::Cancelled,
                None,
                Default::default(),
            )
            .await;
        let _ = self.store.release_chat(chat_id, run_id).await;
    }
}
