//! Starting a LangGraph run on a thread: new input as a chat turn
//! (`Runs::begin_turn`), or `command.resume` continuing the thread's
//! paused run (`Runs::resume`, the same run going on).
//!
//! A new run's input is the thread's state (its newest run's final state)
//! with the request's `input` (and `command.update`) written over it, the
//! `messages` field appended to by id as LangGraph's `add_messages` does:
//! a thread carries its state from run to run as a LangGraph thread does
//! through its checkpointer. Its new human messages are stored as the
//! chat's messages, so the thread reads as a chat in the studio and on
//! `GET /api/chat/{id}`.

use crate::server::Code;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::super::auth::User;
use super::super::error::ApiError;
use super::super::{AppState, RequestId};
use super::pump::From;
use super::{assistants, busy, frontier, invalid, messages, owned_thread};
use crate::events::Breakpoints;
use crate::nodes::Graph;
use crate::runs::{ChatTurn, ResumeRequest, RunHub, TurnError, TurnFrom};
use crate::runtime::RunStatus;
use crate::store::{ChatRecord, MessageRecord};

/// How long `interrupt` / `rollback` wait for the run they stop to end.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `command` (LangGraph's `Command`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Command {
    #[serde(default)]
    resume: Option<Value>,
    #[serde(default)]
    update: Option<Value>,
    #[serde(default)]
    pub(super) goto: Option<Value>,
}

/// A run request (LangGraph's `RunCreateStateful`; fields it has that do
/// not change what runs here are accepted and ignored: `config`,
/// `context`, `metadata`, `on_completion`, `durability`, `feedback_keys`,
/// `stream_subgraphs`, `checkpoint_during`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RunBody {
    pub(super) assistant_id: String,
    #[serde(default)]
    pub(super) input: Option<Value>,
    #[serde(default)]
    pub(super) command: Option<Command>,
    #[serde(default)]
    pub(super) stream_mode: Option<Value>,
    #[serde(default)]
    pub(super) stream_resumable: Option<bool>,
    #[serde(default)]
    pub(super) multitask_strategy: Option<String>,
    #[serde(default)]
    pub(super) if_not_exists: Option<String>,
    #[serde(default)]
    interrupt_before: Option<Value>,
    #[serde(default)]
    interrupt_after: Option<Value>,
    #[serde(default)]
    pub(super) checkpoint_id: Option<String>,
    #[serde(default)]
    pub(super) checkpoint: Option<Value>,
    #[serde(default)]
    webhook: Option<String>,
    #[serde(default)]
    after_seconds: Option<f64>,
    /// The id given out when the run was queued (`queue`), not a field
    /// of the request.
    #[serde(skip)]
    pub(super) run_id: Option<Uuid>,
}

/// A started (or continued) run.
pub(super) struct Begun {
    pub(super) run_id: Uuid,
    pub(super) hub: Arc<RunHub>,
    pub(super) graph: Arc<Graph>,
    /// Where its stream starts sending.
    pub(super) from: From,
}

fn unsupported(what: &str) -> ApiError {
    invalid(format!(
        "{what} is not supported by this server (see docs/langgraph-api.md)"
    ))
}

/// Refuses the options this server does not implement rather than
/// ignoring them.
fn check_supported(b: &RunBody) -> Result<(), ApiError> {
    if b.webhook.is_some() {
        return Err(unsupported("webhook"));
    }
    if b.after_seconds.is_some_and(|s| s > 0.0) {
        return Err(unsupported("after_seconds"));
    }
    Ok(())
}

/// `interrupt_before` / `interrupt_after` as our breakpoints: node names,
/// or `"*"` for every node; `None` when neither is given.
fn breakpoints_of(graph: &Graph, b: &RunBody) -> Result<Option<Breakpoints>, ApiError> {
    let nodes = |v: &Option<Value>, when: &str| -> Result<Vec<String>, ApiError> {
        match v {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) if s == "*" => {
                Ok(graph.nodes.iter().map(|n| n.id.to_string()).collect())
            }
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid(format!("{when} must be \"*\" or a list of node names"))),
            Some(_) => Err(invalid(format!(
                "{when} must be \"*\" or a list of node names"
            ))),
        }
    };
    if b.interrupt_before.is_none() && b.interrupt_after.is_none() {
        return Ok(None);
    }
    let set = Breakpoints {
        before: nodes(&b.interrupt_before, "interrupt_before")?,
        after: nodes(&b.interrupt_after, "interrupt_after")?,
    };
    crate::runs::breaks::check(graph, &set).map_err(|e| invalid(e.to_string()))?;
    Ok(Some(set))
}

/// Whether the thread's run waits at a breakpoint (LangGraph continues one
/// with `input: null`).
async fn at_breakpoint(state: &AppState, chat: &ChatRecord) -> Result<bool, ApiError> {
    let Some(run) = chat.active_run else {
        return Ok(false);
    };
    let Some(run) = state.store.get_run(run).await? else {
        return Ok(false);
    };
    let waiting = super::state::waiting(state, &run).await?;
    Ok(waiting
        .iter()
        .any(|i| matches!(i.ask, crate::events::Ask::Breakpoint { .. })))
}

/// Starts the run a request asks for on thread `tid`.
pub(super) async fn begin(
    state: &Arc<AppState>,
    user: &User,
    request_id: &RequestId,
    tid: &str,
    body: &RunBody,
) -> Result<Begun, ApiError> {
    check_supported(body)?;
    let graph = assistants::graph_of(state, &body.assistant_id)?;
    let chat = match owned_thread(state, user, tid).await {
        Ok(c) => c,
        Err(e) if body.if_not_exists.as_deref() == Some("create") => {
            let _ = e;
            super::threads::create_thread(state, user, tid, None, "do_nothing").await?
        }
        Err(e) => return Err(e),
    };
    let breakpoints = breakpoints_of(&graph, body)?;
    let resume = body.command.as_ref().and_then(|c| c.resume.as_ref());
    let update = body.command.as_ref().and_then(|c| c.update.as_ref());
    // A thread stopped at `interrupt_before`/`after` goes on with no input;
    // `command.update` edits the paused state first (`update_state` then
    // resume, in one request).
    if body.input.as_ref().is_none_or(Value::is_null) && at_breakpoint(state, &chat).await? {
        let set = update
            .map(|u| messages::values_in(&graph.state.schema, u).map_err(invalid))
            .transpose()?;
        let paused = Paused {
            chat: &chat,
            breakpoints,
            set: set.map(Value::Object),
        };
        let value = resume.unwrap_or(&Value::Null);
        return continue_paused(state, user, request_id, paused, graph, value).await;
    }
    if let Some(resume) = resume {
        if update.is_some() {
            return Err(unsupported(
                "command.update together with command.resume (but at a breakpoint)",
            ));
        }
        let paused = Paused {
            chat: &chat,
            breakpoints,
            set: None,
        };
        return continue_paused(state, user, request_id, paused, graph, resume).await;
    }
    make_way(
        state,
        &chat,
        body.multitask_strategy.as_deref().unwrap_or("reject"),
    )
    .await?;
    let goto = frontier::goto_of(&graph, body.command.as_ref().and_then(|c| c.goto.as_ref()))?;
    let at = frontier::checkpoint_of(state, &chat, body).await?;
    let base = match &at {
        Some(cp) => frontier::base_at(state, &graph, &cp.run, cp.step).await,
        None => frontier::thread_base(state, &graph, &chat.id).await?,
    };
    let input = input_state(&graph, base, body.input.as_ref(), update)?;
    let from =
        frontier::turn_from(state, &graph, &chat, &input, goto, at, body.input.as_ref()).await?;
    let t = Turn {
        chat: &chat,
        graph,
        input,
        breakpoints: breakpoints.unwrap_or_default(),
        from,
        run_id: body.run_id,
    };
    start_turn(state, user, request_id, t).await
}

/// A turn to start on a thread: its input state, and where it starts
/// when not at the graph's entry.
pub(super) struct Turn<'a> {
    pub(super) chat: &'a ChatRecord,
    pub(super) graph: Arc<Graph>,
    pub(super) input: Value,
    pub(super) breakpoints: Breakpoints,
    pub(super) from: Option<TurnFrom>,
    /// Its id, when it was given out before (a queued run).
    pub(super) run_id: Option<Uuid>,
}

/// Starts a turn: a chat turn answered by a new run.
pub(super) async fn start_turn(
    state: &Arc<AppState>,
    user: &User,
    request_id: &RequestId,
    t: Turn<'_>,
) -> Result<Begun, ApiError> {
    let turn = ChatTurn {
        chat_id: t.chat.id.clone(),
        user_id: user.0.clone(),
        title: String::new(),
        request_id: request_id.0.clone(),
        graph: Arc::clone(&t.graph),
        messages: chat_messages(state, &t.graph, t.chat, &t.input).await?,
        input: t.input,
        breakpoints: t.breakpoints,
        run_id: t.run_id,
    };
    let started = match t.from {
        Some(from) => state.runs.begin_turn_from(turn, from).await,
        None => state.runs.begin_turn(turn).await,
    };
    let tid = &t.chat.id;
    let started = started.map_err(|e| match e {
        TurnError::Busy => busy(),
        TurnError::NotOwner => ApiError::not_found(format!("Thread {tid} not found")),
        other => other.into(),
    })?;
    Ok(Begun {
        run_id: started.hub.run_id,
        hub: started.hub,
        graph: t.graph,
        from: From::Start,
    })
}

/// `multitask_strategy` against a run in flight: `reject` refuses (409),
/// `interrupt` and `rollback` stop it (and wait for it to end), `enqueue`
/// waits for it to end. A paused run is set aside: new input moves the
/// thread on, as it does on LangGraph's server.
pub(super) async fn make_way(
    state: &AppState,
    chat: &ChatRecord,
    strategy: &str,
) -> Result<(), ApiError> {
    if !matches!(strategy, "reject" | "interrupt" | "rollback" | "enqueue") {
        return Err(invalid(format!(
            "multitask_strategy must be reject, interrupt, rollback or enqueue, not `{strategy}`"
        )));
    }
    let Some(active) = chat.active_run else {
        return Ok(());
    };
    let Some(run) = state.store.get_run(active).await? else {
        return Ok(());
    };
    match run.status {
        RunStatus::Interrupted => {
            state
                .runs
                .set_aside(&run, "new input moved the thread on")
                .await?;
            return Ok(());
        }
        RunStatus::Running => {}
        _ => return Ok(()),
    }
    match strategy {
        "reject" => return Err(busy()),
        "interrupt" | "rollback" => {
            state.runs.stop_chat(&chat.id, Some(active)).await?;
        }
        _ => {}
    }
    let wait = if strategy == "enqueue" {
        state.config.server.request_timeout.0
    } else {
        STOP_WAIT
    };
    let ended = tokio::time::timeout(wait, async {
        loop {
            match state.store.get_run(active).await {
                Ok(Some(r)) if r.status == RunStatus::Running => {}
                _ => break,
            }
            if let Some(hub) = state.runs.for_chat(&chat.id).filter(|h| h.run_id == active) {
                let _ = hub.watch().wait_for(|p| p.done).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    ended.map_err(|_| busy())?;
    // The chat is freed just after the run's status is written.
    for _ in 0..100 {
        match state.store.get_chat(&chat.id).await? {
            Some(c) if c.active_run == Some(active) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            _ => break,
        }
    }
    Ok(())
}

/// `base` (a thread's or a checkpoint's state) with the request's input
/// (and `command.update`) written over it.
pub(super) fn input_state(
    graph: &Graph,
    mut values: Map<String, Value>,
    input: Option<&Value>,
    update: Option<&Value>,
) -> Result<Value, ApiError> {
    let schema = &graph.state.schema;
    let mut new = messages::values_in(schema, input.unwrap_or(&Value::Null)).map_err(invalid)?;
    if let Some(update) = update {
        new.extend(messages::values_in(schema, update).map_err(invalid)?);
    }
    // The previous turn's answer is in the history now (`with_answer`);
    // this turn writes its own.
    if let Some(answer) = graph.chat.answer.as_deref() {
        values.remove(answer);
    }
    let history = schema
        .messages_field()
        .map(|f| schema.spec(f).name.to_string());
    for (k, v) in new {
        if Some(&k) == history.as_ref() {
            let mut list = values
                .remove(&k)
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            for m in v.as_array().into_iter().flatten() {
                match list.iter_mut().find(|old| old["id"] == m["id"]) {
                    Some(old) => *old = m.clone(),
                    None => list.push(m.clone()),
                }
            }
            values.insert(k, Value::Array(list));
        } else if schema.field(&k).is_some() {
            values.insert(k, v);
        } else {
            return Err(invalid(format!(
                "`{k}` is not a field of {}'s state (fields: {})",
                graph.id,
                schema.names().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    // The newest user text, for graphs that read it from a field of its own.
    if let (Some(text_field), Some(h)) = (&graph.chat.text, &history)
        && input.is_none_or(|i| i.get(&**text_field).is_none())
        && let Some(last) = values
            .get(h.as_str())
            .and_then(Value::as_array)
            .and_then(|l| l.iter().rev().find(|m| m["role"] == "user"))
    {
        values.insert(text_field.to_string(), last["content"].clone());
    }
    let input = Value::Object(values);
    graph
        .state
        .from_json(&input)
        .map_err(|e| invalid(format!("invalid input: {e}")))?;
    Ok(input)
}

/// The chat's messages with the input's new human messages after them.
async fn chat_messages(
    state: &AppState,
    graph: &Graph,
    chat: &ChatRecord,
    input: &Value,
) -> Result<Vec<MessageRecord>, ApiError> {
    let mut stored = state.store.messages(&chat.id).await?;
    let schema = &graph.state.schema;
    let Some(field) = schema
        .messages_field()
        .map(|f| schema.spec(f).name.to_string())
    else {
        return Ok(stored);
    };
    let now = crate::events::now_micros();
    for m in input[field.as_str()].as_array().into_iter().flatten() {
        let id = m["id"].as_str().unwrap_or_default();
        if m["role"] != "user" || stored.iter().any(|s| s.id == id) {
            continue;
        }
        stored.push(MessageRecord {
            chat_id: chat.id.clone(),
            id: id.to_owned(),
            role: "user".into(),
            parts: json!([{"type": "text", "text": m["content"]}]),
            metadata: Value::Null,
            position: stored.len() as i64,
            created_at: now,
        });
    }
    Ok(stored)
}

/// `command.resume`: the answer to the thread's paused run — a value for
/// its one interrupt, or `{interrupt_id: value}` for several.
/// The thread a continuation is on, and the run's new breakpoints (if the
/// request gives `interrupt_before`/`after`).
struct Paused<'a> {
    chat: &'a ChatRecord,
    breakpoints: Option<Breakpoints>,
    /// Fields to write over a breakpoint's paused state (our JSON).
    set: Option<Value>,
}

async fn continue_paused(
    state: &Arc<AppState>,
    user: &User,
    request_id: &RequestId,
    paused: Paused<'_>,
    graph: Arc<Graph>,
    resume: &Value,
) -> Result<Begun, ApiError> {
    let chat = paused.chat;
    let not_waiting = || {
        ApiError::new(
            Code::NotInterrupted,
            "this thread has no run waiting for an answer",
        )
    };
    let run_id = chat.active_run.ok_or_else(not_waiting)?;
    let run = state.store.get_run(run_id).await?.ok_or_else(not_waiting)?;
    let waiting = super::state::waiting(state, &run).await?;
    let answers: BTreeMap<String, Value> = match (resume, waiting.as_slice()) {
        // A breakpoint goes on; a value given with it has nothing to answer.
        (_, [one]) if matches!(one.ask, crate::events::Ask::Breakpoint { .. }) => {
            let mut go = json!({"action": "continue"});
            if let Some(set) = paused.set.clone() {
                go["set"] = set;
            }
            BTreeMap::from([(one.id.clone(), go)])
        }
        (Value::Object(m), _)
            if !m.is_empty() && m.keys().all(|k| waiting.iter().any(|i| &i.id == k)) =>
        {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        (v, [one]) => BTreeMap::from([(one.id.clone(), v.clone())]),
        (_, []) => return Err(not_waiting()),
        (_, many) => {
            let ids: Vec<&str> = many.iter().map(|i| i.id.as_str()).collect();
            return Err(invalid(format!(
                "the run waits at {} interrupts ({}); resume with {{id: value}}",
                many.len(),
                ids.join(", ")
            )));
        }
    };
    let req = ResumeRequest {
        breakpoints: paused.breakpoints,
        run_id,
        user_id: user.0.clone(),
        request_id: request_id.0.clone(),
        answers,
        new_message: None,
        messages: Vec::new(),
    };
    let started = state
        .runs
        .resume(req)
        .await
        .map_err(super::super::paused::resume_error)?;
    let from = From::AfterSeq(started.hub.resumed);
    Ok(Begun {
        run_id: started.run_id,
        hub: started.hub,
        graph,
        from,
    })
}
