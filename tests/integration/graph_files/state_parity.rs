//! The chat graph with its state declared in the graph file and with the
//! Rust `ChatState` (same fields, types and reducers) behaves identically:
//! for any conversation, forced intent and model answer, the two runs emit
//! the same events (ids, timestamps and durations aside).

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest};
use stategraph::internals::nodes::Graph;
use stategraph::internals::runtime::{self, RunOptions};
use tokio::sync::mpsc;

use crate::support::{registries, root, services};

const INTENTS: &[&str] = &[
    "QUICK_ANSWER",
    "RESEARCH",
    "EXPLAIN",
    "CLARIFY",
    "OUT_OF_SCOPE",
    "DIRECT",
];

/// The shipped chat graph, and the same file with `state: chat` (the Rust
/// type the tests register) instead of its declared fields.
fn graphs() -> (Arc<Graph>, Arc<Graph>) {
    let yaml = std::fs::read_to_string(root().join("graphs/chat.yaml")).unwrap();
    let start = yaml.find("\nstate:\n").unwrap() + 1;
    let end = start + yaml[start..].find("\n\n").unwrap();
    let rust = format!("{}state: chat{}", &yaml[..start], &yaml[end..]);
    let compile = |text: &str| {
        let cat =
            registries().from_sources(&[("chat", text)], Prompts::load(&root().join("prompts")));
        assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
        Arc::clone(cat.get("chat").unwrap())
    };
    assert!(
        yaml.contains("\n  fields:\n    messages:") && !rust.contains("\n  fields:\n    messages:")
    );
    (compile(&yaml), compile(&rust))
}

/// A model whose answers depend on what the request carries (so state that
/// renders differently into a prompt shows up as different events).
fn model(intent: &'static str) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_fn(move |req: &ChatRequest| {
        let format = req.response_format.as_ref().map(|f| f.name.as_str());
        match format {
            Some("intent_classification") => {
                return Turn::json(
                    json!({"intent": intent, "reasoning": "scripted", "missing_slots": [], "detected_language": "en"}),
                );
            }
            Some("followups") => return Turn::json(json!({"questions": ["Why?", "How?"]})),
            Some(other) if other.contains("summary") => return Turn::json(json!({"summary": "s"})),
            _ => {}
        }
        let called = req
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::Tool { .. }));
        if !req.tools.is_empty() && !called {
            return Turn::tool("calculator", json!({"expression": "6*7"}));
        }
        let seen: usize = req
            .messages
            .iter()
            .map(|m| serde_json::to_string(m).map_or(0, |s| s.len()))
            .sum();
        Turn::text(format!(
            "answer after {} messages, {seen} bytes",
            req.messages.len()
        ))
    }))
}

/// A run's events as JSON, without what differs between any two runs.
async fn events(graph: Arc<Graph>, intent: &'static str, input: Value) -> Vec<Value> {
    let (tx, mut rx) = mpsc::channel(1024);
    let opts = RunOptions {
        events: Some(tx),
        ..Default::default()
    };
    let run = tokio::spawn(runtime::run(graph, services(model(intent)), input, opts));
    let mut out = Vec::new();
    while let Some(e) = rx.recv().await {
        let mut v = serde_json::to_value(&*e).unwrap();
        scrub(&mut v);
        out.push(v);
    }
    run.await.unwrap().unwrap();
    out
}

fn scrub(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in ["run_id", "at", "duration_us", "graph_version", "stream"] {
                map.remove(key);
            }
            map.values_mut().for_each(scrub);
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

fn input(history: &[String], forced: Option<&str>) -> Value {
    let messages: Vec<Value> = history
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"id": format!("m{i}"), "role": role, "content": text})
        })
        .collect();
    json!({
        "messages": messages,
        "query": history.last().cloned().unwrap_or_default(),
        "forced_intent": forced,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn declared_and_rust_chat_states_emit_the_same_events(
        turns in 0usize..14,
        words in proptest::collection::vec("[a-z]{1,8}( [a-z]{1,8}){0,4}", 1..4),
        intent in 0usize..INTENTS.len(),
        forced in proptest::option::of(0usize..INTENTS.len()),
    ) {
        // An odd number of messages, the newest the user's; past 20 the
        // summarizer runs.
        let history: Vec<String> = (0..turns * 2 + 1).map(|i| words[i % words.len()].clone()).collect();
        let input = input(&history, forced.map(|f| INTENTS[f]));
        let (declared, rust) = graphs();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let a = rt.block_on(events(declared, INTENTS[intent], input.clone()));
        let b = rt.block_on(events(rust, INTENTS[intent], input));
        prop_assert!(a.len() > 5);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            prop_assert_eq!(x, y, "event {} differs", i);
        }
        prop_assert_eq!(a.len(), b.len());
    }
}
