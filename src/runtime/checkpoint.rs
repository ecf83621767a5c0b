//! The checkpoint hook: each superstep's patches and events go to a store.
//!
//! The executor hands a [`StepBatch`] to a [`Checkpointer`] at the end of
//! every superstep. The run's input is a batch too (step 0, with
//! `run_started`), but it is handed over together with the first
//! superstep's ([`Checkpointer::save_steps`]), and the last step's batch is
//! the run's final batch, so a run costs exactly one write per superstep. A
//! batch holds what changed — the patches — plus sometimes a full snapshot,
//! the events of the step, and the frontier (the next step's tasks and join
//! progress), which is all a run needs to resume or fork from that step.
//!
//! # When a snapshot is taken
//! Always for the input (step 0). After that, a step whose number is a
//! multiple of `snapshot_every` gets one only if the patches written since
//! the last snapshot weigh at least [`SNAPSHOT_FACTOR`] times that snapshot
//! (by [`json_weight`]); the run's final batch gets one under the same
//! weight rule whatever its step. A fixed cadence alone makes a state that
//! grows (a chat history) cost quadratic bytes — 200 steps appending 1 KB
//! each write 2.6 MB of snapshots every 10 steps. With the weight rule the
//! snapshots grow geometrically (each at least 3x the one before), so
//! together they weigh at most 1.5x the newest, which is at most the final
//! state: between 0.5x and 1.5x the patches, by where the run stops (0.6x,
//! 0.35 MB in all, for that run). Loading any step still reads one snapshot
//! plus at most twice its weight in patches (plus one cadence interval).
//! Small states, whose patches outweigh them quickly, keep the plain cadence.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use futures::future::BoxFuture;
use serde_json::Value;
use uuid::Uuid;

pub use crate::events::{PendingTask, RunStatus, StepBatch, TaskWrite};
use crate::state::{DynState, StateType};

/// How much heavier than the last snapshot the patches since it must be
/// before the next one is taken (see the module docs).
pub(crate) const SNAPSHOT_FACTOR: usize = 2;

/// The approximate size of `v` as JSON text, without serializing it: the
/// snapshot rule needs weights on every step, and a walk costs a fraction of
/// an encoding. Exact for strings without escapes, close for numbers.
pub(crate) fn json_weight(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|i| json_weight(i) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + json_weight(v))
                .sum::<usize>()
        }
    }
}

/// Errors from a checkpoint store.
#[derive(Debug, Clone, thiserror::Error)]
#[error("checkpoint store: {0}")]
pub struct CheckpointError(pub String);

/// Where the executor puts each step.
pub trait Checkpointer: Send + Sync {
    /// Stores one batch. The executor waits for it before the next step.
    fn save(&self, batch: StepBatch) -> BoxFuture<'_, Result<(), CheckpointError>>;

    /// Stores consecutive batches of one run, in order. The executor sends
    /// two at once when the input checkpoint (step 0) rides with the first
    /// superstep's; a checkpointer over a database stores them in one
    /// transaction and round trip. By default, one [`Checkpointer::save`]
    /// after the other.
    fn save_steps(&self, batches: Vec<StepBatch>) -> BoxFuture<'_, Result<(), CheckpointError>> {
        Box::pin(async move {
            for b in batches {
                self.save(b).await?;
            }
            Ok(())
        })
    }
}

/// Keeps every batch in memory (tests, and runs without a store).
#[derive(Debug, Default)]
pub struct MemoryCheckpointer {
    runs: Mutex<HashMap<Uuid, Vec<StepBatch>>>,
}

impl MemoryCheckpointer {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The batches of a run, in order.
    pub fn batches(&self, run: Uuid) -> Vec<StepBatch> {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&run)
            .cloned()
            .unwrap_or_default()
    }

    /// The state after `step`: the newest snapshot at or before it plus the
    /// patches after the snapshot.
    ///
    /// # Errors
    /// No snapshot, or a patch that no longer applies.
    pub fn state_at(
        &self,
        run: Uuid,
        state: &StateType,
        step: u32,
    ) -> Result<Box<dyn DynState>, CheckpointError> {
        let batches = self.batches(run);
        rebuild_state(&batches, state, step)
    }
}

/// Rebuilds the state after `step` from batches (snapshot + patches).
///
/// # Errors
/// No snapshot at or before `step`, or a patch that no longer applies.
pub fn rebuild_state(
    batches: &[StepBatch],
    state: &StateType,
    step: u32,
) -> Result<Box<dyn DynState>, CheckpointError> {
    let base = batches
        .iter()
        .filter(|b| b.step <= step && b.snapshot.is_some())
        .max_by_key(|b| b.step)
        .ok_or_else(|| CheckpointError(format!("no snapshot at or before step {step}")))?;
    let snapshot = base.snapshot.as_ref().map_or(Value::Null, Clone::clone);
    let mut s = state
        .from_json(&snapshot)
        .map_err(|e| CheckpointError(e.to_string()))?;
    for b in batches
        .iter()
        .filter(|b| b.step > base.step && b.step <= step)
    {
        for w in &b.writes {
            for (field, value) in w.patch.iter() {
                let id = s
                    .schema()
                    .field(field)
                    .ok_or_else(|| CheckpointError(format!("unknown field `{field}`")))?;
                s.apply(id, value)
                    .map_err(|e| CheckpointError(e.to_string()))?;
            }
        }
    }
    Ok(s)
}

impl Checkpointer for MemoryCheckpointer {
    fn save(&self, batch: StepBatch) -> BoxFuture<'_, Result<(), CheckpointError>> {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(batch.run_id)
            .or_default()
            .push(batch);
        Box::pin(async { Ok(()) })
    }
}
