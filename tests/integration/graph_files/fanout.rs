//! An empty map fan-out has declared behaviour: `on_empty: skip` (the
//! default) goes on from the target's edges as if it ran with nothing to
//! do; `on_empty: fail` fails the run, saying so. Never a run that just
//! stops with no answer.

use serde_json::json;
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::ScriptedModel;
use stategraph::internals::runtime::{self, RunOptions};

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

/// A graph whose `write` node calls the model with prompt `p.md`.
fn strict_graph() -> String {
    r#"
state:
  fields:
    items:  { type: array }
    answer: { type: string, reducer: last }
entry: start
nodes:
  - id: start
    kind: noop
  - id: write
    kind: llm
    prompt: p.md
    output: answer
edges:
  - start -> write
  - write -> END
"#
    .to_owned()
}

async fn render(template: &str) -> Result<String, String> {
    let prompts = Prompts::from_sources(&root().join("prompts"), [("p.md", template)]);
    let cat = registries().from_sources(&[("strict", &strict_graph())], prompts);
    assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
    let g = std::sync::Arc::clone(cat.get("strict").unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let s = std::sync::Arc::clone(&seen);
    let model = std::sync::Arc::new(ScriptedModel::from_fn(move |req| {
        if let Some(stategraph::internals::llm::ChatMessage::System { content }) =
            req.messages.first()
        {
            *s.lock().unwrap() = content.clone();
        }
        stategraph::internals::llm::scripted::Turn::text("ok")
    }));
    // What the built-in web_search returns: `snippet`, not `content`.
    let input = json!({"items": [{"title": "Sea", "url": "https://x", "snippet": "Salt water."}]});
    runtime::run(g, services(model), input, RunOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let out = seen.lock().unwrap().clone();
    Ok(out)
}

#[tokio::test]
async fn a_template_reading_what_is_not_there_fails_instead_of_rendering_empty() {
    // The RAG bug of the issue: `content` is not there, and the answer got
    // an empty context. Now the node fails, naming the template.
    let e = render("Context: {% for s in items %}{{ s.content }}{% endfor %}")
        .await
        .unwrap_err();
    assert!(e.contains("p.md") && e.contains("undefined"), "{e}");
    assert_eq!(
        render("Context: {% for s in items %}{{ s.snippet }}{% endfor %}")
            .await
            .unwrap(),
        "Context: Salt water."
    );
    // Asking is allowed, and so is an explicit default.
    assert_eq!(
        render("{% for s in items %}{% if s.content %}x{% else %}none{% endif %}{% endfor %}")
            .await
            .unwrap(),
        "none"
    );
    assert_eq!(
        render("[{% for s in items %}{{ s.content | default('') }}{% endfor %}]")
            .await
            .unwrap(),
        "[]"
    );
}
