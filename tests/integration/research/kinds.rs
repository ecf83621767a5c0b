//! The generic pieces research.yaml is built from, in any graph: the `tool`
//! node kind (a record per call, `on_error`) and `fallback_model`.

use std::sync::Arc;

use serde_json::json;
use stategraph::events::{Event, EventKind};
use stategraph::graph::catalog::Registries;
use stategraph::llm::offline::OfflineModel;
use stategraph::llm::scripted::{ScriptedModel, Turn};
use stategraph::llm::{LlmError, Models};
use stategraph::runtime::{self, RunOptions, RunOutcome, Services};
use tokio::sync::mpsc;

/// Compiles one graph file against the built-in registries, with one prompt.
fn compile_one(yaml: &str) -> stategraph::graph::Catalog {
    let prompts = stategraph::graph::prompts::Prompts::from_sources(
        std::path::Path::new("prompts"),
        [("p.md", "You answer.")],
    );
    stategraph::graph::Catalog::from_sources(&[("g", yaml)], prompts, &Registries::default())
}

fn codes(cat: &stategraph::graph::Catalog) -> Vec<(&'static str, String)> {
    cat.diagnostics
        .iter()
        .map(|d| (d.code, d.message.clone()))
        .collect()
}

#[test]
fn tool_and_fallback_settings_are_checked_when_the_graph_loads() {
    let bad = compile_one(
        r#"
state: chat
entry: a
nodes:
  - id: a
    kind: tool
    tool: web_search
    tools: [basic]
    args: { query: "{{ item }}", n: "{{ nope }}", limit: 3 }
    output: answer
    on_error: maybe
  - id: b
    kind: tool
    tool: calculator
    tools: [web]
    output: tool_results
  - id: c
    kind: llm
    prompt: p.md
    fallback_model: chat
  - id: d
    kind: noop
    fallback_model: backup
edges: [a -> b, b -> c, c -> d, d -> END]
"#,
    );
    let got = codes(&bad);
    let expect = [
        ("unknown-tool", "no tool registry provides `web_search`"),
        (
            "invalid-setting",
            "`args.query` uses `item`, but node `a` is not the target of a map edge",
        ),
        (
            "invalid-setting",
            "`args.n` uses `nope`, but state `chat` has no such field",
        ),
        ("field-type", "field `answer` is string"),
        ("invalid-setting", "`on_error` is `maybe`"),
        (
            "invalid-setting",
            "`tool: calculator` is not among the tools the node lists",
        ),
        (
            "invalid-setting",
            "`fallback_model` names the node's own model role `chat`",
        ),
        (
            "setting-not-applicable",
            "`fallback_model` is not a setting of kind `noop`",
        ),
    ];
    for (code, text) in expect {
        assert!(
            got.iter().any(|(c, m)| *c == code && m.contains(text)),
            "missing {code}: {text} in {got:#?}"
        );
    }
    assert_eq!(got.len(), expect.len(), "{got:#?}");
    // A tool of a declared partition validates before it is configured.
    let ok = compile_one(
        r#"
state: chat
entry: a
nodes:
  - id: a
    kind: tool
    tool: web_search
    tools: [web]
    args: { query: "{{ query }}" }
    output: tool_results
  - id: b
    kind: llm
    prompt: p.md
    fallback_model: backup
edges: [a -> b, b -> END]
"#,
    );
    assert!(ok.diagnostics.is_empty(), "{:#?}", ok.diagnostics);
}

const CALC: &str = r#"
state: chat
entry: calc
nodes:
  - id: calc
    kind: tool
    tool: calculator
    args: ARGS
    output: tool_results
    on_error: ON_ERROR
edges: [calc -> END]
"#;

async fn run_calc(
    args: &str,
    on_error: &str,
    query: &str,
) -> (Result<RunOutcome, runtime::RunError>, Vec<Event>) {
    let cat = compile_one(&CALC.replace("ARGS", args).replace("ON_ERROR", on_error));
    let graph = Arc::clone(
        cat.get("g")
            .unwrap_or_else(|| panic!("{:#?}", cat.diagnostics)),
    );
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(64);
    let collect = tokio::spawn(async move {
        let mut v = Vec::new();
        while let Some(e) = rx.recv().await {
            v.push((*e).clone());
        }
        v
    });
    let services = Services::new(
        Models::single(Arc::new(OfflineModel::default())),
        Arc::clone(&Registries::default().tools),
    );
    let result = runtime::run(
        graph,
        Arc::new(services),
        json!({"query": query}),
        RunOptions {
            events: Some(tx),
            ..Default::default()
        },
    )
    .await;
    (result, collect.await.unwrap())
}

#[tokio::test]
async fn a_tool_node_writes_a_record_and_fails_or_continues_on_errors() {
    let (result, events) = run_calc(r#"{ expression: "{{ query }}" }"#, "fail", "6*7").await;
    let state = result.unwrap().state.to_json();
    let record = &state["tool_results"][0];
    assert_eq!(record["args"], json!({"expression": "6*7"}));
    assert_eq!(record["output"]["result"], 42, "{record}");
    let ready = events.iter().find_map(|e| match &e.event {
        EventKind::ToolCallReady { call_id, args, .. } => Some((call_id.clone(), args.clone())),
        _ => None,
    });
    assert_eq!(
        ready,
        Some(("calc:1:0:1".to_owned(), json!({"expression": "6*7"})))
    );
    // `precision` renders empty and is not in the calculator's schema: the
    // argument check fails, which is not worth retrying.
    let bad = r#"{ expression: "{{ query }}", precision: "{{ language }}" }"#;
    let (result, events) = run_calc(bad, "continue", "6*7").await;
    let state = result.unwrap().state.to_json();
    let record = &state["tool_results"][0];
    assert_eq!(record["tool"], "calculator");
    assert_eq!(
        record["args"],
        json!({"expression": "6*7", "precision": ""})
    );
    assert_eq!(record["error"]["type"], "validation_error", "{record}");
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, EventKind::ToolError { tool, .. } if tool == "calculator"))
    );
    let (result, events) = run_calc(bad, "fail", "6*7").await;
    let e = result.unwrap_err();
    assert_eq!(e.code(), "node_failed");
    assert!(e.to_string().contains("tool `calculator` failed"), "{e}");
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
            .count(),
        1,
        "a validation error is not retried"
    );
}

const FALLBACK: &str = r#"
state: chat
entry: answer
nodes:
  - id: answer
    kind: llm
    prompt: p.md
    model: main
    fallback_model: backup
edges: [answer -> END]
"#;

async fn run_fallback(
    primary: Turn,
) -> (Result<RunOutcome, runtime::RunError>, Arc<ScriptedModel>) {
    let cat = compile_one(FALLBACK);
    let graph = Arc::clone(cat.get("g").unwrap());
    let backup = ScriptedModel::new([Turn::text("from the backup")]).shared();
    let models = Models::single(backup.clone())
        .with_role("main", ScriptedModel::new([primary]).shared())
        .with_role("backup", backup.clone());
    let result = runtime::run(
        graph,
        Arc::new(Services::new(
            models,
            Arc::clone(&Registries::default().tools),
        )),
        json!({"query": "hi"}),
        RunOptions::default(),
    )
    .await;
    (result, backup)
}

#[tokio::test]
async fn fallback_model_answers_only_when_the_model_failed_before_answering() {
    let (result, backup) = run_fallback(Turn::Fail(LlmError::Connect("refused".into()))).await;
    assert_eq!(result.unwrap().state.to_json()["answer"], "from the backup");
    assert_eq!(backup.remaining(), 0);
    // Text already streamed cannot be taken back: no second answer.
    let partial = Turn::Chunks(
        vec![stategraph::llm::LlmChunk::Text("Half an ans".into())],
        Some(LlmError::Stream("connection reset".into())),
    );
    let (result, backup) = run_fallback(partial).await;
    assert!(result.unwrap_err().to_string().contains("connection reset"));
    assert_eq!(backup.remaining(), 1, "the backup was not asked");
}
