//! Graph files and prompts carried in memory: a binary's built-in copies.
//!
//! The library embeds no graph: the `stategraph` binary builds its shipped
//! `graphs/` and `prompts/` into itself (its build script lists them) and
//! hands them over as a [`Bundle`], served when the graph directory does
//! not exist — so `stategraph serve` works from any directory, while an
//! application embedding the engine carries only its own files.

use std::path::Path;

use super::catalog::{Catalog, CatalogEnv};
use super::kinds::NodeKinds;
use super::prompts::Prompts;

/// Graph files (`(id, YAML)`) and prompts (`(path, template)`) in memory.
#[derive(Clone, Copy, Debug)]
pub struct Bundle {
    /// `(graph id, file text)`.
    pub graphs: &'static [(&'static str, &'static str)],
    /// `(prompt path under the prompt directory, template text)`.
    pub prompts: &'static [(&'static str, &'static str)],
}

impl Bundle {
    /// The bundle compiled.
    pub fn catalog<K: NodeKinds>(&self, env: CatalogEnv<'_, K>) -> Catalog<K::Node> {
        let prompts = Prompts::from_sources(
            Path::new("(built-in)/prompts"),
            self.prompts.iter().copied(),
        );
        Catalog::from_sources(self.graphs, prompts, env)
    }
}
