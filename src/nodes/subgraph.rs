//! `subgraph`: runs another graph file as one node.
//!
//! The child runs with its own state type: `inputs` copies parent fields into
//! child fields (by default every field both states have, by name), and
//! `outputs` names the child fields written back to the parent — only those,
//! so the parent's reducers are never applied twice. The child's events go
//! into the parent's stream under `node/child_node` names.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{BuildCx, Graph, Kind, Node, NodeContext, NodeError};
use crate::graph::SettingDoc;
use crate::graph::diagnostic::name_hint;
use crate::graph::kinds::schema;
use crate::graph::loc::Sp;
use crate::graph::spec::Surface;
use crate::state::{FieldId, Patch, StateSchema};

/// The kind.
pub(super) fn kind() -> Kind {
    Kind::new(
        "subgraph",
        "Runs another graph file as one node.",
        &[
            SettingDoc::new("graph", schema::STRING, "the graph to run"),
            SettingDoc::new(
                "inputs",
                schema::NAME_MAP,
                "child field: parent field (default: fields both states have)",
            ),
            SettingDoc::new(
                "outputs",
                schema::NAME_MAP,
                "parent field: child field written back",
            ),
        ],
        Surface::Hidden,
        |cx| Subgraph::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// A node running a whole graph.
#[derive(Debug)]
struct Subgraph {
    graph: Arc<Graph>,
    /// (child field, parent field)
    inputs: Vec<(FieldId, FieldId)>,
    /// (parent field name, child field)
    outputs: Vec<(Arc<str>, FieldId)>,
}

impl Subgraph {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let name = cx.require_string("graph").ok()?;
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
        let child = Arc::clone(&graph.state.schema);
        let parent = cx.schema?;
        let mut ok = true;
        let inputs = match cx.name_map("inputs") {
            Ok(Some(map)) => {
                let mut inputs = Vec::new();
                for (c, p) in &map.entries {
                    let cf = child_field(cx, &child, c);
                    let pf = cx.field(p, "a field", |_| true);
                    match (cf, pf) {
                        (Some(cf), Some(pf)) => inputs.push((cf, pf)),
                        _ => ok = false,
                    }
                }
                inputs
            }
            Ok(None) => child
                .fields
                .iter()
                .filter_map(|f| Some((child.field(&f.name)?, parent.field(&f.name)?)))
                .collect(),
            Err(_) => return None,
        };
        let Ok(Some(map)) = cx.name_map("outputs") else {
            let id = cx.id().to_owned();
            cx.error(
                cx.kind_loc(),
                "missing-setting",
                format!("subgraph node `{id}` needs `outputs` (parent field: child field)"),
                None,
            );
            return None;
        };
        let mut outputs = Vec::new();
        for (p, c) in &map.entries {
            let cf = child_field(cx, &child, c);
            let pf = cx.field(p, "a field", |_| true);
            if let Some(pf) = pf {
                cx.writes(pf);
            }
            match (cf, pf) {
                (Some(cf), Some(_)) => outputs.push((Arc::from(p.value.as_str()), cf)),
                _ => ok = false,
            }
        }
        cx.runs_subgraph(Arc::clone(&graph));
        ok.then_some(Self {
            graph,
            inputs,
            outputs,
        })
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let mut child = self.graph.state.default_state();
        for (c, p) in &self.inputs {
            let value = cx.state.get(*p);
            if !value.is_null() {
                child
                    .apply(*c, &value)
                    .map_err(|e| NodeError::Failed(format!("subgraph input: {e}")))?;
            }
        }
        let done = cx
            .subgraphs
            .run_subgraph(Arc::clone(&self.graph), child, &cx)
            .await
            .map_err(|message| NodeError::Subgraph {
                graph: self.graph.id.to_string(),
                message,
            })?;
        let mut patch = Patch::new();
        for (p, c) in &self.outputs {
            patch.insert(Arc::clone(p), done.get(*c));
        }
        Ok(patch)
    }
}

impl Node for Subgraph {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }
}

/// A field of the child's state named in `inputs` / `outputs`.
fn child_field(cx: &mut BuildCx<'_>, child: &StateSchema, sp: &Sp<String>) -> Option<FieldId> {
    let f = child.field(&sp.value);
    if f.is_none() {
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
}
