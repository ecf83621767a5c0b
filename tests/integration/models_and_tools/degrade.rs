//! Bounded generation and graceful degradation (`max_tokens`, `on_error`):
//! for each kind that calls a model, what a timeout, a token limit, an
//! invalid or empty answer and a failing model do to the run — against the
//! scripted model, through the real executor and the real stream bridge.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stategraph::internals::events::{Event, EventKind};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatModel, LlmChunk, LlmError};
use stategraph::internals::nodes::Graph;
use stategraph::internals::runtime::{self, RunError, RunOptions, RunOutcome};
use stategraph::internals::sse::{self, BridgeConfig};
use tokio::sync::mpsc;

use crate::support::{aisdk_validate, registries, report_json, services};

const STATE: &str = "
state:
  fields:
    messages: { type: messages }
    query: { type: string }
    intent: { type: string }
    answer: { type: string }
    followups: { type: array, items: { type: string } }
    summary: { type: string }
    summarized_count: { type: integer }
    category: { type: string, enum: [A, B, OTHER] }
";

fn graph(body: &str) -> Arc<Graph> {
    let yaml = format!("{STATE}{body}");
    let prompts = Prompts::from_sources(std::path::Path::new("prompts"), [("p.md", "You help.")]);
    let cat = registries().from_sources(&[("g", &yaml)], prompts);
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    Arc::clone(cat.get("g").unwrap())
}

/// A run: its outcome, its events, the AI SDK's report on its stream
/// (with the message the client assembles) and the stream itself.
struct Ran {
    outcome: Result<RunOutcome, RunError>,
    events: Vec<Event>,
    report: Value,
    sse: String,
}

/// Runs `g` on `model`.
async fn run_full(g: &Arc<Graph>, model: Arc<dyn ChatModel>) -> Ran {
    let (tx, mut rx) = mpsc::channel(1024);
    let opts = RunOptions {
        events: Some(tx),
        ..Default::default()
    };
    let input = json!({"messages": [{"id": "u1", "role": "user", "content": "hello there"}], "query": "hello there"});
    let task = tokio::spawn(runtime::run(Arc::clone(g), services(model), input, opts));
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push((*e).clone());
    }
    let outcome = task.await.unwrap();
    let text = sse::render(
        BridgeConfig::for_graph(g, "m1".into(), json!({})),
        &events,
        0,
    );
    let (ok, report) = aisdk_validate(&text);
    assert!(ok, "{report}\n{text}");
    Ran {
        outcome,
        events,
        report: report_json(&report),
        sse: text,
    }
}

async fn run(
    g: &Arc<Graph>,
    model: Arc<dyn ChatModel>,
) -> (Result<RunOutcome, RunError>, Vec<Event>, Value) {
    let r = run_full(g, model).await;
    (r.outcome, r.events, r.report)
}

fn field(outcome: &Result<RunOutcome, RunError>, name: &str) -> Value {
    let state = outcome
        .as_ref()
        .unwrap_or_else(|e| panic!("the run failed: {e}"))
        .state
        .to_json();
    state[name].clone()
}

fn truncated(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::Custom(c) if c.name == "truncated" => Some(c.data.clone()),
            _ => None,
        })
        .collect()
}

fn notes(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::Thinking { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn slow(words: usize, per_token_ms: u64) -> Arc<ScriptedModel> {
    let text: Vec<String> = (0..words).map(|i| format!("w{i}")).collect();
    ScriptedModel::new([Turn::text(text.join(" "))])
        .with_token_delay(Duration::from_millis(per_token_ms))
        .shared()
}

const ANSWER: &str = "
entry: answer
nodes:
  - { id: answer, kind: llm, prompt: p.md, input: query, output: answer, timeout: 300ms }
edges:
  - answer -> END
";

#[tokio::test]
async fn an_answer_cut_by_its_timeout_keeps_what_it_streamed() {
    let g = graph(ANSWER);
    let Ran {
        outcome,
        events,
        report,
        sse,
    } = run_full(&g, slow(100, 20)).await;
    // Half an answer is not data: the field stays empty (issue 31) ...
    assert_eq!(field(&outcome, "answer"), "");
    assert_eq!(
        truncated(&events),
        [json!({"node": "answer", "reason": "timeout"})]
    );
    // ... while the message keeps what the user read, as streamed.
    let streamed: String = events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        streamed.starts_with("w0 w1") && !streamed.contains("w99"),
        "{streamed}"
    );
    let parts = report["message"]["parts"].as_array().unwrap();
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, streamed, "the client shows what was streamed");
    assert!(parts.iter().any(|p| p["type"] == "data-truncated"));
    assert!(
        sse.contains(r#""type":"finish","finishReason":"length""#),
        "{sse}"
    );
}

#[tokio::test]
async fn an_answer_that_times_out_before_any_text_fails_unless_skipped() {
    let (outcome, events, _) = run(&graph(ANSWER), slow(3, 1000)).await;
    assert!(
        matches!(outcome, Err(RunError::Node { .. })),
        "nothing to keep: the run fails"
    );
    assert!(truncated(&events).is_empty());
    let skip = ANSWER.replace("timeout: 300ms", "timeout: 300ms, on_error: skip");
    let (outcome, events, _) = run(&graph(&skip), slow(3, 1000)).await;
    assert_eq!(field(&outcome, "answer"), "");
    assert!(
        notes(&events).contains("`answer` failed (node timed out"),
        "{}",
        notes(&events)
    );
}

#[tokio::test]
async fn an_answer_at_its_token_limit_is_marked_truncated() {
    let model = ScriptedModel::new([Turn::Chunks(
        vec![
            LlmChunk::Text("half an ans".into()),
            LlmChunk::Finish("length".into()),
        ],
        None,
    )])
    .shared();
    let Ran {
        outcome,
        events,
        sse,
        ..
    } = run_full(&graph(ANSWER), model.clone()).await;
    assert_eq!(field(&outcome, "answer"), "half an ans");
    assert_eq!(
        truncated(&events),
        [json!({"node": "answer", "reason": "length"})]
    );
    assert!(
        sse.contains(r#""type":"finish","finishReason":"length""#),
        "{sse}"
    );
    // The node's bound went with the request.
    assert_eq!(model.requests()[0].max_tokens, Some(1024));
}

const ROUTER: &str = "
entry: route
nodes:
  - id: route
    kind: router
    prompt: p.md
    intents: [A, B, OTHER]
    fallback: OTHER
    timeout: 200ms
  - { id: done, kind: noop }
edges:
  - route -> done
  - done -> END
";

#[tokio::test]
async fn a_router_falls_back_on_timeout_garbage_length_and_empty_answers() {
    let g = graph(ROUTER);
    // Timeout: the model is too slow for the node's limit.
    let (outcome, events, _) = run(&g, slow(50, 50)).await;
    assert_eq!(field(&outcome, "intent"), "OTHER");
    assert!(
        notes(&events).contains("Intent: OTHER (fallback)"),
        "{}",
        notes(&events)
    );
    // Garbage, a JSON cut by the token limit, an empty answer.
    for turn in [
        Turn::Raw("I think it is A, probably".into()),
        Turn::Chunks(
            vec![
                LlmChunk::Text("{\"intent\": \"A\", \"reas".into()),
                LlmChunk::Finish("length".into()),
            ],
            None,
        ),
        Turn::Raw(String::new()),
    ] {
        let model = ScriptedModel::new([turn]).shared();
        let (outcome, _, _) = run(&g, model.clone()).await;
        assert_eq!(field(&outcome, "intent"), "OTHER");
        let request = &model.requests()[0];
        assert_eq!(
            (request.max_tokens, request.temperature),
            (Some(256), Some(0.0))
        );
    }
    // `on_error: fail` makes a timeout fatal again.
    let strict = graph(&ROUTER.replace(
        "    timeout: 200ms",
        "    timeout: 200ms\n    on_error: fail",
    ));
    let (outcome, _, _) = run(&strict, slow(50, 50)).await;
    assert!(outcome.is_err());
}

#[tokio::test]
async fn follow_ups_and_summaries_that_fail_are_skipped() {
    let g = graph(
        "
entry: summarize
nodes:
  - { id: summarize, kind: summarizer, prompt: p.md, first_after: 0 }
  - { id: suggest, kind: followup, prompt: p.md, input: query, timeout: 200ms }
edges:
  - summarize -> suggest
  - suggest -> END
",
    );
    let model = ScriptedModel::new([Turn::Fail(LlmError::Http {
        status: 500,
        message: "down".into(),
    })])
    .with_token_delay(Duration::from_millis(400))
    .shared();
    let (outcome, events, _) = run(&g, model).await;
    assert_eq!(field(&outcome, "summary"), "");
    assert_eq!(field(&outcome, "followups"), json!([]));
    let notes = notes(&events);
    assert!(
        notes.contains("`summarize` failed") && notes.contains("skipped"),
        "{notes}"
    );
    assert!(
        notes.contains("`suggest` failed (node timed out"),
        "{notes}"
    );
}

#[tokio::test]
async fn a_structured_answer_falls_back_to_its_values_when_the_model_is_down() {
    let g = graph(
        "
entry: classify
nodes:
  - id: classify
    kind: llm
    prompt: p.md
    input: query
    outputs: [category]
    fallback: { category: OTHER }
    max_tokens: 64
    temperature: 0.2
    stop: [\"\\n\\n\"]
edges:
  - classify -> END
",
    );
    let model = ScriptedModel::new([Turn::Fail(LlmError::Http {
        status: 503,
        message: "overloaded".into(),
    })])
    .shared();
    let (outcome, events, _) = run(&g, model.clone()).await;
    assert_eq!(field(&outcome, "category"), "OTHER");
    assert!(
        notes(&events).contains("using its fallback"),
        "{}",
        notes(&events)
    );
    let r = &model.requests()[0];
    assert_eq!(
        (r.max_tokens, r.temperature, r.stop.clone()),
        (Some(64), Some(0.2), vec!["\n\n".to_owned()])
    );
}

/// A hidden node on a slow model shows as working from its first call.
#[tokio::test]
async fn a_hidden_node_is_visible_while_it_waits_for_the_model() {
    let (_, events, report) = run(&graph(ROUTER), slow(2, 5)).await;
    let first_llm = events
        .iter()
        .position(|e| matches!(e.event, EventKind::LlmStarted(_)))
        .unwrap();
    let before: Vec<Event> = events[..=first_llm].to_vec();
    let early = sse::render(
        BridgeConfig::for_graph(&graph(ROUTER), "m1".into(), json!({})),
        &before,
        0,
    );
    assert!(
        early.contains(r#""type":"data-thinking""#) && early.contains(r#""status":"running""#),
        "{early}"
    );
    let parts = report["message"]["parts"].as_array().unwrap();
    let route = parts
        .iter()
        .find(|p| p["type"] == "data-thinking" && p["data"]["node"] == "route")
        .unwrap();
    assert_eq!(route["data"]["status"], "done");
}

/// An agent whose model keeps calling tools stops offering them once its
/// time budget (`answer_by`) is spent: the next call must answer.
#[tokio::test]
async fn an_agent_past_its_time_budget_is_asked_to_answer_without_tools() {
    let g = graph(
        "
entry: a
nodes:
  - id: a
    kind: agent
    prompt: p.md
    surface: answer
    tools: [basic]
    input: query
    max_iterations: 50
    answer_by: 300ms
    output: answer
edges: [a -> END]
",
    );
    // Every call with tools asks for the clock again (slowly); without
    // tools, it answers.
    let model = Arc::new(
        ScriptedModel::from_fn(|req| {
            if req.tools.is_empty() {
                Turn::text("Done.")
            } else {
                Turn::tool("current_time", json!({}))
            }
        })
        .with_token_delay(Duration::from_millis(60)),
    );
    let (outcome, events, _) = run(&g, model).await;
    assert_eq!(field(&outcome, "answer"), "Done.");
    let calls = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::LlmStarted(_)))
        .count();
    assert!(
        (2..50).contains(&calls),
        "stopped early, after {calls} calls"
    );
    assert!(
        notes(&events).contains("Used the time budget"),
        "{}",
        notes(&events)
    );
    // Re-executed (instantly, from the recording), it decides as it did.
    let offline = stategraph::internals::runtime::Services::new(
        stategraph::internals::llm::Models::single(Arc::new(ScriptedModel::new([]))),
        Arc::clone(&registries().tools),
    );
    let r = stategraph::internals::replay::reexecute(g, offline, &events)
        .await
        .unwrap();
    assert!(r.divergence.is_none(), "{}", r.report());
}

/// A tool call whose arguments the token limit cut off is an input error
/// on the stream (the AI SDK refuses an output error for a call whose input
/// never became available), and the agent goes on.
#[tokio::test]
async fn a_tool_call_cut_off_by_the_token_limit_is_a_tool_input_error() {
    let g = graph(
        "
entry: a
nodes:
  - id: a
    kind: agent
    prompt: p.md
    surface: answer
    tools: [basic]
    input: query
    max_iterations: 3
    output: answer
edges: [a -> END]
",
    );
    let model = Arc::new(ScriptedModel::new([
        Turn::Chunks(
            vec![
                LlmChunk::ToolCallStart {
                    index: 0,
                    id: "c1".into(),
                    name: "calculator".into(),
                },
                LlmChunk::ToolCallArgs {
                    index: 0,
                    delta: "{\"expression\": \"6*".into(),
                },
                LlmChunk::Finish("length".into()),
            ],
            None,
        ),
        Turn::text("Sorry, I could not compute it."),
    ]));
    let r = run_full(&g, model).await;
    assert_eq!(
        field(&r.outcome, "answer"),
        "Sorry, I could not compute it."
    );
    assert!(r.sse.contains(r#""type":"tool-input-error""#), "{}", r.sse);
    assert!(
        !r.sse.contains(r#""type":"tool-output-error""#),
        "{}",
        r.sse
    );
    let parts = r.report["message"]["parts"].as_array().unwrap();
    assert!(
        parts
            .iter()
            .any(|p| p["toolCallId"] == "c1" && p["state"] == "output-error"),
        "{parts:?}"
    );
}
