//! Adaptive RAG (examples/langgraph/graphs/adaptive_rag.yaml) down every
//! branch: the web route, and the vector-store route through no relevant
//! documents (rewrite), an answer not grounded (generate again), one
//! grounded but not useful (rewrite), and a useful one (end). Retrieval is
//! the example's real MCP server (blog_server.py, Python); web search is the
//! built-in `web_search` against a local SearXNG-like endpoint.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use serde_json::{Value, json};
use stategraph::internals::config::Dur;
use stategraph::internals::events::{Event, EventKind};
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, Models};
use stategraph::internals::nodes::Registries;
use stategraph::internals::runtime::{self, RunOptions, Services};
use stategraph::internals::tools::mcp::{McpConfig, McpManager};
use stategraph::internals::tools::search::{self, SearchConfig};
use tokio::sync::mpsc;

use super::system;
use crate::support::{registries, root};

/// The venv's Python (tests/run.sh).
fn python() -> PathBuf {
    let python = std::env::var_os("STATEGRAPH_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/stategraph-tests/venv/bin/python")
        });
    assert!(
        python.exists(),
        "the MCP test venv is missing: run `bash tests/run.sh`"
    );
    python
}

#[derive(serde::Deserialize)]
struct SearchParams {
    q: String,
}

/// A SearXNG-like endpoint (what `[tools.search]` points at): two results
/// about the query, in SearXNG's shape (`content`, which `web_search`
/// returns as `snippet`).
async fn searxng() -> String {
    let app = Router::new().route(
        "/search",
        get(|Query(p): Query<SearchParams>| async move {
            axum::Json(json!({"query": p.q, "results": [
                {"title": "Forecast", "url": "https://weather.example/zrh", "content": format!("{}: sunny, 21 degrees.", p.q)},
                {"title": "Radar", "url": "https://weather.example/radar", "content": "No rain expected."}
            ]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/")
}

/// The newest user message's text.
fn user(req: &ChatRequest) -> String {
    req.messages
        .iter()
        .rev()
        .find_map(|m| match m {
            ChatMessage::User { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The text of `s` after `marker`.
fn after<'a>(s: &'a str, marker: &str) -> &'a str {
    s.split_once(marker).map_or("", |(_, rest)| rest)
}

/// A model that routes weather to the web, finds a document relevant only
/// when both it and the question mention memory, rewrites the question
/// twice, and writes three answers in turn: one not grounded (the moon),
/// one grounded but not useful, one useful. Its graders judge by those
/// marks, so a prompt missing the facts or the answer would change the path.
fn model(generated: Arc<Vec<std::sync::Mutex<String>>>) -> ScriptedModel {
    let rewrites = AtomicUsize::new(0);
    let answers = AtomicUsize::new(0);
    ScriptedModel::from_fn(move |req| {
        let s = system(req);
        if s.starts_with("You are an expert at routing") {
            let to = if user(req).contains("weather") {
                "web_search"
            } else {
                "vectorstore"
            };
            Turn::json(json!({ "datasource": to }))
        } else if s.starts_with("You are a grader assessing the relevance") {
            let (doc, question) = s.split_once("User question:").unwrap_or_default();
            let yes = doc.contains("memory") && question.contains("memory");
            Turn::json(json!({"binary_score": if yes { "yes" } else { "no" }}))
        } else if s.starts_with("You are a question re-writer") {
            let question = match rewrites.fetch_add(1, Ordering::SeqCst) {
                0 => "agent memory",
                _ => "long-term memory of agents",
            };
            Turn::json(json!({ "question": question }))
        } else if s.starts_with("You are an assistant for question-answering") {
            let n = answers.fetch_add(1, Ordering::SeqCst);
            if let Some(slot) = generated.get(n) {
                *slot.lock().unwrap() = s.clone();
            }
            Turn::text(if user(req).contains("weather") {
                "Sunny, 21 degrees."
            } else {
                match n {
                    0 => "Agents remember by flying to the moon.",
                    1 => "Memory is discussed.",
                    _ => "Agents keep long-term memory in an external vector store.",
                }
            })
        } else if s.starts_with("You are a grader assessing whether an LLM generation is grounded")
        {
            // Grounded: facts were given and the answer invents no moon.
            let facts = after(&s, "Set of facts:");
            let answer = after(&s, "LLM generation:");
            let yes = facts.contains("- ") && !answer.contains("moon");
            Turn::json(json!({"grounded": if yes { "yes" } else { "no" }}))
        } else if s.starts_with("You are a grader assessing whether an answer addresses") {
            let answer = after(&s, "LLM generation:");
            let yes = answer.contains("long-term") || answer.contains("Sunny");
            Turn::json(json!({"useful": if yes { "yes" } else { "no" }}))
        } else {
            Turn::text(format!("unexpected prompt: {s}"))
        }
    })
}

/// Runs the graph on `query`: the final state and the nodes started, in
/// order (a map's tasks counted once).
async fn run(services: Arc<Services>, reg: &Registries, query: &str) -> (Value, Vec<String>) {
    let dir = root().join("examples/langgraph");
    let cat = reg.load(&dir.join("graphs"), &dir.join("prompts"));
    assert!(cat.diagnostics.is_empty(), "{:#?}", cat.diagnostics);
    let g = Arc::clone(cat.get("adaptive_rag").unwrap());
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(10_000);
    let opts = RunOptions {
        events: Some(tx),
        ..RunOptions::default()
    };
    let out = runtime::run(g, services, json!({ "query": query }), opts)
        .await
        .unwrap();
    let mut path: Vec<String> = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let (EventKind::NodeStarted { .. }, Some(node)) = (&e.event, e.node.as_deref())
            && path.last().map(String::as_str) != Some(node)
        {
            path.push(node.to_owned());
        }
    }
    (out.state.to_json(), path)
}

#[tokio::test]
async fn adaptive_rag_takes_every_branch() {
    let reg = registries();
    search::register(
        &reg.tools,
        &SearchConfig {
            url: searxng().await,
            max_results: 3,
            timeout: Dur(Duration::from_secs(5)),
        },
    )
    .unwrap();
    let config: McpConfig = toml::from_str(&format!(
        "[servers.blog]\ncommand = [{}, {}]\nhealth_check = 0\n",
        json!(python().to_string_lossy()),
        json!(
            root()
                .join("examples/langgraph/blog_server.py")
                .to_string_lossy()
        ),
    ))
    .unwrap();
    let mcp = McpManager::start(&config, Arc::clone(&reg.tools));
    assert!(
        mcp.wait_ready(Duration::from_secs(60)).await,
        "blog_server.py did not start: {:?}",
        mcp.status()
    );
    let generated: Arc<Vec<std::sync::Mutex<String>>> =
        Arc::new((0..3).map(|_| std::sync::Mutex::default()).collect());
    let services = |g: &Arc<Vec<std::sync::Mutex<String>>>| {
        Arc::new(Services::new(
            Models::single(Arc::new(model(Arc::clone(g)))),
            Arc::clone(&reg.tools),
        ))
    };

    // The web route: searched, not graded, answered from the results.
    let (state, path) = run(
        services(&generated),
        &reg,
        "What is the weather in Zurich today?",
    )
    .await;
    assert_eq!(
        path,
        [
            "route_question",
            "web_search",
            "generate",
            "grade_hallucination",
            "grade_answer"
        ]
    );
    assert_eq!(state["answer"], "Sunny, 21 degrees.");
    let prompt = generated[0].lock().unwrap().clone();
    assert!(
        prompt.contains("- Forecast: What is the weather in Zurich today?: sunny, 21 degrees.")
            && prompt.contains("- Radar: No rain expected."),
        "{prompt}"
    );

    // The vector store: nothing relevant → rewrite; the first answer is not
    // grounded → generate again; grounded but not useful → rewrite; useful.
    let generated: Arc<Vec<std::sync::Mutex<String>>> =
        Arc::new((0..3).map(|_| std::sync::Mutex::default()).collect());
    let (state, path) = run(services(&generated), &reg, "How do agents remember things?").await;
    assert_eq!(
        path,
        [
            "route_question",
            "retrieve",
            "grade_document", // none relevant
            "transform_query",
            "retrieve",
            "grade_document",
            "generate",
            "grade_hallucination", // the moon: not grounded
            "generate",
            "grade_hallucination",
            "grade_answer", // not useful
            "transform_query",
            "retrieve",
            "grade_document",
            "generate",
            "grade_hallucination",
            "grade_answer", // useful: END
        ]
    );
    assert_eq!(
        state["answer"],
        "Agents keep long-term memory in an external vector store."
    );
    assert_eq!(state["question"], "long-term memory of agents");
    assert_eq!(state["attempt"], 2);
    // Each attempt graded both retrieved documents; one was relevant in
    // the second and the third attempts.
    let graded = state["context"].as_array().unwrap();
    assert_eq!(graded.len(), 6);
    let relevant: Vec<i64> = graded
        .iter()
        .filter(|d| d["relevant"] == true)
        .map(|d| d["attempt"].as_i64().unwrap())
        .collect();
    assert_eq!(relevant, [1, 2]);
    // The answer is generated from this attempt's relevant documents only.
    let prompt = generated[2].lock().unwrap().clone();
    assert!(prompt.contains("An agent's memory"), "{prompt}");
    assert_eq!(prompt.matches("\n- ").count(), 1, "{prompt}");
    mcp.shutdown().await;
}
