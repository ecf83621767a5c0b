//! Checking test files against the graphs they name: every graph, node,
//! state field, tool and route value a case mentions must exist, and a
//! value set or expected in a field must have its type — found by `check`
//! before anything runs, each at its `file:line:col`.

use super::spec::{Case, Expect, Start, Stub, TestFile};
use crate::graph::Transition;
use crate::graph::diagnostic::{Diagnostic, Diagnostics, name_hint};
use crate::graph::loc::Sp;
use crate::nodes::{Graph, GraphCatalog};
use crate::tools::ToolRegistry;

/// The diagnostics of `file` against `catalog` and the `tools` registered.
pub fn check_test_file(
    file: &TestFile,
    catalog: &GraphCatalog,
    tools: &ToolRegistry,
) -> Vec<Diagnostic> {
    let mut d = Diagnostics::new(std::sync::Arc::clone(&file.display));
    for case in &file.cases {
        let Some(graph) = catalog.get(&case.graph.value) else {
            if catalog.failed.contains(&case.graph.value) {
                d.error(
                    case.graph.loc,
                    "invalid-graph",
                    format!(
                        "graph `{}` has errors, so its cases cannot run",
                        case.graph.value
                    ),
                    Some("fix the graph file first (`stategraph check`)".into()),
                );
            } else {
                d.error(
                    case.graph.loc,
                    "unknown-graph",
                    format!("no graph `{}`", case.graph.value),
                    name_hint(&case.graph.value, catalog.graphs.keys().map(String::as_str)),
                );
            }
            continue;
        };
        Checker {
            d: &mut d,
            graph,
            tools,
            case,
        }
        .case();
    }
    d.into_vec()
}

struct Checker<'a> {
    d: &'a mut Diagnostics,
    graph: &'a Graph,
    tools: &'a ToolRegistry,
    case: &'a Case,
}

impl Checker<'_> {
    fn case(&mut self) {
        for t in &self.case.real_tools {
            if !self.tools.knows(&t.value) {
                self.d.error(
                    t.loc,
                    "unknown-tool",
                    format!(
                        "`real_tools` names `{}`, which no registry or configuration provides",
                        t.value
                    ),
                    name_hint(&t.value, self.tools.names().iter().map(String::as_str)),
                );
            }
        }
        for turn in &self.case.turns {
            if let Start::Input(input) = &turn.start {
                for (field, value) in &input.state {
                    self.field_value(field, value, "input");
                }
            }
            for (node, _) in &turn.models {
                if node.value != "*" {
                    self.node(node);
                }
            }
            for stub in &turn.tools {
                self.stub(stub);
            }
            self.expect(&turn.expect, &turn.tools);
        }
    }

    fn node(&mut self, n: &Sp<String>) -> bool {
        let (top, rest) = match n.value.split_once('/') {
            Some((t, r)) => (t, Some(r)),
            None => (n.value.as_str(), None),
        };
        let Some(idx) = self.graph.node_index(top) else {
            self.d.error(
                n.loc,
                "unknown-node",
                format!("graph `{}` has no node `{top}`", self.graph.id),
                name_hint(top, self.graph.nodes.iter().map(|n| &*n.id)),
            );
            return false;
        };
        if let Some(rest) = rest {
            let inner = self.graph.nodes[idx as usize].subgraph.as_ref();
            let known = inner.is_some_and(|g| {
                g.node_index(rest.split('/').next().unwrap_or(rest))
                    .is_some()
            });
            if !known {
                self.d.error(
                    n.loc,
                    "unknown-node",
                    format!("`{top}` runs no subgraph node `{rest}`"),
                    None,
                );
                return false;
            }
        }
        true
    }

    fn field_value(&mut self, field: &Sp<String>, value: &Sp<serde_json::Value>, what: &str) {
        let schema = &self.graph.state.schema;
        let Some(id) = schema.field(&field.value) else {
            self.d.error(
                field.loc,
                "unknown-field",
                format!(
                    "the state of graph `{}` has no field `{}` ({what})",
                    self.graph.id, field.value
                ),
                name_hint(&field.value, schema.fields.iter().map(|f| &*f.name)),
            );
            return;
        };
        let spec = &schema.fields[id.0 as usize];
        if let Err(m) = spec.ty.check(&value.value) {
            let at = if m.path.is_empty() {
                String::new()
            } else {
                format!(" at {}", m.path)
            };
            self.d.error(
                value.loc,
                "invalid-field-value",
                format!("`{}` takes {}, not {}{at}", field.value, m.expected, m.got),
                None,
            );
        }
    }

    /// The node ids that list `entry` (a tool or a partition).
    fn offered(&self, entry: &str) -> bool {
        self.graph
            .nodes
            .iter()
            .any(|n| n.tools.iter().any(|t| t == entry))
    }

    fn stub(&mut self, s: &Stub) {
        if s.name.value == "http" {
            let http_nodes: Vec<&str> = self
                .graph
                .nodes
                .iter()
                .filter(|n| &*n.kind == "http")
                .map(|n| &*n.id)
                .collect();
            match &s.node {
                Some(n) if !http_nodes.contains(&n.value.as_str()) => self.d.error(
                    n.loc,
                    "unknown-node",
                    format!("graph `{}` has no `http` node `{}`", self.graph.id, n.value),
                    name_hint(&n.value, http_nodes.iter().copied()),
                ),
                None if http_nodes.is_empty() => self.d.error(
                    s.name.loc,
                    "unknown-tool",
                    format!("graph `{}` has no `http` node to stub", self.graph.id),
                    None,
                ),
                _ => {}
            }
            return;
        }
        if let Some(n) = &s.node {
            self.node(n);
        }
        let partition = s
            .partition
            .as_ref()
            .map(|p| p.value.clone())
            .or_else(|| self.tools.spec(&s.name.value).map(|t| t.partition));
        let reachable =
            self.offered(&s.name.value) || partition.as_deref().is_some_and(|p| self.offered(p));
        if !reachable {
            let lists: Vec<String> = self
                .graph
                .nodes
                .iter()
                .flat_map(|n| n.tools.iter().cloned())
                .collect();
            let (code, message) = match &s.partition {
                Some(p) => (
                    "unknown-tool",
                    format!(
                        "no node of graph `{}` is offered partition `{}`",
                        self.graph.id, p.value
                    ),
                ),
                None => (
                    "unknown-tool",
                    format!(
                        "no node of graph `{}` is offered `{}`",
                        self.graph.id, s.name.value
                    ),
                ),
            };
            let hint = if lists.is_empty() {
                "this graph's nodes call no tools".to_owned()
            } else {
                format!(
                    "its nodes list {}; give the stub `partition:` when the tool comes from one (an MCP server's)",
                    dedup(lists).join(", ")
                )
            };
            self.d.error(s.name.loc, code, message, Some(hint));
        }
    }

    fn expect(&mut self, e: &Expect, stubs: &[Stub]) {
        let mut nodes: Vec<&Sp<String>> = Vec::new();
        if let Some(p) = &e.path {
            nodes.extend(p.value.iter());
        }
        if let Some(n) = &e.nodes {
            nodes.extend(n.set.iter().flat_map(|s| s.value.iter()));
            nodes.extend(n.includes.iter().chain(&n.excludes));
        }
        nodes.extend(e.after.iter().map(|(n, _)| n));
        for n in nodes {
            self.node(n);
        }
        for (node, values) in &e.routes {
            self.route(node, values);
        }
        for (field, value) in &e.state {
            self.field_value(field, value, "expected");
        }
        for (_, fields) in &e.after {
            for (field, value) in fields {
                self.field_value(field, value, "expected");
            }
        }
        if let Some(calls) = &e.tool_calls {
            for c in &calls.value {
                if let Some(n) = &c.node {
                    self.node(n);
                }
                let name = &c.name.value;
                let known = name == "http"
                    || stubs.iter().any(|s| s.name.value == *name)
                    || self.tools.spec(name).is_some()
                    || self.offered(name)
                    || self
                        .tools
                        .expand(
                            &self
                                .case
                                .real_tools
                                .iter()
                                .map(|t| t.value.clone())
                                .collect::<Vec<_>>(),
                        )
                        .contains(name);
                if !known {
                    self.d.error(
                        c.name.loc,
                        "unknown-tool",
                        format!("the case expects a call of `{name}`, which is neither stubbed, named in `real_tools`, nor registered"),
                        Some("stub it in `tools:` (calls can only reach stubs and real tools)".into()),
                    );
                }
            }
        }
    }

    fn route(&mut self, node: &Sp<String>, values: &Sp<Vec<String>>) {
        if !self.node(node) {
            return;
        }
        let Some(idx) = self.graph.node_index(&node.value) else {
            return;
        };
        let Some(route) = self.graph.nodes[idx as usize]
            .out
            .iter()
            .find_map(|t| match t {
                Transition::Route(r) => Some(r),
                _ => None,
            })
        else {
            self.d.error(
                node.loc,
                "unknown-route",
                format!(
                    "`{}` has no conditional edge, so it routes on nothing",
                    node.value
                ),
                Some("expect its path instead (`path:` or `nodes:`)".into()),
            );
            return;
        };
        let cases: Vec<&str> = route.cases.iter().map(|(k, _)| k.as_str()).collect();
        // A router declares the values it writes: another can never come.
        let declared = self.graph.nodes[idx as usize]
            .declared
            .as_ref()
            .map(|(_, v)| v);
        for v in &values.value {
            if cases.contains(&v.as_str()) || declared.is_some_and(|d| d.contains(v)) {
                continue;
            }
            let message = format!(
                "`{}` routes on `{}`, and no case of it is `{v}`",
                node.value, route.field_name
            );
            let hint = Some(format!(
                "its cases: {}{}",
                cases.join(", "),
                if route.default.is_some() {
                    " (other values take the default)"
                } else {
                    ""
                }
            ));
            if route.default.is_some() && declared.is_none() {
                self.d.warning(values.loc, "unknown-route", message, hint);
            } else {
                self.d.error(values.loc, "unknown-route", message, hint);
            }
        }
    }
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}
