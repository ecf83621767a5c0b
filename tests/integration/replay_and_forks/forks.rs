//! Forks that answer "what if" (#19): after a node the edit is routed
//! again — every route of every shipped graph — and before a node it runs
//! again with nothing earlier called; refusals carry stable codes; forks
//! (and forks of forks) replay and re-execute like any run; an attached
//! fork's answer becomes an alternative of the chat's message.

use std::time::Duration;

use serde_json::{Value, json};
use stategraph::internals::events::{EventKind, ForkMode, PendingTask};
use stategraph::internals::nodes::Graph;
use stategraph::internals::replay::{self, Edit, EditError, ReplayError};
use stategraph::internals::runtime::{RunStatus, StepBatch};
use stategraph::internals::store::memory::MemoryStore;
use stategraph::internals::store::{EventLog, RunRecord};
use uuid::Uuid;

use crate::support::model::{RequestLog, Script, model, route};
use crate::support::server::TestServer;
use crate::support::{assert_reexecutes, chat_body, post_json, shipped_catalog};

/// A chat turn answered through `intent`; returns the server, the model's
/// request log and the run id.
async fn chat_turn(intent: &str, chat: &str) -> (TestServer, RequestLog, Uuid) {
    let (m, log) = model(Script {
        router: route(intent),
        ..Script::default()
    });
    let server = TestServer::start(m, |_| {}).await;
    let client = reqwest::Client::new();
    let live = post_json(&client, &server.url("/api/chat"), &chat_body(chat, "hello"))
        .await
        .text()
        .await
        .unwrap();
    let run: Uuid = live
        .split("\"runId\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no run id in {live}"));
    wait(&server, run).await;
    (server, log, run)
}

/// Waits for a run to end; returns its record.
async fn wait(server: &TestServer, run: Uuid) -> RunRecord {
    for _ in 0..500 {
        let r = server.state.store.get_run(run).await.unwrap().unwrap();
        if r.status != RunStatus::Running && server.state.runs.running() == 0 {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("run {run} did not end");
}

/// POSTs a fork; returns (status, body).
async fn fork(server: &TestServer, run: Uuid, body: Value) -> (u16, Value) {
    let r = post_json(
        &reqwest::Client::new(),
        &server.url(&format!("/api/runs/{run}/fork")),
        &body,
    )
    .await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Forks and waits for the fork; returns its id.
async fn forked(server: &TestServer, run: Uuid, body: Value) -> Uuid {
    let (status, v) = fork(server, run, body.clone()).await;
    assert_eq!(status, 202, "{body} → {v}");
    let id: Uuid = v["runId"].as_str().unwrap().parse().unwrap();
    let r = wait(server, id).await;
    assert_eq!(r.status, RunStatus::Finished, "{body}: {:?}", r.error);
    id
}

/// The nodes a run's tasks ran, in order.
async fn ran(server: &TestServer, run: Uuid) -> Vec<String> {
    let (_, events) = replay::load(&*server.state.store, run).await.unwrap();
    events
        .iter()
        .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
        .filter_map(|e| e.node.as_deref().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_fork_after_the_chat_router_takes_each_route() {
    // The report of #19: "hello" routed CLARIFY; the fork says EXPLAIN.
    let (server, _, run) = chat_turn("CLARIFY", "what-if").await;
    assert_eq!(
        ran(&server, run).await,
        ["summarizer", "router", "clarifier"]
    );
    let paths: [(&str, &[&str]); 6] = [
        ("EXPLAIN", &["explain", "narrator", "followup"]),
        (
            "QUICK_ANSWER",
            &["quick_answer", "narrator", "followup", "card"],
        ),
        ("RESEARCH", &["research", "narrator", "followup"]),
        ("CLARIFY", &["clarifier"]),
        ("OUT_OF_SCOPE", &["suggester"]),
        ("DIRECT", &["direct"]),
    ];
    for (intent, path) in paths {
        let child = forked(
            &server,
            run,
            json!({"after": "router", "set": {"intent": intent}}),
        )
        .await;
        assert_eq!(
            ran(&server, child).await,
            path,
            "after router, intent {intent}"
        );
        let record = server.state.store.get_run(child).await.unwrap().unwrap();
        let parent = record.parent.unwrap();
        assert_eq!(
            (
                parent.run_id,
                parent.step,
                parent.mode,
                parent.nodes.as_slice()
            ),
            (run, 2, Some(ForkMode::After), &["router".to_owned()][..]),
            "the record names parent, step, mode and node"
        );
        assert_eq!(parent.set["intent"], intent, "and the edit");
        assert_reexecutes(&server.state, child).await;
        let (_, events) = replay::load(&*server.state.store, child).await.unwrap();
        let sse = replay::sse(&events).unwrap();
        assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    }
    // Without `after`, the step's only node; with only the node, its step.
    let (status, v) = fork(&server, run, json!({"at": 2, "set": {"intent": "DIRECT"}})).await;
    assert_eq!((status, v["nodes"].clone()), (202, json!(["router"])));
    let (status, v) = fork(&server, run, json!({"after": "router", "set": {}})).await;
    assert_eq!((status, v["at"].clone()), (202, json!(2)));
    // A value the route has no case for goes to its default (direct).
    let child = forked(
        &server,
        run,
        json!({"after": "router", "set": {"intent": "NOPE"}}),
    )
    .await;
    assert_eq!(ran(&server, child).await, ["direct"]);
    server.shutdown().await;
}

#[tokio::test]
async fn a_fork_before_a_node_reruns_only_it_and_a_fork_of_a_fork_replays() {
    let (server, log, run) = chat_turn("CLARIFY", "before").await;
    let calls_before = log.lock().unwrap().len();
    let child = forked(
        &server,
        run,
        json!({"before": "clarifier", "set": {"query": "hello, which city has 42?"}}),
    )
    .await;
    let calls: Vec<(String, String)> = log.lock().unwrap()[calls_before..]
        .iter()
        .map(|(n, r)| (n.clone(), serde_json::to_string(&r.messages).unwrap()))
        .collect();
    assert_eq!(calls.len(), 1, "only the clarifier is called: {calls:?}");
    assert_eq!(calls[0].0, "clarifier");
    assert!(
        calls[0].1.contains("which city has 42?"),
        "with the edited input"
    );
    assert_eq!(
        ran(&server, child).await,
        ["clarifier"],
        "earlier nodes come from the recording"
    );
    let record = server.state.store.get_run(child).await.unwrap().unwrap();
    assert_eq!(record.parent.as_ref().unwrap().mode, Some(ForkMode::Before));
    assert_eq!(record.parent.as_ref().unwrap().step, 3);
    assert_reexecutes(&server.state, child).await;

    // A fork of a fork: reroute the original after its router, then edit
    // the findings after explain in that fork.
    let first = forked(
        &server,
        run,
        json!({"after": "router", "set": {"intent": "EXPLAIN"}}),
    )
    .await;
    let calls_before = log.lock().unwrap().len();
    let second = forked(
        &server,
        first,
        json!({"after": "explain", "set": {"findings": "edited findings"}}),
    )
    .await;
    assert_eq!(ran(&server, second).await, ["narrator", "followup"]);
    let narrated = log.lock().unwrap()[calls_before..].iter().any(|(n, r)| {
        n == "narrator"
            && serde_json::to_string(&r.messages)
                .unwrap()
                .contains("edited findings")
    });
    assert!(narrated, "the narrator read the edited findings");
    assert_reexecutes(&server.state, second).await;
    let (_, a) = replay::load(&*server.state.store, second).await.unwrap();
    let (_, b) = replay::load(&*server.state.store, second).await.unwrap();
    let sse = replay::sse(&a).unwrap();
    assert_eq!(sse, replay::sse(&b).unwrap());
    assert!(sse.contains("\"type\":\"text-delta\""), "{sse}");
    server.shutdown().await;
}

#[tokio::test]
async fn refused_edits_answer_4xx_with_a_code_and_run_nothing() {
    let (server, log, run) = chat_turn("CLARIFY", "refused").await;
    let calls = log.lock().unwrap().len();
    let runs = server
        .state
        .store
        .list_runs(&stategraph::internals::store::RunQuery::newest(100))
        .await
        .unwrap()
        .len();
    let cases = [
        (
            json!({"after": "router", "set": {"nope": 1}}),
            400,
            "unknown_field",
        ),
        (
            json!({"after": "router", "set": {"summarized_count": "many"}}),
            400,
            "invalid_value",
        ),
        (
            json!({"after": "router", "set": {"forced_intent": "NOPE"}}),
            400,
            "invalid_value",
        ),
        (
            json!({"before": "router", "set": {"summarized_count": -1}}),
            400,
            "invalid_value",
        ),
        (json!({"after": "ghost", "set": {}}), 400, "unknown_node"),
        (json!({"after": "narrator", "set": {}}), 400, "node_not_run"),
        (
            json!({"at": 2, "after": "clarifier", "set": {}}),
            400,
            "node_not_run",
        ),
        (
            json!({"before": "router", "after": "router"}),
            400,
            "invalid_request",
        ),
        (
            json!({"after": "router", "sett": {}}),
            400,
            "invalid_request",
        ),
        (json!({"set": {"intent": "DIRECT"}}), 400, "step_required"),
        (json!({"at": 9, "set": {}}), 400, "no_checkpoint"),
    ];
    for (body, status, code) in cases {
        let (s, v) = fork(&server, run, body.clone()).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{body} → {v}"
        );
    }
    assert_eq!(log.lock().unwrap().len(), calls, "nothing ran");
    let now = server
        .state
        .store
        .list_runs(&stategraph::internals::store::RunQuery::newest(100))
        .await
        .unwrap()
        .len();
    assert_eq!(now, runs, "nothing was stored");
    server.shutdown().await;
}

#[tokio::test]
async fn an_attached_fork_becomes_an_alternative_answer_in_the_chat() {
    let (server, _, run) = chat_turn("CLARIFY", "attach").await;
    let (status, v) = fork(
        &server,
        run,
        json!({"after": "router", "set": {"intent": "DIRECT"}, "attach": true}),
    )
    .await;
    assert_eq!(status, 202, "{v}");
    let child: Uuid = v["runId"].as_str().unwrap().parse().unwrap();
    wait(&server, child).await;
    let chat: Value = reqwest::get(server.url("/api/chat/attach"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let messages = chat["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        2,
        "the conversation keeps its place: {chat}"
    );
    let answer = &messages[1];
    assert_eq!(answer["id"], v["alternativeOf"]);
    assert!(
        answer["parts"]
            .to_string()
            .contains("Which city do you mean?"),
        "the original stays"
    );
    let alts = answer["metadata"]["alternatives"].as_array().unwrap();
    assert_eq!(alts.len(), 1);
    assert_eq!(alts[0]["runId"], child.to_string());
    assert!(
        alts[0]["parts"]
            .to_string()
            .contains("Hello! How can I help?"),
        "{alts:?}"
    );
    let record = server.state.store.get_run(child).await.unwrap().unwrap();
    assert_eq!(record.chat_id.as_deref(), Some("attach"));
    assert_eq!(
        record.parent.unwrap().alternative_of,
        answer["id"].as_str().map(str::to_owned)
    );
    server.shutdown().await;
}

/// A run of `graph` recorded as checkpoints only: the input `state`, then
/// step 1 running `node` (writing nothing). Enough to fork after or before
/// `node` without running anything.
async fn recorded_step(store: &MemoryStore, graph: &Graph, state: Value, node: &str) -> Uuid {
    let run = Uuid::now_v7();
    let batch = |step: u32, next: Vec<PendingTask>, snapshot: Option<Value>| StepBatch {
        run_id: run,
        step,
        writes: Vec::new(),
        events: Vec::new(),
        next,
        joins: graph.joins.iter().map(|_| Vec::new()).collect(),
        snapshot,
        status: RunStatus::Running,
    };
    let task = PendingTask {
        node: node.into(),
        item: None,
    };
    store
        .append(&batch(0, vec![task], Some(state)))
        .await
        .unwrap();
    store.append(&batch(1, Vec::new(), None)).await.unwrap();
    run
}

/// The next tasks after `node` with `set`, as node names (map tasks with
/// their item).
async fn next_after(
    graph: &Graph,
    state: Value,
    node: &str,
    set: Value,
) -> Result<Vec<String>, ReplayError> {
    let store = MemoryStore::new();
    let run = recorded_step(&store, graph, state, node).await;
    let edit = Edit {
        step: None,
        mode: ForkMode::After,
        node: Some(node.into()),
        set: set.as_object().unwrap().clone().into_iter().collect(),
    };
    let point = replay::fork_point(&store, graph, run, &edit).await?;
    assert_eq!(point.resume.step, 1);
    Ok(point
        .resume
        .next
        .iter()
        .map(|t| match &t.item {
            Some(i) => format!("{}({})", t.node, i.as_str().unwrap_or("?")),
            None => t.node.clone(),
        })
        .collect())
}

#[tokio::test]
async fn a_fork_after_each_research_route_and_fan_out_takes_it() {
    let cat = shipped_catalog();
    let graph = cat.get("research").unwrap();
    let base = json!({"query": "q", "iteration": 1});
    let cases: &[(&str, Value, &[&str])] = &[
        ("select", json!({"urls": ["https://a"]}), &["crawl"]),
        ("select", json!({"urls": []}), &["reflect"]),
        (
            "gather",
            json!({"readable": [{"url": "https://a"}]}),
            &["reading"],
        ),
        ("gather", json!({"readable": []}), &["rank"]),
        ("reflect", json!({"coverage": 0.9}), &["synthesize"]),
        (
            "reflect",
            json!({"coverage": 0.2, "gaps": ["g"], "results": [{"output": {"results": []}}]}),
            &["requery"],
        ),
        (
            "crawl",
            json!({"urls": ["https://a", "https://b"]}),
            &["fetch(https://a)", "fetch(https://b)"],
        ),
        (
            "plan",
            json!({"queries": ["x", "y"]}),
            &["search(x)", "search(y)"],
        ),
        ("requery", json!({"queries": ["z"]}), &["search(z)"]),
    ];
    for (node, set, expected) in cases {
        let next = next_after(graph, base.clone(), node, set.clone())
            .await
            .unwrap();
        assert_eq!(next, *expected, "after {node} with {set}");
    }
}

#[tokio::test]
async fn a_fork_after_the_single_node_graphs_ends_and_before_it_reruns_it() {
    let cat = shipped_catalog();
    for name in ["analyst", "assistant"] {
        let graph = cat.get(name).unwrap();
        let state = json!({"query": "q"});
        let next = next_after(graph, state.clone(), name, json!({"answer": "edited"}))
            .await
            .unwrap();
        assert!(next.is_empty(), "{name} → END: {next:?}");
        let store = MemoryStore::new();
        let run = recorded_step(&store, graph, state, name).await;
        let edit = Edit {
            step: None,
            mode: ForkMode::Before,
            node: Some(name.into()),
            set: vec![("query".into(), json!("edited"))],
        };
        let point = replay::fork_point(&store, graph, run, &edit).await.unwrap();
        assert_eq!((point.resume.step, point.resume.next.len()), (0, 1));
        assert_eq!(point.resume.state.to_json()["query"], "edited");
    }
}

/// A route on a router's field with a case per intent and no default, and
/// a step that runs two nodes.
const ROUTED: &str = r#"
entry: pick
state:
  fields:
    query: { type: string }
    summary: { type: string }
    x: { type: string }
    out: { type: array, items: { type: string }, reducer: append }
nodes:
  - id: pick
    kind: router
    prompt: chat/router.md
    model: routing
    input: query
    output: x
    intents: [A, B]
    fallback: A
  - { id: a, kind: set, set: { out: "{{ ['a'] }}" } }
  - { id: b, kind: set, set: { out: "{{ ['b'] }}" } }
  - { id: c, kind: set, set: { out: "{{ ['c'] }}" } }
edges:
  - from: pick
    route: { on: x, cases: { A: a, B: b } }
  - a -> END
  - b -> c
  - c -> END
"#;

#[tokio::test]
async fn values_a_route_cannot_take_and_ambiguous_steps_are_refused() {
    let reg = crate::support::registries();
    let prompts = stategraph::internals::graph::prompts::Prompts::load(
        &crate::support::root().join("prompts"),
    );
    let cat = reg.from_sources(&[("routed", ROUTED)], prompts);
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    let graph = cat.get("routed").unwrap();
    assert_eq!(
        next_after(graph, json!({}), "pick", json!({"x": "B"}))
            .await
            .unwrap(),
        ["b"]
    );
    let no_route = next_after(graph, json!({}), "pick", json!({"x": "C"})).await;
    match no_route {
        Err(ReplayError::Edit(e @ EditError::NoRoute { .. })) => {
            assert_eq!(e.code(), "no_route");
            assert!(e.to_string().contains("`C`"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A step that ran a and c: which one the edit comes after must be said.
    let store = MemoryStore::new();
    let run = recorded_step(&store, graph, json!({}), "a").await;
    let two = StepBatch {
        run_id: run,
        step: 0,
        writes: Vec::new(),
        events: Vec::new(),
        next: ["a", "c"]
            .map(|n| PendingTask {
                node: n.into(),
                item: None,
            })
            .to_vec(),
        joins: Vec::new(),
        snapshot: Some(json!({"out": ["a", "c"]})),
        status: RunStatus::Running,
    };
    let run2 = Uuid::now_v7();
    store
        .append(&StepBatch {
            run_id: run2,
            ..two
        })
        .await
        .unwrap();
    store
        .append(&StepBatch {
            run_id: run2,
            step: 1,
            writes: Vec::new(),
            events: Vec::new(),
            next: Vec::new(),
            joins: Vec::new(),
            snapshot: None,
            status: RunStatus::Running,
        })
        .await
        .unwrap();
    let edit = |node: Option<&str>| Edit {
        step: Some(1),
        mode: ForkMode::After,
        node: node.map(str::to_owned),
        set: vec![("out".into(), json!(["!"]))],
    };
    let e = replay::fork_point(&store, graph, run2, &edit(None))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ReplayError::Edit(EditError::AmbiguousNode { nodes, .. }) if nodes == &["a", "c"]),
        "{e}"
    );
    let p = replay::fork_point(&store, graph, run2, &edit(Some("c")))
        .await
        .unwrap();
    assert_eq!(p.origin.nodes, ["c"]);
    // Through the reducer: `out` appends, it is not replaced.
    assert_eq!(p.resume.state.to_json()["out"], json!(["a", "c", "!"]));
}
