//! Persisted contracts besides the events themselves: what the executor
//! hands to a checkpoint store at the end of each superstep ([`StepBatch`])
//! and how a run stands ([`RunStatus`]). Stores, replay and recovery read
//! them back, so like events they are serde data: add fields with defaults,
//! never change the meaning of old ones.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Event;
use crate::state::Patch;

/// One task's write, in the order it was applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskWrite {
    /// The task's node.
    pub node: String,
    /// Task index within the step.
    pub task: u32,
    /// The patch.
    pub patch: Patch,
}

/// A task waiting to run in the next step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingTask {
    /// Node id.
    pub node: String,
    /// Map item, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<Value>,
}

/// How a run ended, for the final batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Still running.
    Running,
    /// Reached END.
    Finished,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Paused at an interrupt (a tool approval, a client-side tool, a
    /// question), waiting for a person's answer: nothing runs and nothing
    /// is held in memory until a resume claims it.
    Interrupted,
}

impl RunStatus {
    /// The name stores and the API use.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// What one superstep changed.
#[derive(Clone, Debug)]
pub struct StepBatch {
    /// The run.
    pub run_id: Uuid,
    /// The step (0 = the input, before the first step).
    pub step: u32,
    /// Patches applied in this step, in order.
    pub writes: Vec<TaskWrite>,
    /// Events emitted since the previous batch.
    pub events: Vec<Arc<Event>>,
    /// Tasks of the next step.
    pub next: Vec<PendingTask>,
    /// Per join, the sources that have arrived.
    pub joins: Vec<Vec<String>>,
    /// The full state after this step, when the snapshot rule asks for one
    /// (always at step 0; see the module docs).
    pub snapshot: Option<Value>,
    /// Running, or how the run ended (the final batch).
    pub status: RunStatus,
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// Name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of the arguments (shared: offered on every call).
    pub parameters: Arc<Value>,
    /// The partition the tool belongs to (absent in recordings made
    /// before it was recorded): lets a re-execution tell which offered
    /// tools were, say, the data tools, with no tool server running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}
