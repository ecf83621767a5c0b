//! Tools checked at load: with `graphs/tools.lock.json` (what the MCP
//! servers list, written by `stategraph tools lock`), `check` catches a
//! tool typo, a bound or filled argument no tool takes and an `approve:`
//! of a tool the node does not offer — each at its file:line:col, with
//! "did you mean" — and accepts `approve:` of any tool the node offers
//! without `external_tools`.

use std::path::Path;

use serde_json::json;
use stategraph::internals::graph::Diagnostic;

use crate::support::registries;

/// What the `business` MCP server lists.
fn lock() -> serde_json::Value {
    json!({"version": 1, "servers": {"business": {"partition": "business", "tools": [
        {"name": "retrieve", "description": "Search the knowledge base",
         "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
        {"name": "cancel_order", "description": "Cancel an order",
         "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}, "customer_id": {"type": "string"}}}}
    ]}}})
}

/// Loads `graph` (as `g.yaml`) from a directory holding `lock` (if any);
/// the diagnostics.
fn check(graph: &str, lock: Option<&str>) -> Vec<Diagnostic> {
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    let prompts = dir.path().join("prompts");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::write(prompts.join("p.md"), "You help.").unwrap();
    std::fs::write(graphs.join("g.yaml"), graph).unwrap();
    if let Some(l) = lock {
        std::fs::write(graphs.join("tools.lock.json"), l).unwrap();
    }
    registries().load(&graphs, &prompts).diagnostics
}

/// An agent whose extra settings are `node` (indented as node keys).
fn graph(node: &str) -> String {
    format!(
        "state:\n  fields:\n    query: {{ type: string }}\n    answer: {{ type: string }}\nentry: agent\nnodes:\n  - id: agent\n    kind: agent\n    prompt: p.md\n    input: query\n{node}\nedges: [agent -> END]\n"
    )
}

fn find<'a>(d: &'a [Diagnostic], code: &str) -> &'a Diagnostic {
    d.iter()
        .find(|x| x.code == code)
        .unwrap_or_else(|| panic!("no {code} in {d:#?}"))
}

fn at(d: &Diagnostic) -> (String, u32, u32) {
    let file = Path::new(&*d.file)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    (file, d.line, d.column)
}

#[test]
fn a_locked_servers_tools_are_checked_with_did_you_mean() {
    let lock = lock().to_string();
    let lock = Some(lock.as_str());

    // The typo of the issue: `retreive`.
    let d = check(&graph("    tools: [basic, retreive]"), lock);
    let typo = find(&d, "unknown-tool");
    assert_eq!(at(typo), ("g.yaml".into(), 11, 20));
    assert!(
        typo.hint.as_deref().unwrap().contains("retrieve"),
        "{typo:?}"
    );

    // The whole partition, and approval of one of its tools: no
    // `external_tools` needed.
    let ok = check(
        &graph("    tools: [business]\n    approve: [cancel_order]"),
        lock,
    );
    assert!(ok.iter().all(|d| !d.is_error()), "{ok:#?}");

    let d = check(
        &graph("    tools: [business]\n    approve: [cancel_ordr]"),
        lock,
    );
    let approve = find(&d, "invalid-setting");
    assert_eq!(at(approve), ("g.yaml".into(), 12, 15));
    assert!(approve.message.contains("does not offer it"), "{approve:?}");
    assert!(
        approve.hint.as_deref().unwrap().contains("cancel_order"),
        "{approve:?}"
    );

    // A bound argument the tool does not take.
    let d = check(
        &graph("    tools:\n      - { name: cancel_order, args: { customer: \"{{ query }}\" } }"),
        lock,
    );
    let bound = find(&d, "unknown-argument");
    assert_eq!(at(bound), ("g.yaml".into(), 12, 39));
    assert!(
        bound.hint.as_deref().unwrap().contains("customer_id"),
        "{bound:?}"
    );

    // A fill no offered tool takes.
    let d = check(
        &graph("    tools: [business]\n    fill_args: { custmer_id: \"{{ query }}\" }"),
        lock,
    );
    let fill = find(&d, "unknown-argument");
    assert_eq!(at(fill), ("g.yaml".into(), 12, 18));
    assert!(
        fill.hint.as_deref().unwrap().contains("customer_id"),
        "{fill:?}"
    );
}

#[test]
fn without_a_lock_the_hint_says_how_to_get_one_and_a_bad_lock_is_named() {
    let d = check(&graph("    tools: [retreive]"), None);
    let typo = find(&d, "unknown-tool");
    assert!(
        typo.hint
            .as_deref()
            .unwrap()
            .contains("stategraph tools lock"),
        "{typo:?}"
    );
    let d = check(&graph("    tools: [basic]"), Some("{\"version\": 1}"));
    let bad = find(&d, "tool-lock");
    assert_eq!(at(bad), ("tools.lock.json".into(), 1, 1));
    assert!(bad.message.contains("stategraph tools lock"), "{bad:?}");
}
