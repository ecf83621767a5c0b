//! Our LangGraph API stream against LangGraph's own, recorded from
//! `langgraph dev` (langgraph-api 0.16.7, langgraph 1.2.24; fixtures and
//! how to record them again: tests/fixtures/langgraph_wire/record.sh)
//! serving graph.py, the example graph (examples/langgraph_api) written in
//! LangGraph with a fake model. The same requests go to `stategraph
//! serve`; the streams must have the same events in the same order (runs
//! of `messages` tokens counted as one: the models split text differently)
//! and the same shapes: the keys of every event's data, of the messages
//! in state, of a token's `[chunk, metadata]`, of an interrupt; CRLF line
//! ends; `{detail}` errors.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::root;

/// `(event, data)` of each SSE event, checking the CRLF framing
/// (`langgraph_api/sse.py`: `SEP = b"\r\n"`).
fn parse(raw: &str) -> Vec<(String, Value)> {
    assert!(raw.contains("\r\n\r\n"), "CRLF framing: {raw:.200}");
    raw.split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty() && !b.starts_with(':'))
        .map(|b| {
            let field = |name: &str| {
                b.split("\r\n")
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no `{name}` in {b:?}"))
            };
            let data = serde_json::from_str(field("data: ")).expect("JSON data");
            (field("event: ").to_owned(), data)
        })
        .collect()
}

/// The event names, debug events left out (their order around a step
/// differs with the executor) and each run of tokens (`messages`,
/// `messages/partial`) as one.
fn outline(events: &[(String, Value)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (e, data) in events {
        let name = match e.as_str() {
            "debug" => continue,
            "updates" => format!(
                "updates:{}",
                keys(data).into_iter().collect::<Vec<_>>().join(",")
            ),
            "values" if data.get("__interrupt__").is_some() => "values:__interrupt__".into(),
            other => other.to_owned(),
        };
        let tokens = name == "messages" || name == "messages/partial";
        if tokens && out.last().is_some_and(|l| *l == name) {
            continue;
        }
        out.push(name);
    }
    out
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Every key LangGraph's data has, ours has (ours may have more: our state
/// shows unset fields at their initial values).
fn covers(ours: &Value, theirs: &Value, what: &str) {
    let missing: Vec<_> = keys(theirs).difference(&keys(ours)).cloned().collect();
    assert!(
        missing.is_empty(),
        "{what}: missing {missing:?}\nours: {ours}\ntheirs: {theirs}"
    );
}

/// The messages in a state, by LangChain type.
fn message_shapes(values: &Value, ours: &Value, what: &str) {
    for theirs in values["messages"].as_array().into_iter().flatten() {
        let ty = &theirs["type"];
        let mine = ours["messages"]
            .as_array()
            .and_then(|l| l.iter().find(|m| &m["type"] == ty))
            .unwrap_or_else(|| panic!("{what}: no {ty} message in {ours}"));
        covers(mine, theirs, &format!("{what}: a {ty} message"));
    }
}

/// The metadata keys of a token the SDKs and `useStream` read (the rest
/// describe LangGraph's deployment: host, plan, versions).
const TOKEN_METADATA: &[&str] = &[
    "langgraph_node",
    "langgraph_step",
    "langgraph_triggers",
    "langgraph_path",
    "langgraph_checkpoint_ns",
    "checkpoint_ns",
    "thread_id",
    "run_id",
    "graph_id",
    "assistant_id",
    "run_attempt",
    "created_by",
    "ls_provider",
    "ls_model_type",
];

fn compare(ours: &[(String, Value)], theirs: &[(String, Value)], what: &str) {
    assert_eq!(
        outline(ours),
        outline(theirs),
        "{what}: the events in order"
    );
    assert_eq!(ours[0].0, "metadata", "{what}: metadata first");
    assert_eq!(keys(&ours[0].1), keys(&theirs[0].1), "{what}: metadata");
    let first = |events: &[(String, Value)], name: &str| {
        events
            .iter()
            .find(|(e, _)| e == name)
            .map(|(_, d)| d.clone())
    };
    for name in ["values", "updates"] {
        let pairs = ours
            .iter()
            .filter(|(e, _)| e == name)
            .zip(theirs.iter().filter(|(e, _)| e == name));
        for ((_, o), (_, t)) in pairs {
            covers(o, t, &format!("{what}: {name}"));
            for (node, written) in t.as_object().into_iter().flatten() {
                if name == "updates" && node != "__interrupt__" {
                    covers(&o[node], written, &format!("{what}: updates of {node}"));
                }
            }
            if name == "values" {
                message_shapes(t, o, &format!("{what}: values"));
            }
        }
    }
    if let (Some(o), Some(t)) = (first(ours, "messages"), first(theirs, "messages")) {
        assert_eq!(keys(&o[0]), keys(&t[0]), "{what}: a token's chunk");
        assert_eq!(o[0]["type"], t[0]["type"]);
        for k in TOKEN_METADATA {
            if t[0]["type"] != "AIMessageChunk" && t[1].get(*k).is_none() {
                continue; // a node's whole message: no model's, no checkpoint_ns
            }
            assert!(t[1].get(*k).is_some(), "the recording has {k}");
            assert!(
                o[1].get(*k).is_some(),
                "{what}: a token's metadata has no {k}: {}",
                o[1]
            );
        }
        assert_eq!(o[1]["langgraph_node"], t[1]["langgraph_node"]);
        assert_eq!(o[1]["langgraph_step"], t[1]["langgraph_step"]);
    }
    let interrupt = |events: &[(String, Value)]| {
        events.iter().find_map(|(e, d)| {
            (e == "values")
                .then(|| d.get("__interrupt__").cloned())
                .flatten()
        })
    };
    if let Some(t) = interrupt(theirs) {
        let o = interrupt(ours).unwrap_or_else(|| panic!("{what}: no interrupt"));
        assert_eq!(keys(&o[0]), keys(&t[0]), "{what}: an interrupt");
        assert_eq!(
            keys(&o[0]["value"]),
            keys(&t[0]["value"]),
            "{what}: the interrupt's value"
        );
    }
    message_mode(ours, theirs, what);
    let debug = |events: &[(String, Value)]| -> BTreeSet<String> {
        events
            .iter()
            .filter(|(e, _)| e == "debug")
            .map(|(_, d)| d["type"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(debug(ours), debug(theirs), "{what}: debug event types");
    for ty in ["task", "task_result", "checkpoint"] {
        let payload = |events: &[(String, Value)]| {
            events
                .iter()
                .find(|(e, d)| e == "debug" && d["type"] == ty)
                .map(|(_, d)| d.clone())
        };
        if let (Some(o), Some(t)) = (payload(ours), payload(theirs)) {
            covers(&o, &t, &format!("{what}: debug {ty}"));
            covers(
                &o["payload"],
                &t["payload"],
                &format!("{what}: debug {ty} payload"),
            );
        }
    }
}

/// The `messages` mode's events: a message's metadata, a partial and a
/// complete message in LangGraph's shapes.
fn message_mode(ours: &[(String, Value)], theirs: &[(String, Value)], what: &str) {
    let first = |events: &[(String, Value)], name: &str| {
        events
            .iter()
            .find(|(e, _)| e == name)
            .map(|(_, d)| d.clone())
    };
    if let (Some(o), Some(t)) = (
        first(ours, "messages/metadata"),
        first(theirs, "messages/metadata"),
    ) {
        let meta = |v: &Value| v.as_object().unwrap().values().next().unwrap()["metadata"].clone();
        let (o, t) = (meta(&o), meta(&t));
        for k in ["langgraph_node", "langgraph_step"] {
            assert_eq!(o[k], t[k], "{what}: messages/metadata {k}");
        }
        for k in TOKEN_METADATA.iter().filter(|k| t.get(**k).is_some()) {
            assert!(o.get(*k).is_some(), "{what}: messages/metadata has no {k}");
        }
    }
    for name in ["messages/partial", "messages/complete"] {
        if let (Some(o), Some(t)) = (first(ours, name), first(theirs, name)) {
            covers(&o[0], &t[0], &format!("{what}: {name}"));
            assert_eq!(o[0]["type"], t[0]["type"], "{what}: {name}'s type");
        }
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(root().join("tests/fixtures/langgraph_wire").join(name)).unwrap()
}

/// A run on a new thread (`t`: none) or on thread `t`, its SSE events.
async fn run_on(
    http: &reqwest::Client,
    base: &str,
    t: Option<&str>,
    body: Value,
) -> (String, Vec<(String, Value)>) {
    let post = |path: String, body: Value| {
        http.post(format!("{base}{path}"))
            .header("x-api-key", "key-a")
            .json(&body)
            .send()
    };
    let t = match t {
        Some(t) => t.to_owned(),
        None => {
            let v: Value = post("/threads".into(), json!({}))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["thread_id"].as_str().unwrap().to_owned()
        }
    };
    let r = post(format!("/threads/{t}/runs/stream"), body)
        .await
        .unwrap();
    (t, parse(&r.text().await.unwrap()))
}

/// The `messages` mode (messages/metadata, messages/partial,
/// messages/complete) on a turn, an interrupt and its resume, and on the
/// `note` graph, whose message is written whole: alone, and with
/// `messages-tuple` (then LangGraph sends the tuples alone).
async fn messages_mode(http: &reqwest::Client, base: &str) {
    let modes = json!(["messages", "updates"]);
    let says = |graph: &str, text: &str, modes: &Value| json!({"assistant_id": graph, "input": {"messages": [{"type": "human", "content": text}]}, "stream_mode": modes});
    let (_, turn) = run_on(http, base, None, says("agent", "hello there", &modes)).await;
    compare(
        &turn,
        &parse(&fixture("messages_turn.sse")),
        "messages: a turn",
    );
    let (t, paused) = run_on(http, base, None, says("agent", "please approve", &modes)).await;
    let theirs = parse(&fixture("messages_interrupt.sse"));
    compare(&paused, &theirs, "messages: an interrupt");
    let resume =
        json!({"assistant_id": "agent", "command": {"resume": "ship it"}, "stream_mode": modes});
    let (_, resumed) = run_on(http, base, Some(&t), resume).await;
    let theirs = parse(&fixture("messages_resume.sse"));
    compare(&resumed, &theirs, "messages: a resume");
    let (_, note) = run_on(http, base, None, says("note", "hello there", &modes)).await;
    let theirs = parse(&fixture("messages_note.sse"));
    assert!(outline(&theirs).contains(&"messages/complete".to_owned()));
    compare(&note, &theirs, "messages: a message written whole");
    let both = json!(["messages", "messages-tuple", "updates"]);
    let (_, note) = run_on(http, base, None, says("note", "hello there", &both)).await;
    let theirs = parse(&fixture("messages_note_both.sse"));
    compare(&note, &theirs, "messages and messages-tuple");
}

#[tokio::test]
async fn our_stream_has_langgraphs_events_in_its_shapes() {
    let dir = tempfile::tempdir().unwrap();
    // The example's graph and note.yaml (note.py's stategraph twin).
    let graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    let example = root().join("examples/langgraph_api/graphs/agent.yaml");
    std::fs::copy(example, graphs.join("agent.yaml")).unwrap();
    std::fs::write(graphs.join("note.yaml"), fixture("note.yaml")).unwrap();
    let (mut child, base) = super::langgraph_api::serve_graphs(dir.path(), &graphs).await;
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        http.post(format!("{base}{path}"))
            .header("x-api-key", "key-a")
            .json(&body)
            .send()
    };
    let modes = json!(["values", "updates", "messages-tuple", "custom", "debug"]);
    let thread = |v: Value| v["thread_id"].as_str().unwrap().to_owned();
    let stream = |t: &str, body: Value| post(format!("/threads/{t}/runs/stream"), body);

    let t = thread(
        post("/threads".into(), json!({}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    );
    let turn = stream(&t, json!({"assistant_id": "agent", "input": {"messages": [{"type": "human", "content": "hello there"}]}, "stream_mode": modes}))
        .await.unwrap().text().await.unwrap();
    compare(&parse(&turn), &parse(&fixture("turn.sse")), "a turn");

    let t = thread(
        post("/threads".into(), json!({}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    );
    let paused = stream(&t, json!({"assistant_id": "agent", "input": {"messages": [{"type": "human", "content": "please approve"}]}, "stream_mode": modes}))
        .await.unwrap().text().await.unwrap();
    compare(
        &parse(&paused),
        &parse(&fixture("interrupt.sse")),
        "an interrupt",
    );
    let resumed = stream(
        &t,
        json!({"assistant_id": "agent", "command": {"resume": "ship it"}, "stream_mode": modes}),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    compare(&parse(&resumed), &parse(&fixture("resume.sse")), "a resume");

    messages_mode(&http, &base).await;

    let state: Value = http
        .get(format!("{base}/threads/{t}/state"))
        .header("x-api-key", "key-a")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let theirs: Value = serde_json::from_str(&fixture("state.json")).unwrap();
    covers(&state, &theirs, "thread state");
    covers(&state["values"], &theirs["values"], "thread state values");
    message_shapes(&theirs["values"], &state["values"], "thread state");
    covers(&state["checkpoint"], &theirs["checkpoint"], "a checkpoint");

    // LangGraph's 404: `{"detail": "Thread with ID … not found"}`.
    let recorded = fixture("not_found.txt");
    let (body, code) = recorded.trim().rsplit_once('\n').unwrap();
    let theirs: Value = serde_json::from_str(body).unwrap();
    let r = http
        .get(format!(
            "{base}/threads/00000000-0000-4000-8000-000000000000"
        ))
        .header("x-api-key", "key-a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16().to_string(), code);
    let ours: Value = r.json().await.unwrap();
    covers(&ours, &theirs, "a 404");
    assert!(ours["detail"].is_string());
    let _ = child.kill().await;
}
