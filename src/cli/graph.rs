//! `stategraph graph NAME`: draw a graph.

use crate::graph::mermaid::{dot, mermaid};
use crate::nodes::Graph;

/// Output formats of `stategraph graph`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphFormat {
    /// Mermaid flowchart.
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

/// The drawing of `g`.
pub fn graph(g: &Graph, format: GraphFormat) -> String {
    match format {
        GraphFormat::Mermaid => mermaid(g),
        GraphFormat::Dot => dot(g),
    }
}
