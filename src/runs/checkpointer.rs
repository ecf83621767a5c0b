//! [`LogCheckpointer`]: the executor's checkpoint hook on a [`Store`], and
//! what it does while the database is away.
//!
//! A database restart, a failover or a network blip makes appends fail with
//! [`StoreError::Unavailable`] for a few seconds. Failing the run for that
//! would turn every maintenance window into failed chats, so the
//! checkpointer retries transient failures with exponential backoff (100 ms
//! doubling to 2 s) for up to an *outage limit* (30 s by default), then gives
//! up with an error saying how long the store has been unavailable. The
//! executor waits for the save, so meanwhile the run just pauses. The
//! outage is timed from the first failure of any write of the run (clones
//! share the clock: the run's event pump and its checkpoints), so writes
//! queued behind one another do not each wait the limit anew. Other
//! errors (a conflict, data that cannot be encoded) are not retried: a retry
//! cannot fix them.
//!
//! # Lost replies
//! An append can commit and its reply still be lost: the connection drops
//! between the commit and the answer. The retry then finds the batch's events
//! already stored and fails with [`StoreError::Conflict`]. So a conflict on a
//! *retried* append is checked by reading back the batch's last event: if it
//! is stored exactly as sent, the earlier attempt landed (an append is
//! atomic, so the whole batch did) and the save succeeds. Anything else is a
//! real conflict — another writer took those seqs — and fails.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::events::{Event, RunStatus};
use crate::runtime::{CheckpointError, Checkpointer, StepBatch};
use crate::store::{Store, StoreError, StoreResult};

/// How long [`LogCheckpointer`] retries by default before giving up.
pub(crate) const DEFAULT_OUTAGE_LIMIT: Duration = Duration::from_secs(30);

/// The first pause between attempts; it doubles up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(2);

/// Stores each step in a [`Store`]'s event log, retrying through outages
/// (see the module docs).
#[derive(Clone)]
pub struct LogCheckpointer {
    store: Arc<dyn Store>,
    outage_limit: Duration,
    /// The highest event seq stored by someone else (the run's pump), when
    /// events are stored as they are emitted.
    events_stored: Option<watch::Receiver<u64>>,
    /// Since when writes have failed (shared by clones), `None` while the
    /// last write succeeded.
    failing_since: Arc<Mutex<Option<Instant>>>,
    /// Marks the run as ending before its last step is written.
    end_mark: Option<super::held::EndMark>,
}

impl std::fmt::Debug for LogCheckpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogCheckpointer")
            .field("backend", &self.store.backend())
            .field("outage_limit", &self.outage_limit)
            .finish()
    }
}

impl LogCheckpointer {
    /// A checkpointer over `store` with the default outage limit (30 s).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            outage_limit: DEFAULT_OUTAGE_LIMIT,
            events_stored: None,
            failing_since: Arc::default(),
            end_mark: None,
        }
    }

    /// How long a save keeps retrying an unavailable store before it fails.
    /// Zero means a single attempt.
    #[must_use]
    pub fn with_outage_limit(mut self, limit: Duration) -> Self {
        self.outage_limit = limit;
        self
    }

    /// Events are stored by another writer as they are emitted (the run's
    /// pump, with `stream_durability = "visible"`), which reports the highest
    /// seq stored on `stored`: each save waits until its step's events are
    /// in, then stores only the checkpoint. One writer per event keeps the
    /// log's seqs in order.
    #[must_use]
    pub fn after_events(mut self, stored: watch::Receiver<u64>) -> Self {
        self.events_stored = Some(stored);
        self
    }

    /// Marks the run as ending (`held`) before its last step is written.
    #[must_use]
    pub(super) fn marking_end(mut self, mark: super::held::EndMark) -> Self {
        self.end_mark = Some(mark);
        self
    }

    /// The outage limit.
    pub fn outage_limit(&self) -> Duration {
        self.outage_limit
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Appends `batch`, retrying transient failures up to the outage limit.
    ///
    /// # Errors
    /// A non-transient store error, a real conflict, or an outage longer than
    /// the limit ("the store has been unavailable for 30s: …").
    pub async fn save_batch(&self, batch: &StepBatch) -> Result<(), CheckpointError> {
        self.save_batches(std::slice::from_ref(batch)).await
    }

    /// Appends consecutive `batches` of one run in one
    /// [`EventLog::append_steps`](crate::store::EventLog::append_steps), retrying as
    /// [`LogCheckpointer::save_batch`] does.
    ///
    /// # Errors
    /// As [`LogCheckpointer::save_batch`].
    pub async fn save_batches(&self, batches: &[StepBatch]) -> Result<(), CheckpointError> {
        let Some(batch) = batches.last() else {
            return Ok(());
        };
        let last = batches.iter().flat_map(|b| &b.events).max_by_key(|e| e.seq);
        if let Some(mark) = &self.end_mark
            && batches.iter().any(|b| b.status != RunStatus::Running)
        {
            mark.mark();
        }
        self.retrying(batch.run_id, batch.step, last.map(|e| &**e), || {
            self.store.append_steps(batches)
        })
        .await
    }

    /// Appends events of `run` without a checkpoint
    /// ([`EventLog::append_events`](crate::store::EventLog::append_events)),
    /// retrying as [`LogCheckpointer::save_batch`] does.
    ///
    /// # Errors
    /// As [`LogCheckpointer::save_batch`].
    pub async fn save_events(
        &self,
        run: uuid::Uuid,
        events: &[Arc<Event>],
    ) -> Result<(), CheckpointError> {
        let Some(last) = events.last() else {
            return Ok(());
        };
        self.retrying(run, last.step, Some(&**last), || {
            self.store.append_events(run, events)
        })
        .await
    }

    /// Runs `append` until it succeeds, retrying transient failures up to
    /// the outage limit; a conflict on a retry is success if `last` (the
    /// append's last event) is stored exactly as sent (a lost reply).
    async fn retrying<'s>(
        &'s self,
        run: uuid::Uuid,
        step: u32,
        last: Option<&Event>,
        append: impl Fn() -> BoxFuture<'s, StoreResult<()>>,
    ) -> Result<(), CheckpointError> {
        let mut delay = FIRST_DELAY;
        let mut retried = false;
        loop {
            let error = match append().await {
                Ok(()) => {
                    self.outage(false);
                    return Ok(());
                }
                Err(StoreError::Conflict(conflict)) if retried => {
                    match self.already_stored(run, last).await {
                        Ok(true) => {
                            tracing::info!(run_id = %run, step,
                                "an earlier attempt stored the batch (its reply was lost)");
                            return Ok(());
                        }
                        Ok(false) => {
                            return Err(CheckpointError(
                                StoreError::Conflict(conflict).to_string(),
                            ));
                        }
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            if !error.is_transient() {
                return Err(CheckpointError(error.to_string()));
            }
            let elapsed = self.outage(true).elapsed();
            if elapsed >= self.outage_limit {
                return Err(CheckpointError(format!(
                    "the store has been unavailable for {}: {error}",
                    human(self.outage_limit)
                )));
            }
            let pause = delay.min(self.outage_limit - elapsed);
            tracing::warn!(run_id = %run, step, error = %error,
                retry_in_ms = pause.as_millis() as u64, "store unavailable; retrying the checkpoint");
            tokio::time::sleep(pause).await;
            delay = (delay * 2).min(MAX_DELAY);
            retried = true;
        }
    }

    /// Notes a write's outcome; since when writes have failed (now, if
    /// the last one succeeded).
    fn outage(&self, failed: bool) -> Instant {
        let mut since = self
            .failing_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !failed {
            *since = None;
            return Instant::now();
        }
        *since.get_or_insert_with(Instant::now)
    }

    /// Whether `last` is stored exactly as sent.
    async fn already_stored(&self, run: uuid::Uuid, last: Option<&Event>) -> StoreResult<bool> {
        let Some(last) = last else {
            return Ok(false);
        };
        let Some(after) = last.seq.checked_sub(1) else {
            return Ok(false);
        };
        let stored = self.store.events(run, after, 1).await?;
        Ok(stored.first().is_some_and(|e| e == last))
    }

    /// With [`LogCheckpointer::after_events`]: waits until the batches'
    /// events are stored, then drops them from the batches (only the
    /// checkpoints are left to write).
    async fn gate(&self, batches: &mut [StepBatch]) -> Result<(), CheckpointError> {
        let Some(stored) = &self.events_stored else {
            return Ok(());
        };
        let need = batches
            .iter()
            .flat_map(|b| &b.events)
            .map(|e| e.seq)
            .max()
            .unwrap_or(0);
        stored
            .clone()
            .wait_for(|s| *s >= need)
            .await
            .map_err(|_| CheckpointError("the run's events could not be stored".into()))?;
        for b in batches {
            b.events.clear();
        }
        Ok(())
    }
}

impl Checkpointer for LogCheckpointer {
    fn save(&self, mut batch: StepBatch) -> BoxFuture<'_, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.gate(std::slice::from_mut(&mut batch)).await?;
            self.save_batch(&batch).await
        })
    }

    fn save_steps(
        &self,
        mut batches: Vec<StepBatch>,
    ) -> BoxFuture<'_, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.gate(&mut batches).await?;
            self.save_batches(&batches).await
        })
    }
}

/// `30s`, `1500ms`.
fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_people_write_them() {
        assert_eq!(human(Duration::from_secs(30)), "30s");
        assert_eq!(human(Duration::from_millis(1500)), "1500ms");
        assert_eq!(human(Duration::ZERO), "0s");
    }
}
