//! Routing: what runs after a step, from the graph's edges — plain edges,
//! conditional routes, map fan-outs and joins. The executor calls [`route`]
//! after every step; a fork calls it through [`next_after`] to route again
//! from an edited state, so both take the same path.

use std::borrow::Cow;

use serde_json::Value;

use super::{PendingTask, RunError};
use crate::events::Frontier;
use crate::graph::{NodeIdx, Target, Transition};
use crate::nodes::Graph;
use crate::state::DynState;

/// One task of a superstep.
#[derive(Debug, Clone)]
pub(super) struct Task {
    pub(super) node: NodeIdx,
    pub(super) item: Option<Value>,
    /// Task order: (node index, 0 for a plain trigger or 1 + map item number).
    pub(super) order: (u32, u32),
}

/// The executor's tasks for pending ones, in task order.
pub(super) fn tasks_of(graph: &Graph, pending: &[PendingTask]) -> Result<Vec<Task>, RunError> {
    let mut tasks = Vec::with_capacity(pending.len());
    let mut counters = std::collections::HashMap::<u32, u32>::new();
    for p in pending {
        let node = graph
            .node_index(&p.node)
            .ok_or_else(|| RunError::Input(unknown_node(&p.node)))?;
        let k = match &p.item {
            None => 0,
            Some(_) => {
                let c = counters.entry(node).or_default();
                *c += 1;
                *c
            }
        };
        tasks.push(Task {
            node,
            item: p.item.clone(),
            order: (node, k),
        });
    }
    Ok(tasks)
}

/// Join progress by node names, as the executor keeps it.
pub(super) fn joins_of(graph: &Graph, arrived: &[Vec<String>]) -> Vec<Vec<bool>> {
    graph
        .joins
        .iter()
        .enumerate()
        .map(|(j, join)| {
            join.sources
                .iter()
                .map(|src| {
                    arrived
                        .get(j)
                        .is_some_and(|a| a.iter().any(|a| *a == *graph.nodes[*src as usize].id))
                })
                .collect()
        })
        .collect()
}

/// What runs after a step whose tasks were `ran`, on the state after it,
/// with join progress `joins` as it was before the step: the routing the
/// executor does after every step (the same function), for a fork that
/// routes again after its edit. The frontier's `step` is 0; the caller
/// knows which step it follows.
///
/// # Errors
/// A node in `ran` the graph does not have; a route with no target for
/// the value it reads ([`RunError::NoRoute`]); an edge expression that
/// fails ([`RunError::Map`]).
pub(crate) fn next_after(
    graph: &Graph,
    state: &dyn DynState,
    ran: &[PendingTask],
    joins: &[Vec<String>],
) -> Result<Frontier, RunError> {
    let ran = tasks_of(graph, ran)?;
    let mut joins = joins_of(graph, joins);
    let mut scratch = Scratch::new(graph);
    let mut next = Vec::new();
    route(
        graph,
        state,
        |n| Cow::Borrowed(&*graph.nodes[n as usize].id),
        &ran,
        &mut joins,
        &mut scratch,
        &mut next,
    )?;
    Ok(Frontier {
        step: 0,
        next: pending(graph, &next),
        joins: join_progress(graph, &joins),
    })
}

fn unknown_node(node: &str) -> crate::state::StateError {
    crate::state::StateError::UnknownField {
        node: node.to_owned(),
        field: "(node)".into(),
        state: "graph".into(),
    }
}

/// Scratch of [`route`]: nodes triggered for the next step (marks, and the
/// list of marked nodes so a step costs what it triggers, not the graph
/// size).
pub(super) struct Scratch {
    triggered: Vec<bool>,
    triggered_list: Vec<NodeIdx>,
}

impl Scratch {
    pub(super) fn new(graph: &Graph) -> Self {
        Self {
            triggered: vec![false; graph.nodes.len()],
            triggered_list: Vec::new(),
        }
    }

    /// Marks `n` to run next step (once however often it is triggered).
    fn trigger(&mut self, n: NodeIdx) {
        let mark = &mut self.triggered[n as usize];
        if !*mark {
            *mark = true;
            self.triggered_list.push(n);
        }
    }

    /// The triggered nodes as tasks, in node order, into `next` (cleared
    /// first; left empty unless `keep`). The marks are cleared either way:
    /// the scratch is reused.
    fn drain_into(&mut self, next: &mut Vec<Task>, keep: bool) {
        self.triggered_list.sort_unstable();
        next.clear();
        for n in self.triggered_list.drain(..) {
            self.triggered[n as usize] = false;
            if keep {
                next.push(Task {
                    node: n,
                    item: None,
                    order: (n, 0),
                });
            }
        }
    }
}

/// Evaluates the transitions of the tasks that `ran` into the next step's
/// tasks (`next`, cleared first), updating join progress: what the executor
/// does after every step, and what [`next_after`] does for a fork.
/// `name` gives a node's name for errors.
pub(super) fn route<'n>(
    graph: &Graph,
    state: &dyn DynState,
    name: impl Fn(NodeIdx) -> Cow<'n, str>,
    ran: &[Task],
    joins: &mut [Vec<bool>],
    scratch: &mut Scratch,
    next: &mut Vec<Task>,
) -> Result<(), RunError> {
    let mut sends: Vec<Task> = Vec::new();
    let mut map_count = std::collections::HashMap::<NodeIdx, u32>::new();
    let mut outcome = Ok(());
    // The nodes whose edges are followed: those that ran, then the targets
    // of empty map edges (`on_empty: skip`), as if they ran with nothing to
    // do — each once.
    let mut work: Vec<NodeIdx> = ran.iter().map(|t| t.node).collect();
    let mut skipped: Vec<NodeIdx> = Vec::new();
    let mut i = 0;
    'tasks: while let Some(&node) = work.get(i) {
        i += 1;
        for tr in &graph.nodes[node as usize].out {
            match follow(graph, state, &name, node, tr, joins) {
                Ok(Followed::Nothing) => {}
                Ok(Followed::Trigger(n)) => scratch.trigger(n),
                Ok(Followed::Skip(to)) => {
                    if !skipped.contains(&to) {
                        skipped.push(to);
                        work.push(to);
                    }
                }
                Ok(Followed::Send(to, items)) => {
                    let c = map_count.entry(to).or_default();
                    for item in items {
                        *c += 1;
                        sends.push(Task {
                            node: to,
                            item: Some(item),
                            order: (to, *c),
                        });
                    }
                }
                Err(e) => {
                    outcome = Err(e);
                    break 'tasks;
                }
            }
        }
    }
    scratch.drain_into(next, outcome.is_ok());
    outcome?;
    if !sends.is_empty() {
        next.extend(sends);
        next.sort_by_key(|t| t.order);
    }
    Ok(())
}

/// What following one transition gives.
enum Followed {
    /// Nothing runs because of it (END, or a join still waiting).
    Nothing,
    /// The node runs next step.
    Trigger(NodeIdx),
    /// An empty map edge with `on_empty: skip`: its target's edges are
    /// followed as if it ran.
    Skip(NodeIdx),
    /// A map edge: one task of the node per item.
    Send(NodeIdx, Vec<Value>),
}

/// Follows transition `tr` of `node` (a join records the arrival).
fn follow<'n>(
    graph: &Graph,
    state: &dyn DynState,
    name: &impl Fn(NodeIdx) -> Cow<'n, str>,
    node: NodeIdx,
    tr: &Transition,
    joins: &mut [Vec<bool>],
) -> Result<Followed, RunError> {
    let map_error = |message: String| RunError::Map {
        node: name(node).into_owned(),
        message,
    };
    Ok(match tr {
        Transition::Goto(Target::Node(n)) => Followed::Trigger(*n),
        Transition::Goto(Target::End) => Followed::Nothing,
        Transition::Route(r) => {
            let key = r.on.key(state).map_err(|e| map_error(e.to_string()))?;
            match r.target(key.as_deref()) {
                Some(Target::Node(n)) => Followed::Trigger(n),
                Some(Target::End) => Followed::Nothing,
                None => {
                    return Err(RunError::NoRoute {
                        node: name(node).into_owned(),
                        field: r.field_name.to_string(),
                        value: key.map_or("null".into(), |k| format!("`{k}`")),
                    });
                }
            }
        }
        Transition::Map {
            over,
            to,
            fail_on_empty,
        } => {
            let items = over.list(state).map_err(|e| map_error(e.to_string()))?;
            match (items.is_empty(), *fail_on_empty) {
                (true, true) => {
                    return Err(map_error(format!(
                        "the list for `{}` is empty (`on_empty: fail`)",
                        name(*to)
                    )));
                }
                (true, false) => Followed::Skip(*to),
                (false, _) => Followed::Send(*to, items),
            }
        }
        Transition::Join(j) => {
            let join = &graph.joins[*j];
            if let Some(pos) = join.sources.iter().position(|s| *s == node) {
                joins[*j][pos] = true;
            }
            if joins[*j].iter().all(|&a| a) {
                joins[*j].iter_mut().for_each(|a| *a = false);
                Followed::Trigger(join.target)
            } else {
                Followed::Nothing
            }
        }
    })
}

/// Tasks as a checkpoint stores them.
pub(super) fn pending(graph: &Graph, tasks: &[Task]) -> Vec<PendingTask> {
    tasks
        .iter()
        .map(|t| PendingTask {
            node: graph.nodes[t.node as usize].id.to_string(),
            item: t.item.clone(),
        })
        .collect()
}

/// Join progress by node names, as a checkpoint stores it.
pub(super) fn join_progress(graph: &Graph, joins: &[Vec<bool>]) -> Vec<Vec<String>> {
    graph
        .joins
        .iter()
        .zip(joins)
        .map(|(j, arrived)| {
            j.sources
                .iter()
                .zip(arrived)
                .filter(|(_, a)| **a)
                .map(|(s, _)| graph.nodes[*s as usize].id.to_string())
                .collect()
        })
        .collect()
}
