//! examples/langgraph: LangGraph tutorials rebuilt as graph files, each run
//! with a scripted model down every branch.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::llm::ChatMessage;
use stategraph::llm::scripted::{ScriptedModel, Turn};
use stategraph::runtime::{self, RunOptions};

use crate::support::{registries, root, services};

fn catalog() -> stategraph::nodes::GraphCatalog {
    let dir = root().join("examples/langgraph");
    let cat = registries().load(&dir.join("graphs"), &dir.join("prompts"));
    assert!(cat.diagnostics.is_empty(), "{:#?}", cat.diagnostics);
    cat
}

fn system(req: &stategraph::llm::ChatRequest) -> String {
    match req.messages.first() {
        Some(ChatMessage::System { content }) => content.clone(),
        _ => String::new(),
    }
}

async fn run(graph: &str, model: ScriptedModel, input: Value) -> (Value, u32) {
    let cat = catalog();
    let g = Arc::clone(cat.get(graph).unwrap());
    let out = runtime::run(g, services(Arc::new(model)), input, RunOptions::default())
        .await
        .unwrap();
    (out.state.to_json(), out.steps)
}

#[tokio::test]
async fn reflection_takes_turns_for_seven_supersteps() {
    let model = ScriptedModel::from_fn(|req| {
        let n = req.messages.len();
        if system(req).starts_with("You are an essay assistant") {
            Turn::text(format!("essay {n}"))
        } else {
            Turn::text(format!("critique {n}"))
        }
    });
    let input =
        json!({"messages": [{"id": "u1", "role": "user", "content": "Write about the sea"}]});
    let (state, steps) = run("reflection", model, input).await;
    assert_eq!(steps, 7);
    let roles: Vec<&str> = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(state["answer"], state["messages"][7]["content"]);
}

fn jokester() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let s = system(req);
        if s.starts_with("Generate a list") {
            let subjects = if s.contains("nothing") {
                json!([])
            } else {
                json!(["cats", "dogs", "fish"])
            };
            Turn::json(json!({ "subjects": subjects }))
        } else if let Some(rest) = s.strip_prefix("Generate a joke about ") {
            let subject = rest.split('.').next().unwrap_or_default();
            Turn::json(json!({ "jokes": [format!("a joke about {subject}")] }))
        } else {
            let jokes = s.matches("a joke about").count();
            Turn::text(if jokes == 0 {
                "No jokes.".to_owned()
            } else {
                format!("best of {jokes}")
            })
        }
    })
}

#[tokio::test]
async fn map_reduce_writes_one_joke_per_subject_and_skips_an_empty_list() {
    let (state, steps) = run("map_reduce", jokester(), json!({"query": "animals"})).await;
    let mut jokes: Vec<&str> = state["jokes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap())
        .collect();
    jokes.sort_unstable();
    assert_eq!(
        jokes,
        [
            "a joke about cats",
            "a joke about dogs",
            "a joke about fish"
        ]
    );
    assert_eq!(state["answer"], "best of 3");
    assert_eq!(steps, 3, "subjects, the jokes in parallel, best");
    // No subjects: the joke node is skipped and the run still answers.
    let (state, _) = run("map_reduce", jokester(), json!({"query": "nothing"})).await;
    assert_eq!(state["jokes"], json!([]));
    assert_eq!(state["answer"], "No jokes.");
}
