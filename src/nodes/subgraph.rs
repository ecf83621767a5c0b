//! `subgraph`: runs another graph file as one node.
//!
//! The child runs with its own state type: `inputs` copies parent fields into
//! child fields (by default every field both states have, by name), and
//! `outputs` names the child fields written back to the parent — only those,
//! so the parent's reducers are never applied twice. The child's events go
//! into the parent's stream under `node/child_node` names.

use std::sync::Arc;

use super::{BuildCx, NodeContext, NodeError};
use crate::graph::CompiledGraph;
use crate::graph::diagnostic::name_hint;
use crate::graph::loc::Sp;
use crate::state::{FieldId, Patch};

const SETTINGS: &[&str] = &["graph", "inputs", "outputs"];

/// A node running a whole graph.
#[derive(Debug)]
pub struct Subgraph {
    graph: Arc<CompiledGraph>,
    /// (child field, parent field)
    inputs: Vec<(FieldId, FieldId)>,
    /// (parent field name, child field)
    outputs: Vec<(Arc<str>, FieldId)>,
}

impl Subgraph {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let n = cx.node;
        cx.accept(SETTINGS);
        let name = cx.require(&n.graph, "graph")?;
        let Some(graph) = cx.graphs.get(&name.value).cloned() else {
            let known: Vec<&str> = cx.graphs.keys().map(String::as_str).collect();
            cx.error(
                name.loc,
                "unknown-graph",
                format!("no valid graph `{}` to run as a subgraph", name.value),
                name_hint(&name.value, known.iter().copied()).or(Some(
                    "the graph must exist, be valid and not include this graph".into(),
                )),
            );
            return None;
        };
        let child = &*graph.state.schema;
        let parent = cx.schema?;
        let mut ok = true;
        let mut child_field = |cx: &mut BuildCx<'_>, sp: &Sp<String>| {
            let f = child.field(&sp.value);
            if f.is_none() {
                ok = false;
                cx.error(
                    sp.loc,
                    "unknown-field",
                    format!(
                        "subgraph state `{}` has no field `{}`",
                        child.name, sp.value
                    ),
                    name_hint(&sp.value, child.names()),
                );
            }
            f
        };
        let mut inputs = Vec::new();
        match &n.inputs {
            Some(map) => {
                for (c, p) in &map.entries {
                    let cf = child_field(cx, c);
                    let pf = cx.field(p, "a field", |_| true);
                    if let (Some(cf), Some(pf)) = (cf, pf) {
                        inputs.push((cf, pf));
                    }
                }
            }
            None => {
                for f in &child.fields {
                    if let (Some(cf), Some(pf)) = (child.field(&f.name), parent.field(&f.name)) {
                        inputs.push((cf, pf));
                    }
                }
            }
        }
        let mut outputs = Vec::new();
        let Some(map) = &n.outputs else {
            cx.error(
                n.kind.loc,
                "missing-setting",
                format!(
                    "subgraph node `{}` needs `outputs` (parent field: child field)",
                    n.id.value
                ),
                None,
            );
            return None;
        };
        for (p, c) in &map.entries {
            let cf = child_field(cx, c);
            let pf = cx.field(p, "a field", |_| true);
            if let Some(pf) = pf {
                cx.writes.push(pf);
            }
            if let (Some(cf), Some(_)) = (cf, pf) {
                outputs.push((Arc::from(p.value.as_str()), cf));
            }
        }
        ok.then_some(Self {
            graph,
            inputs,
            outputs,
        })
    }

    /// The graph this node runs.
    pub fn graph(&self) -> &Arc<CompiledGraph> {
        &self.graph
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let mut child = self.graph.state.default_state();
        for (c, p) in &self.inputs {
            let value = cx.state.get(*p);
            if !value.is_null() {
                child
                    .apply(*c, &value)
                    .map_err(|e| NodeError::Failed(format!("subgraph input: {e}")))?;
            }
        }
        let prefix = cx.events.node().to_string();
        let done = Box::pin(crate::runtime::run_nested(
            Arc::clone(&self.graph),
            cx.services,
            child,
            Arc::clone(cx.events.sink()),
            &prefix,
            cx.cancel,
        ))
        .await
        .map_err(|e| NodeError::Subgraph {
            graph: self.graph.id.to_string(),
            message: e.to_string(),
        })?;
        let mut patch = Patch::new();
        for (p, c) in &self.outputs {
            patch.insert(Arc::clone(p), done.get(*c));
        }
        Ok(patch)
    }
}
