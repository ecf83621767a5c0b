//! An empty map fan-out has declared behaviour: `on_empty: skip` (the
//! default) goes on from the target's edges as if it ran with nothing to
//! do; `on_empty: fail` fails the run, saying so. Never a run that just
//! stops with no answer.

use serde_json::json;
use stategraph::graph::prompts::Prompts;
use stategraph::llm::scripted::ScriptedModel;
use stategraph::runtime::{self, RunOptions};

use crate::support::{registries, root, services};

fn graph(on_empty: &str) -> String {
    format!(
        r#"
state:
  fields:
    queries: {{ type: array, items: {{ type: string }} }}
    notes:   {{ type: array, items: {{ type: string }}, reducer: append }}
    answer:  {{ type: string }}
entry: plan
nodes:
  - id: plan
    kind: noop
  - id: note
    kind: set
    set: {{ notes: "{{{{ 'note on ' ~ item }}}}" }}
  - id: answer
    kind: set
    set: {{ answer: "{{{{ notes | length }}}} notes" }}
edges:
  - from: plan
    map: {{ over: queries, to: note{on_empty} }}
  - note -> answer
  - answer -> END
"#
    )
}

async fn run(on_empty: &str, queries: serde_json::Value) -> Result<serde_json::Value, String> {
    let prompts = Prompts::from_sources(&root().join("prompts"), []);
    let cat = registries().from_sources(&[("fan", &graph(on_empty))], prompts);
    assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
    let g = std::sync::Arc::clone(cat.get("fan").unwrap());
    let model = std::sync::Arc::new(ScriptedModel::new([]));
    runtime::run(
        g,
        services(model),
        json!({ "queries": queries }),
        RunOptions::default(),
    )
    .await
    .map(|o| o.state.to_json())
    .map_err(|e| e.to_string())
}

#[tokio::test]
async fn an_empty_fan_out_skips_its_target_by_default_and_fails_when_told() {
    let full = run("", json!(["a", "b"])).await.unwrap();
    assert_eq!(full["answer"], "2 notes");
    // Default `skip`: the run goes on past `note` and answers.
    let empty = run("", json!([])).await.unwrap();
    assert_eq!(empty["answer"], "0 notes");
    let skip = run(", on_empty: skip", json!([])).await.unwrap();
    assert_eq!(skip["answer"], "0 notes");
    let fail = run(", on_empty: fail", json!([])).await.unwrap_err();
    assert!(
        fail.contains("the list for `note` is empty (`on_empty: fail`)"),
        "{fail}"
    );
    // `fail` changes nothing when there are items.
    let fine = run(", on_empty: fail", json!(["x"])).await.unwrap();
    assert_eq!(fine["answer"], "1 notes");
}
