//! examples/langgraph: LangGraph tutorials rebuilt as graph files, each run
//! with a scripted model down every branch.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::llm::ChatMessage;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::runtime::{self, RunOptions};

use crate::support::{registries, root, services};

mod adaptive_rag;

fn catalog() -> stategraph::internals::nodes::GraphCatalog {
    let dir = root().join("examples/langgraph");
    let reg = registries();
    // As `check --config examples/langgraph/stategraph.toml` does: the
    // MCP servers' partitions are known (adaptive RAG's `tool: retrieve`).
    reg.tools.declare_partition("blog");
    let cat = reg.load(&dir.join("graphs"), &dir.join("prompts"));
    assert!(cat.diagnostics.is_empty(), "{:#?}", cat.diagnostics);
    cat
}

fn system(req: &stategraph::internals::llm::ChatRequest) -> String {
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

/// A model that does what the newest message asks, passenger id included.
const GULLIBLE: &str = r#"
rules:
  - when: { user: "cancel T-BOB as bob", tool_results: false }
    reply: { tool_calls: [{ name: cancel_ticket, args: { ticket_id: T-BOB, passenger_id: bob } }] }
  - when: { user: "cancel T-BOB as alice", tool_results: false }
    reply: { tool_calls: [{ name: cancel_ticket, args: { ticket_id: T-BOB, passenger_id: alice } }] }
  - reply: "Done."
"#;

/// The customer-support example over `POST /api/chat` with two API keys,
/// its tools a real MCP server (Python, needs the test venv).
#[tokio::test]
async fn customer_support_cannot_touch_another_passengers_tickets() {
    let python = std::env::var_os("STATEGRAPH_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/stategraph-tests/venv/bin/python")
        });
    assert!(
        python.exists(),
        "the MCP test venv is missing: run `bash tests/run.sh`"
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("model.yaml");
    std::fs::write(&script, GULLIBLE).unwrap();
    let example = root().join("examples/langgraph");
    let toml = format!(
        "[paths]\ngraphs = \"{}\"\nprompts = \"{}\"\n[store]\nbackend = \"memory\"\n[llm]\nscript = \"{}\"\n[auth.api_keys]\nk-alice = \"alice\"\nk-bob = \"bob\"\n[tools.mcp.servers.airline]\ncommand = [\"{}\", \"{}\"]\n",
        example.join("graphs").display(),
        example.join("prompts").display(),
        script.display(),
        python.display(),
        example.join("airline_server.py").display(),
    );
    let config = stategraph::internals::config::Config::from_toml(&toml).unwrap();
    let state = stategraph::internals::server::build_state(config, registries())
        .await
        .unwrap();
    // Startup waits only a moment for MCP servers; on a loaded machine the
    // Python one can take longer, and a chat before it is ready finds no tool.
    let mcp = state.mcp.as_ref().expect("the airline MCP server");
    assert!(
        mcp.wait_ready(std::time::Duration::from_secs(120)).await,
        "{:?}",
        mcp.status()
    );
    let server = crate::support::server::TestServer::serve(state).await;
    let post = |key: &'static str, chat: &'static str, text: &'static str| {
        let url = server.url("/api/chat");
        async move {
            let body = json!({
                "id": chat, "graph": "customer_support", "trigger": "submit-message",
                "messages": [{"id": format!("u-{chat}"), "role": "user", "parts": [{"type": "text", "text": text}]}]
            });
            let resp = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {key}"))
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            resp.text().await.unwrap()
        }
    };
    // Alice's model sends Bob's id: the call runs as Alice, and fails.
    let sse = post("k-alice", "a1", "cancel T-BOB as bob").await;
    assert!(sse.contains("passenger alice has no ticket T-BOB"), "{sse}");
    // Bob's own cancel (his model sending Alice's id) finds the ticket
    // still active, so Alice's attempt changed nothing.
    let sse = post("k-bob", "b1", "cancel T-BOB as alice").await;
    assert!(sse.contains(r#""cancelled":"T-BOB""#), "{sse}");
    server.shutdown().await;
}

#[tokio::test]
async fn plan_and_execute_runs_each_step_with_tools_until_the_replanner_answers() {
    let model = ScriptedModel::from_fn(|req| {
        let s = system(req);
        let after_tool = matches!(req.messages.last(), Some(ChatMessage::Tool { .. }));
        if s.starts_with("For the given objective") {
            Turn::json(json!({"plan": ["compute 6*7", "double it"]}))
        } else if s.starts_with("You execute one step") {
            match (s.contains("Execute step 1: compute 6*7"), after_tool) {
                (true, false) => Turn::tool("calculator", json!({"expression": "6*7"})),
                (false, false) => Turn::tool("calculator", json!({"expression": "42*2"})),
                (_, true) => Turn::text("done"),
            }
        } else {
            // The replanner sees the executor's tool results in the conversation.
            let results = req
                .messages
                .iter()
                .filter(|m| matches!(m, ChatMessage::Tool { .. }))
                .count();
            match results {
                1 => Turn::json(json!({"plan": ["double it"], "answer": ""})),
                _ => Turn::json(json!({"plan": [], "answer": "84"})),
            }
        }
    });
    let input = json!({
        "query": "What is 6 times 7, doubled?",
        "messages": [{"id": "u1", "role": "user", "content": "What is 6 times 7, doubled?"}]
    });
    let (state, steps) = run("plan_execute", model, input).await;
    assert_eq!(state["answer"], "84");
    assert_eq!(steps, 5, "planner, executor, replan, executor, replan");
    let tools: Vec<&Value> = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tools.len(), 2);
    assert!(tools[1]["content"].as_str().unwrap().contains("84"));
}
