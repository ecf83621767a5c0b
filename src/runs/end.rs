//! Recording how a run ended — through any outage of the store.
//!
//! A run's end (its status, usage, the chat's assistant message, the
//! chat's active run) is the one write that must land whatever happens:
//! until it does, the store says the run is `running` and its chat stays
//! busy. So it is retried for as long as the store refuses it with a fault
//! retrying may outlive (the outage policy's transient errors: a database
//! away, a full disk, an I/O error), with a backoff, until it lands or the
//! process shuts down (the run then stays `running` at its last checkpoint
//! and is resumed after the restart, as after a crash).
//!
//! A run whose store gave out mid-run — its events or a checkpoint could
//! not be written within `store_outage_limit` — is failed: its clients'
//! streams have already ended with an `error` (`drive`), and once the store
//! takes writes again its log gets the `run_failed` it could not write then
//! and the run is recorded `failed`, its message as far as it was stored.
//! Unless its lease went to another instance meanwhile (this one could not
//! renew it through the outage): that instance continues the run from its
//! log, and this one writes nothing more of it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::drive::Pumped;
use super::{Alternative, Launch, Runs};
use crate::events::{ErrorInfo, Event, EventKind, now_micros};
use crate::runtime::RunStatus;
use crate::store::{MessageRecord, StoreError, StoreResult, TurnEnd};

/// The first pause between attempts to record an end; it doubles up to
/// [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// The error code of a run failed because its store gave out.
pub(super) const STORE_UNAVAILABLE: &str = "store_unavailable";

/// Runs `write` until it lands, retrying transient failures for as long as
/// they last (see the module docs); a non-transient failure, or shutdown,
/// ends the attempts.
async fn until_stored<T, F, Fut>(runs: &Runs, what: &str, mut write: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StoreResult<T>>,
{
    let mut pause = FIRST_PAUSE;
    loop {
        let error = match write().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() && !runs.shutdown.is_cancelled() => e,
            Err(e) => return Err(e),
        };
        tracing::warn!(error = %error, retry_in_ms = pause.as_millis() as u64, "store unavailable; retrying {what}");
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = runs.shutdown.cancelled() => return Err(error),
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Records a run whose store gave out (`why`) as failed, once the store
/// takes writes again (see the module docs): `failed`, or `None` when
/// it is not this process's to record.
pub(super) async fn record_store_failure(
    runs: &Runs,
    launch: &Launch,
    why: String,
    mut pumped: Pumped,
) -> Option<RunStatus> {
    let run = launch.run_id;
    let ours = until_stored(runs, "the lease of a failed run", || {
        let now = now_micros();
        runs.store
            .acquire_lease(run, &runs.instance, now, runs.lease_until())
    })
    .await;
    match ours {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(run_id = %run, "the run's lease went to another instance during the outage (or it ended); it is not recorded here");
            return None;
        }
        Err(e) => {
            tracing::error!(run_id = %run, error = %e, "could not record a run whose store gave out");
            return None;
        }
    }
    let error = ErrorInfo {
        code: STORE_UNAVAILABLE.into(),
        message: why,
    };
    match until_stored(runs, "a failed run's last event", || {
        log_failure(runs, run, &error)
    })
    .await
    {
        Ok(Some(ev)) => {
            let mut chunks = Vec::new();
            pumped.bridge.on_event(&ev, &mut chunks);
            chunks.iter().for_each(|c| pumped.assembler.push(c));
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!(run_id = %run, error = %e, "could not log the failure of a run whose store gave out");
        }
    }
    record_end(runs, launch, RunStatus::Failed, Some(error), pumped).await;
    Some(RunStatus::Failed)
}

/// Appends `run_failed` after the run's last stored event, unless that
/// is already terminal; the event appended.
async fn log_failure(
    runs: &Runs,
    run: uuid::Uuid,
    error: &ErrorInfo,
) -> StoreResult<Option<Arc<Event>>> {
    let Some(record) = runs.store.get_run(run).await? else {
        return Ok(None);
    };
    let last = match record.last_seq.checked_sub(1) {
        Some(after) => runs.store.events(run, after, 1).await?.pop(),
        None => None,
    };
    if last.as_ref().is_some_and(|e| e.event.is_terminal()) {
        return Ok(None);
    }
    let ev = Arc::new(Event {
        run_id: run,
        seq: record.last_seq + 1,
        at: now_micros(),
        step: last.as_ref().map_or(record.last_step, |e| e.step),
        node: None,
        task: 0,
        event: EventKind::RunFailed {
            error: error.clone(),
        },
    });
    runs.store
        .append_events(run, std::slice::from_ref(&ev))
        .await?;
    Ok(Some(ev))
}

/// Records how the run ended: its status and usage (spent tokens count
/// whatever the outcome), the chat's assistant message and active run — for
/// a chat's run in one transaction ([`ChatStore::end_turn`]) — retried
/// through outages (see the module docs).
///
/// [`ChatStore::end_turn`]: crate::store::ChatStore::end_turn
pub(super) async fn record_end(
    runs: &Runs,
    launch: &Launch,
    status: RunStatus,
    error: Option<ErrorInfo>,
    pumped: Pumped,
) {
    if let Some(alt) = &launch.alternative
        && status == RunStatus::Finished
        && let Err(e) = until_stored(runs, "a fork's answer", || {
            add_alternative(runs, launch, alt, &pumped)
        })
        .await
    {
        tracing::error!(error = %e, "could not store the fork's answer as an alternative");
    }
    let ended = match &launch.chat {
        Some(chat) => {
            let end = TurnEnd {
                run_id: launch.run_id,
                status,
                error,
                usage: pumped.usage,
                message: MessageRecord {
                    chat_id: chat.chat_id.clone(),
                    id: chat.message_id.clone(),
                    role: "assistant".into(),
                    // A failed run's half answer is not stored as an answer.
                    parts: Value::Array(pumped.assembler.stored_parts()),
                    metadata: pumped.assembler.metadata(),
                    position: chat.position,
                    created_at: now_micros(),
                },
                // A paused run stays the chat's active run: the chat's next
                // request answers it (or sets it aside).
                release: status != RunStatus::Interrupted,
            };
            until_stored(runs, "the end of a run", || {
                runs.store.end_turn(end.clone())
            })
            .await
        }
        None => {
            until_stored(runs, "the end of a run", || {
                runs.store
                    .finish_run(launch.run_id, status, error.clone(), pumped.usage)
            })
            .await
        }
    };
    if let Err(e) = ended {
        tracing::error!(error = %e, "could not record the end of the run");
    }
    runs.observer.spent(&launch.user_id, pumped.usage);
}

/// Adds an attached fork's answer to the alternatives of the message it
/// forks (`metadata.alternatives`: `{id, runId, parts, metadata, createdAt}`,
/// oldest first); a chat or message deleted meanwhile stays deleted.
async fn add_alternative(
    runs: &Runs,
    launch: &Launch,
    alt: &Alternative,
    pumped: &Pumped,
) -> Result<(), StoreError> {
    let messages = runs.store.messages(&alt.chat_id).await?;
    let Some(mut message) = messages.into_iter().find(|m| m.id == alt.of) else {
        return Ok(());
    };
    let entry = serde_json::json!({
        "id": alt.id,
        "runId": launch.run_id,
        "parts": pumped.assembler.stored_parts(),
        "metadata": pumped.assembler.metadata(),
        "createdAt": now_micros() / 1000,
    });
    if !message.metadata.is_object() {
        message.metadata = Value::Object(serde_json::Map::new());
    }
    if let Some(meta) = message.metadata.as_object_mut() {
        let list = meta
            .entry("alternatives")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        if let Some(list) = list.as_array_mut() {
            // Recovery may finish a fork twice: one entry per fork.
            list.retain(|a| a["id"] != alt.id.as_str());
            list.push(entry);
        }
    }
    runs.store.upsert_message(message).await
}
