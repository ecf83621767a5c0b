//! Continuing a run paused at interrupts (human in the loop).
//!
//! A run that reaches an interrupt — a tool call that needs approval, a
//! client-side tool, an `interrupt` node's question — stops: its state
//! before the step it paused in is checkpointed, the step's tasks are its
//! next ones, the pause is logged as `run_interrupted` with what it waits
//! for, and its status is `interrupted`. Nothing executes it and nothing
//! of it stays in memory.
//!
//! [`Runs::resume`] continues it, from any instance: the answers are
//! checked against what the run waits for (every interrupt answered, no
//! unknown id, each answer of the right shape and type), the run is claimed
//! from `interrupted` to `running` in one conditional update (so of
//! concurrent resumes exactly one proceeds), and the step runs again from
//! its checkpoint with the answers — what it did before the pause (model
//! calls, tool calls) served from the log, not repeated.
//!
//! A pause may lapse (`expires_after`): the run then fails with
//! `interrupt_expired`, found by the upkeep pass or by the late answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use super::{Begin, ChatLink, Launch, Runs, StartError, Started};
use crate::events::{Ask, ErrorInfo, Event, EventKind, Interrupt, now_micros};
use crate::nodes::Graph;
use crate::replay;
use crate::runtime::{Resume, RunStatus, rebuild_state};
use crate::store::{MessageRecord, RunQuery, RunRecord, StoreError};

/// Answers to a paused run's interrupts.
#[derive(Debug, Clone)]
pub struct ResumeRequest {
    /// The run.
    pub run_id: Uuid,
    /// Who answers: must be the run's user.
    pub user_id: String,
    /// A correlation id (may be empty).
    pub request_id: String,
    /// Interrupt id → answer.
    pub answers: BTreeMap<String, Value>,
    /// For a chat run whose answer came as a new user message: the new
    /// assistant message the continuation streams into (otherwise it
    /// continues the paused message).
    pub new_message: Option<ChatLink>,
    /// With `new_message`: the chat as the client has it (the answer
    /// included), stored once the run is claimed, so a refused answer
    /// (mistyped, lapsed, or second to another) leaves the chat as it was.
    /// Empty: the stored messages stay.
    pub messages: Vec<MessageRecord>,
    /// New breakpoints for the run from this continuation on (`None`: it
    /// keeps those it had).
    pub breakpoints: Option<crate::events::Breakpoints>,
}

/// Why a run could not be resumed. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// No such run, or not this user's.
    #[error("no run {0}")]
    NotFound(Uuid),
    /// The run does not wait for anything (or another request resumed it
    /// first).
    #[error("run {run} is not waiting for an answer (it is {status})")]
    NotWaiting {
        /// The run.
        run: Uuid,
        /// Its status.
        status: &'static str,
    },
    /// An answer names an interrupt the run does not wait at (unknown, or
    /// answered already).
    #[error("the run does not wait at `{0}` (unknown, or already answered)")]
    Unknown(String),
    /// Some interrupts got no answer.
    #[error("every interrupt needs an answer; missing: {}", .0.join(", "))]
    Unanswered(Vec<String>),
    /// An answer has the wrong shape or type.
    #[error("the answer to `{id}` is invalid: {message}")]
    Invalid {
        /// The interrupt.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// The edit given at a breakpoint was refused (as a fork's would be).
    #[error(transparent)]
    Edit(#[from] crate::replay::EditError),
    /// The new breakpoints name nodes the graph does not have.
    #[error(transparent)]
    Breakpoints(#[from] super::breaks::BreakpointError),
    /// The wait lapsed: the run failed.
    #[error("the run waited too long: {} expired, and the run has failed", .0.join(", "))]
    Expired(Vec<String>),
    /// The run's graph is not served here.
    #[error("graph `{0}` is not served here")]
    UnknownGraph(String),
    /// It could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// Its log or checkpoints could not be read.
    #[error(transparent)]
    Replay(#[from] replay::ReplayError),
    /// Its state could not be rebuilt.
    #[error(transparent)]
    Checkpoint(#[from] crate::runtime::CheckpointError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The interrupts a run's log says it waits at: those of its last
/// `run_interrupted`, when nothing resumed it since.
pub(crate) fn pending(events: &[Event]) -> Vec<Interrupt> {
    for e in events.iter().rev() {
        match &e.event {
            EventKind::RunInterrupted { interrupts } => return interrupts.clone(),
            EventKind::RunResumed { .. } => return Vec::new(),
            _ => {}
        }
    }
    Vec::new()
}

/// Checks `answers` against what the run waits at and normalises them:
/// an approval is `{approved: bool, reason?: string}` (a bare boolean is
/// accepted), a client tool `{output}` or `{error: string}`, a question's a
/// value of its field's type, a breakpoint's `{action, set}` with its edit
/// checked on the `paused` state (the graph's default state when `None`).
///
/// # Errors
/// An unknown or missing id, or an invalid answer.
pub(crate) fn check_answers(
    graph: &Graph,
    waiting: &[Interrupt],
    answers: BTreeMap<String, Value>,
    paused: Option<&dyn crate::state::DynState>,
) -> Result<BTreeMap<String, Value>, ResumeError> {
    if let Some(id) = answers
        .keys()
        .find(|id| !waiting.iter().any(|i| &i.id == *id))
    {
        return Err(ResumeError::Unknown(id.clone()));
    }
    let missing: Vec<String> = waiting
        .iter()
        .filter(|i| !answers.contains_key(&i.id))
        .map(|i| i.id.clone())
        .collect();
    if !missing.is_empty() {
        return Err(ResumeError::Unanswered(missing));
    }
    let mut out = BTreeMap::new();
    for (id, answer) in answers {
        let Some(it) = waiting.iter().find(|i| i.id == id) else {
            continue;
        };
        let invalid = |message: String| ResumeError::Invalid {
            id: id.clone(),
            message,
        };
        let value = match &it.ask {
            Ask::Approval { .. } => approval(answer).map_err(invalid)?,
            Ask::ClientTool { .. } => client_output(answer).map_err(invalid)?,
            Ask::Breakpoint { .. } => {
                let default;
                let state = match paused {
                    Some(s) => s,
                    None => {
                        default = graph.state.default_state();
                        &*default
                    }
                };
                match super::breaks::answer(graph, state, answer) {
                    Ok(v) => v,
                    Err(Ok(message)) => return Err(invalid(message)),
                    Err(Err(edit)) => return Err(ResumeError::Edit(edit)),
                }
            }
            Ask::Question { field, .. } => {
                let schema = &graph.state.schema;
                let spec = schema
                    .field(field)
                    .map(|f| &schema.fields[f.0 as usize])
                    .ok_or_else(|| invalid(format!("the graph has no field `{field}` any more")))?;
                spec.ty.check(&answer).map_err(|m| {
                    invalid(format!(
                        "`{field}` takes {}, got {}{}",
                        m.expected,
                        m.got,
                        if m.path.is_empty() {
                            String::new()
                        } else {
                            format!(" at {}", m.path)
                        }
                    ))
                })?;
                answer
            }
        };
        out.insert(id, value);
    }
    Ok(out)
}

fn approval(answer: Value) -> Result<Value, String> {
    match answer {
        Value::Bool(b) => Ok(serde_json::json!({ "approved": b })),
        Value::Object(m) => {
            let Some(approved) = m.get("approved").and_then(Value::as_bool) else {
                return Err("an approval needs `approved`: true or false".into());
            };
            let mut v = serde_json::json!({ "approved": approved });
            match m.get("reason") {
                None | Some(Value::Null) => {}
                Some(Value::String(r)) => v["reason"] = Value::String(r.clone()),
                Some(_) => return Err("`reason` must be a string".into()),
            }
            Ok(v)
        }
        _ => Err("an approval is `{\"approved\": true|false, \"reason\"?: …}`".into()),
    }
}

fn client_output(answer: Value) -> Result<Value, String> {
    match &answer {
        Value::Object(m) if m.contains_key("output") || m.contains_key("error") => {
            if m.get("error")
                .is_some_and(|e| !e.is_string() && !e.is_null())
            {
                return Err("`error` must be a string".into());
            }
            Ok(answer)
        }
        _ => Err("a client tool's answer is `{\"output\": …}` or `{\"error\": \"…\"}`".into()),
    }
}

impl Runs {
    /// What a paused run waits at (empty when it does not wait).
    ///
    /// # Errors
    /// The log could not be read.
    pub async fn waiting_at(&self, run: &RunRecord) -> Result<Vec<Interrupt>, replay::ReplayError> {
        if run.status != RunStatus::Interrupted {
            return Ok(Vec::new());
        }
        let (_, events) = replay::load(&*self.store, run.id).await?;
        Ok(pending(&events))
    }

    /// Continues a paused run with answers to its interrupts (see the
    /// module docs). Returns the continuing run's hub.
    ///
    /// # Errors
    /// See [`ResumeError`]; nothing is changed on error.
    pub async fn resume(self: &Arc<Self>, req: ResumeRequest) -> Result<Started, ResumeError> {
        let runs = Arc::clone(self);
        self.whole(async move { runs.continue_paused(req).await })
            .await
    }

    async fn continue_paused(
        self: &Arc<Self>,
        mut req: ResumeRequest,
    ) -> Result<Started, ResumeError> {
        let run = self
            .owned_run(&req.user_id, req.run_id)
            .await?
            .ok_or(ResumeError::NotFound(req.run_id))?;
        if run.status != RunStatus::Interrupted {
            return Err(ResumeError::NotWaiting {
                run: run.id,
                status: run.status.as_str(),
            });
        }
        let graph = self
            .graphs
            .get(&run.graph)
            .ok_or_else(|| ResumeError::UnknownGraph(run.graph.clone()))?;
        let (_, history) = replay::load(&*self.store, run.id).await?;
        let waiting = pending(&history);
        let lapsed = expired(&waiting, now_micros());
        if !lapsed.is_empty() {
            self.expire(&run, &lapsed).await?;
            return Err(ResumeError::Expired(lapsed));
        }
        let from = self.paused_at(&run, &graph, &history).await?;
        let answers = check_answers(
            &graph,
            &waiting,
            std::mem::take(&mut req.answers),
            Some(&*from.state),
        )?;
        if let Some(b) = &req.breakpoints {
            super::breaks::check(&graph, b)?;
        }
        let permit = self.permit()?;
        let not_waiting = || ResumeError::NotWaiting {
            run: run.id,
            status: "running",
        };
        let hold = self.held.hold(run.id).ok_or_else(not_waiting)?;
        if !self
            .store
            .claim_interrupted(run.id, &self.instance, self.lease_until())
            .await?
        {
            return Err(not_waiting());
        }
        hold.leased();
        let claimed = Claimed {
            run: run.clone(),
            graph,
            history,
            from,
            answers,
            permit,
            hold,
        };
        match self.continue_claimed(claimed, req).await {
            Ok(started) => Ok(started),
            Err(e) => {
                // Claimed but not started: leave it waiting as it was.
                tracing::error!(run_id = %run.id, error = %e, "could not continue a paused run");
                let _ = self.store.release_lease(run.id, &self.instance).await;
                let _ = self
                    .store
                    .finish_run(run.id, RunStatus::Interrupted, None, run.usage)
                    .await;
                Err(e)
            }
        }
    }

    async fn continue_claimed(
        self: &Arc<Self>,
        claimed: Claimed,
        mut req: ResumeRequest,
    ) -> Result<Started, ResumeError> {
        let Claimed {
            run,
            graph,
            history,
            from,
            answers,
            permit,
            hold,
        } = claimed;
        if let Some(link) = &req.new_message
            && !req.messages.is_empty()
        {
            let messages = std::mem::take(&mut req.messages);
            self.store
                .replace_messages_from(&link.chat_id, 0, messages)
                .await?;
        }
        let new_message = req.new_message.is_some();
        let chat = match req.new_message {
            Some(link) => Some(link),
            None => self.paused_message(&run).await?,
        };
        let request_id = Some(req.request_id)
            .filter(|r| !r.is_empty())
            .or_else(|| run.request_id.clone())
            .unwrap_or_default();
        let metadata = super::stream_metadata(
            &self.services,
            run.id,
            &request_id,
            run.chat_id.as_deref().unwrap_or(""),
            &graph,
        );
        tracing::info!(run_id = %run.id, step = from.step + 1, answers = answers.len(), "continuing a paused run");
        let breakpoints = match req.breakpoints {
            Some(b) => (b, true),
            None => (super::breaks::recorded(&history).unwrap_or_default(), false),
        };
        let launch = Launch {
            run_id: run.id,
            user_id: run.user_id.clone(),
            request_id,
            graph,
            chat,
            alternative: None,
            metadata,
            begin: Begin::Continued {
                from,
                history,
                answers,
                new_message,
            },
            forked_from: run.parent.clone(),
            tap: None,
            hold,
            admitted: false,
            breakpoints,
        };
        let hub = self.launch(launch, permit)?;
        Ok(Started {
            run_id: run.id,
            hub,
        })
    }

    /// Where a paused run continues: its last checkpoint (the state before
    /// the step it paused in, that step's tasks next).
    async fn paused_at(
        &self,
        run: &RunRecord,
        graph: &Graph,
        history: &[Event],
    ) -> Result<Resume, ResumeError> {
        let checkpoints = self.store.checkpoints(run.id, u32::MAX).await?;
        let Some(last) = checkpoints.last() else {
            return Err(ResumeError::Checkpoint(crate::runtime::CheckpointError(
                "a paused run has no checkpoint".into(),
            )));
        };
        let batches: Vec<_> = checkpoints.iter().map(|c| c.to_batch(run.id)).collect();
        Ok(Resume {
            state: rebuild_state(&batches, &graph.state, last.step)?,
            step: last.step,
            next: last.next.clone(),
            joins: last.joins.clone(),
            last_seq: history.last().map_or(run.last_seq, |e| e.seq),
        })
    }

    /// The chat message a paused chat run continues (its own).
    async fn paused_message(&self, run: &RunRecord) -> Result<Option<ChatLink>, StoreError> {
        let Some(chat_id) = &run.chat_id else {
            return Ok(None);
        };
        let message_id = super::turn::answer_message_id(run.id, run.message_id.as_deref());
        let position = self
            .store
            .messages(chat_id)
            .await?
            .iter()
            .position(|m| m.id == message_id)
            .map_or(0, |p| p as i64);
        Ok(Some(ChatLink {
            chat_id: chat_id.clone(),
            message_id,
            position,
        }))
    }

    /// Sets a paused run aside: its chat moved on (a new message while it
    /// waited for an approval). It ends `cancelled`. False when it was not
    /// waiting (any more).
    ///
    /// # Errors
    /// The store failed.
    pub async fn set_aside(&self, run: &RunRecord, reason: &str) -> Result<bool, StoreError> {
        self.end_paused(
            run,
            EventKind::RunCancelled {
                reason: reason.to_owned(),
            },
            RunStatus::Cancelled,
            None,
        )
        .await
    }

    /// Fails the paused runs whose wait lapsed (upkeep).
    pub async fn expire_interrupts(&self) {
        let mut query = RunQuery::newest(EXPIRY_BATCH);
        query.status = Some(RunStatus::Interrupted);
        let runs = match self.store.list_runs(&query).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not look for lapsed interrupts");
                return;
            }
        };
        let now = now_micros();
        for run in runs {
            let events = match replay::load(&*self.store, run.id).await {
                Ok((_, e)) => e,
                Err(e) => {
                    tracing::warn!(run_id = %run.id, error = %e, "could not read a paused run");
                    continue;
                }
            };
            let lapsed = expired(&pending(&events), now);
            if !lapsed.is_empty()
                && let Err(e) = self.expire(&run, &lapsed).await
            {
                tracing::warn!(run_id = %run.id, error = %e, "could not fail a run whose wait lapsed");
            }
        }
    }

    /// Fails a paused run whose interrupts `lapsed`.
    async fn expire(&self, run: &RunRecord, lapsed: &[String]) -> Result<bool, StoreError> {
        let error = ErrorInfo {
            code: "interrupt_expired".into(),
            message: format!(
                "no answer came in time for {}; the run stopped waiting",
                lapsed.join(", ")
            ),
        };
        tracing::info!(run_id = %run.id, lapsed = ?lapsed, "a paused run's wait lapsed");
        self.end_paused(
            run,
            EventKind::RunFailed {
                error: error.clone(),
            },
            RunStatus::Failed,
            Some(error),
        )
        .await
    }

    /// Ends a paused run with `event` and `status` — once: it is claimed
    /// first, so a concurrent resume or expiry does nothing twice.
    async fn end_paused(
        &self,
        run: &RunRecord,
        event: EventKind,
        status: RunStatus,
        error: Option<ErrorInfo>,
    ) -> Result<bool, StoreError> {
        // Held while it is `running` again here, so the lease upkeep does
        // not take it for a stranded run and execute it.
        let Some(hold) = self.held.hold(run.id) else {
            return Ok(false);
        };
        if !self
            .store
            .claim_interrupted(run.id, &self.instance, self.lease_until())
            .await?
        {
            return Ok(false);
        }
        hold.leased();
        let latest = self
            .store
            .get_run(run.id)
            .await?
            .unwrap_or_else(|| run.clone());
        let ev = Arc::new(Event {
            run_id: run.id,
            seq: latest.last_seq + 1,
            at: now_micros(),
            step: latest.last_step,
            node: None,
            task: 0,
            event,
        });
        self.store.append_events(run.id, &[ev]).await?;
        self.store
            .finish_run(run.id, status, error, latest.usage)
            .await?;
        self.store.release_lease(run.id, &self.instance).await?;
        if let Some(chat) = &run.chat_id {
            self.store.release_chat(chat, run.id).await?;
        }
        self.observer.finished(&run.graph, status.as_str());
        Ok(true)
    }
}

/// A paused run this process claimed to continue, and what continuing it
/// takes.
struct Claimed {
    run: RunRecord,
    graph: Arc<Graph>,
    history: Vec<Event>,
    from: Resume,
    answers: BTreeMap<String, Value>,
    permit: tokio::sync::OwnedSemaphorePermit,
    hold: super::Hold,
}

/// Paused runs looked at per upkeep pass.
const EXPIRY_BATCH: usize = 100;

/// The interrupts among `waiting` whose wait lapsed by `now`.
fn expired(waiting: &[Interrupt], now: u64) -> Vec<String> {
    waiting
        .iter()
        .filter(|i| i.expires_at.is_some_and(|at| at <= now))
        .map(|i| i.id.clone())
        .collect()
}
