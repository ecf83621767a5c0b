//! Where a fork starts: a step of a recorded run, a node in it, and an
//! edit.
//!
//! - **After** a node (the default): the edit is applied to the state after
//!   the step as if the node had written it — through the fields' reducers
//!   — and what runs next is routed again from the edited state by the
//!   executor's own routing ([`runtime::next_after`]): conditional routes,
//!   map fan-outs and joins. A step that ran several nodes must name one.
//! - **Before** a node: the node runs again on the state it saw, with the
//!   edited fields replaced; everything before the step comes from the
//!   recording (its state), nothing before it is called again. The step's
//!   other tasks, if it ran several, run again too.
//!
//! Everything is checked before the fork starts: the step and node, the
//! fields and their types, and — after a node — that every route has a
//! target for the edited state. Each refusal is an [`EditError`] with a
//! stable [`code`](EditError::code).

use serde_json::Value;
use uuid::Uuid;

use super::{ReplayError, state_at};
use crate::events::{ForkMode, ForkOrigin, PendingTask};
use crate::nodes::Graph;
use crate::runtime::{self, Resume, RunError};
use crate::state::DynState;
use crate::store::{CheckpointRecord, Store};

/// A fork to locate: the step, the node and the edit.
#[derive(Clone, Debug)]
pub struct Edit {
    /// The step forked: the one the node ran in. Optional when `node` ran
    /// in exactly one step.
    pub step: Option<u32>,
    /// After the node (route again) or before it (run it again).
    pub mode: ForkMode,
    /// The node; after a node, optional when the step ran only one.
    pub node: Option<String>,
    /// Fields and their JSON values.
    pub set: Vec<(String, Value)>,
}

/// Why an edit was refused (nothing ran).
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The run has no checkpoint for that step.
    #[error("run {run} has no checkpoint at step {step}{hint}")]
    NoCheckpoint {
        /// The run.
        run: Uuid,
        /// The step.
        step: u32,
        /// What to do instead.
        hint: &'static str,
    },
    /// Neither a step nor a node was given.
    #[error("say where to fork: a step (`at`), a node (`after` or `before`), or both")]
    StepRequired,
    /// The graph has no such node.
    #[error("graph `{graph}` has no node `{node}`")]
    UnknownNode {
        /// The graph.
        graph: String,
        /// The node.
        node: String,
    },
    /// The node did not run where asked.
    #[error("node `{node}` did not run {place}")]
    NodeNotRun {
        /// The node.
        node: String,
        /// `in step N (it ran a, b)` or `in this run`.
        place: String,
    },
    /// The step ran several nodes; which one the edit comes after is not
    /// clear.
    #[error("step {step} ran {}; say which one the edit comes after (`after`)", .nodes.join(", "))]
    AmbiguousNode {
        /// The step.
        step: u32,
        /// The nodes it ran.
        nodes: Vec<String>,
    },
    /// The node ran in several steps.
    #[error("node `{node}` ran in steps {}; say which one (`at`)", join_steps(.steps))]
    AmbiguousStep {
        /// The node.
        node: String,
        /// The steps it ran in.
        steps: Vec<u32>,
    },
    /// Before a node needs a node.
    #[error("`before` needs the node to run again")]
    NodeRequired,
    /// The state has no such field.
    #[error("state `{state}` has no field `{field}`")]
    UnknownField {
        /// The state type.
        state: String,
        /// The field.
        field: String,
    },
    /// The value does not fit the field.
    #[error("`{field}`: {message}")]
    InvalidValue {
        /// The field.
        field: String,
        /// Why.
        message: String,
    },
    /// After the edit a route has no target for what it reads.
    #[error(
        "after the edit, node `{node}`'s route on `{field}` has no case for {value} and no default; use one of its cases"
    )]
    NoRoute {
        /// The node whose route it is.
        node: String,
        /// The field or expression routed on.
        field: String,
        /// The value.
        value: String,
    },
    /// After the edit an edge's expression failed.
    #[error("after the edit, {0}")]
    Route(String),
}

fn join_steps(steps: &[u32]) -> String {
    steps
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl EditError {
    /// Stable machine-readable code (API error codes, CLI diagnostics).
    pub fn code(&self) -> &'static str {
        match self {
            EditError::NoCheckpoint { .. } => "no_checkpoint",
            EditError::StepRequired => "step_required",
            EditError::UnknownNode { .. } => "unknown_node",
            EditError::NodeNotRun { .. } => "node_not_run",
            EditError::AmbiguousNode { .. } => "ambiguous_node",
            EditError::AmbiguousStep { .. } => "ambiguous_step",
            EditError::NodeRequired => "node_required",
            EditError::UnknownField { .. } => "unknown_field",
            EditError::InvalidValue { .. } => "invalid_value",
            EditError::NoRoute { .. } => "no_route",
            EditError::Route(_) => "route_failed",
        }
    }
}

/// A located fork: where the new run starts and what its record names.
#[derive(Debug)]
pub struct ForkPoint {
    /// State and frontier.
    pub resume: Resume,
    /// Parent, step, mode, node(s) and edit.
    pub origin: ForkOrigin,
}

/// Locates a fork of `run` (see the module docs) and checks its edit.
///
/// # Errors
/// [`ReplayError::Edit`] when the step, node or edit is refused;
/// [`ReplayError::Store`] when the store failed.
pub async fn fork_point(
    store: &dyn Store,
    graph: &Graph,
    run: Uuid,
    edit: &Edit,
) -> Result<ForkPoint, ReplayError> {
    if let Some(node) = &edit.node
        && graph.node_index(node).is_none()
    {
        return Err(EditError::UnknownNode {
            graph: graph.id.to_string(),
            node: node.clone(),
        }
        .into());
    }
    let cps = store.checkpoints(run, u32::MAX).await?;
    let step = match (edit.step, &edit.node) {
        (Some(s), _) => s,
        (None, Some(node)) => step_of(&cps, node)?,
        (None, None) => return Err(EditError::StepRequired.into()),
    };
    let at = Locate {
        store,
        graph,
        run,
        edit,
        cps,
        step,
    };
    match edit.mode {
        ForkMode::Before => at.before().await,
        ForkMode::After if step == 0 => at.after_input().await,
        ForkMode::After => at.after().await,
    }
}

/// A fork being located: the run's checkpoints and the step it forks at.
struct Locate<'a> {
    store: &'a dyn Store,
    graph: &'a Graph,
    run: Uuid,
    edit: &'a Edit,
    cps: Vec<CheckpointRecord>,
    step: u32,
}

impl Locate<'_> {
    /// The checkpoint of step `k`.
    fn cp(&self, k: u32) -> Result<&CheckpointRecord, EditError> {
        self.cps
            .iter()
            .find(|c| c.step == k)
            .ok_or(EditError::NoCheckpoint {
                run: self.run,
                step: k,
                hint: if k == 0 {
                    "; a fork starts after the step it was forked at: fork its parent for earlier steps"
                } else {
                    ""
                },
            })
    }

    /// The new run's record of where it came from.
    fn origin(&self, mode: ForkMode, nodes: Vec<String>) -> ForkOrigin {
        ForkOrigin {
            run_id: self.run,
            step: self.step,
            mode: Some(mode),
            nodes,
            set: self.edit.set.iter().cloned().collect(),
            alternative_of: None,
        }
    }

    /// Before a node: it runs again on the state it saw, edited.
    async fn before(&self) -> Result<ForkPoint, ReplayError> {
        let (graph, edit, step) = (self.graph, self.edit, self.step);
        let node = edit.node.clone().ok_or(EditError::NodeRequired)?;
        let before = step.checked_sub(1).ok_or_else(|| not_run(&node, 0, &[]))?;
        let prior = self.cp(before)?;
        if !prior.next.iter().any(|t| t.node == node) {
            return Err(not_run(&node, step, &prior.next).into());
        }
        let state = state_at(self.store, graph, self.run, before).await?;
        let state = replaced(graph, &*state, &edit.set)?;
        Ok(ForkPoint {
            resume: Resume {
                state,
                step: before,
                next: prior.next.clone(),
                joins: prior.joins.clone(),
                last_seq: 0,
            },
            origin: self.origin(ForkMode::Before, vec![node]),
        })
    }

    /// After the input: no node ran; the edit replaces input fields and
    /// the entry runs.
    async fn after_input(&self) -> Result<ForkPoint, ReplayError> {
        if let Some(node) = &self.edit.node {
            return Err(not_run(node, 0, &[]).into());
        }
        let input = self.cp(0)?;
        let state = state_at(self.store, self.graph, self.run, 0).await?;
        let state = replaced(self.graph, &*state, &self.edit.set)?;
        Ok(ForkPoint {
            resume: Resume {
                state,
                step: 0,
                next: input.next.clone(),
                joins: input.joins.clone(),
                last_seq: 0,
            },
            origin: self.origin(ForkMode::After, Vec::new()),
        })
    }

    /// After a node: the edit as if it had written it, then routed again.
    async fn after(&self) -> Result<ForkPoint, ReplayError> {
        let (graph, edit, step) = (self.graph, self.edit, self.step);
        let prior = self.cp(step - 1)?;
        self.cp(step)?;
        let mut ran: Vec<String> = Vec::new();
        for t in &prior.next {
            if !ran.contains(&t.node) {
                ran.push(t.node.clone());
            }
        }
        let nodes = match &edit.node {
            Some(n) if ran.contains(n) => vec![n.clone()],
            Some(n) => return Err(not_run(n, step, &prior.next).into()),
            None if ran.len() > 1 => {
                return Err(EditError::AmbiguousNode { step, nodes: ran }.into());
            }
            None => ran,
        };
        let mut state = state_at(self.store, graph, self.run, step).await?;
        written(graph, &mut *state, &edit.set)?;
        let next = runtime::next_after(graph, &*state, &prior.next, &prior.joins)
            .map_err(|e| route_error(e, graph))?;
        Ok(ForkPoint {
            resume: Resume {
                state,
                step,
                next: next.next,
                joins: next.joins,
                last_seq: 0,
            },
            origin: self.origin(ForkMode::After, nodes),
        })
    }
}

/// The one step `node` ran in.
fn step_of(cps: &[CheckpointRecord], node: &str) -> Result<u32, EditError> {
    let steps: Vec<u32> = cps
        .iter()
        .filter(|c| c.next.iter().any(|t| t.node == node))
        .map(|c| c.step + 1)
        // A frontier stored but never run (a failed or cancelled run's
        // last checkpoint) is not a step that ran.
        .filter(|k| cps.iter().any(|c| c.step == *k))
        .collect();
    match steps.as_slice() {
        [] => Err(EditError::NodeNotRun {
            node: node.to_owned(),
            place: "in this run".into(),
        }),
        [one] => Ok(*one),
        _ => Err(EditError::AmbiguousStep {
            node: node.to_owned(),
            steps,
        }),
    }
}

fn not_run(node: &str, step: u32, ran: &[PendingTask]) -> EditError {
    let mut names: Vec<&str> = ran.iter().map(|t| t.node.as_str()).collect();
    names.dedup();
    let place = if names.is_empty() {
        format!("in step {step}")
    } else {
        format!("in step {step} (it ran {})", names.join(", "))
    };
    EditError::NodeNotRun {
        node: node.to_owned(),
        place,
    }
}

/// `state` with the fields of `set` replaced (checked against their types):
/// a fork's edit before a node, and a breakpoint's.
///
/// # Errors
/// [`EditError::UnknownField`], [`EditError::InvalidValue`].
pub(crate) fn replaced(
    graph: &Graph,
    state: &dyn DynState,
    set: &[(String, Value)],
) -> Result<Box<dyn DynState>, EditError> {
    let mut json = state.to_json();
    for (field, value) in set {
        if graph.state.schema.field(field).is_none() {
            return Err(unknown_field(graph, field));
        }
        json[field] = value.clone();
    }
    graph.state.from_json(&json).map_err(|e| {
        let field = set.first().map_or_else(String::new, |(f, _)| f.clone());
        EditError::InvalidValue {
            field: if set.len() == 1 { field } else { "edit".into() },
            message: e.to_string(),
        }
    })
}

/// Applies `set` to `state` as a node's write: through each field's reducer.
fn written(
    graph: &Graph,
    state: &mut dyn DynState,
    set: &[(String, Value)],
) -> Result<(), EditError> {
    for (field, value) in set {
        let id = graph
            .state
            .schema
            .field(field)
            .ok_or_else(|| unknown_field(graph, field))?;
        state
            .apply(id, value)
            .map_err(|e| EditError::InvalidValue {
                field: field.clone(),
                message: e.to_string(),
            })?;
    }
    Ok(())
}

fn unknown_field(graph: &Graph, field: &str) -> EditError {
    EditError::UnknownField {
        state: graph.state.schema.name.to_string(),
        field: field.to_owned(),
    }
}

fn route_error(e: RunError, graph: &Graph) -> ReplayError {
    match e {
        RunError::NoRoute { node, field, value } => {
            EditError::NoRoute { node, field, value }.into()
        }
        RunError::Map { .. } => EditError::Route(e.to_string()).into(),
        other => ReplayError::Graph(format!(
            "the recorded step no longer fits graph `{}`: {other}",
            graph.id
        )),
    }
}
