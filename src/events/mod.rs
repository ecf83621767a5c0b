//! The event stream: one tagged enum, persisted as a contract.
//!
//! Every run produces a totally ordered sequence of [`Event`]s. The SSE
//! bridge, the store, resume, replay and the CLI all read this one stream, so
//! its serialized form is a contract: variants are added, never changed in
//! meaning, and readers skip variants they do not know ([`EventKind::Unknown`]).
//! The format version is carried by [`EventKind::RunStarted`].

mod contracts;
mod sink;

pub use sink::now_micros;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::state::Patch;

pub use contracts::{PendingTask, RunStatus, StepBatch, TaskWrite, ToolDef};
pub use sink::{EventSink, NodeEvents};

/// Version of the serialized event format, stored in `run_started`.
pub(crate) const EVENT_FORMAT: u32 = 1;

/// The name of the custom event saying an answer was cut short (data
/// `{node, reason}`, reason `length`, `timeout` or `error`): the stream
/// shows it as a `data-truncated` part and finishes with reason `length`.
pub(crate) const TRUNCATED: &str = "truncated";

/// The name of the custom event saying the model provider refused a
/// request under its content policy (data `{node, message}`): the stream
/// shows it as a `data-refusal` part, the node's answer says so plainly,
/// and the stream finishes with reason `content-filter`.
pub(crate) const REFUSAL: &str = "refusal";

/// One event with its envelope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The run it belongs to.
    pub run_id: Uuid,
    /// Position in the run's stream, from 1, without gaps. SSE `id:`.
    pub seq: u64,
    /// Wall-clock time, microseconds since the Unix epoch.
    pub at: u64,
    /// Superstep (0 before the first step).
    pub step: u32,
    /// The node that emitted it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Arc<str>>,
    /// Task index within the step (map fan-out item), 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub task: u32,
    /// What happened.
    pub event: EventKind,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// Token counts reported by a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
    /// Of the prompt tokens, those served from the provider's prompt cache
    /// (billed lower; absent from older recordings).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub cached_tokens: u64,
    /// Of the completion tokens, those spent on hidden reasoning.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub reasoning_tokens: u64,
    /// Of the prompt tokens, those written to the provider's prompt cache
    /// (Anthropic bills them higher than plain input; absent from older
    /// recordings).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub cache_write_tokens: u64,
    /// What the call cost in billionths of a US dollar, at the prices the
    /// configuration gives its model (0 when it gives none).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub cost_nano_usd: u64,
}

fn is_zero64(v: &u64) -> bool {
    *v == 0
}

impl Usage {
    /// Prompt plus completion tokens.
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    /// The cost in US dollars (see [`Usage::cost_nano_usd`]).
    pub fn cost_usd(&self) -> f64 {
        self.cost_nano_usd as f64 / 1e9
    }

    /// Whether no token was counted (such usage is not written out).
    pub fn is_zero(&self) -> bool {
        self.prompt_tokens == 0 && self.completion_tokens == 0
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.prompt_tokens += rhs.prompt_tokens;
        self.completion_tokens += rhs.completion_tokens;
        self.cached_tokens += rhs.cached_tokens;
        self.reasoning_tokens += rhs.reasoning_tokens;
        self.cache_write_tokens += rhs.cache_write_tokens;
        self.cost_nano_usd += rhs.cost_nano_usd;
    }
}

/// A tool call as the model asked for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The model's id for the call.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model wrote them (JSON text, possibly invalid).
    pub arguments: String,
}

/// Everything a model call produced; recorded so a run can be re-executed
/// without the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmOutput {
    /// Text content.
    pub text: String,
    /// Reasoning text, for models that stream it separately.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// Tool calls requested.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRecord>,
    /// Why generation stopped: `stop`, `length`, `tool_calls`, `content_filter`.
    pub finish_reason: String,
}

/// A tool failure as given back to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolFailure {
    /// `validation_error`, `not_found`, `timeout`, `not_allowed` or `execution_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What went wrong, for the model and the log.
    pub message: String,
    /// Structured details (e.g. the available choices).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// A failure summary safe to persist and show to the operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Stable machine-readable code, e.g. `recursion_limit`.
    pub code: String,
    /// Human-readable message.
    pub message: String,
}

/// Where a forked run came from: the parent, the step, the node and the
/// edit (the last three are absent in runs forked before they were
/// recorded).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The parent run.
    pub run_id: Uuid,
    /// The step forked: the one whose node(s) the edit comes after, or the
    /// one the node re-runs in (`before`).
    pub step: u32,
    /// Whether the edit comes after the step's node(s) or before one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ForkMode>,
    /// The node(s) the edit comes after, or the node re-run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// The fields edited and their values.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub set: serde_json::Map<String, Value>,
    /// When the fork is attached to its parent's chat: the assistant message
    /// its answer is an alternative of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alternative_of: Option<String>,
}

/// Where a fork's edit goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkMode {
    /// As if the step's node had written it (through the fields'
    /// reducers); what runs next is routed again from the edited state.
    After,
    /// Into the state the node saw (fields replaced); the node runs again.
    Before,
}

/// The tasks a run starts with when it does not start at the graph's entry
/// (a fork): the step it continues after, its next tasks and join progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Frontier {
    /// The last step done before the run's first.
    pub step: u32,
    /// Tasks of the next step.
    pub next: Vec<PendingTask>,
    /// Per join, sources that have arrived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joins: Vec<Vec<String>>,
}

/// A point where a run waits for a person (see [`EventKind::RunInterrupted`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// Unique within the run; the answer names it. For a tool approval it
    /// is the AI SDK's `approvalId`, for a client-side tool the tool call id.
    pub id: String,
    /// The node (and task) that asked.
    pub node: String,
    /// Its step.
    pub step: u32,
    /// Its task.
    #[serde(default)]
    pub task: u32,
    /// When the wait lapses and the run fails, µs since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// What is asked.
    #[serde(flatten)]
    pub ask: Ask,
}

/// What an [`Interrupt`] asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Ask {
    /// Whether a tool call may run. Answer: `{"approved": bool, "reason"?: string}`.
    Approval {
        /// The tool call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Its arguments.
        args: Value,
    },
    /// The output of a tool the front end executes. Answer:
    /// `{"output": any}` or `{"error": string}`.
    ClientTool {
        /// The tool call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Its arguments.
        args: Value,
    },
    /// A question whose answer is written into a state field. Answer: a
    /// value of the field's type.
    Question {
        /// The question, rendered from the state.
        question: String,
        /// The field the answer goes to.
        field: String,
        /// JSON Schema of the answer (the field's type).
        schema: Value,
        /// Suggested answers, if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        options: Vec<Value>,
    },
    /// A breakpoint: the run stopped between two steps, as asked for when
    /// it started or was resumed (see [`Breakpoints`]). Answer:
    /// `{"action": "continue"|"step", "set"?: {field: value}}`.
    Breakpoint {
        /// `before` a step that runs a breakpoint node, `after` a step that
        /// ran one, or `step` after one step taken with `action: step`.
        when: String,
        /// The breakpoint nodes that matched (for `step`: those of `next`).
        nodes: Vec<String>,
        /// The nodes of the step about to run (empty at the end of the run).
        next: Vec<String>,
    },
}

/// Where a run pauses between steps: before a step that would run one of
/// `before`, after a step that ran one of `after` (node ids). Set per run,
/// recorded as [`EventKind::BreakpointsSet`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breakpoints {
    /// Pause before these nodes run.
    #[serde(default)]
    pub before: Vec<String>,
    /// Pause after these nodes ran.
    #[serde(default)]
    pub after: Vec<String>,
}

impl Breakpoints {
    /// Whether none are set.
    pub fn is_empty(&self) -> bool {
        self.before.is_empty() && self.after.is_empty()
    }
}

impl Interrupt {
    /// One line saying what it waits for (timelines, logs).
    pub fn summary(&self) -> String {
        match &self.ask {
            Ask::Approval { tool, args, .. } => {
                format!("{}: approval of {tool}({args})", self.id)
            }
            Ask::ClientTool { tool, args, .. } => {
                format!("{}: the output of client tool {tool}({args})", self.id)
            }
            Ask::Question {
                question, field, ..
            } => format!("{}: an answer to {question:?} (into `{field}`)", self.id),
            Ask::Breakpoint { when, nodes, .. } => {
                format!("{}: a breakpoint {when} {}", self.id, nodes.join(", "))
            }
        }
    }

    /// The tool call this interrupt is about (approvals, client tools).
    pub fn call_id(&self) -> Option<&str> {
        match &self.ask {
            Ask::Approval { call_id, .. } | Ask::ClientTool { call_id, .. } => Some(call_id),
            Ask::Question { .. } | Ask::Breakpoint { .. } => None,
        }
    }
}

/// What [`EventKind::RunStarted`] records. Boxed so that an [`Event`]
/// is sized by its common kinds (a token), not by this one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStart {
    /// Graph id (file stem).
    pub graph: String,
    /// Content hash of the graph file and prompts the run used.
    pub graph_version: String,
    /// The input state (shared with the caller, which built it).
    pub input: Arc<Value>,
    /// `EVENT_FORMAT` at the time of writing.
    pub format: u32,
    /// Set when this run was forked from another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// Where a fork starts (its state is `input`); absent for a run
    /// that starts at the graph's entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontier: Option<Frontier>,
    /// How the run was streamed to a client (message id, metadata,
    /// surfaces), so a replay can reproduce the stream exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<Value>,
    /// The user the run acts for (bound tool arguments read it as
    /// `user.id`), so a re-execution acts for the same user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// What [`EventKind::LlmStarted`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmStart {
    /// Call number within the task, from 0.
    pub call: u32,
    /// Model role from the graph file.
    pub role: Arc<str>,
    /// Model name actually used.
    pub model: String,
    /// Fingerprint of the request (messages, tools, format), to detect
    /// when a re-execution asks something different.
    pub request: String,
}

/// What [`EventKind::LlmFinished`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmFinish {
    /// The call.
    pub call: u32,
    /// What it produced (recorded for re-execution).
    pub output: LlmOutput,
    /// Tokens used.
    pub usage: Usage,
    /// Wall time.
    pub duration_us: u64,
}

/// What [`EventKind::LlmFailed`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmFailure {
    /// The call.
    pub call: u32,
    /// What went wrong.
    pub error: String,
    /// Tokens the model reported before it failed (a stream that broke
    /// after its usage chunk): they were spent and count for the run.
    #[serde(default, skip_serializing_if = "Usage::is_zero")]
    pub usage: Usage,
}

/// What [`EventKind::ToolCallReady`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolReady {
    /// The call id.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// Parsed arguments.
    pub args: Value,
}

/// What [`EventKind::ToolResult`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolReturn {
    /// The call id.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// The result given to the model.
    pub output: Value,
    /// Served from the result cache.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// Display-ready: shown to the user verbatim (pass-through).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub display: bool,
    /// Wall time.
    pub duration_us: u64,
}

/// What [`EventKind::ToolError`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolFault {
    /// The call id.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// The structured failure.
    pub error: ToolFailure,
}

/// What [`EventKind::ToolDenied`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDenial {
    /// The call id.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// The reason given, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What [`EventKind::Custom`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CustomData {
    /// Data name.
    pub name: String,
    /// Payload.
    pub data: Value,
    /// The UI part's id, when the data replaces an earlier part with
    /// the same id (progress); otherwise one part per node task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Shown while streaming but not kept in the stored message
    /// (progress that means nothing once the answer is there).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transient: bool,
}

/// What [`EventKind::Source`] records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceRef {
    /// The number the answer cites it by (`[2]` → `2`).
    pub source_id: String,
    /// Where it is.
    pub url: String,
    /// Its title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// What happened. Serialized with a `type` tag in snake_case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The run began (boxed: the largest variant, once per run; every
    /// other event stays small, see [`RunStart`]).
    RunStarted(Box<RunStart>),
    /// The run reached END.
    RunFinished {
        /// Supersteps executed.
        steps: u32,
        /// Tokens used by all model calls.
        usage: Usage,
    },
    /// The run stopped with an error.
    RunFailed {
        /// What went wrong.
        error: ErrorInfo,
    },
    /// The run was cancelled before it finished.
    RunCancelled {
        /// Why (e.g. `stop requested`).
        reason: String,
    },
    /// The run paused for a person: the step in progress stopped at these
    /// interrupts, nothing of it was applied, and the run waits (status
    /// `interrupted`) until they are answered.
    RunInterrupted {
        /// What it waits for.
        interrupts: Vec<Interrupt>,
    },
    /// The run continues after a pause, with the answers to its
    /// interrupts (by interrupt id). A re-execution reads them from here.
    RunResumed {
        /// Interrupt id → the answer.
        answers: std::collections::BTreeMap<String, Value>,
    },
    /// The run's breakpoints from here on (set when it started or was
    /// resumed; empty lists clear them).
    BreakpointsSet {
        /// The breakpoints.
        breakpoints: Breakpoints,
    },
    /// A task started (or restarted after a retry).
    NodeStarted {
        /// 1 for the first attempt.
        attempt: u32,
        /// The map item this task received, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item: Option<Value>,
    },
    /// A task finished; its patch is applied at the end of the step.
    NodeFinished {
        /// Its writes.
        patch: Patch,
        /// Wall time of the successful attempt.
        duration_us: u64,
    },
    /// An attempt failed and will be retried.
    NodeRetrying {
        /// The attempt that failed.
        attempt: u32,
        /// Why it failed.
        error: String,
        /// Backoff before the next attempt.
        delay_ms: u64,
    },
    /// A task failed for good; the run fails.
    NodeFailed {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        error: String,
    },
    /// A model call began (boxed, as are the other kinds below whose
    /// fields pass 48 bytes: an [`Event`] is sized by its largest kind).
    LlmStarted(Box<LlmStart>),
    /// The tools a model-calling node offers its model (once per task,
    /// before its first call): recorded so that a re-execution offers the
    /// same ones when the tools' providers (an MCP server, say) are absent.
    ToolsOffered {
        /// Name, description and argument schema of each.
        tools: Vec<ToolDef>,
    },
    /// Streamed answer text.
    TextDelta {
        /// The call.
        call: u32,
        /// The text.
        delta: String,
    },
    /// Streamed reasoning text.
    ReasoningDelta {
        /// The call.
        call: u32,
        /// The text.
        delta: String,
    },
    /// A model call completed.
    LlmFinished(Box<LlmFinish>),
    /// A model call failed.
    LlmFailed(Box<LlmFailure>),
    /// The model started a tool call.
    ToolCallStarted {
        /// The model's call id.
        call_id: String,
        /// Tool name.
        tool: String,
    },
    /// A fragment of a tool call's arguments.
    ToolCallDelta {
        /// The call id.
        call_id: String,
        /// Argument text fragment.
        delta: String,
    },
    /// Arguments are complete and about to be executed.
    ToolCallReady(Box<ToolReady>),
    /// A tool returned.
    ToolResult(Box<ToolReturn>),
    /// A tool failed; the failure is given to the model as data.
    ToolError(Box<ToolFault>),
    /// A tool call a person denied: it did not run; the model was told.
    ToolDenied(Box<ToolDenial>),
    /// A node explains what it is doing (the thinking panel).
    Thinking {
        /// The explanation.
        text: String,
    },
    /// Application data from a node (`data-<name>` in the UI stream).
    Custom(Box<CustomData>),
    /// A source the answer cites (`source-url` in the UI stream, whatever
    /// the node's surface).
    Source(Box<SourceRef>),
    /// The state after a step was handed to the checkpoint store.
    CheckpointSaved {
        /// The step stored.
        checkpoint: u32,
    },
    /// A variant written by a newer version; readers skip it.
    #[serde(other)]
    Unknown,
}

impl EventKind {
    /// Whether the run ends with this event.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            EventKind::RunFinished { .. }
                | EventKind::RunFailed { .. }
                | EventKind::RunCancelled { .. }
                | EventKind::RunInterrupted { .. }
        )
    }

    /// The tokens this event records as spent: a model call's, whether it
    /// finished or failed after reporting its usage. Run totals add these.
    pub fn spent(&self) -> Usage {
        match self {
            EventKind::LlmFinished(f) => f.usage,
            EventKind::LlmFailed(f) => f.usage,
            _ => Usage::default(),
        }
    }

    /// Whether a client sees something for this event (text, reasoning, a
    /// thinking note, a tool call, data, a source): the first such event
    /// ends a run's "time to first visible part".
    pub fn is_visible(&self) -> bool {
        matches!(
            self,
            EventKind::TextDelta { .. }
                | EventKind::ReasoningDelta { .. }
                | EventKind::Thinking { .. }
                | EventKind::ToolCallStarted { .. }
                | EventKind::ToolCallReady(_)
                | EventKind::Custom(_)
                | EventKind::Source(_)
        )
    }

    /// Whether `other` records the same behaviour: equal but for timing
    /// (durations and retry delays, which vary from run to run).
    pub fn same_behaviour(&self, other: &EventKind) -> bool {
        if self == other {
            return true;
        }
        if std::mem::discriminant(self) != std::mem::discriminant(other) {
            return false;
        }
        let strip = |k: &EventKind| {
            let mut v = serde_json::to_value(k).ok()?;
            if let Some(o) = v.as_object_mut() {
                o.remove("duration_us");
                o.remove("delay_ms");
            }
            Some(v)
        };
        matches!((strip(self), strip(other)), (Some(a), Some(b)) if a == b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_serialize_with_a_type_tag_and_skip_unknown_kinds() {
        let e = Event {
            run_id: Uuid::nil(),
            seq: 3,
            at: 7,
            step: 1,
            node: Some("router".into()),
            task: 0,
            event: EventKind::TextDelta {
                call: 0,
                delta: "hi".into(),
            },
        };
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(
            text,
            r#"{"run_id":"00000000-0000-0000-0000-000000000000","seq":3,"at":7,"step":1,"node":"router","event":{"type":"text_delta","call":0,"delta":"hi"}}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), e);
        let future = json!({"run_id": Uuid::nil(), "seq": 4, "at": 8, "step": 1,
            "event": {"type": "hologram", "beam": 1}});
        let parsed: Event = serde_json::from_value(future).unwrap();
        assert_eq!(parsed.event, EventKind::Unknown);
    }

    #[test]
    fn an_event_is_sized_by_its_small_kinds() {
        // Every event, a token's included, is built at this size and moved
        // on its way to the hub (#37): kinds past 48 bytes of fields are boxed.
        let (kind, event) = (
            std::mem::size_of::<EventKind>(),
            std::mem::size_of::<Event>(),
        );
        assert!(
            kind <= 56 && event <= 112,
            "EventKind {kind}, Event {event}"
        );
    }

    #[test]
    fn boxed_kinds_serialize_their_fields_beside_the_tag() {
        let k = EventKind::ToolResult(Box::new(ToolReturn {
            call_id: "c1".into(),
            tool: "search".into(),
            output: json!({"hits": 2}),
            cached: true,
            display: false,
            duration_us: 5,
        }));
        let text = serde_json::to_string(&k).unwrap();
        assert_eq!(
            text,
            r#"{"type":"tool_result","call_id":"c1","tool":"search","output":{"hits":2},"cached":true,"duration_us":5}"#
        );
        assert_eq!(serde_json::from_str::<EventKind>(&text).unwrap(), k);
    }
}
