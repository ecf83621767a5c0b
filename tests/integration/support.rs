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

/// Runs the AI SDK's own parser (../shared/tools/aisdk-validate) over an SSE
/// capture; returns (passed, report).
pub fn aisdk_validate(sse: &str) -> (bool, String) {
    let tool = root().join("../shared/tools/aisdk-validate");
    assert!(
        tool.join("node_modules/ai").is_dir(),
        "the AI SDK validator is not installed: run `npm ci` in {} (tests/run.sh does)",
        tool.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("capture.sse");
    std::fs::write(&file, sse).expect("write capture");
    validate_args(&[file.to_string_lossy().as_ref(), "--json"])
}

/// The validator's `--json` report from its output.
pub fn report_json(report: &str) -> serde_json::Value {
    report.find('{').and_then(|i| serde_json::from_str(&report[i..]).ok()).unwrap_or_default()
}

/// Runs the validator with arguments (a URL or file, flags).
pub fn validate_args(args: &[&str]) -> (bool, String) {
    let tool = root().join("../shared/tools/aisdk-validate");
    let out = std::process::Command::new("node")
        .arg(tool.join("validate.mjs"))
        .args(args)
        .output()
        .expect("node runs");
    let report = format!("{}\n{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    (out.status.success(), report)
}
