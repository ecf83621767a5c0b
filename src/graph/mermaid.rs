//! Drawing compiled graphs: Mermaid (for READMEs and the API), DOT, and
//! the edge list the studio lays out itself.

use std::fmt::Write;

use petgraph::visit::EdgeRef;

use super::compiled::{CompiledGraph, EdgeKind, Slot};

fn name<N>(g: &CompiledGraph<N>, slot: Slot) -> String {
    match slot {
        Slot::Node(i) => g.nodes[i as usize].id.to_string(),
        Slot::End => "__end__".into(),
    }
}

/// The graph as a Mermaid flowchart.
pub(crate) fn mermaid<N>(g: &CompiledGraph<N>) -> String {
    let mut out = String::from("flowchart TD\n    __start__([START])\n    __end__([END])\n");
    for n in &g.nodes {
        let (open, close) = match &*n.kind {
            "router" => ("{{", "}}"),
            "agent" => ("[[", "]]"),
            "subgraph" => ("[/", "/]"),
            _ => ("[", "]"),
        };
        let _ = writeln!(
            out,
            "    {}{open}\"{}<br/><small>{}</small>\"{close}",
            n.id, n.id, n.kind
        );
    }
    for &e in &g.entry {
        let _ = writeln!(out, "    __start__ --> {}", g.nodes[e as usize].id);
    }
    for e in g.topology.edge_references() {
        let (a, b) = (
            name(g, g.topology[e.source()]),
            name(g, g.topology[e.target()]),
        );
        let line = match e.weight() {
            EdgeKind::Plain => format!("{a} --> {b}"),
            EdgeKind::Case(v) => format!("{a} -->|{}| {b}", v.replace('|', "/")),
            EdgeKind::Default => format!("{a} -.->|default| {b}"),
            EdgeKind::Map(field) => format!("{a} ==>|each {field}| {b}"),
            EdgeKind::Join => format!("{a} -->|join| {b}"),
        };
        let _ = writeln!(out, "    {line}");
    }
    out
}

/// One edge as the studio draws it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DrawnEdge {
    /// The node it leaves.
    pub from: String,
    /// The node it enters, `__end__` for END.
    pub to: String,
    /// `plain`, `case`, `default`, `map` or `join`.
    pub kind: &'static str,
    /// The case's value, or the field a map fans out over.
    pub label: Option<String>,
}

/// Every edge of the graph (START's excluded: `entry` lists them).
pub(crate) fn edges<N>(g: &CompiledGraph<N>) -> Vec<DrawnEdge> {
    g.topology
        .edge_references()
        .map(|e| {
            let (kind, label) = match e.weight() {
                EdgeKind::Plain => ("plain", None),
                EdgeKind::Case(v) => ("case", Some(v.clone())),
                EdgeKind::Default => ("default", Some("default".to_owned())),
                EdgeKind::Map(f) => ("map", Some(f.clone())),
                EdgeKind::Join => ("join", None),
            };
            DrawnEdge {
                from: name(g, g.topology[e.source()]),
                to: name(g, g.topology[e.target()]),
                kind,
                label,
            }
        })
        .collect()
}

/// The graph in Graphviz DOT.
pub(crate) fn dot<N>(g: &CompiledGraph<N>) -> String {
    let mut out = format!(
        "digraph \"{}\" {{\n    rankdir=TB;\n    __start__ [shape=circle,label=\"START\"];\n    __end__ [shape=doublecircle,label=\"END\"];\n",
        g.id
    );
    for n in &g.nodes {
        let shape = if &*n.kind == "router" {
            "diamond"
        } else {
            "box"
        };
        let _ = writeln!(
            out,
            "    \"{}\" [shape={shape},label=\"{}\\n({})\"];",
            n.id, n.id, n.kind
        );
    }
    for &e in &g.entry {
        let _ = writeln!(out, "    __start__ -> \"{}\";", g.nodes[e as usize].id);
    }
    for e in g.topology.edge_references() {
        let (a, b) = (
            name(g, g.topology[e.source()]),
            name(g, g.topology[e.target()]),
        );
        let attrs = match e.weight() {
            EdgeKind::Plain => String::new(),
            EdgeKind::Case(v) => format!(" [label=\"{}\"]", v.replace('"', "'")),
            EdgeKind::Default => " [label=\"default\",style=dashed]".into(),
            EdgeKind::Map(f) => format!(" [label=\"each {f}\",style=bold]"),
            EdgeKind::Join => " [label=\"join\"]".into(),
        };
        let _ = writeln!(out, "    \"{a}\" -> \"{b}\"{attrs};");
    }
    out.push_str("}\n");
    out
}
