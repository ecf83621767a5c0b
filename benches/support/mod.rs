//! Shared bench fixtures: generated graphs and the scripted chat model;
//! [`pg`] for benches that use PostgreSQL.
#![allow(dead_code, missing_docs, unreachable_pub)]

pub mod pg;

use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::events::Usage;
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmChunk, Models};
use stategraph::internals::nodes::Graph as CompiledGraph;
use stategraph::internals::nodes::Registries;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use stategraph::internals::runtime::{self, RunOptions, Services};
use tokio::sync::mpsc;

stategraph::state! {
    /// The chat pipeline's state as a Rust type (the shipped graph declares
    /// it in YAML; the figures bench compares the two).
    pub struct ChatState as "chat" {
        /// The conversation so far.
        messages: Vec<stategraph::state::Message> => merge_by_id,
        /// The newest user message's text.
        query: String => last,
        /// Rolling summary.
        summary: String => last,
        /// Messages the summary covers.
        summarized_count: u32 => last,
        /// A forced intent.
        forced_intent: Option<String> => last,
        /// The intent.
        intent: String => last,
        /// The router's details.
        routing: Value => last,
        /// Detected language.
        language: String => last,
        /// Agent findings.
        findings: String => last,
        /// Tool call records.
        tool_results: Vec<Value> => append,
        /// The answer.
        answer: String => last,
        /// Follow-up questions.
        followups: Vec<String> => last,
        /// The quick answer's card.
        quick_answer_card: Option<Value> => last,
    }
}

/// Registries with the Rust `chat` state registered.
pub fn registries() -> Registries {
    let mut reg = Registries::default();
    reg.states.register::<ChatState>();
    reg
}

/// A chain of `n` no-op nodes.
pub fn chain_yaml(n: usize) -> String {
    let mut y = format!(
        "state: chat\nentry: n0\nrecursion_limit: {}\nnodes:\n",
        n + 1
    );
    for i in 0..n {
        let _ = writeln!(y, "  - {{id: n{i}, kind: noop}}");
    }
    y.push_str("edges:\n");
    for i in 0..n {
        let next = if i + 1 == n {
            "END".to_string()
        } else {
            format!("n{}", i + 1)
        };
        let _ = writeln!(y, "  - n{i} -> {next}");
    }
    y
}

/// `start` fans out to `n` no-op branches that all join into `joined`.
pub fn fanout_yaml(n: usize) -> String {
    let mut y = String::from(
        "state: chat\nentry: start\nnodes:\n  - {id: start, kind: noop}\n  - {id: joined, kind: noop}\n",
    );
    for i in 0..n {
        let _ = writeln!(y, "  - {{id: b{i}, kind: noop}}");
    }
    let branches: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    let _ = write!(
        y,
        "edges:\n  - from: start\n    to: [{}]\n  - from: [{}]\n    to: joined\n  - joined -> END\n",
        branches.join(", "),
        branches.join(", ")
    );
    y
}

/// A graph of `n` nodes mixing kinds, routes and a loop, for compile timing.
pub fn mixed_yaml(n: usize) -> String {
    let mut y = String::from(
        "state: chat\nentry: r\nnodes:\n  - id: r\n    kind: router\n    prompt: p.md\n    intents: [A, B]\n    fallback: A\n",
    );
    for i in 0..n - 1 {
        if i % 3 == 0 {
            let _ = writeln!(
                y,
                "  - {{id: n{i}, kind: llm, prompt: p.md, output: answer}}"
            );
        } else {
            let _ = writeln!(y, "  - {{id: n{i}, kind: set, set: {{findings: x}}}}");
        }
    }
    y.push_str("edges:\n  - from: r\n    route:\n      on: intent\n      cases: {A: n0, B: n1}\n");
    for i in 0..n - 1 {
        let next = if i + 2 >= n - 1 {
            "END".to_string()
        } else {
            format!("n{}", i + 2)
        };
        let _ = writeln!(y, "  - n{i} -> {next}");
    }
    y
}

pub fn compile(yaml: &str) -> Arc<CompiledGraph> {
    let cat = registries().from_sources(&[("g", yaml)], prompts());
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    Arc::clone(cat.get("g").expect("compiled"))
}

pub fn prompts() -> Prompts {
    Prompts::from_sources(
        Path::new("prompts"),
        [("p.md", "Answer {{ query }} using {{ summary }}")],
    )
}

/// What compiling needs besides the file, built once.
pub struct CompileFixture {
    reg: Registries,
    prompts: Arc<Prompts>,
    graphs: std::collections::BTreeMap<String, Arc<CompiledGraph>>,
}

impl CompileFixture {
    pub fn new() -> Self {
        Self {
            reg: registries(),
            prompts: Arc::new(prompts()),
            graphs: Default::default(),
        }
    }

    /// Loads (parses) a graph file's text.
    pub fn load(&self, yaml: &str) -> stategraph::internals::graph::load::GraphFile {
        stategraph::internals::graph::load::parse(Path::new("g.yaml"), "g", yaml.as_bytes())
            .expect("parses")
    }

    /// Validates and compiles a loaded graph file.
    pub fn compile(&self, file: &stategraph::internals::graph::load::GraphFile) -> usize {
        let env = stategraph::internals::graph::CompileEnv {
            states: &self.reg.states,
            reducers: &self.reg.reducers,
            kinds: &self.reg.kinds,
            tools: &self.reg.tools,
            prompts: &self.prompts,
            graphs: &self.graphs,
        };
        let (g, _) = stategraph::internals::graph::compile(file, &env).expect("compiles");
        g.nodes.len()
    }
}

/// The shipped chat graph.
pub fn chat_graph() -> Arc<CompiledGraph> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cat = registries().load(&root.join("graphs"), &root.join("prompts"));
    Arc::clone(cat.get("chat").expect("chat graph"))
}

/// The shipped chat graph with its state as the Rust `ChatState` instead of
/// the fields the file declares (the same names, types and reducers).
pub fn chat_graph_rust() -> Arc<CompiledGraph> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let yaml = std::fs::read_to_string(root.join("graphs/chat.yaml")).expect("chat.yaml");
    let start = yaml.find("\nstate:\n").expect("a state block") + 1;
    let end = start + yaml[start..].find("\n\n").expect("its end");
    let yaml = format!("{}state: chat{}", &yaml[..start], &yaml[end..]);
    let cat = registries().from_sources(&[("chat", &yaml)], Prompts::load(&root.join("prompts")));
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    Arc::clone(cat.get("chat").expect("chat graph"))
}

fn words(n: usize, prefix: &str) -> Vec<LlmChunk> {
    (0..n)
        .map(|i| LlmChunk::Text(format!("{prefix}{i} ")))
        .collect()
}

/// Prebuilt turns, cloned per call so the model costs little.
struct Turns {
    router: Vec<LlmChunk>,
    followups: Vec<LlmChunk>,
    tool_text: Vec<LlmChunk>,
    text: Vec<LlmChunk>,
}

/// `text` split into exactly `n` chunks (for JSON answers).
fn split(text: &str, n: usize) -> Vec<LlmChunk> {
    if n == 0 {
        return Vec::new();
    }
    let chars: Vec<char> = text.chars().collect();
    let per = chars.len().div_ceil(n).max(1);
    let mut out: Vec<LlmChunk> = chars
        .chunks(per)
        .map(|c| LlmChunk::Text(c.iter().collect()))
        .collect();
    while out.len() < n {
        out.push(LlmChunk::Text(String::new()));
    }
    out
}

fn finish(mut chunks: Vec<LlmChunk>, reason: &str) -> Turn {
    chunks.push(LlmChunk::Finish(reason.into()));
    chunks.push(LlmChunk::Usage(Usage {
        prompt_tokens: 100,
        completion_tokens: 50,
        ..Default::default()
    }));
    Turn::Chunks(chunks, None)
}

/// The RESEARCH path's model: 8 calls (summarizer, router, research ×4
/// with 3 tool calls, narrator, followup), each streaming `tokens` chunks.
pub fn research_model(tokens: usize) -> Arc<ScriptedModel> {
    let router = json!({"intent": "RESEARCH", "reasoning": "needs sources", "missing_slots": [], "detected_language": "en"}).to_string();
    let followups = json!({"questions": ["One more?", "And another?", "A third?"]}).to_string();
    let t = Turns {
        router: split(&router, tokens),
        followups: split(&followups, tokens),
        tool_text: words(tokens, "r"),
        text: words(tokens, "w"),
    };
    // Requests are told apart by cheap features (the structured-output
    // name, offered tools), so the model itself costs little.
    Arc::new(ScriptedModel::from_fn(move |req: &ChatRequest| {
        let format = req.response_format.as_ref().map(|f| f.name.as_str());
        if format == Some("intent_classification") {
            return finish(t.router.clone(), "stop");
        }
        if !req.tools.is_empty() {
            let rounds = req
                .messages
                .iter()
                .filter(|m| matches!(m, ChatMessage::Tool { .. }))
                .count();
            if rounds < 3 {
                let mut chunks = t.tool_text.clone();
                chunks.push(LlmChunk::ToolCallStart {
                    index: 0,
                    id: format!("call_{rounds}"),
                    name: "calculator".into(),
                });
                chunks.push(LlmChunk::ToolCallArgs {
                    index: 0,
                    delta: "{\"expression\":".into(),
                });
                chunks.push(LlmChunk::ToolCallArgs {
                    index: 0,
                    delta: format!("\"{rounds} + 1\"}}"),
                });
                return finish(chunks, "tool_calls");
            }
        }
        if format == Some("followups") {
            return finish(t.followups.clone(), "stop");
        }
        finish(t.text.clone(), "stop")
    }))
}

/// Input for the RESEARCH path: 21 messages, so the summarizer runs.
pub fn research_input() -> Arc<Value> {
    let mut messages: Vec<Value> = (0..20)
        .map(|i| json!({"id": format!("m{i}"), "role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("earlier message number {i}")}))
        .collect();
    messages.push(
        json!({"id": "q", "role": "user", "content": "Compare EV sales in Norway and Sweden"}),
    );
    Arc::new(json!({"messages": messages, "query": "Compare EV sales in Norway and Sweden"}))
}

pub fn services(model: Arc<ScriptedModel>) -> Arc<Services> {
    Arc::new(Services::new(
        Models::single(model),
        Arc::clone(&registries().tools),
    ))
}

/// Runs once with every event consumed; returns the number of events.
pub async fn run_consumed(
    graph: Arc<CompiledGraph>,
    services: Arc<Services>,
    input: impl Into<Arc<Value>>,
) -> usize {
    run_with(graph, services, input, RunOptions::default())
        .await
        .events
}

/// What one run did.
#[derive(Clone, Copy, Debug)]
pub struct Ran {
    /// Events emitted (and consumed).
    pub events: usize,
    /// Supersteps executed.
    pub steps: u32,
}

/// Runs once with `opts` (its event channel replaced by one whose events
/// are all consumed, as a server's pump does); panics if the run fails.
pub async fn run_with(
    graph: Arc<CompiledGraph>,
    services: Arc<Services>,
    input: impl Into<Arc<Value>>,
    opts: RunOptions,
) -> Ran {
    let (tx, mut rx) = mpsc::channel(1024);
    let drain = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(ev) = rx.recv().await {
            std::hint::black_box(&ev);
            n += 1;
        }
        n
    });
    let out = runtime::run(
        graph,
        services,
        input,
        RunOptions {
            events: Some(tx),
            ..opts
        },
    )
    .await;
    let steps = match out {
        Ok(o) => o.steps,
        Err(e) => panic!("run failed: {e}"),
    };
    Ran {
        events: drain.await.unwrap_or(0),
        steps,
    }
}

/// Tokens per model call that make the chat RESEARCH path emit about
/// `events` events (measured, so it follows changes to the graph).
pub async fn tokens_for_events(events: usize) -> usize {
    let (graph, input) = (chat_graph(), research_input());
    let base = run_consumed(graph.clone(), services(research_model(0)), input.clone()).await;
    let with = run_consumed(graph, services(research_model(100)), input).await;
    let per_token = (with.saturating_sub(base) as f64 / 100.0).max(1.0);
    ((events.saturating_sub(base)) as f64 / per_token).round() as usize
}

pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}
