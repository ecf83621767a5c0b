//! Re-execution is exact for every run (issue 31, item 5): a retried model
//! call, a failed primary call and its fallback, a retried `http` node and
//! a retried tool call all replay from the recording in order, with no
//! divergence. The models have different names, so a recording that
//! served a call under the wrong model's name would diverge (the test that
//! existed passed only because both of its models were named `scripted`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use stategraph::internals::events::{Event, EventKind, LlmStart};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{LlmError, Models};
use stategraph::internals::nodes::{Graph, Registries};
use stategraph::internals::replay;
use stategraph::internals::runtime::{self, RunOptions, RunOutcome, Services};
use stategraph::internals::tools::{Tool, ToolError, ToolPolicy, ToolSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::registries;

const STATE: &str = "
state:
  fields:
    messages: { type: messages }
    query: { type: string }
    answer: { type: string }
    priority: { type: string }
    total: { type: string }
";

fn graph(reg: &Registries, body: &str) -> Arc<Graph> {
    let yaml = format!("{STATE}{body}");
    let prompts = Prompts::from_sources(std::path::Path::new("prompts"), [("p.md", "You help.")]);
    let cat = reg.from_sources(&[("g", &yaml)], prompts);
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    Arc::clone(cat.get("g").unwrap())
}

/// Runs `g` live; its outcome and events.
async fn live(g: &Arc<Graph>, services: Services) -> (RunOutcome, Vec<Event>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4096);
    let input =
        json!({"messages": [{"id": "u1", "role": "user", "content": "hello"}], "query": "hello"});
    let task = tokio::spawn(runtime::run(
        Arc::clone(g),
        Arc::new(services),
        input,
        RunOptions {
            events: Some(tx),
            ..Default::default()
        },
    ));
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push((*e).clone());
    }
    (task.await.unwrap().unwrap(), events)
}

/// Re-executes `events` with a model that cannot answer and asserts that
/// nothing diverged (node patches included) and the run ended the same.
async fn assert_exact(g: Arc<Graph>, reg: &Registries, events: &[Event]) {
    let nobody = ScriptedModel::new([]).named("nobody").shared();
    let services = Services::new(Models::single(nobody), Arc::clone(&reg.tools));
    let r = replay::reexecute(g, services, events).await.unwrap();
    assert!(r.divergence.is_none(), "{}", r.report());
    assert!(
        matches!(
            r.events.last().map(|e| &e.event),
            Some(EventKind::RunFinished { .. })
        ),
        "{}",
        r.report()
    );
}

fn started_models(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::LlmStarted(llm_start) => {
                let LlmStart { model, .. } = &**llm_start;
                Some(model.clone())
            }
            _ => None,
        })
        .collect()
}

fn down() -> Turn {
    Turn::Fail(LlmError::Http {
        status: 503,
        message: "overloaded".into(),
    })
}

#[tokio::test]
async fn a_fallback_run_and_a_retried_model_call_reexecute_without_divergence() {
    let reg = registries();
    let g = graph(
        &reg,
        "
entry: answer
nodes:
  - { id: answer, kind: llm, prompt: p.md, input: query, output: answer, model: primary, fallback_model: backup, retry: { attempts: 2, backoff: 1ms } }
edges: [answer -> END]
",
    );
    // Attempt 1: the primary fails, the backup fails too, so the node is
    // retried; attempt 2: the primary fails, the backup answers.
    let primary = ScriptedModel::new([down(), down()])
        .named("primary-model")
        .shared();
    let backup = ScriptedModel::new([down(), Turn::text("From the backup.")])
        .named("backup-model")
        .shared();
    let models = Models::single(ScriptedModel::new([]).named("default").shared())
        .with_role("primary", primary)
        .with_role("backup", backup);
    let (out, events) = live(&g, Services::new(models, Arc::clone(&reg.tools))).await;
    let state = out.state.to_json();
    assert_eq!(state["answer"], "From the backup.");
    assert_eq!(
        started_models(&events),
        [
            "primary-model",
            "backup-model",
            "primary-model",
            "backup-model"
        ]
    );
    assert_exact(g, &reg, &events).await;
}

/// A one-shot HTTP/1.1 server: answers each connection with the next of
/// `replies` (status, JSON body), the last one forever.
async fn serve(replies: Vec<(u16, &'static str)>) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/score", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let (status, body) = replies[n.min(replies.len() - 1)];
            let mut buf = vec![0u8; 8192];
            let _ = sock.read(&mut buf).await;
            let reason = if status == 200 { "OK" } else { "Unavailable" };
            let resp = format!(
                "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (url, hits)
}

#[tokio::test]
async fn a_retried_http_node_reexecutes_without_divergence() {
    let reg = registries();
    let (url, hits) = serve(vec![
        (503, r#"{"error": "busy"}"#),
        (200, r#"{"priority": "high"}"#),
    ])
    .await;
    let g = graph(
        &reg,
        &format!(
            "
entry: score
nodes:
  - {{ id: score, kind: http, url: \"{url}\", send: [query], writes: [priority], retry: {{ attempts: 2, backoff: 1ms }} }}
edges: [score -> END]
"
        ),
    );
    let model = ScriptedModel::new([]).named("unused").shared();
    let (out, events) = live(
        &g,
        Services::new(Models::single(model), Arc::clone(&reg.tools)),
    )
    .await;
    let state = out.state.to_json();
    assert_eq!(state["priority"], "high");
    assert_eq!(hits.load(Ordering::SeqCst), 2, "retried once");
    let retried = events.iter().find_map(|e| match &e.event {
        EventKind::NodeRetrying { error, .. } => Some(error.clone()),
        _ => None,
    });
    let retried = retried.expect("the node was retried");
    assert_eq!(
        retried.matches("HTTP call to").count(),
        1,
        "the error is wrapped once: {retried}"
    );
    assert_exact(g, &reg, &events).await;
    assert_eq!(hits.load(Ordering::SeqCst), 2, "re-execution made no call");
}

/// A tool that fails (transiently) on its first call, then answers.
struct Flaky {
    spec: ToolSpec,
    calls: AtomicUsize,
}

impl Tool for Flaky {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(ToolError::Execution("the service is busy".into()));
            }
            Ok(json!({ "total": format!("{} items", args["what"].as_str().unwrap_or("?")) }))
        })
    }
}

#[tokio::test]
async fn a_retried_tool_call_reexecutes_without_divergence() {
    let reg = registries();
    let flaky = Arc::new(Flaky {
        spec: ToolSpec {
            name: "flaky_count".into(),
            description: "Counts things (busy at first).".into(),
            input_schema: Arc::new(
                json!({"type": "object", "properties": {"what": {"type": "string"}}}),
            ),
            output_schema: None,
            partition: "test".into(),
            policy: ToolPolicy::default(),
        },
        calls: AtomicUsize::new(0),
    });
    reg.tools.register(flaky.clone()).unwrap();
    let g = graph(
        &reg,
        "
entry: count
nodes:
  - id: count
    kind: tool
    tool: flaky_count
    tools: [flaky_count]
    args: { what: \"{{ query }}\" }
    outputs: { total: \"{{ result.total }}\" }
    retry: { attempts: 2, backoff: 1ms }
edges: [count -> END]
",
    );
    let model = ScriptedModel::new([]).named("unused").shared();
    let (out, events) = live(
        &g,
        Services::new(Models::single(model), Arc::clone(&reg.tools)),
    )
    .await;
    let state = out.state.to_json();
    assert_eq!(state["total"], "hello items");
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 2, "retried once");
    assert_exact(g, &reg, &events).await;
    assert_eq!(
        flaky.calls.load(Ordering::SeqCst),
        2,
        "re-execution made no call"
    );
}
