//! Conversations as state: `llm` and `agent` nodes append their turns to a
//! messages field (`messages:`), tool calls and results included, and the
//! turns survive into the next chat turn while the chat the client shows
//! stays as it was.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmChunk, LlmError};
use stategraph::internals::runtime::{self, RunOptions};

use crate::support::server::TestServer;
use crate::support::{assert_reexecutes, post_json, registries, root, services};

/// A ReAct agent whose conversation is its state (LangGraph's
/// `create_react_agent` with `add_messages`).
const REACT: &str = r#"
state:
  fields:
    messages: { type: messages }
    answer: { type: string }
entry: agent
nodes:
  - id: agent
    kind: agent
    prompt: agent.md
    tools: [calculator]
    messages: messages
edges: [agent -> END]
"#;

type Log = Arc<std::sync::Mutex<Vec<ChatRequest>>>;

/// A request log for a scripted model's closure, and a handle to read it.
fn logged() -> (Log, Log) {
    let log = Log::default();
    (Arc::clone(&log), log)
}

/// The system prompt of a request.
fn system(req: &ChatRequest) -> &str {
    match req.messages.first() {
        Some(ChatMessage::System { content }) => content,
        _ => "",
    }
}

/// Whether the request's newest message is a tool result (the agent's
/// second call of a turn).
fn after_tool(req: &ChatRequest) -> bool {
    matches!(req.messages.last(), Some(ChatMessage::Tool { .. }))
}

/// The newest user message's text.
fn last_user(req: &ChatRequest) -> String {
    req.messages
        .iter()
        .rev()
        .find_map(ChatMessage::user_text)
        .unwrap_or_default()
        .to_owned()
}

/// POSTs a turn; the SSE chunks and the run id.
async fn turn(server: &TestServer, messages: &[Value]) -> (Vec<Value>, uuid::Uuid, String) {
    let body =
        json!({"id": "conv", "graph": "react", "messages": messages, "trigger": "submit-message"});
    let resp = post_json(&reqwest::Client::new(), &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    let chunks: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let start = chunks
        .iter()
        .find(|c| c["type"] == "start")
        .unwrap()
        .clone();
    let run = start["messageMetadata"]["runId"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let id = start["messageId"].as_str().unwrap().to_owned();
    (chunks, run, id)
}

fn text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect()
}

fn ui(id: &str, role: &str, text: &str) -> Value {
    json!({"id": id, "role": role, "parts": [{"type": "text", "text": text}]})
}

#[tokio::test]
async fn an_agents_tool_turns_are_state_and_the_next_chat_turn_sees_them() {
    let (log, seen) = logged();
    let model = ScriptedModel::from_fn(move |req| {
        log.lock().unwrap().push(req.clone());
        assert!(system(req).starts_with("You answer with the calculator"));
        if after_tool(req) {
            return Turn::text("It is 42.");
        }
        match last_user(req).as_str() {
            "What is 6 times 7?" => Turn::tool("calculator", json!({"expression": "6*7"})),
            // The second turn answers from the first turn's tool result,
            // which only the stored conversation holds.
            _ => {
                let seen = req.messages.iter().find_map(|m| match m {
                    ChatMessage::Tool { content, .. } => Some(content.clone()),
                    _ => None,
                });
                Turn::text(format!(
                    "Earlier the calculator said {}",
                    seen.unwrap_or_default()
                ))
            }
        }
    })
    .shared();
    let dir = tempfile::tempdir().unwrap();
    let (graphs, prompts) = (dir.path().join("graphs"), dir.path().join("prompts"));
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::write(graphs.join("react.yaml"), REACT).unwrap();
    std::fs::write(
        prompts.join("agent.md"),
        "You answer with the calculator.\n",
    )
    .unwrap();
    let server = TestServer::start(Arc::clone(&model) as _, move |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = prompts;
    })
    .await;

    let q1 = ui("u1", "user", "What is 6 times 7?");
    let (chunks, run1, answer1) = turn(&server, std::slice::from_ref(&q1)).await;
    assert_eq!(text(&chunks), "It is 42.");
    // The client sees the tool call as it always did.
    assert!(
        chunks
            .iter()
            .any(|c| c["type"] == "tool-output-available" && c["output"]["result"] == 42),
        "{chunks:?}"
    );

    // The stored state holds the whole turn: question, call, result, answer.
    let graph = server.state.graphs.get("react").unwrap();
    let record = server.state.store.get_run(run1).await.unwrap().unwrap();
    let state = stategraph::internals::replay::state_at(
        &*server.state.store,
        &graph,
        run1,
        record.last_step,
    )
    .await
    .unwrap()
    .to_json();
    let msgs = state["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{msgs:#?}"
    );
    let call = &msgs[1]["tool_calls"][0];
    assert_eq!(
        (call["name"].as_str(), &call["args"]),
        (Some("calculator"), &json!({"expression": "6*7"}))
    );
    assert_eq!(msgs[2]["tool_call_id"], call["id"]);
    assert_eq!(msgs[2]["name"], "calculator");
    assert_eq!(
        serde_json::from_str::<Value>(msgs[2]["content"].as_str().unwrap()).unwrap()["result"],
        42
    );
    assert_eq!(msgs[3]["content"], "It is 42.");
    let ids: std::collections::BTreeSet<&str> =
        msgs.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 4, "every message has its own id: {ids:?}");

    // Turn 2: the client sends only what it shows (text).
    let history = [
        q1,
        ui(&answer1, "assistant", "It is 42."),
        ui("u2", "user", "And what did the tool say?"),
    ];
    let (chunks, run2, _) = turn(&server, &history).await;
    assert_eq!(
        text(&chunks),
        r#"Earlier the calculator said {"expression":"6*7","result":42}"#
    );
    let second = seen.lock().unwrap().pop().unwrap();
    let shape: Vec<&str> = second.messages[1..]
        .iter()
        .map(|m| match m {
            ChatMessage::System { .. } => "system",
            ChatMessage::User { .. } | ChatMessage::UserWithImages { .. } => "user",
            ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty() => "calls",
            ChatMessage::Assistant { .. } => "assistant",
            ChatMessage::Tool { .. } => "tool",
        })
        .collect();
    assert_eq!(shape, ["user", "calls", "tool", "assistant", "user"]);
    let record = server.state.store.get_run(run2).await.unwrap().unwrap();
    let state = stategraph::internals::replay::state_at(
        &*server.state.store,
        &graph,
        run2,
        record.last_step,
    )
    .await
    .unwrap()
    .to_json();
    assert_eq!(state["messages"].as_array().unwrap().len(), 6);

    // What the chat shows is unchanged: text and the tool part, no tool
    // turns of the state leaking into the stored UI messages.
    let stored = server.state.store.messages("conv").await.unwrap();
    let roles: Vec<&str> = stored.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);

    // Deterministic ids: a re-execution writes the same state.
    assert_reexecutes(&server.state, run1).await;
    assert_reexecutes(&server.state, run2).await;
    server.shutdown().await;
}

/// LangGraph's reflection tutorial: generate, reflect, generate, … until
/// the conversation has more than 6 messages — one node per superstep,
/// no bookkeeping nodes.
const REFLECTION: &str = r#"
state:
  fields:
    messages: { type: messages }
    answer: { type: string }
    critique: { type: string }
entry: generate
nodes:
  - id: generate
    kind: llm
    prompt: generate.md
    messages: messages
  - id: reflect
    kind: llm
    prompt: reflect.md
    messages: messages
    history: { swap_roles: true }
    reply_as: user
    output: critique
    surface: thinking
edges:
  - from: generate
    route: { expr: "messages | length > 6", cases: { true: END, false: reflect } }
  - reflect -> generate
"#;

#[tokio::test]
async fn a_reflection_loop_runs_in_as_many_supersteps_as_langgraphs() {
    let (log, seen) = logged();
    let model = ScriptedModel::from_fn(move |req| {
        log.lock().unwrap().push(req.clone());
        let n = req.messages.len();
        if system(req).starts_with("You write") {
            Turn::text(format!("essay draft {}", n / 2))
        } else {
            Turn::text(format!("critique {}", n / 2))
        }
    })
    .shared();
    let prompts = Prompts::from_sources(
        &root().join("prompts"),
        [
            ("generate.md", "You write five-paragraph essays."),
            ("reflect.md", "You grade essays. Critique the latest one."),
        ],
    );
    let cat = registries().from_sources(&[("reflection", REFLECTION)], prompts);
    assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
    let graph = Arc::clone(cat.get("reflection").unwrap());
    let input =
        json!({"messages": [{"id": "u1", "role": "user", "content": "Write about the sea"}]});
    let out = runtime::run(
        graph,
        services(Arc::clone(&model) as _),
        input,
        RunOptions::default(),
    )
    .await
    .unwrap();
    // LangGraph: generate, reflect, generate, reflect, generate, reflect,
    // generate — 7 supersteps, then `len(messages) > 6` ends it.
    assert_eq!(out.steps, 7);
    let state = out.state.to_json();
    let msgs = state["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
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
    assert_eq!(msgs[2]["name"], "reflect");
    assert_eq!(state["answer"], msgs[7]["content"]);
    // The critic reads the essay as the user's message (roles swapped),
    // the writer reads the critique as the user's.
    let requests = seen.lock().unwrap().clone();
    let critic = &requests[1];
    assert!(system(critic).starts_with("You grade"));
    assert!(
        matches!(critic.messages.last(), Some(ChatMessage::User { content }) if content.starts_with("essay draft"))
    );
    assert!(
        matches!(critic.messages[1], ChatMessage::Assistant { .. }),
        "the request became the critic's own"
    );
    let writer = &requests[2];
    assert!(
        matches!(writer.messages.last(), Some(ChatMessage::User { content }) if content.starts_with("critique"))
    );
}

#[test]
fn messages_settings_are_checked() {
    let prompts = || Prompts::from_sources(&root().join("prompts"), [("p.md", "Hi.")]);
    let graph = |node: &str| {
        format!(
            "state:\n  fields:\n    messages: {{ type: messages }}\n    log: {{ type: messages, reducer: last }}\n    answer: {{ type: string }}\nentry: n\nnodes:\n  - id: n\n    kind: llm\n    prompt: p.md\n{node}\nedges: [n -> END]\n"
        )
    };
    let cases = [
        ("    messages: log", "field-type", "append or merge_by_id"),
        ("    messages: answer", "field-type", "type messages"),
        (
            "    reply_as: user",
            "invalid-setting",
            "`messages`, which is not set",
        ),
        (
            "    history: { last: 3 }",
            "missing-setting",
            "needs the messages field",
        ),
        (
            "    messages: messages\n    history: { last: 3, tokens: 9 }",
            "invalid-setting",
            "given twice",
        ),
        (
            "    messages: messages\n    history: { size: 3 }",
            "invalid-setting",
            "no key `size`",
        ),
        (
            "    messages: messages\n    outputs: [answer]",
            "invalid-setting",
            "answers JSON",
        ),
    ];
    for (node, code, words) in cases {
        let cat = registries().from_sources(&[("g", &graph(node))], prompts());
        let d = cat
            .diagnostics
            .iter()
            .find(|d| d.code == code)
            .unwrap_or_else(|| panic!("{node}: no {code} in {:#?}", cat.diagnostics));
        assert!(d.message.contains(words), "{node}: {}", d.message);
        assert!(d.line > 0 && d.column > 0, "{node}: placed");
    }
    let ok = registries().from_sources(
        &[(
            "g",
            &graph("    messages: messages\n    history: { tokens: 2000 }"),
        )],
        prompts(),
    );
    assert!(!ok.has_errors(), "{:#?}", ok.diagnostics);
}

/// An answer a failed node keeps — the part of it the user read before the
/// model broke, or the refusal written when the provider declines — is the
/// node's reply in its conversation, as a normal reply is: the next turn's
/// prompt sees what the user saw.
#[tokio::test]
async fn a_kept_answer_is_appended_to_the_conversation_like_a_reply() {
    const KEPT: &str = r#"
state:
  fields:
    messages: { type: messages }
    answer: { type: string }
entry: answer
nodes:
  - { id: answer, kind: llm, prompt: p.md, surface: answer, messages: messages }
edges: [answer -> END]
"#;
    let cases = [
        (
            Turn::Chunks(
                vec![LlmChunk::Text("The sea covers ".into())],
                Some(LlmError::Scripted("the stream broke".into())),
            ),
            "The sea covers ",
        ),
        (
            Turn::Fail(LlmError::ContentPolicy("flagged".into())),
            "I can't help with that request",
        ),
    ];
    for (turn, kept) in cases {
        let model = ScriptedModel::new([turn]).shared();
        let prompts = Prompts::from_sources(&root().join("prompts"), [("p.md", "Answer.")]);
        let cat = registries().from_sources(&[("kept", KEPT)], prompts);
        assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
        let input =
            json!({"messages": [{"id": "u1", "role": "user", "content": "How big is the sea?"}]});
        let out = runtime::run(
            Arc::clone(cat.get("kept").unwrap()),
            services(model as _),
            input,
            RunOptions::default(),
        )
        .await
        .unwrap();
        let state = out.state.to_json();
        let msgs = state["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 2, "{kept}: {state}");
        assert_eq!(msgs[1]["role"], "assistant", "{kept}: {state}");
        assert_eq!(msgs[1]["name"], "answer", "{kept}: {state}");
        assert!(
            msgs[1]["content"].as_str().unwrap().starts_with(kept),
            "{kept}: {state}"
        );
    }
}
