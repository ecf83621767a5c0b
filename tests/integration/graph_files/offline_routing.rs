//! The built-in offline model routes any graph by that graph's own words:
//! a router's `keywords` (a regular expression per intent, in the graph
//! file) travel with the structured-output request, and the model knows no
//! app's intents (issue 36: apps out of the engine).

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::Models;
use stategraph::internals::llm::offline::OfflineModel;
use stategraph::internals::nodes::{Graph, Registries};
use stategraph::internals::runtime::{self, RunOptions, Services};

/// A new app: two intents no engine code names, each with its keywords.
const GRAPH: &str = r#"
entry: pick
state:
  fields:
    query: { type: string }
    route: { type: string, enum: [alpha, beta] }
    out: { type: array, items: { type: string }, reducer: append }
nodes:
  - id: pick
    kind: router
    prompt: route.md
    input: query
    output: route
    intents: [alpha, beta]
    KEYWORDS
    fallback: alpha
  - { id: a, kind: set, set: { out: "{{ ['a'] }}" } }
  - { id: b, kind: set, set: { out: "{{ ['b'] }}" } }
edges:
  - from: pick
    route: { on: route, cases: { alpha: a, beta: b } }
  - a -> END
  - b -> END
"#;

fn compile(keywords: &str) -> Arc<Graph> {
    let reg = Registries::default();
    let yaml = GRAPH.replace("KEYWORDS", keywords);
    let prompts = Prompts::from_sources(
        Path::new("prompts"),
        [("route.md", "Answer alpha for the day, beta for the night.")],
    );
    let cat = reg.from_sources(&[("g", yaml.as_str())], prompts);
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    Arc::clone(cat.get("g").unwrap())
}

/// Where the offline model routes `query`.
async fn routed(graph: &Arc<Graph>, query: &str) -> Value {
    let services = Arc::new(Services::new(
        Models::single(Arc::new(OfflineModel::default())),
        Arc::clone(&Registries::default().tools),
    ));
    let out = runtime::run(
        Arc::clone(graph),
        services,
        json!({ "query": query }),
        RunOptions::default(),
    )
    .await
    .unwrap();
    let state = out.state.to_json();
    assert_eq!(state["out"].as_array().map(Vec::len), Some(1), "{state}");
    json!([state["route"], state["out"][0]])
}

#[tokio::test]
async fn the_offline_model_routes_a_new_graph_by_its_own_keywords() {
    let g = compile(r#"keywords: { alpha: "sun|day", beta: "moon|night" }"#);
    // Neither text names an intent: only the graph's keywords tell them apart.
    assert_eq!(routed(&g, "The Moon tonight").await, json!(["beta", "b"]));
    assert_eq!(routed(&g, "a sunny morning").await, json!(["alpha", "a"]));
    // Matching nothing: the first intent.
    assert_eq!(routed(&g, "tea").await, json!(["alpha", "a"]));
    // Without keywords the same text takes the first intent, so it was the
    // keywords that chose `beta` above; a text naming an intent still picks it.
    let plain = compile("");
    assert_eq!(
        routed(&plain, "The Moon tonight").await,
        json!(["alpha", "a"])
    );
    assert_eq!(routed(&plain, "beta please").await, json!(["beta", "b"]));
}

#[test]
fn keywords_for_unknown_intents_or_bad_expressions_are_file_errors() {
    let reg = Registries::default();
    let prompts = || Prompts::from_sources(Path::new("prompts"), [("route.md", "Route.")]);
    for (keywords, code, needle) in [
        (r#"keywords: { gamma: "x" }"#, "unknown-intent", "gamma"),
        (
            r#"keywords: { beta: "(unclosed" }"#,
            "invalid-setting",
            "keywords.beta",
        ),
    ] {
        let yaml = GRAPH.replace("KEYWORDS", keywords);
        let cat = reg.from_sources(&[("g", yaml.as_str())], prompts());
        let d = cat
            .diagnostics
            .iter()
            .find(|d| d.is_error())
            .unwrap_or_else(|| panic!("{keywords} was accepted"));
        assert_eq!(d.code, code, "{d}");
        assert!(d.message.contains(needle), "{d}");
        // At the router's `keywords` (line 15 of GRAPH).
        assert_eq!(d.line, 15, "{d}");
    }
}
