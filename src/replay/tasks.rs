//! A run's timeline as data: supersteps × node tasks, each with its
//! duration, attempts, retries, model calls (tokens) and tool calls.
//! `GET /api/runs/{id}/timeline` serves it to the studio; [`super::timeline`]
//! prints the same story as text for the CLI.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::events::{
    Event, EventKind, LlmFailure, LlmFinish, LlmStart, ToolFault, ToolReady, ToolReturn,
};

/// Supersteps in order, with the events they span.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskTimeline {
    /// Steps that ran a node, in order.
    pub steps: Vec<StepTasks>,
    /// The first event's seq (0 without events).
    pub first_seq: u64,
    /// The last event's seq (0 without events).
    pub last_seq: u64,
}

/// One superstep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct StepTasks {
    /// The step.
    pub step: u32,
    /// Its tasks in the order they started.
    pub tasks: Vec<TaskSpan>,
}

/// Where a task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TaskStatus {
    /// Started, not ended, and the run goes on.
    Running,
    /// Finished.
    Finished,
    /// Failed after its attempts.
    Failed,
    /// Never ended: the run ended (failed, cancelled) while it ran.
    Interrupted,
}

/// One node task (a map item is a task of its own).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskSpan {
    /// The node.
    pub node: String,
    /// The task within the step.
    pub task: u32,
    /// When it first started (µs since the epoch).
    pub started_at: u64,
    /// From its first start to its end (µs), retries included.
    pub duration_us: Option<u64>,
    /// Where it stands.
    pub status: TaskStatus,
    /// Attempts made.
    pub attempts: u32,
    /// Failed attempts that were retried.
    pub retries: Vec<Retry>,
    /// Model calls.
    pub llm: Vec<LlmCall>,
    /// Tool calls.
    pub tools: Vec<ToolCall>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A failed attempt that was retried.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Retry {
    /// The attempt that failed.
    pub attempt: u32,
    /// Why.
    pub error: String,
    /// The wait before the next one.
    pub delay_ms: u64,
}

/// A model call.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LlmCall {
    /// The call's number within the task.
    pub call: u32,
    /// The model role.
    pub role: String,
    /// The model.
    pub model: String,
    /// How long it took (none: it has not ended).
    pub duration_us: Option<u64>,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A tool call.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolCall {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// How long it took (none: no result yet, or it failed).
    pub duration_us: Option<u64>,
    /// Served from the tool cache.
    pub cached: bool,
    /// `kind: message` when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The timeline of a run from its events (in seq order).
pub(crate) fn task_timeline(events: &[Event]) -> TaskTimeline {
    let mut steps: BTreeMap<u32, Vec<TaskSpan>> = BTreeMap::new();
    // (step, node, task) → index in its step's list.
    let mut index: HashMap<(u32, &str, u32), usize> = HashMap::new();
    let mut ended = false;
    for e in events {
        if e.event.is_terminal() {
            ended = true;
        }
        let Some(node) = e.node.as_deref() else {
            continue;
        };
        let tasks = steps.entry(e.step).or_default();
        let i = *index.entry((e.step, node, e.task)).or_insert_with(|| {
            tasks.push(TaskSpan::new(node, e.task, e.at));
            tasks.len() - 1
        });
        apply(&mut tasks[i], e);
    }
    let steps = steps
        .into_iter()
        .map(|(step, mut tasks)| {
            if ended {
                for t in &mut tasks {
                    if t.status == TaskStatus::Running {
                        t.status = TaskStatus::Interrupted;
                    }
                }
            }
            StepTasks { step, tasks }
        })
        .collect();
    TaskTimeline {
        steps,
        first_seq: events.first().map_or(0, |e| e.seq),
        last_seq: events.last().map_or(0, |e| e.seq),
    }
}

impl TaskSpan {
    /// A task seen for the first time, at `at`.
    fn new(node: &str, task: u32, at: u64) -> Self {
        Self {
            node: node.to_owned(),
            task,
            started_at: at,
            duration_us: None,
            status: TaskStatus::Running,
            attempts: 0,
            retries: Vec::new(),
            llm: Vec::new(),
            tools: Vec::new(),
            error: None,
        }
    }
}

/// What one of the task's events says of it: its attempts, end and retries
/// here, its model and tool calls in [`apply_call`].
fn apply(t: &mut TaskSpan, e: &Event) {
    match &e.event {
        EventKind::NodeStarted { attempt, .. } => t.attempts = t.attempts.max(*attempt),
        EventKind::NodeFinished { .. } => {
            t.status = TaskStatus::Finished;
            t.duration_us = Some(e.at.saturating_sub(t.started_at));
        }
        EventKind::NodeFailed { error, attempts } => {
            t.status = TaskStatus::Failed;
            t.attempts = t.attempts.max(*attempts);
            t.error = Some(error.clone());
            t.duration_us = Some(e.at.saturating_sub(t.started_at));
        }
        EventKind::NodeRetrying {
            attempt,
            error,
            delay_ms,
        } => t.retries.push(Retry {
            attempt: *attempt,
            error: error.clone(),
            delay_ms: *delay_ms,
        }),
        other => apply_call(t, other),
    }
}

/// A model or tool call event of the task.
fn apply_call(t: &mut TaskSpan, event: &EventKind) {
    match event {
        EventKind::LlmStarted(llm_start) => {
            let LlmStart {
                call, role, model, ..
            } = &**llm_start;
            t.llm.push(LlmCall {
                call: *call,
                role: role.to_string(),
                model: model.clone(),
                duration_us: None,
                prompt_tokens: 0,
                completion_tokens: 0,
                error: None,
            })
        }
        EventKind::LlmFinished(llm_finish) => {
            let LlmFinish {
                call,
                usage,
                duration_us,
                ..
            } = &**llm_finish;
            if let Some(c) = t.llm.iter_mut().rev().find(|c| c.call == *call) {
                c.duration_us = Some(*duration_us);
                c.prompt_tokens = usage.prompt_tokens;
                c.completion_tokens = usage.completion_tokens;
            }
        }
        EventKind::LlmFailed(llm_failure) => {
            let LlmFailure { call, error, usage } = &**llm_failure;
            if let Some(c) = t.llm.iter_mut().rev().find(|c| c.call == *call) {
                c.error = Some(error.clone());
                c.prompt_tokens = usage.prompt_tokens;
                c.completion_tokens = usage.completion_tokens;
            }
        }
        EventKind::ToolCallReady(tool_ready) => {
            let ToolReady { call_id, tool, .. } = &**tool_ready;
            tool_call(t, call_id, tool);
        }
        EventKind::ToolResult(tool_return) => {
            let ToolReturn {
                call_id,
                tool,
                cached,
                duration_us,
                ..
            } = &**tool_return;
            let c = tool_call(t, call_id, tool);
            c.duration_us = Some(*duration_us);
            c.cached = *cached;
        }
        EventKind::ToolError(tool_fault) => {
            let ToolFault {
                call_id,
                tool,
                error,
            } = &**tool_fault;
            tool_call(t, call_id, tool).error = Some(format!("{}: {}", error.kind, error.message));
        }
        _ => {}
    }
}

/// The task's call `call_id`, added when it is not there yet.
fn tool_call<'a>(t: &'a mut TaskSpan, call_id: &str, tool: &str) -> &'a mut ToolCall {
    let i = match t.tools.iter().position(|c| c.call_id == call_id) {
        Some(i) => i,
        None => {
            t.tools.push(ToolCall {
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                duration_us: None,
                cached: false,
                error: None,
            });
            t.tools.len() - 1
        }
    };
    &mut t.tools[i]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::events::{ToolFailure, ToolFault, Usage};

    fn ev(seq: u64, step: u32, node: Option<&str>, task: u32, event: EventKind) -> Event {
        Event {
            run_id: Uuid::nil(),
            seq,
            at: 1_000 * seq,
            step,
            node: node.map(Arc::from),
            task,
            event,
        }
    }

    /// Task `a` of step 1 retried, its model call failing, then failed;
    /// task `b`'s tool call timed out; then the run was cancelled.
    fn a_failing_task_and_a_cut_one() -> Vec<Event> {
        let a = |seq, event| ev(seq, 1, Some("a"), 0, event);
        vec![
            a(
                1,
                EventKind::NodeStarted {
                    attempt: 1,
                    item: None,
                },
            ),
            a(
                2,
                EventKind::NodeRetrying {
                    attempt: 1,
                    error: "flaky".into(),
                    delay_ms: 5,
                },
            ),
            a(
                3,
                EventKind::NodeStarted {
                    attempt: 2,
                    item: None,
                },
            ),
            a(
                4,
                EventKind::LlmStarted(Box::new(LlmStart {
                    call: 0,
                    role: Arc::from("chat"),
                    model: "m".into(),
                    request: String::new(),
                })),
            ),
            a(
                5,
                EventKind::LlmFailed(Box::new(LlmFailure {
                    call: 0,
                    error: "boom".into(),
                    usage: Usage {
                        prompt_tokens: 7,
                        ..Usage::default()
                    },
                })),
            ),
            ev(
                6,
                1,
                Some("b"),
                1,
                EventKind::ToolError(Box::new(ToolFault {
                    call_id: "c1".into(),
                    tool: "t".into(),
                    error: ToolFailure {
                        kind: "timeout".into(),
                        message: "slow".into(),
                        details: json!(null),
                    },
                })),
            ),
            a(
                7,
                EventKind::NodeFailed {
                    attempts: 2,
                    error: "gave up".into(),
                },
            ),
            ev(
                8,
                1,
                None,
                0,
                EventKind::RunCancelled {
                    reason: "stop".into(),
                },
            ),
        ]
    }

    #[test]
    fn tasks_carry_attempts_calls_tokens_and_errors() {
        let events = a_failing_task_and_a_cut_one();
        let tl = task_timeline(&events);
        assert_eq!((tl.first_seq, tl.last_seq), (1, 8));
        assert_eq!(tl.steps.len(), 1);
        let [a, b] = tl.steps[0].tasks.as_slice() else {
            panic!("two tasks expected: {tl:?}");
        };
        assert_eq!(a.status, TaskStatus::Failed);
        assert_eq!(a.attempts, 2);
        assert_eq!(a.duration_us, Some(6_000));
        assert_eq!(a.retries[0].error, "flaky");
        assert_eq!(a.llm[0].error.as_deref(), Some("boom"));
        assert_eq!(a.llm[0].prompt_tokens, 7);
        assert_eq!(b.status, TaskStatus::Interrupted, "the run ended first");
        assert_eq!(b.tools[0].error.as_deref(), Some("timeout: slow"));
    }
}
