//! Breakpoints: a run that pauses between supersteps, as a person asked
//! when it started or was resumed (docs/breakpoints.md).
//!
//! A breakpoint is an interrupt like any other (`run_interrupted`, status
//! `interrupted`, durable across restarts), raised by the executor instead
//! of a node. Its id is `breakpoint-N`, N the step about to run, so the
//! answer finds its place again in a continuation, a crash recovery and a
//! re-execution (which serves the recorded answers). The answer is
//! `{"action": "continue"|"step", "set"?: {field: value}}`: the fields of
//! `set` replace the state's before the step runs (checked by the caller
//! first, as a fork's edit is), and `step` pauses again before the next one.
//!
//! Each step is checked once: the first step of a continuation is the one
//! the run paused in, which was checked when it first came up.

use serde_json::{Map, Value};

use crate::events::{Ask, Breakpoints, Interrupt};
use crate::graph::NodeIdx;
use crate::nodes::{Graph, Services};
use crate::state::{DynState, StateError};

/// What happens before a step.
#[derive(Debug)]
pub(super) enum Decision {
    /// It runs.
    Go,
    /// It runs, on the state with these fields replaced (an answered
    /// breakpoint's edit; empty `set`s are `Go`).
    Edit(Map<String, Value>),
    /// The run pauses here.
    Pause(Interrupt),
}

/// A run's breakpoints and where it is with them.
#[derive(Debug, Default)]
pub(super) struct Breaks {
    /// The run's breakpoints; `None`: this execution never pauses (a
    /// re-execution, a subgraph), though it applies recorded edits.
    set: Option<Breakpoints>,
    /// Skip the next check (the first step of a continuation).
    passed: bool,
    /// Pause before the next step (an answer said `step`).
    stepping: bool,
    /// The nodes of the previous step (for `after`).
    prev: Vec<NodeIdx>,
    /// Whether this execution is a subgraph's (no breakpoints, no edits).
    nested: bool,
}

impl Breaks {
    /// The breakpoints of an execution; `continued` when it continues a
    /// paused run (its first step is not checked again).
    pub(super) fn new(set: Option<Breakpoints>, continued: bool, nested: bool) -> Self {
        Self {
            set,
            passed: continued,
            nested,
            ..Self::default()
        }
    }

    /// Remembers the nodes of the step that just ran.
    pub(super) fn ran(&mut self, nodes: impl Iterator<Item = NodeIdx>) {
        self.prev.clear();
        self.prev.extend(nodes);
    }

    /// Decides before step `step`, whose tasks run `next` (empty: the run
    /// is at its end, where only `after` can pause).
    pub(super) fn before_step(
        &mut self,
        graph: &Graph,
        services: &Services,
        step: u32,
        next: &[NodeIdx],
    ) -> Decision {
        if self.nested {
            return Decision::Go;
        }
        let id = format!("breakpoint-{step}");
        let passed = std::mem::take(&mut self.passed);
        let stepping = std::mem::take(&mut self.stepping);
        if let Some(answer) = answer(services, &id) {
            self.stepping = answer["action"] == "step";
            return match answer.get("set") {
                Some(Value::Object(set)) if !set.is_empty() => Decision::Edit(set.clone()),
                _ => Decision::Go,
            };
        }
        let Some(set) = &self.set else {
            return Decision::Go;
        };
        if passed {
            return Decision::Go;
        }
        let names = |nodes: &[NodeIdx], keep: &dyn Fn(&str) -> bool| -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            for &n in nodes {
                let name = &*graph.nodes[n as usize].id;
                if keep(name) && !out.iter().any(|o| o == name) {
                    out.push(name.to_owned());
                }
            }
            out
        };
        let upcoming = names(next, &|_| true);
        let before = names(next, &|n| set.before.iter().any(|b| b == n));
        let after = names(&self.prev, &|n| set.after.iter().any(|b| b == n));
        let (when, nodes) = if !after.is_empty() {
            ("after", after)
        } else if !before.is_empty() {
            ("before", before)
        } else if stepping && !upcoming.is_empty() {
            ("step", upcoming.clone())
        } else {
            return Decision::Go;
        };
        Decision::Pause(Interrupt {
            id,
            node: nodes[0].clone(),
            step,
            task: 0,
            expires_at: None,
            ask: Ask::Breakpoint {
                when: when.to_owned(),
                nodes,
                next: upcoming,
            },
        })
    }
}

/// The answer given to interrupt `id`: with this continuation, or recorded.
fn answer(services: &Services, id: &str) -> Option<Value> {
    services
        .answers
        .as_ref()
        .and_then(|a| a.get(id).cloned())
        .or_else(|| services.playback.as_ref().and_then(|p| p.answer(id)))
}

/// `state` with the fields of `set` replaced by their values (a
/// breakpoint's edit), checked against the state's types.
///
/// # Errors
/// An unknown field or a value of the wrong type.
pub(super) fn edited(
    graph: &Graph,
    state: &dyn DynState,
    set: &Map<String, Value>,
) -> Result<Box<dyn DynState>, StateError> {
    let mut json = state.to_json();
    for (field, value) in set {
        json[field.as_str()] = value.clone();
    }
    graph.state.from_json(&json)
}
