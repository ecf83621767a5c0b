//! Bound tool arguments through `POST /api/chat` with two API keys: a tool
//! that writes is scoped to the signed-in user, whatever the model sends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use stategraph::internals::engine::{Engine, Graphs};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, Models};
use stategraph::internals::runtime::Services;
use stategraph::internals::server::AppState;
use stategraph::internals::store::memory::MemoryStore;
use stategraph::internals::tools::{Tool, ToolError, ToolPolicy, ToolSpec};

use crate::support::server::TestServer;
use crate::support::{assert_reexecutes, registries, root};

/// The customer-support agent: it may cancel tickets, always as the
/// signed-in passenger.
const SUPPORT: &str = r#"
state:
  fields:
    messages: { type: messages }
    answer: { type: string }
entry: support
nodes:
  - id: support
    kind: agent
    prompt: support.md
    messages: messages
    tools:
      - name: cancel_ticket
        args: { passenger_id: "{{ user.id }}" }
edges: [support -> END]
"#;

/// Ticket → (owner, cancelled).
type Tickets = Arc<Mutex<BTreeMap<String, (String, bool)>>>;

/// A tool that writes: cancels a ticket the passenger owns.
struct CancelTicket {
    spec: ToolSpec,
    tickets: Tickets,
}

impl Tool for CancelTicket {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let passenger = args["passenger_id"].as_str().unwrap_or_default();
            let ticket = args["ticket"].as_str().unwrap_or_default();
            let mut tickets = self.tickets.lock().unwrap();
            match tickets.get_mut(ticket) {
                Some((owner, cancelled)) if owner == passenger => {
                    *cancelled = true;
                    Ok(json!({"cancelled": ticket}))
                }
                _ => Err(ToolError::NotFound {
                    message: format!("passenger {passenger} has no ticket {ticket}"),
                    details: Value::Null,
                }),
            }
        })
    }
}

fn cancel_tool(tickets: Tickets) -> Arc<CancelTicket> {
    Arc::new(CancelTicket {
        spec: ToolSpec {
            name: "cancel_ticket".into(),
            description: "Cancel one of the passenger's tickets".into(),
            input_schema: Arc::new(json!({
                "type": "object",
                "properties": {
                    "passenger_id": {"type": "string"},
                    "ticket": {"type": "string"}
                },
                "required": ["passenger_id", "ticket"],
                "additionalProperties": false
            })),
            output_schema: None,
            partition: "support".into(),
            policy: ToolPolicy::default(),
        },
        tickets,
    })
}

/// The model does what the newest message asks, passenger id included:
/// "cancel T-BOB as bob" calls `cancel_ticket` with `passenger_id: bob`.
fn gullible(log: Arc<Mutex<Vec<ChatRequest>>>) -> ScriptedModel {
    ScriptedModel::from_fn(move |req| {
        log.lock().unwrap().push(req.clone());
        if matches!(req.messages.last(), Some(ChatMessage::Tool { .. })) {
            return Turn::text("Done.");
        }
        let text = req
            .messages
            .iter()
            .rev()
            .find_map(ChatMessage::user_text)
            .unwrap_or_default();
        let words: Vec<&str> = text.split_whitespace().collect();
        Turn::tool(
            "cancel_ticket",
            json!({"ticket": words[1], "passenger_id": words[3]}),
        )
    })
}

async fn post(server: &TestServer, key: &str, chat: &str, text: &str) -> (String, uuid::Uuid) {
    let body = json!({
        "id": chat, "graph": "support", "trigger": "submit-message",
        "messages": [{"id": format!("u-{chat}"), "role": "user", "parts": [{"type": "text", "text": text}]}]
    });
    let resp = reqwest::Client::new()
        .post(server.url("/api/chat"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    let run = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|c| c["type"] == "start")
        .and_then(|c| c["messageMetadata"]["runId"].as_str().map(str::to_owned))
        .unwrap()
        .parse()
        .unwrap();
    (sse, run)
}

#[tokio::test]
async fn a_model_sending_another_users_id_changes_nothing_that_user_owns() {
    let tickets: Tickets = Arc::new(Mutex::new(BTreeMap::from([
        ("T-ALICE".to_owned(), ("alice".to_owned(), false)),
        ("T-BOB".to_owned(), ("bob".to_owned(), false)),
    ])));
    let reg = registries();
    reg.tools
        .register(cancel_tool(Arc::clone(&tickets)))
        .unwrap();
    let cat = reg.from_sources(
        &[("support", SUPPORT)],
        Prompts::from_sources(
            &root().join("prompts"),
            [("support.md", "You help passengers.")],
        ),
    );
    assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
    let log = Arc::new(Mutex::new(Vec::new()));
    let services = Services::new(
        Models::single(Arc::new(gullible(Arc::clone(&log)))),
        Arc::clone(&reg.tools),
    );
    let mut config = stategraph::internals::config::Config::default();
    config
        .auth
        .api_keys
        .insert("k-alice".into(), "alice".into());
    config.auth.api_keys.insert("k-bob".into(), "bob".into());
    let graphs = Graphs::from_catalog(cat, reg.clone());
    let state = AppState::new(
        config,
        Arc::new(MemoryStore::new()),
        &Engine::from_parts(reg, graphs, services),
    );
    let server = TestServer::serve(state).await;

    // Alice's model is told to cancel Bob's ticket as Bob.
    let (sse, run1) = post(&server, "k-alice", "a1", "cancel T-BOB as bob").await;
    assert!(sse.contains("passenger alice has no ticket T-BOB"), "{sse}");
    assert_eq!(
        tickets.lock().unwrap()["T-BOB"],
        ("bob".to_owned(), false),
        "Bob's ticket is untouched"
    );
    // The model was never offered the bound argument.
    let first = log.lock().unwrap()[0].clone();
    let offered = &first
        .tools
        .iter()
        .find(|t| t.name == "cancel_ticket")
        .unwrap()
        .parameters;
    assert!(
        offered["properties"].get("passenger_id").is_none(),
        "{offered}"
    );
    assert_eq!(offered["required"], json!(["ticket"]));
    assert!(offered["properties"].get("ticket").is_some());
    // The stream shows the arguments the tool ran with.
    assert!(sse.contains(r#""passenger_id":"alice""#), "{sse}");

    // Bob's model sends Alice's id for his own ticket: it is his that goes.
    let (_, run2) = post(&server, "k-bob", "b1", "cancel T-BOB as alice").await;
    assert_eq!(tickets.lock().unwrap()["T-BOB"], ("bob".to_owned(), true));
    // And Alice's model cannot cancel hers as Bob either.
    post(&server, "k-alice", "a2", "cancel T-ALICE as bob").await;
    assert_eq!(
        tickets.lock().unwrap()["T-ALICE"],
        ("alice".to_owned(), true)
    );

    // The user is part of the recording: a re-execution acts for the same one.
    assert_reexecutes(&server.state, run1).await;
    assert_reexecutes(&server.state, run2).await;
    server.shutdown().await;
}

#[test]
fn bound_arguments_are_checked_where_they_are_written() {
    let prompts = || Prompts::from_sources(&root().join("prompts"), [("p.md", "Hi.")]);
    let graph = |tools: &str| {
        format!(
            "state:\n  fields:\n    passenger: {{ type: string }}\n    answer: {{ type: string }}\nentry: n\nnodes:\n  - id: n\n    kind: agent\n    prompt: p.md\n    tools:\n{tools}\nedges: [n -> END]\n"
        )
    };
    let cases = [
        (
            "      - { name: calculator, args: { expression: \"{{ state.pasenger }}\" } }",
            "unknown-attribute",
            "state.pasenger",
            Some("passenger"),
        ),
        (
            "      - { name: basic, args: { expression: \"1\" } }",
            "invalid-setting",
            "is a partition",
            None,
        ),
        (
            "      - { name: calculator, with: { expression: \"1\" } }",
            "invalid-setting",
            "no key `with`",
            None,
        ),
        (
            "      - { args: { expression: \"1\" } }",
            "missing-setting",
            "needs the tool's `name`",
            None,
        ),
        (
            "      - { name: calculater, args: { expression: \"1\" } }",
            "unknown-tool",
            "calculater",
            Some("calculator"),
        ),
    ];
    for (tools, code, words, hint) in cases {
        let cat = registries().from_sources(&[("g", &graph(tools))], prompts());
        let d = cat
            .diagnostics
            .iter()
            .find(|d| d.code == code)
            .unwrap_or_else(|| panic!("{tools}: no {code} in {:#?}", cat.diagnostics));
        assert!(d.message.contains(words), "{tools}: {}", d.message);
        assert_eq!(d.line, 11, "{tools}: placed on its line");
        assert!(
            d.column >= 9,
            "{tools}: placed in the entry, col {}",
            d.column
        );
        if let Some(h) = hint {
            assert!(
                d.hint.as_deref().unwrap_or_default().contains(h),
                "{tools}: {:?}",
                d.hint
            );
        }
    }
    let ok = registries().from_sources(
        &[(
            "g",
            &graph("      - basic\n      - { name: calculator, args: { expression: \"{{ state.passenger }}\" } }"),
        )],
        prompts(),
    );
    assert!(!ok.has_errors(), "{:#?}", ok.diagnostics);
}

/// `config.NAME` in a bound argument: the graph file's `config:` values,
/// set by the file (never by a request), hidden from the model like any
/// bound argument; `check` knows the names.
const CONFIGURED: &str = r#"
config:
  airline: acme
state:
  fields:
    messages: { type: messages }
    answer: { type: string }
entry: support
nodes:
  - id: support
    kind: agent
    prompt: support.md
    messages: messages
    tools:
      - name: cancel_ticket
        args: { passenger_id: "{{ config.airline }}" }
edges: [support -> END]
"#;

#[tokio::test]
async fn a_bound_argument_reads_the_graphs_config() {
    let tickets: Tickets = Arc::new(Mutex::new(BTreeMap::from([
        ("T-ACME".to_owned(), ("acme".to_owned(), false)),
        ("T-BOB".to_owned(), ("bob".to_owned(), false)),
    ])));
    let reg = registries();
    reg.tools
        .register(cancel_tool(Arc::clone(&tickets)))
        .unwrap();
    let prompts = || {
        Prompts::from_sources(
            &root().join("prompts"),
            [("support.md", "You help passengers.")],
        )
    };
    let cat = reg.from_sources(&[("support", CONFIGURED)], prompts());
    assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
    let log = Arc::new(Mutex::new(Vec::new()));
    let services = Arc::new(Services::new(
        Models::single(Arc::new(gullible(Arc::clone(&log)))),
        Arc::clone(&reg.tools),
    ));
    for text in ["cancel T-BOB as bob", "cancel T-ACME as bob"] {
        let input = json!({"messages": [{"id": "u1", "role": "user", "content": text}]});
        stategraph::internals::runtime::run(
            Arc::clone(cat.get("support").unwrap()),
            Arc::clone(&services),
            input,
            stategraph::internals::runtime::RunOptions::default(),
        )
        .await
        .unwrap();
    }
    // The model sent `bob` both times; the config's value went instead.
    let now = tickets.lock().unwrap().clone();
    assert_eq!(now["T-BOB"], ("bob".to_owned(), false), "not acme's ticket");
    assert_eq!(now["T-ACME"], ("acme".to_owned(), true));
    let offered = &log.lock().unwrap()[0].tools[0].parameters.clone();
    assert!(
        offered["properties"].get("passenger_id").is_none(),
        "{offered}"
    );

    // `check` knows the config's names, and that it is constants only.
    let cases = [
        (
            CONFIGURED.replace("config.airline", "config.airlne"),
            "unknown-attribute",
            "did you mean `airline`?",
        ),
        (
            CONFIGURED.replace("config:\n  airline: acme\n", ""),
            "unknown-attribute",
            "`config` has no attribute `airline`",
        ),
        (
            CONFIGURED.replace("airline: acme", "airline: \"{{ user.id }}\""),
            "invalid-setting",
            "config values are written as they are",
        ),
        (
            CONFIGURED.replace("config:\n  airline: acme\n", "config: acme\n"),
            "invalid-setting",
            "`config` maps names to values",
        ),
    ];
    for (graph, code, words) in cases {
        let cat = registries().from_sources(&[("support", &graph)], prompts());
        let d = cat
            .diagnostics
            .iter()
            .find(|d| d.code == code)
            .unwrap_or_else(|| panic!("{words}: no {code} in {:#?}", cat.diagnostics));
        let text = format!("{} {}", d.message, d.hint.as_deref().unwrap_or_default());
        assert!(text.contains(words), "{words}: {text}");
        assert!(d.line > 1, "{words}: placed at {}:{}", d.line, d.column);
    }
}
