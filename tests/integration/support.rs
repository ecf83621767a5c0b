//! Shared helpers for integration tests.

use std::path::PathBuf;
use std::sync::Arc;

use stategraph::graph::catalog::{Catalog, Registries};
use stategraph::llm::{ChatModel, Models};
use stategraph::runtime::Services;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped graphs and prompts, compiled.
pub fn shipped_catalog() -> Catalog {
    let cat = Catalog::load(&root().join("graphs"), &root().join("prompts"), &Registries::default());
    assert!(!cat.has_errors(), "shipped graphs must be valid: {:#?}", cat.diagnostics);
    cat
}

/// Services with one model for every role and the built-in tools.
pub fn services(model: Arc<dyn ChatModel>) -> Arc<Services> {
    Arc::new(Services { models: Models::single(model), tools: Arc::clone(&Registries::default().tools) })
}
