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

use super::AppState;
use super::runs::{Begin, RunStart};
use crate::events::now_micros;
use crate::replay;
use crate::runtime::{Resume, rebuild_state};
use crate::store::RunRecord;

/// Runs claimed per pass.
const CLAIM_BATCH: usize = 16;

/// How often an instance with runs in flight asks the store whether
/// another instance was asked to stop one of them: the delay a stop
/// request made elsewhere can take.
const STOP_POLL: Duration = Duration::from_millis(250);

/// Starts lease renewal and orphan recovery.
pub(super) fn spawn(state: Arc<AppState>) -> Option<tokio::task::JoinHandle<()>> {
    let every = state.config.server.recover_interval.0;
    if every.is_zero() {
        return None;
    }
    Some(tokio::spawn(async move {
        let lease = state.config.server.lease.0;
        let renew_every = (lease / 3).max(Duration::from_millis(50));
        let mut renew = tokio::time::interval(renew_every);
        let mut claim = tokio::time::interval(every.max(Duration::from_millis(50)));
        let mut stops = tokio::time::interval(STOP_POLL);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        claim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        stops.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = renew.tick() => {
                    let until = now_micros() + lease.as_micros() as u64;
                    if let Err(e) = state.store.renew_leases(&state.instance, until).await {
                        tracing::warn!(error = %e, "could not renew run leases");
                    }
                }
                _ = claim.tick() => recover_orphans(&state).await,
                _ = stops.tick(), if state.runs.running() > 0 => stop_requested(&state).await,
            }
        }
    }))
}

/// Cancels the runs this process executes that a stop request made on
/// another instance names.
async fn stop_requested(state: &Arc<AppState>) {
    match state.store.stop_requests(&state.instance).await {
        Ok(ids) => {
            for id in ids {
                if state.runs.cancel_run(id) {
                    tracing::info!(run_id = %id, "stopping a run as asked through another instance");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not check for stop requests"),
    }
}

/// Claims and resumes runs whose instance died.
pub(super) async fn recover_orphans(state: &Arc<AppState>) {
    let now = now_micros();
    let until = now + state.config.server.lease.0.as_micros() as u64;
    let runs = match state
        .store
        .claim_orphans(&state.instance, now, until, CLAIM_BATCH)
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
        if let Err(e) = recover(state, run).await {
            tracing::error!(run_id = %id, error = %e, "could not resume an orphaned run");
        }
    }
}

async fn recover(state: &Arc<AppState>, run: RunRecord) -> Result<(), String> {
    let graph = state
        .graphs
        .get(&run.graph)
        .ok_or_else(|| format!("graph `{}` is not served here", run.graph))?;
    if graph.version != run.graph_version {
        tracing::warn!(run_id = %run.id, recorded = %run.graph_version, current = %graph.version, "resuming with a newer version of the graph");
    }
    let (_, history) = replay::load(&*state.store, run.id)
        .await
        .map_err(|e| e.to_string())?;
    let checkpoints = state
        .store
        .checkpoints(run.id, u32::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let chat_id = run
        .chat_id
        .clone()
        .unwrap_or_else(|| format!("run:{}", run.id));
    let message_id = run
        .message_id
        .clone()
        .unwrap_or_else(|| format!("msg_{}", run.id.simple()));
    let position = match &run.chat_id {
        Some(c) => state
            .store
            .messages(c)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .filter(|m| m.id != message_id)
            .count() as i64,
        None => 0,
    };
    let Some(last) = checkpoints.last() else {
        // It died before its first checkpoint: nothing of it is stored
        // but its input, so it starts over.
        tracing::info!(run_id = %run.id, "restarting an orphaned run that never checkpointed");
        let metadata = super::chat::stream_metadata(
            state,
            run.id,
            run.request_id.as_deref().unwrap_or(""),
            &chat_id,
            &graph,
        );
        let start = RunStart {
            run_id: run.id,
            chat_id,
            user_id: run.user_id.clone(),
            request_id: run.request_id.clone().unwrap_or_default(),
            message_id,
            position,
            metadata,
            graph,
            begin: Begin::Fresh(run.input.clone()),
        };
        return state
            .runs
            .start(state, start)
            .map(|_| ())
            .map_err(|e| format!("{e:?}"));
    };
    let batches: Vec<_> = checkpoints.iter().map(|c| c.to_batch(run.id)).collect();
    let resumed_state =
        rebuild_state(&batches, &graph.state, last.step).map_err(|e| e.to_string())?;
    let last_seq = history.last().map_or(0, |e| e.seq);
    let from = Resume {
        state: resumed_state,
        step: last.step,
        next: last.next.clone(),
        joins: last.joins.clone(),
        last_seq,
    };
    tracing::info!(run_id = %run.id, step = last.step, last_seq, "resuming an orphaned run from its last checkpoint");
    let start = RunStart {
        run_id: run.id,
        chat_id,
        user_id: run.user_id.clone(),
        request_id: run.request_id.clone().unwrap_or_default(),
        message_id,
        position,
        metadata: serde_json::Value::Null,
        graph,
        begin: Begin::Resumed { from, history },
    };
    state
        .runs
        .start(state, start)
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
}
