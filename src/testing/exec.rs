//! Running a case: its turns one after the other, each a run of the graph
//! as the server would start it — a chat request's input, the previous
//! turn's `carry:` fields, or the answers to the interrupts it paused at —
//! with the case's scripted replies and stubs in place of models and tools.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::expect::{Failure, check};
use super::judge::judge_turn;
use super::observe::{Observation, observe};
use super::script::{Miss, Script, registry};
use super::spec::{Case, InputSpec, ResumeSpec, Start, Status, TestFile, TurnSpec};
use crate::events::{Event, Interrupt};
use crate::graph::loc::Loc;
use crate::llm::{ChatModel, ChatRequest, ChunkStream, LlmError, Models};
use crate::nodes::{Graph, GraphCatalog, Playback, Services};
use crate::replay::Recording;
use crate::runs::resume::{check_answers, pending};
use crate::runtime::{self, MemoryCheckpointer, Resume, RunError, RunOptions};
use crate::sse::BridgeConfig;
use crate::tools::{ToolError, ToolOutcome, ToolRegistry};

/// What cases run against.
#[derive(Clone, Debug)]
pub struct Env {
    /// The graphs, compiled.
    pub catalog: Arc<GraphCatalog>,
    /// The real tools (`real_tools` borrows from here; stubs take their
    /// schemas and partitions).
    pub tools: Arc<ToolRegistry>,
    /// The longest a turn may take.
    pub turn_timeout: Duration,
    /// The configured models, asked when a case's script has no reply for
    /// a call or its recorded request changed (`stategraph test --live`);
    /// `None`: such a call fails the case.
    pub live: Option<Models>,
    /// The judge model of `judge:` expectations (`--judge ROLE`,
    /// `[testing] judge`); `None`: they are reported as not judged.
    pub judge: Option<super::judge::Judge>,
}

/// How one case went.
#[derive(Debug)]
pub struct CaseResult {
    /// Its file.
    pub file: Arc<str>,
    /// Its name.
    pub name: String,
    /// Its graph.
    pub graph: String,
    /// Where it is written.
    pub loc: Loc,
    /// What did not hold (empty: it passed).
    pub failures: Vec<Failure>,
    /// What each turn did.
    pub turns: Vec<Observation>,
    /// The judged expectations, each with its verdict and reason (a
    /// `fail` or `error` is in `failures` too).
    pub judged: Vec<super::judge::Judged>,
    /// Wall time.
    pub duration: Duration,
}

impl CaseResult {
    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// A model that is never called: every call is answered by the script.
#[derive(Debug)]
struct Unreachable;

impl ChatModel for Unreachable {
    fn name(&self) -> &str {
        "none"
    }
    fn stream(&self, _: &ChatRequest) -> ChunkStream {
        use futures::StreamExt;
        let e = LlmError::Scripted("a test case reaches no model".into());
        futures::stream::iter([Err(e)]).boxed()
    }
}

/// The run a case carries from turn to turn.
struct Chat {
    history: Vec<Value>,
    previous: Option<Value>,
    answer: String,
    paused: Option<Paused>,
}

/// A run paused at interrupts, to continue in the next turn.
struct Paused {
    run_id: Uuid,
    events: Vec<Event>,
    checkpoints: Arc<MemoryCheckpointer>,
    interrupts: Vec<Interrupt>,
}

/// Runs one case of `file`.
pub async fn run_case(env: &Env, file: &TestFile, case: &Case) -> CaseResult {
    let started = Instant::now();
    let mut result = CaseResult {
        file: Arc::clone(&file.display),
        name: case.name.value.clone(),
        graph: case.graph.value.clone(),
        loc: case.loc,
        failures: Vec::new(),
        turns: Vec::new(),
        judged: Vec::new(),
        duration: Duration::ZERO,
    };
    let Some(graph) = env.catalog.get(&case.graph.value).cloned() else {
        result.failures.push(Failure::at(
            "graph",
            0,
            case.graph.loc,
            format!(
                "no valid graph `{}` (run `stategraph check`)",
                case.graph.value
            ),
        ));
        return result;
    };
    let notes = Arc::new(std::sync::Mutex::new(Vec::<Miss>::new()));
    let script = Arc::new(Script::new(Arc::clone(&notes), env.live.is_some()));
    let real: Vec<String> = case.real_tools.iter().map(|t| t.value.clone()).collect();
    let mut chat = Chat {
        history: Vec::new(),
        previous: None,
        answer: String::new(),
        paused: None,
    };
    for (i, turn) in case.turns.iter().enumerate() {
        script.begin_turn(&turn.models, &turn.tools);
        let tools = match registry(&env.tools, &turn.tools, &real, &notes) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                result.failures.push(Failure::at("tools", i, turn.loc, e));
                break;
            }
        };
        let obs = match one_turn(env, &graph, turn, i, &mut chat, &script, tools).await {
            Ok(obs) => obs,
            Err(message) => {
                result
                    .failures
                    .push(Failure::at("run", i, turn.loc, message));
                break;
            }
        };
        result.failures.extend(check(i, &turn.expect, &obs));
        if !turn.expect.judge.is_empty() {
            let question = last_user_text(&chat.history);
            judge(env, i, turn, &question, &obs.answer, &mut result).await;
        }
        let misses = std::mem::take(
            &mut *notes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for miss in misses {
            result
                .failures
                .push(Failure::at("script", i, turn.loc, miss.message));
        }
        let status = obs.status;
        result.turns.push(obs);
        if status == Some(Status::Failed) && i + 1 < case.turns.len() {
            result.failures.push(Failure::at(
                "run",
                i,
                turn.loc,
                format!("turn {} failed, so the turns after it did not run", i + 1),
            ));
            break;
        }
    }
    for (node, loc) in script.unused() {
        result.failures.push(Failure::at(
            "unused",
            case.turns.len().saturating_sub(1),
            loc,
            format!("this scripted reply for `{node}` was never used (the run made fewer calls of that node than the case scripts)"),
        ));
    }
    result.duration = started.elapsed();
    result
}

/// The turn's judged criteria, each failed one a failure of the case.
async fn judge(
    env: &Env,
    i: usize,
    turn: &TurnSpec,
    question: &str,
    answer: &str,
    result: &mut CaseResult,
) {
    let judged = judge_turn(env.judge.as_ref(), i, &turn.expect.judge, question, answer).await;
    for j in judged.iter().filter(|j| j.failed()) {
        let loc = Loc {
            line: j.line,
            column: j.column,
        };
        let message = if j.verdict == "fail" {
            format!(
                "the judge ({}) says the answer does not meet “{}”: {}",
                j.judge, j.criterion, j.reason
            )
        } else {
            format!("“{}” could not be judged: {}", j.criterion, j.reason)
        };
        result.failures.push(Failure::at("judge", i, loc, message));
    }
    result.judged.extend(judged);
}

/// One turn: its input (or answers), the run, what it did.
async fn one_turn(
    env: &Env,
    graph: &Arc<Graph>,
    turn: &TurnSpec,
    index: usize,
    chat: &mut Chat,
    script: &Arc<Script>,
    tools: Arc<ToolRegistry>,
) -> Result<Observation, String> {
    let models = env
        .live
        .clone()
        .unwrap_or_else(|| Models::single(Arc::new(Unreachable)));
    let mut services = Services::new(models, tools);
    let bridge = BridgeConfig::for_graph(
        graph,
        format!("msg_turn{}", index + 1),
        json!({"graph": &*graph.id, "test": true}),
    );
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(1024);
    let mut opts = RunOptions {
        events: Some(tx),
        stream: Some(bridge.to_json()),
        ..RunOptions::default()
    };
    let (checkpoints, mut history, after_seq, run) = match &turn.start {
        Start::Input(input) => {
            let input = input_state(graph, input, chat)?;
            let cp = Arc::new(MemoryCheckpointer::new());
            opts.checkpointer = Some(cp.clone());
            services.playback = Some(script.clone());
            let fut = runtime::run(Arc::clone(graph), Arc::new(services), input, opts);
            (cp, Vec::new(), 0, futures::future::FutureExt::boxed(fut))
        }
        Start::Resume(answers) => {
            let paused = chat.paused.take().ok_or_else(|| {
                "`resume`: the previous turn did not pause (its status is not `interrupted`)"
                    .to_owned()
            })?;
            let answers = answers_for(graph, &paused, &answers.value)?;
            let (from, logged) = resume_point(graph, &paused)?;
            services.playback = Some(Arc::new(Chain {
                recorded: Recording::from_events(&logged),
                script: script.clone(),
            }));
            opts.run_id = paused.run_id;
            opts.checkpointer = Some(paused.checkpoints.clone());
            opts.logged = logged;
            opts.answers = Some(answers);
            let after = from.last_seq;
            let fut = runtime::resume(Arc::clone(graph), Arc::new(services), from, opts);
            (
                paused.checkpoints,
                paused.events,
                after,
                futures::future::FutureExt::boxed(fut),
            )
        }
    };
    let (outcome, fresh) = wait(run, &mut rx, env.turn_timeout, index).await?;
    let run_id = fresh.first().map_or(Uuid::nil(), |e| e.run_id);
    history.extend(fresh.iter().map(|e| (**e).clone()));
    let sse = crate::sse::render(bridge, &history, after_seq);
    let (end, interrupts) = ending(&outcome);
    let batches = checkpoints.batches(run_id);
    let own: Vec<&Event> = history.iter().filter(|e| e.seq > after_seq).collect();
    let obs = observe(graph, &own, &batches, sse, end, interrupts);
    if let Err(RunError::Interrupted(list)) = outcome {
        chat.paused = Some(Paused {
            run_id,
            events: history,
            checkpoints,
            interrupts: list,
        });
    } else {
        chat.previous = Some(obs.state.clone());
        chat.answer.clone_from(&obs.answer);
    }
    Ok(obs)
}

/// Where a paused run continues: the state after its last checkpoint, and
/// the events it logged past that step (played back, not repeated).
fn resume_point(graph: &Graph, paused: &Paused) -> Result<(Resume, Vec<Event>), String> {
    let batches = paused.checkpoints.batches(paused.run_id);
    let last = batches.last().ok_or("the paused run has no checkpoint")?;
    let from = Resume {
        state: runtime::rebuild_state(&batches, &graph.state, last.step)
            .map_err(|e| e.to_string())?,
        step: last.step,
        next: last.next.clone(),
        joins: last.joins.clone(),
        last_seq: paused.events.last().map_or(0, |e| e.seq),
    };
    let logged: Vec<Event> = paused
        .events
        .iter()
        .filter(|e| e.step > from.step && e.node.is_some())
        .cloned()
        .collect();
    Ok((from, logged))
}

/// Runs the turn's `run` to its end, collecting its events, within the
/// turn's time limit.
async fn wait<T>(
    run: impl std::future::Future<Output = T>,
    rx: &mut mpsc::Receiver<Arc<Event>>,
    limit: Duration,
    index: usize,
) -> Result<(T, Vec<Arc<Event>>), String> {
    let collect = async {
        let mut out = Vec::new();
        while let Some(ev) = rx.recv().await {
            out.push(ev);
        }
        out
    };
    tokio::time::timeout(limit, async { tokio::join!(run, collect) })
        .await
        .map_err(|_| format!("turn {} did not finish within {limit:?}", index + 1))
}

/// How a run ended: its status (with the error) and the interrupts it
/// paused at.
fn ending<T>(outcome: &Result<T, RunError>) -> ((Status, Option<String>), Vec<Value>) {
    match outcome {
        Ok(_) => ((Status::Completed, None), Vec::new()),
        Err(RunError::Interrupted(list)) => (
            (Status::Interrupted, None),
            list.iter()
                .filter_map(|i| serde_json::to_value(i).ok())
                .collect(),
        ),
        Err(e) => ((Status::Failed, Some(e.to_string())), Vec::new()),
    }
}

/// The newest user message's text: the question a judge is shown.
fn last_user_text(history: &[Value]) -> String {
    history
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// The answers a `resume:` gives, checked as the server checks them.
fn answers_for(
    graph: &Graph,
    paused: &Paused,
    spec: &ResumeSpec,
) -> Result<std::collections::BTreeMap<String, Value>, String> {
    let waiting = if paused.interrupts.is_empty() {
        pending(&paused.events)
    } else {
        paused.interrupts.clone()
    };
    let answers = match spec {
        ResumeSpec::Value(v) => match waiting.as_slice() {
            [one] => [(one.id.clone(), v.clone())].into_iter().collect(),
            _ => {
                let ids: Vec<&str> = waiting.iter().map(|i| i.id.as_str()).collect();
                return Err(format!(
                    "`resume.value` answers one interrupt, but the run waits at {}: use `answers: {{id: …}}`",
                    ids.join(", ")
                ));
            }
        },
        ResumeSpec::Answers(list) => list.iter().cloned().collect(),
    };
    check_answers(graph, &waiting, answers, None).map_err(|e| format!("`resume`: {e}"))
}

/// The input state a chat request would give: the conversation so far
/// plus this message, the graph's `carry:` fields from the previous turn,
/// then the fields set outright.
fn input_state(graph: &Graph, spec: &InputSpec, chat: &mut Chat) -> Result<Value, String> {
    let io = &graph.chat;
    if let Some(messages) = &spec.messages {
        chat.history = messages
            .value
            .iter()
            .enumerate()
            .map(|(i, m)| with_id(m, &format!("m{}", i + 1)))
            .collect();
    } else if let Some(text) = &spec.message {
        if !chat.history.is_empty() {
            let n = chat.history.len();
            chat.history
                .push(json!({"id": format!("a{n}"), "role": "assistant", "content": chat.answer}));
        }
        let n = chat.history.len();
        chat.history
            .push(json!({"id": format!("u{n}"), "role": "user", "content": text.value}));
    }
    let mut input = Map::new();
    if spec.message.is_some() || spec.messages.is_some() {
        if io.history.is_none() && io.text.is_none() {
            return Err(format!(
                "graph `{}` takes no message: its state has no `messages` field and no `query` string (give `input.state` instead)",
                graph.id
            ));
        }
        if let Some(f) = &io.history {
            input.insert(f.to_string(), Value::Array(chat.history.clone()));
        }
        if let Some(f) = &io.text {
            let last = chat
                .history
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default();
            input.insert(f.to_string(), json!(last));
        }
    }
    if let Some(prev) = &chat.previous {
        for f in &io.carry {
            if let Some(v) = prev.get(&**f) {
                input.entry(f.to_string()).or_insert_with(|| v.clone());
            }
        }
    }
    for (k, v) in &spec.state {
        input.insert(k.value.clone(), v.value.clone());
    }
    Ok(Value::Object(input))
}

fn with_id(m: &Value, id: &str) -> Value {
    let mut m = m.clone();
    if let Value::Object(o) = &mut m {
        o.entry("id").or_insert_with(|| json!(id));
    }
    m
}

/// A paused run continuing: what its paused step did comes from its log,
/// the rest from the script.
#[derive(Debug)]
struct Chain {
    recorded: Recording,
    script: Arc<Script>,
}

impl Playback for Chain {
    fn llm(&self, node: &str, step: u32, task: u32, call: u32) -> Option<(String, ChunkStream)> {
        self.recorded
            .llm(node, step, task, call)
            .or_else(|| self.script.llm(node, step, task, call))
    }
    fn llm_for(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call: u32,
        request: &ChatRequest,
    ) -> Option<(String, ChunkStream)> {
        self.recorded
            .llm(node, step, task, call)
            .or_else(|| self.script.llm_for(node, step, task, call, request))
    }
    fn tool(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call_id: &str,
    ) -> Option<Result<ToolOutcome, ToolError>> {
        self.recorded
            .tool(node, step, task, call_id)
            .or_else(|| self.script.tool(node, step, task, call_id))
    }
    fn past_budget(&self, node: &str, step: u32, task: u32, call: u32) -> bool {
        self.recorded.past_budget(node, step, task, call)
    }
    fn tools_offered(&self, node: &str, step: u32, task: u32) -> Option<Vec<crate::llm::ToolDef>> {
        self.recorded.tools_offered(node, step, task)
    }
    fn answer(&self, id: &str) -> Option<Value> {
        self.recorded.answer(id)
    }
}
