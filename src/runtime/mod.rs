//! The executor: supersteps over a compiled graph.
//!
//! Each superstep runs every ready task concurrently against the same state
//! snapshot, applies their patches in task order (never completion order),
//! then evaluates each finished node's transitions to find the next step's
//! tasks, until no task is left (END). Everything it does is emitted as
//! events; the checkpoint hook receives each step's patches and events.
//!
//! Concurrency: a step's tasks are polled together inside the run's own
//! task (no spawning per node), which is what keeps a node step under a
//! microsecond. Node work is I/O-bound (models, tools); a node that needs CPU
//! for long should move it to `spawn_blocking`.

mod breaks;
mod checkpoint;
mod executor;
mod routing;
mod task;

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[allow(unused_imports)]
use crate::events::EventKind;
use crate::events::{ErrorInfo, Event, ForkOrigin, Usage};
use crate::nodes::{Graph, NodeError};
use crate::state::{DynState, StateError};

pub use crate::nodes::Services;

pub use checkpoint::{
    CheckpointError, Checkpointer, MemoryCheckpointer, PendingTask, RunStatus, StepBatch,
    TaskWrite, rebuild_state,
};
pub(crate) use checkpoint::{SNAPSHOT_FACTOR, json_weight};
pub use executor::{Resume, resume, run};
pub(crate) use routing::next_after;

/// Options of one run.
#[derive(Clone)]
pub struct RunOptions {
    /// The run's id.
    pub run_id: Uuid,
    /// Where events go (bounded; a full channel slows the run down).
    pub events: Option<mpsc::Sender<Arc<Event>>>,
    /// Cancels the run.
    pub cancel: CancellationToken,
    /// Receives each step's batch.
    pub checkpointer: Option<Arc<dyn Checkpointer>>,
    /// Snapshot cadence: every this many steps a full snapshot is taken if
    /// the patches since the last one outweigh it (the snapshot rule of the checkpoint module).
    pub snapshot_every: u32,
    /// Set when this run is a fork.
    pub forked_from: Option<ForkOrigin>,
    /// Stream settings recorded in `run_started` (see [`EventKind::RunStarted`]).
    pub stream: Option<Value>,
    /// When a step's checkpoint must be stored.
    pub durability: Durability,
    /// Set when a paused run continues: the answers to its interrupts
    /// (by id), recorded first as `run_resumed` and given to its nodes.
    pub answers: Option<std::collections::BTreeMap<String, Value>>,
    /// Events of this run already in the log that it will emit again (crash
    /// recovery: the step that was interrupted, or the whole run when it
    /// never checkpointed). Re-emitted ones are not stamped or sent twice;
    /// see [`crate::events::EventSink::with_logged`].
    pub logged: Vec<Event>,
    /// Tokens the run spent in earlier executions whose events are not in
    /// `logged` (a continuation after a pause, a recovery from a
    /// checkpoint): `run_finished` reports the run's total.
    pub spent_before: Usage,
    /// The run's breakpoints (`None`: it never pauses at one, though it
    /// applies the edits its recorded answers made).
    pub breakpoints: Option<crate::events::Breakpoints>,
    /// Whether `breakpoints` are new with this execution (recorded as
    /// `breakpoints_set`), rather than read back from the run's log.
    pub record_breakpoints: bool,
}

/// When checkpoints are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// A step is stored before the next starts (default): a crash loses at
    /// most the step in progress.
    #[default]
    Sync,
    /// Stored in the background while the next step runs, at most one step
    /// behind: less latency per step, a crash may lose one more step.
    Async,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            run_id: Uuid::now_v7(),
            events: None,
            cancel: CancellationToken::new(),
            checkpointer: None,
            snapshot_every: 10,
            forked_from: None,
            stream: None,
            durability: Durability::Sync,
            answers: None,
            logged: Vec::new(),
            spent_before: Usage::default(),
            breakpoints: None,
            record_breakpoints: false,
        }
    }
}

/// A finished run.
#[derive(Debug)]
pub struct RunOutcome {
    /// The run id.
    pub run_id: Uuid,
    /// The final state.
    pub state: Box<dyn DynState>,
    /// Supersteps executed.
    pub steps: u32,
    /// Tokens used.
    pub usage: Usage,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The input did not decode as the graph's state type.
    #[error("invalid input: {0}")]
    Input(StateError),
    /// Too many supersteps.
    #[error("recursion limit of {limit} steps reached; the path that looped: {path}")]
    RecursionLimit {
        /// The limit.
        limit: u32,
        /// The repeating path.
        path: String,
    },
    /// A node failed (after its retries).
    #[error("node `{node}` failed: {source}")]
    Node {
        /// The node.
        node: String,
        /// Its error.
        source: NodeError,
    },
    /// Patches could not be applied.
    #[error(transparent)]
    State(StateError),
    /// A route's or map edge's expression failed.
    #[error("node `{node}`: the expression of its outgoing edge failed: {message}")]
    Map {
        /// The node whose edge it is.
        node: String,
        /// Why.
        message: String,
    },
    /// A conditional edge had no target for the value.
    #[error("node `{node}`: no route for `{field}` = {value}")]
    NoRoute {
        /// The node.
        node: String,
        /// The field.
        field: String,
        /// The value found.
        value: String,
    },
    /// The run was cancelled.
    #[error("run cancelled")]
    Cancelled,
    /// The run paused at interrupts (not a failure): it is stored as
    /// `interrupted` and continues when they are answered.
    #[error("run paused for {} answer(s) from a person", .0.len())]
    Interrupted(Vec<crate::events::Interrupt>),
    /// The checkpoint store failed.
    #[error(transparent)]
    Checkpoint(CheckpointError),
}

impl RunError {
    /// Stable error code for events and APIs.
    pub fn code(&self) -> &'static str {
        match self {
            RunError::Input(_) => "invalid_input",
            RunError::RecursionLimit { .. } => "recursion_limit",
            RunError::Node { .. } => "node_failed",
            RunError::State(StateError::Conflict { .. }) => "write_conflict",
            RunError::State(_) => "invalid_patch",
            RunError::NoRoute { .. } => "no_route",
            RunError::Map { .. } => "map_failed",
            RunError::Cancelled => "cancelled",
            RunError::Interrupted(_) => "interrupted",
            RunError::Checkpoint(_) => "checkpoint_failed",
        }
    }

    /// The error as stored in `run_failed`.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo {
            code: self.code().into(),
            message: self.to_string(),
        }
    }
}

/// Starts a run and returns its input as JSON for `run_started`.
pub(crate) fn input_state(graph: &Graph, input: &Value) -> Result<Box<dyn DynState>, RunError> {
    graph.state.from_json(input).map_err(RunError::Input)
}
