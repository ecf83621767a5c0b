//! A test case from a stored run (`stategraph test --from-run`, the
//! studio's "save as test"): the run's input becomes the case's input, its
//! model outputs the scripted replies, its tool results the stubs, and its
//! path, routes, tool calls, answer and status the expectations — all of
//! them, exact; the author then trims what should stay loose.
//!
//! A run that paused and continued becomes a case of two turns: the input,
//! then `resume` with the answers it was given.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::observe::{Call, Observation, observe};
use super::spec::Status;
use crate::events::{
    Event, EventKind, LlmFailure, LlmFinish, LlmStart, StepBatch, ToolDef, ToolFault, ToolReady,
    ToolReturn,
};
use crate::nodes::Graph;
use crate::sse::BridgeConfig;
use crate::tools::ToolRegistry;

/// A stored run, as a case is written from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recorded<'a> {
    /// The graph (as served now; ids and fields are read from it).
    pub graph: &'a Graph,
    /// The run's input state.
    pub input: &'a Value,
    /// Its events.
    pub events: &'a [Event],
    /// Its checkpoints.
    pub batches: &'a [StepBatch],
    /// The tools registered now (a stub names the partition of a tool
    /// that no registry provides, an MCP server's).
    pub tools: &'a ToolRegistry,
}

/// The case as YAML: one item of a file's `cases:` list (indented by two
/// spaces, starting `  - name:`).
pub(crate) fn case_yaml(rec: Recorded<'_>, name: &str) -> String {
    let segments = segments(rec.events);
    let mut out = format!("  - name: {}\n", q(name));
    let multi = segments.len() > 1;
    if multi {
        out.push_str("    turns:\n");
    }
    for (i, seg) in segments.iter().enumerate() {
        let ind = if multi { "        " } else { "    " };
        let first = if multi { "      - " } else { "    " };
        let mut turn = String::new();
        if i == 0 {
            input(rec, &mut turn, ind);
        } else {
            resume(seg, &mut turn, ind);
        }
        models(seg, &mut turn, ind);
        stubs(rec, seg, &mut turn, ind);
        let obs = observation(rec, seg, segments[..i].iter().map(|s| s.len()).sum());
        expect(&obs, &mut turn, ind);
        // The first line of a turn goes after the list marker.
        let mut lines = turn.lines();
        if let Some(l) = lines.next() {
            let _ = writeln!(out, "{first}{}", l.trim_start());
        }
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

/// The run's events cut where it continued after a pause.
fn segments(events: &[Event]) -> Vec<&[Event]> {
    let mut cuts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.event, EventKind::RunResumed { .. }))
        .map(|(i, _)| i)
        .collect();
    cuts.push(events.len());
    let mut out = Vec::new();
    let mut from = 0;
    for c in cuts {
        out.push(&events[from..c]);
        from = c;
    }
    out
}

/// A JSON value on one line (JSON is YAML).
fn q(v: impl serde::Serialize) -> String {
    serde_json::to_string(&v).unwrap_or_default()
}

/// A node id as a mapping key.
fn key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_owned()
    } else {
        q(k)
    }
}

fn input(rec: Recorded<'_>, out: &mut String, ind: &str) {
    let io = &rec.graph.chat;
    let Value::Object(fields) = rec.input else {
        return;
    };
    let _ = writeln!(out, "{ind}input:");
    let mut state = Map::new();
    for (k, v) in fields {
        if io.history.as_deref() == Some(k.as_str()) {
            let _ = writeln!(out, "{ind}  messages:");
            for m in v.as_array().into_iter().flatten() {
                let _ = writeln!(out, "{ind}    - {}", q(m));
            }
        } else if io.text.as_deref() == Some(k.as_str()) && io.history.is_some() {
            // Derived from the conversation's newest user message.
        } else {
            state.insert(k.clone(), v.clone());
        }
    }
    if !state.is_empty() {
        let _ = writeln!(out, "{ind}  state: {}", q(&state));
    }
}

fn resume(seg: &[Event], out: &mut String, ind: &str) {
    let answers = seg.iter().find_map(|e| match &e.event {
        EventKind::RunResumed { answers } => Some(answers),
        _ => None,
    });
    let _ = writeln!(out, "{ind}resume:");
    let _ = writeln!(
        out,
        "{ind}  answers: {}",
        q(answers.cloned().unwrap_or_default())
    );
}

/// The scripted replies: each model call's output (or failure), per node.
fn models(seg: &[Event], out: &mut String, ind: &str) {
    let mut by_node: Vec<(String, Vec<String>)> = Vec::new();
    // The request of the call in progress, per task: a recorded reply
    // answers only the same request (a prompt edit makes it differ).
    let mut asked: BTreeMap<(Option<&str>, u32, u32), &str> = BTreeMap::new();
    for e in seg {
        let task = (e.node.as_deref(), e.step, e.task);
        let mut reply = match &e.event {
            EventKind::LlmStarted(llm_start) => {
                let LlmStart { request, .. } = &**llm_start;
                asked.insert(task, request);
                continue;
            }
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish { output, .. } = &**llm_finish;
                let mut r = Map::new();
                if !output.reasoning.is_empty() {
                    r.insert("reasoning".into(), json!(output.reasoning));
                }
                match serde_json::from_str::<Value>(&output.text) {
                    Ok(v @ Value::Object(_)) => r.insert("json".into(), v),
                    _ if !output.text.is_empty() || output.tool_calls.is_empty() => {
                        r.insert("text".into(), json!(output.text))
                    }
                    _ => None,
                };
                if !output.tool_calls.is_empty() {
                    let calls: Vec<Value> = output
                        .tool_calls
                        .iter()
                        .map(|c| {
                            let args = serde_json::from_str::<Value>(&c.arguments)
                                .ok()
                                .filter(Value::is_object)
                                .unwrap_or_else(|| json!({}));
                            json!({"name": c.name, "args": args, "id": c.id})
                        })
                        .collect();
                    r.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(r)
            }
            EventKind::LlmFailed(llm_failure) => {
                let LlmFailure { error, .. } = &**llm_failure;
                failure_reply(error)
            }
            _ => continue,
        };
        if let Some(r) = asked.remove(&task).filter(|r| !r.is_empty()) {
            reply["request"] = json!(r);
        }
        let node = e.node.as_deref().unwrap_or("*").to_owned();
        let text = q(reply);
        match by_node.iter_mut().find(|(n, _)| *n == node) {
            Some((_, list)) => list.push(text),
            None => by_node.push((node, vec![text])),
        }
    }
    if by_node.is_empty() {
        return;
    }
    let _ = writeln!(out, "{ind}models:");
    for (node, replies) in by_node {
        let _ = writeln!(out, "{ind}  {}:", key(&node));
        for r in replies {
            let _ = writeln!(out, "{ind}    - {r}");
        }
    }
}

/// A failed call as a reply: its HTTP status, a timeout, or a 502.
fn failure_reply(error: &str) -> Value {
    if error.starts_with("model call timed out") {
        return json!({"timeout": true});
    }
    let status = error
        .strip_prefix("model endpoint returned HTTP ")
        .and_then(|r| r.split(':').next())
        .and_then(|s| s.trim().parse::<u16>().ok())
        .unwrap_or(502);
    json!({"error": {"status": status, "message": error}})
}

/// The tool stubs: each call's result (or failure), and the tools offered
/// but never called (so the case offers the same), which fail if called.
fn stubs(rec: Recorded<'_>, seg: &[Event], out: &mut String, ind: &str) {
    let mut offered: BTreeMap<String, ToolDef> = BTreeMap::new();
    let mut pending: BTreeMap<&str, (String, String, Value)> = BTreeMap::new();
    let mut list: Vec<Value> = Vec::new();
    for e in seg {
        let node = e.node.as_deref().unwrap_or("");
        match &e.event {
            EventKind::ToolsOffered { tools } => {
                for t in tools {
                    offered.entry(t.name.clone()).or_insert_with(|| t.clone());
                }
            }
            EventKind::ToolCallReady(tool_ready) => {
                let ToolReady {
                    call_id,
                    tool,
                    args,
                } = &**tool_ready;
                pending.insert(call_id, (node.to_owned(), tool.clone(), args.clone()));
            }
            EventKind::ToolResult(tool_return) => {
                let ToolReturn {
                    call_id, output, ..
                } = &**tool_return;
                if let Some((node, name, args)) = pending.remove(call_id.as_str()) {
                    list.push(stub(
                        rec,
                        &offered,
                        &node,
                        &name,
                        args,
                        ("result", output.clone()),
                    ));
                }
            }
            EventKind::ToolError(tool_fault) => {
                let ToolFault { call_id, error, .. } = &**tool_fault;
                if let Some((node, name, args)) = pending.remove(call_id.as_str()) {
                    let kind = if super::spec::STUB_ERRORS.contains(&error.kind.as_str()) {
                        error.kind.as_str()
                    } else {
                        "execution_error"
                    };
                    list.push(stub(
                        rec,
                        &offered,
                        &node,
                        &name,
                        args,
                        ("error", json!({"type": kind, "message": error.message})),
                    ));
                }
            }
            _ => {}
        }
    }
    list.dedup();
    let called: Vec<String> = list
        .iter()
        .filter_map(|s| s["name"].as_str().map(str::to_owned))
        .collect();
    for (name, def) in &offered {
        if called.contains(name) {
            continue;
        }
        let mut s = json!({"name": name, "error": {"type": "not_found", "message": "not called in the recorded run"}});
        if rec.tools.spec(name).is_none()
            && let Some(p) = def.partition.as_ref().filter(|p| *p != name)
        {
            s["partition"] = json!(p);
        }
        list.push(s);
    }
    if list.is_empty() {
        return;
    }
    let _ = writeln!(out, "{ind}tools:");
    let mut seen = Vec::new();
    let mut schemas_given: Vec<String> = Vec::new();
    for s in list {
        if !seen.contains(&s) {
            seen.push(s.clone());
            let mut s = s;
            // A tool no registry provides (an MCP server's) keeps the
            // argument schema it was offered with, once per tool, so
            // arguments are checked and `fill_args` works as in the run.
            let name = s["name"].as_str().unwrap_or_default().to_owned();
            if rec.tools.spec(&name).is_none() && !schemas_given.contains(&name) {
                if let Some(def) = offered
                    .get(&name)
                    .filter(|d| d.parameters.get("properties").is_some())
                {
                    s["schema"] = (*def.parameters).clone();
                }
                schemas_given.push(name);
            }
            let _ = writeln!(out, "{ind}  - {}", q(&s));
        }
    }
}

fn stub(
    rec: Recorded<'_>,
    offered: &BTreeMap<String, ToolDef>,
    node: &str,
    name: &str,
    args: Value,
    outcome: (&str, Value),
) -> Value {
    let mut s = json!({"name": name});
    if name == "http" {
        s["node"] = json!(node);
    } else {
        s["args"] = args;
    }
    s[outcome.0] = outcome.1;
    if rec.tools.spec(name).is_none()
        && let Some(p) = offered
            .get(name)
            .and_then(|d| d.partition.as_ref())
            .filter(|p| *p != name)
    {
        s["partition"] = json!(p);
    }
    s
}

/// What the segment did, read as a test run is.
fn observation(rec: Recorded<'_>, seg: &[Event], before: usize) -> Observation {
    let end = seg.iter().rev().find_map(|e| match &e.event {
        EventKind::RunFinished { .. } => Some((Status::Completed, None)),
        EventKind::RunFailed { error } => Some((Status::Failed, Some(error.message.clone()))),
        EventKind::RunInterrupted { .. } => Some((Status::Interrupted, None)),
        _ => None,
    });
    let interrupts: Vec<Value> = seg
        .iter()
        .find_map(|e| match &e.event {
            EventKind::RunInterrupted { interrupts } => Some(
                interrupts
                    .iter()
                    .filter_map(|i| serde_json::to_value(i).ok())
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_default();
    let after = if before == 0 {
        0
    } else {
        rec.events[before - 1].seq
    };
    let sse = rec
        .events
        .iter()
        .find_map(|e| match &e.event {
            EventKind::RunStarted(start) => start.stream.as_ref().and_then(BridgeConfig::from_json),
            _ => None,
        })
        .map(|cfg| crate::sse::render(cfg, &rec.events[..before + seg.len()], after))
        .unwrap_or_default();
    let own: Vec<&Event> = seg.iter().collect();
    let end = end.unwrap_or((Status::Failed, Some("the run did not end".into())));
    observe(rec.graph, &own, rec.batches, sse, end, interrupts)
}

fn expect(o: &Observation, out: &mut String, ind: &str) {
    let _ = writeln!(out, "{ind}expect:");
    let status = o.status.map_or("failed", Status::as_str);
    let _ = writeln!(out, "{ind}  status: {status}");
    if let Some(e) = &o.error {
        let _ = writeln!(out, "{ind}  error: {}", q(e));
    }
    let _ = writeln!(out, "{ind}  path: {}", q(&o.path));
    let routes: Map<String, Value> = o
        .routes
        .iter()
        .filter_map(|(n, v)| Some((n.clone(), json!(v.as_ref()?))))
        .collect();
    if !routes.is_empty() {
        let _ = writeln!(out, "{ind}  routes: {}", q(&routes));
    }
    if o.tool_calls.is_empty() {
        let _ = writeln!(out, "{ind}  tool_calls: []");
    } else {
        let _ = writeln!(out, "{ind}  tool_calls:");
        for Call {
            node, name, args, ..
        } in &o.tool_calls
        {
            let _ = writeln!(
                out,
                "{ind}    - {}",
                q(json!({"name": name, "args": args, "node": node}))
            );
        }
    }
    if !o.interrupts.is_empty() {
        let list: Vec<Value> = o
            .interrupts
            .iter()
            .map(|i| {
                let mut i = i.clone();
                if let Value::Object(m) = &mut i {
                    m.remove("expires_at");
                }
                i
            })
            .collect();
        let _ = writeln!(out, "{ind}  interrupts: {}", q(&list));
    }
    if status == "completed" {
        let _ = writeln!(out, "{ind}  answer: {}", q(&o.answer));
    }
    if !o.sse.is_empty() {
        let _ = writeln!(out, "{ind}  aisdk_valid: {}", o.stream.valid());
    }
}

/// The header of a new file of recorded cases.
pub(crate) fn file_header(graph: &str) -> String {
    format!(
        "# Cases written from stored runs (`stategraph test --from-run`, the studio's\n# \"save as test\"): everything the run did is expected exactly; trim what\n# should stay loose. Reference: docs/testing.md\ngraph: {}\ncases:\n",
        key(graph)
    )
}
