//! Breakpoints around the run lifecycle: checked when they are set (a
//! chat turn, a run, a resume), read back from a run's log when it
//! continues or recovers, and the answer at one checked before the run
//! goes on — its edit exactly as a fork's (`replay::fork`).
//!
//! The executor raises and passes them (`runtime::breaks`); what they are
//! and how to use them is in docs/breakpoints.md.

use serde_json::Value;

use crate::events::{Breakpoints, Event, EventKind};
use crate::nodes::Graph;
use crate::replay::{EditError, replaced};

/// Breakpoints refused (nothing started).
#[derive(Debug, thiserror::Error)]
pub enum BreakpointError {
    /// Not `{before: [node…], after: [node…]}`.
    #[error("`breakpoints` must be {{\"before\": [node, …], \"after\": [node, …]}}: {0}")]
    Invalid(String),
    /// A node the graph does not have.
    #[error("graph `{graph}` has no node `{node}` (breakpoint {when}); its nodes: {}", .nodes.join(", "))]
    UnknownNode {
        /// The graph.
        graph: String,
        /// The node named.
        node: String,
        /// `before` or `after`.
        when: &'static str,
        /// The graph's nodes.
        nodes: Vec<String>,
    },
}

impl BreakpointError {
    /// Stable code for APIs.
    pub fn code(&self) -> &'static str {
        match self {
            BreakpointError::Invalid(_) => "invalid_breakpoints",
            BreakpointError::UnknownNode { .. } => "unknown_node",
        }
    }
}

/// Parses a request's `breakpoints` and checks its nodes against `graph`.
///
/// # Errors
/// Not the documented shape, or a node the graph does not have.
pub(crate) fn parse(graph: &Graph, v: &Value) -> Result<Breakpoints, BreakpointError> {
    let b: Breakpoints = match v {
        Value::Object(m) if m.keys().all(|k| k == "before" || k == "after") => {
            serde_json::from_value(v.clone())
                .map_err(|e| BreakpointError::Invalid(e.to_string()))?
        }
        Value::Object(m) => {
            let k = m.keys().find(|k| *k != "before" && *k != "after");
            return Err(BreakpointError::Invalid(format!(
                "unknown key `{}`",
                k.map_or("", String::as_str)
            )));
        }
        _ => return Err(BreakpointError::Invalid("not an object".into())),
    };
    check(graph, &b)?;
    Ok(b)
}

/// Checks that every breakpoint names a node of `graph`.
///
/// # Errors
/// A node the graph does not have.
pub(crate) fn check(graph: &Graph, b: &Breakpoints) -> Result<(), BreakpointError> {
    let lists = [("before", &b.before), ("after", &b.after)];
    for (when, nodes) in lists {
        if let Some(node) = nodes.iter().find(|n| graph.node_index(n).is_none()) {
            return Err(BreakpointError::UnknownNode {
                graph: graph.id.to_string(),
                node: node.clone(),
                when,
                nodes: graph.nodes.iter().map(|n| n.id.to_string()).collect(),
            });
        }
    }
    Ok(())
}

/// The breakpoints a run's log says it has now: the last ones set.
pub(crate) fn recorded(history: &[Event]) -> Option<Breakpoints> {
    history.iter().rev().find_map(|e| match &e.event {
        EventKind::BreakpointsSet { breakpoints } => Some(breakpoints.clone()),
        _ => None,
    })
}

/// Checks the answer at a breakpoint and normalises it to
/// `{"action": "continue"|"step", "set": {…}}`; the edit is checked as a
/// fork's (`unknown_field`, `invalid_value`) on the paused `state`.
///
/// # Errors
/// `Err(Ok(message))`: not the documented shape; `Err(Err(edit))`: the edit
/// was refused.
pub(crate) fn answer(
    graph: &Graph,
    state: &dyn crate::state::DynState,
    answer: Value,
) -> Result<Value, Result<String, EditError>> {
    let Value::Object(mut m) = answer else {
        return Err(Ok(
            "a breakpoint's answer is {\"action\": \"continue\"|\"step\", \"set\"?: {…}}".into(),
        ));
    };
    if let Some(k) = m.keys().find(|k| *k != "action" && *k != "set") {
        return Err(Ok(format!("unknown key `{k}` (known: action, set)")));
    }
    let action = match m.remove("action") {
        None => "continue".to_owned(),
        Some(Value::String(a)) if a == "continue" || a == "step" => a,
        Some(other) => {
            return Err(Ok(format!(
                "`action` is \"continue\" or \"step\" (\"abort\" ends the run), got {other}"
            )));
        }
    };
    let set = match m.remove("set") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(set)) => set,
        Some(_) => return Err(Ok("`set` maps fields to their new values".into())),
    };
    let edit: Vec<(String, Value)> = set.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    replaced(graph, state, &edit).map_err(Err)?;
    Ok(serde_json::json!({ "action": action, "set": set }))
}
