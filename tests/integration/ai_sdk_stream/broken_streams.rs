//! A broken model stream is not data (issue 31, item 2): a stream that
//! ends without a finish reason — cut off, or broken by a transport error
//! after some text — is a failed call for every kind that calls a model.
//! The node retries or degrades as `on_error` says, and its partial text
//! never becomes a field value. A data node that ends up with nothing
//! writes its `no_data` packet, so no half-written figure reaches the
//! narrator. Scripted model, real executor, real stream bridge.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use stategraph::internals::events::{Event, EventKind};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatModel, ChatRequest, LlmChunk, LlmError};
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
    findings: { type: string }
    answer: { type: string }
    followups: { type: array, items: { type: string } }
    category: { type: string, enum: [A, B, OTHER] }
";

/// The half answer of the issue: a figure cut off mid-sentence.
const HALF: &str = "Qatar GDP per capita was 99,999 USD in 2023 and";

fn graph(body: &str) -> Arc<Graph> {
    let yaml = format!("{STATE}{body}");
    let prompts = Prompts::from_sources(
        std::path::Path::new("prompts"),
        [
            ("research.md", "Research the data."),
            ("narrator.md", "Write the answer.\nPacket: {{ findings }}"),
            ("p.md", "You help."),
        ],
    );
    let cat = registries().from_sources(&[("g", &yaml)], prompts);
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    Arc::clone(cat.get("g").unwrap())
}

struct Ran {
    outcome: Result<RunOutcome, RunError>,
    events: Vec<Event>,
    report: Value,
    sse: String,
}

async fn run(g: &Arc<Graph>, model: Arc<dyn ChatModel>) -> Ran {
    let (tx, mut rx) = mpsc::channel(1024);
    let opts = RunOptions {
        events: Some(tx),
        ..Default::default()
    };
    let input = json!({"messages": [{"id": "u1", "role": "user", "content": "GDP per capita of Qatar?"}], "query": "GDP per capita of Qatar?"});
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

fn state(outcome: &Result<RunOutcome, RunError>) -> Value {
    outcome
        .as_ref()
        .unwrap_or_else(|e| panic!("the run failed: {e}"))
        .state
        .to_json()
}

/// Text streamed, then the stream simply ends: no finish reason, no error.
fn cut_off(text: &str) -> Turn {
    Turn::Chunks(vec![LlmChunk::Text(text.into())], None)
}

/// Text streamed, then the connection breaks.
fn broken(text: &str) -> Turn {
    Turn::Chunks(
        vec![LlmChunk::Text(text.into())],
        Some(LlmError::Stream("connection reset".into())),
    )
}

fn system(req: &ChatRequest) -> &str {
    match req.messages.first() {
        Some(ChatMessage::System { content }) => content,
        _ => "",
    }
}

fn attempts_of(events: &[Event], node: &str) -> u32 {
    events
        .iter()
        .filter(|e| e.node.as_deref() == Some(node))
        .filter_map(|e| match e.event {
            EventKind::NodeStarted { attempt, .. } => Some(attempt),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

const RESEARCH: &str = "
entry: research
nodes:
  - id: research
    kind: agent
    prompt: research.md
    surface: thinking
    tools: [calculator]
    data_tools: [calculator]
    no_data: \"NO_DATA: no figures could be retrieved.\"
    input: query
    output: findings
    retry: { attempts: 2, backoff: 1ms }
  - { id: narrator, kind: llm, prompt: narrator.md, input: query, output: answer, surface: answer }
edges:
  - research -> narrator
  - narrator -> END
";

/// The research model: a data call, then `answer(attempt)`; the narrator
/// repeats the packet it was given, so the test sees what reached it.
fn research_model(answer: impl Fn(usize) -> Turn + Send + Sync + 'static) -> Arc<ScriptedModel> {
    let answers = AtomicUsize::new(0);
    ScriptedModel::from_fn(move |req| {
        if system(req).starts_with("Research") {
            if !req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }))
            {
                return Turn::tool("calculator", json!({"expression": "6*7"}));
            }
            return answer(answers.fetch_add(1, Ordering::SeqCst));
        }
        Turn::text(format!("Narrated: {}", system(req)))
    })
    .shared()
}

#[tokio::test]
async fn a_research_stream_broken_mid_answer_gives_no_data_and_no_figure_reaches_the_narrator() {
    for breaking in [cut_off as fn(&str) -> Turn, broken] {
        let r = run(&graph(RESEARCH), research_model(move |_| breaking(HALF))).await;
        let s = state(&r.outcome);
        assert_eq!(
            s["findings"], "NO_DATA: no figures could be retrieved.",
            "the half answer is not data"
        );
        assert_eq!(attempts_of(&r.events, "research"), 2, "retried once");
        let answer = s["answer"].as_str().unwrap();
        assert!(answer.contains("NO_DATA"), "{answer}");
        assert!(
            !answer.contains("99,999"),
            "the figure reached the narrator: {answer}"
        );
        let failed = r
            .events
            .iter()
            .filter(|e| matches!(&e.event, EventKind::LlmFailed(_)))
            .count();
        assert_eq!(failed, 2, "each broken stream is a failed call");
        // The client's message has the narrated answer, not the half one.
        let parts = r.report["message"]["parts"].as_array().unwrap();
        let text: String = parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        assert!(!text.contains("99,999"), "{text}");
    }
}

#[tokio::test]
async fn a_data_node_whose_first_stream_breaks_is_retried_and_keeps_the_whole_answer() {
    let whole = "Qatar GDP per capita was 87,661 USD in 2023.";
    let model = research_model(move |n| {
        if n == 0 {
            cut_off(HALF)
        } else {
            Turn::text(whole)
        }
    });
    let r = run(&graph(RESEARCH), model).await;
    let s = state(&r.outcome);
    assert_eq!(s["findings"], whole);
    assert!(!s["answer"].as_str().unwrap().contains("99,999"));
    assert_eq!(attempts_of(&r.events, "research"), 2);
}

#[tokio::test]
async fn a_hidden_llm_node_cut_off_retries_and_then_fails_without_writing_its_half() {
    let g = graph(
        "
entry: write
nodes:
  - { id: write, kind: llm, prompt: p.md, input: query, output: findings, surface: hidden, retry: { attempts: 2, backoff: 1ms } }
edges: [write -> END]
",
    );
    // Retried: the second attempt's whole answer is the value.
    let model = ScriptedModel::new([cut_off(HALF), Turn::text("All of it.")]).shared();
    let r = run(&g, model).await;
    assert_eq!(state(&r.outcome)["findings"], "All of it.");
    // Both attempts cut off: nothing to fall back on, the run fails.
    let model = ScriptedModel::new([cut_off(HALF), cut_off(HALF)]).shared();
    let r = run(&g, model).await;
    assert!(
        matches!(r.outcome, Err(RunError::Node { .. })),
        "{:?}",
        r.outcome.map(|o| o.state.to_json())
    );
    assert!(!r.sse.contains("99,999"), "{}", r.sse);
}

#[tokio::test]
async fn a_router_cut_off_after_a_whole_json_uses_its_fallback_intent() {
    let g = graph(
        "
entry: route
nodes:
  - { id: route, kind: router, prompt: p.md, intents: [A, B, OTHER], fallback: OTHER }
  - { id: done, kind: noop }
edges:
  - route -> done
  - done -> END
",
    );
    // The JSON is whole, but the stream never said it was finished.
    let model = ScriptedModel::new([cut_off(r#"{"intent": "A", "reasoning": "x"}"#)]).shared();
    let r = run(&g, model).await;
    assert_eq!(state(&r.outcome)["intent"], "OTHER");
}

#[tokio::test]
async fn a_structured_llm_node_cut_off_uses_its_fallback_values() {
    let g = graph(
        "
entry: classify
nodes:
  - { id: classify, kind: llm, prompt: p.md, input: query, outputs: [category], fallback: { category: OTHER } }
edges: [classify -> END]
",
    );
    let model = ScriptedModel::new([cut_off(r#"{"category": "A"}"#)]).shared();
    let r = run(&g, model).await;
    assert_eq!(state(&r.outcome)["category"], "OTHER");
}

#[tokio::test]
async fn follow_ups_cut_off_are_skipped() {
    let g = graph(
        "
entry: suggest
nodes:
  - { id: suggest, kind: followup, prompt: p.md, input: query }
edges: [suggest -> END]
",
    );
    let model =
        ScriptedModel::new([cut_off(r#"{"questions": ["One?", "Two?", "Three?"]}"#)]).shared();
    let r = run(&g, model).await;
    assert_eq!(state(&r.outcome)["followups"], json!([]));
}

#[tokio::test]
async fn an_answer_broken_after_the_user_read_part_of_it_is_shown_not_stored_as_data() {
    let g = graph(
        "
entry: a
nodes:
  - { id: a, kind: agent, prompt: p.md, surface: answer, input: query, output: answer, retry: { attempts: 3, backoff: 1ms } }
edges: [a -> END]
",
    );
    for breaking in [cut_off as fn(&str) -> Turn, broken] {
        let model = ScriptedModel::new([breaking(HALF), Turn::text("unused")]).shared();
        let r = run(&g, model.clone()).await;
        assert_eq!(
            model.requests().len(),
            1,
            "text the user read is not written again by a retry"
        );
        assert_eq!(
            state(&r.outcome)["answer"],
            "",
            "half an answer is not data"
        );
        let parts = r.report["message"]["parts"].as_array().unwrap();
        let text: String = parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        assert_eq!(text, HALF, "what was shown stays");
        assert!(parts.iter().any(|p| p["type"] == "data-truncated"));
        assert!(
            r.sse.contains(r#""type":"finish","finishReason":"length""#),
            "{}",
            r.sse
        );
    }
}

/// A data node that only searched has no data (issue 31): `not_data_tools`
/// names the tools among `data_tools` whose results are not figures.
#[tokio::test]
async fn a_data_node_that_only_searched_has_no_data() {
    let g = graph(
        "
entry: research
nodes:
  - id: research
    kind: agent
    prompt: research.md
    surface: thinking
    tools: [basic]
    data_tools: [basic]
    not_data_tools: [current_time]
    no_data: \"NO_DATA: no figures could be retrieved.\"
    input: query
    output: findings
edges: [research -> END]
",
    );
    let model_calling = |tool: &'static str, args: Value| {
        ScriptedModel::from_fn(move |req| {
            if req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }))
            {
                Turn::text(HALF)
            } else {
                Turn::tool(tool, args.clone())
            }
        })
        .shared()
    };
    // Only the "search": no data, whatever the model then wrote.
    let r = run(&g, model_calling("current_time", json!({}))).await;
    assert_eq!(
        state(&r.outcome)["findings"],
        "NO_DATA: no figures could be retrieved."
    );
    // A data tool that answered: its findings stand.
    let r = run(
        &g,
        model_calling("calculator", json!({"expression": "6*7"})),
    )
    .await;
    assert_eq!(state(&r.outcome)["findings"], HALF);
}
