//! Keeping runs alive across crashes and instances.
//!
//! Every run this process executes holds a lease in the store, renewed
//! every third of its length. A process that dies stops renewing; once its
//! leases expire, any instance sharing the database claims the orphaned runs
//! (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so each run goes to exactly one)
//! and resumes each from its last checkpoint: the state is rebuilt from the
//! snapshot and patches, the next step's tasks come from the checkpoint, and
//! event numbering continues where the log stops. Steps that completed
//! before the crash — with their model and tool calls — are not repeated.
//! Clients resume the stream as usual (`GET /api/chat/{id}/stream`).
//!
//! A stop asked of an instance that does not execute the run is stored as a
//! request on the run; the executing instance polls for requests on its own
//! runs while it has any in flight and cancels them.

use std::sync::Arc;
use std::time::Duration;

use super::{Alternative, Begin, ChatLink, Launch, Runs};
use crate::events::{ForkOrigin, now_micros};
use crate::replay;
use crate::runtime::{Resume, rebuild_state};
use crate::store::{RunRecord, StoreError};

/// Runs claimed per pass.
const CLAIM_BATCH: usize = 16;

/// How often an instance with runs in flight asks the store whether
/// another instance was asked to stop one of them: the delay a stop
/// request made elsewhere can take.
const STOP_POLL: Duration = Duration::from_millis(250);

/// Why an orphaned run could not be resumed.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// Its graph is not served here.
    #[error("graph `{0}` is not served here")]
    UnknownGraph(String),
    /// Its log or checkpoints could not be read or rebuilt.
    #[error(transparent)]
    Replay(#[from] replay::ReplayError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Its state could not be rebuilt from the checkpoints.
    #[error(transparent)]
    Checkpoint(#[from] crate::runtime::CheckpointError),
    /// It could not start.
    #[error(transparent)]
    Start(#[from] super::StartError),
}

impl Runs {
    /// Starts lease renewal, stop-request polling, handing memory back
    /// when the process goes quiet (`idle`) and — when configured
    /// (`claim_orphans` and a non-zero `recover_interval`) — orphan
    /// recovery. Stops at shutdown.
    pub fn spawn_upkeep(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let every = self.config.recover_interval;
        let claims = self.config.claim_orphans && !every.is_zero();
        let runs = Arc::clone(self);
        tokio::spawn(async move {
            let renew_every = (runs.config.lease / 3).max(Duration::from_millis(50));
            let mut renew = tokio::time::interval(renew_every);
            let mut claim = tokio::time::interval(every.max(Duration::from_millis(50)));
            let mut stops = tokio::time::interval(STOP_POLL);
            renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            claim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            stops.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut quiet = tokio::time::interval(super::idle::QUIET_CHECK);
            quiet.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut seen = super::idle::Quiet::default();
            loop {
                tokio::select! {
                    _ = renew.tick() => runs.renew().await,
                    _ = claim.tick(), if claims => {
                        runs.recover_orphans().await;
                        runs.expire_interrupts().await;
                    }
                    _ = stops.tick(), if runs.running() > 0 => runs.stop_requested().await,
                    _ = quiet.tick() => runs.release_if_quiet(&mut seen).await,
                    _ = runs.shutdown.cancelled() => break,
                }
            }
        })
    }

    /// Renews this process's leases and squares them with the runs it
    /// holds (see `held`): a stranded run — leased here, executed nowhere
    /// — is taken over now; a run whose lease went to another instance
    /// stops executing here (it is suspended: nothing more of it is
    /// written; the other instance continues it from the log).
    pub(super) async fn renew(self: &Arc<Self>) {
        let began = std::time::Instant::now();
        let until = self.lease_until();
        let leased = match self.store.renew_leases(&self.instance, until).await {
            Ok(leased) => leased,
            Err(e) => {
                tracing::warn!(error = %e, "could not renew run leases");
                return;
            }
        };
        let (stranded, lost) = self.held.compare(&leased, began);
        for id in lost {
            if let Some(hub) = self.executing(id) {
                tracing::warn!(run_id = %id, "another instance took over this run's lease; stopping it here");
                hub.suspend.cancel();
            }
        }
        for id in stranded {
            tracing::warn!(run_id = %id, "a run leased here was not executing; taking it over");
            if let Err(e) = self.take_over(id).await {
                tracing::error!(run_id = %id, error = %e, "could not take over a stranded run");
            }
        }
    }

    /// Executes a stored running run that nobody executes — stranded here,
    /// or orphaned (its lease expired or was never taken) — if its lease
    /// can be had: its hub, or `None` when another instance holds the
    /// lease, it is no longer running, or this process executes it already.
    ///
    /// # Errors
    /// It could not be resumed (its lease is given up for another try).
    pub async fn take_over(
        self: &Arc<Self>,
        run_id: uuid::Uuid,
    ) -> Result<Option<Arc<super::RunHub>>, RecoverError> {
        if self.held.contains(run_id) {
            return Ok(self.executing(run_id));
        }
        let now = now_micros();
        if !self
            .store
            .acquire_lease(run_id, &self.instance, now, self.lease_until())
            .await?
        {
            return Ok(None);
        }
        let Some(run) = self.store.get_run(run_id).await? else {
            return Ok(None);
        };
        match self.recover(run).await {
            Ok(hub) => Ok(hub),
            Err(e) => {
                let _ = self.store.release_lease(run_id, &self.instance).await;
                Err(e)
            }
        }
    }

    /// The hub of `run` if this process executes it.
    fn executing(&self, run: uuid::Uuid) -> Option<Arc<super::RunHub>> {
        self.hubs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .find(|h| h.run_id == run && !h.follower && !h.is_done())
            .cloned()
    }

    /// Cancels the runs this process executes that a stop request made on
    /// another instance names.
    async fn stop_requested(&self) {
        match self.store.stop_requests(&self.instance).await {
            Ok(ids) => {
                for id in ids {
                    if self.cancel_run(id) {
                        tracing::info!(run_id = %id, "stopping a run as asked through another instance");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not check for stop requests"),
        }
    }

    /// Claims and resumes runs whose instance died.
    pub async fn recover_orphans(self: &Arc<Self>) {
        let now = now_micros();
        let runs = match self
            .store
            .claim_orphans(&self.instance, now, self.lease_until(), CLAIM_BATCH)
            .await
        {
            Ok(runs) => runs,
            Err(e) => {
                tracing::warn!(error = %e, "could not look for orphaned runs");
                return;
            }
        };
        for run in runs {
            let id = run.id;
            // Its lease expired while this process still answers for it
            // (it could not renew through an outage): the claim renewed it.
            if self.held.contains(id) {
                continue;
            }
            if let Err(e) = self.recover(run).await {
                tracing::error!(run_id = %id, error = %e, "could not resume an orphaned run");
                // Leave it to another pass (here or elsewhere).
                let _ = self.store.release_lease(id, &self.instance).await;
            }
        }
    }

    /// Resumes `run`, leased to this process, from its log: its hub
    /// (`None`: it is held here already, or no longer running).
    async fn recover(
        self: &Arc<Self>,
        run: RunRecord,
    ) -> Result<Option<Arc<super::RunHub>>, RecoverError> {
        let Some(hold) = self.held.hold(run.id) else {
            return Ok(None);
        };
        hold.leased();
        if run.status != crate::runtime::RunStatus::Running {
            return Ok(None);
        }
        let graph = self
            .graphs
            .get(&run.graph)
            .ok_or_else(|| RecoverError::UnknownGraph(run.graph.clone()))?;
        if graph.version != run.graph_version {
            tracing::warn!(run_id = %run.id, recorded = %run.graph_version, current = %graph.version, "resuming with a newer version of the graph");
        }
        let permit = self.permit()?;
        let (_, history) = replay::load(&*self.store, run.id).await?;
        let checkpoints = self.store.checkpoints(run.id, u32::MAX).await?;
        let alternative = alternative(&run);
        let chat = match alternative {
            Some(_) => None,
            None => self.chat_link(&run).await?,
        };
        let request_id = run.request_id.clone().unwrap_or_default();
        let metadata = super::stream_metadata(
            &self.services,
            run.id,
            &request_id,
            run.chat_id.as_deref().unwrap_or(""),
            &graph,
        );
        let recorded = super::breaks::recorded(&history);
        // A run restarted from its input records them again, as it did.
        let again = recorded.is_some() && checkpoints.is_empty();
        let breakpoints = (recorded.unwrap_or_default(), again);
        let begin = begin(&run, &graph, &checkpoints, history)?;
        let launch = Launch {
            run_id: run.id,
            user_id: run.user_id.clone(),
            request_id,
            graph,
            chat,
            alternative,
            metadata,
            begin,
            forked_from: run.parent.clone(),
            tap: None,
            hold,
            admitted: false,
            breakpoints,
        };
        Ok(Some(self.launch(launch, permit)?))
    }
}

impl Runs {
    /// Where a recovered run's answer goes in its chat (none without one):
    /// its message, after every other message the chat holds.
    async fn chat_link(&self, run: &RunRecord) -> Result<Option<ChatLink>, RecoverError> {
        let Some(c) = &run.chat_id else {
            return Ok(None);
        };
        let message_id = message_id(run);
        let position = self
            .store
            .messages(c)
            .await?
            .iter()
            .filter(|m| m.id != message_id)
            .count() as i64;
        Ok(Some(ChatLink {
            chat_id: c.clone(),
            message_id,
            position,
        }))
    }
}

/// The message a run answers in: its own, or one named after it.
fn message_id(run: &RunRecord) -> String {
    super::turn::answer_message_id(run.id, run.message_id.as_deref())
}

/// An attached fork answers no place in the chat: its answer becomes an
/// alternative of the message it names.
fn alternative(run: &RunRecord) -> Option<Alternative> {
    match (&run.chat_id, run.parent.as_ref()) {
        (
            Some(c),
            Some(ForkOrigin {
                alternative_of: Some(of),
                ..
            }),
        ) => Some(Alternative {
            chat_id: c.clone(),
            of: of.clone(),
            id: message_id(run),
        }),
        _ => None,
    }
}

/// How an orphaned run begins again: from its last checkpoint, or from its
/// input when it died before the first.
fn begin(
    run: &RunRecord,
    graph: &crate::nodes::Graph,
    checkpoints: &[crate::store::CheckpointRecord],
    history: Vec<crate::events::Event>,
) -> Result<Begin, RecoverError> {
    Ok(match checkpoints.last() {
        // It died before its first checkpoint: nothing of it is stored
        // but its input, so it starts over.
        // What it logged (with visible durability) is replayed silently.
        None => {
            tracing::info!(run_id = %run.id, logged = history.len(), "restarting an orphaned run that never checkpointed");
            Begin::Again {
                input: run.input.clone(),
                history,
            }
        }
        Some(last) => {
            let batches: Vec<_> = checkpoints.iter().map(|c| c.to_batch(run.id)).collect();
            let state = rebuild_state(&batches, &graph.state, last.step)?;
            let last_seq = history.last().map_or(0, |e| e.seq);
            // What the interrupted step logged (with visible durability:
            // everything a client saw) is replayed silently; its finished
            // model and tool calls are served from the log, not repeated.
            let logged = history.iter().filter(|e| e.step > last.step).count();
            tracing::info!(run_id = %run.id, step = last.step, last_seq, logged, "resuming an orphaned run from its last checkpoint");
            Begin::Resumed {
                from: Resume {
                    state,
                    step: last.step,
                    next: last.next.clone(),
                    joins: last.joins.clone(),
                    last_seq,
                },
                history,
            }
        }
    })
}
