//! `stategraph run GRAPH "message"`: run a graph once, streaming events.

use std::io::Write;
use std::sync::Arc;

use anyhow::bail;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::setup::Ctx;
use crate::events::{
    CustomData, Event, EventKind, LlmFailure, LlmStart, SourceRef, ToolDenial, ToolFault,
    ToolReady, ToolReturn,
};
use crate::graph::ChatIo;
use crate::runs::RunStart;
use crate::runtime::{self, RunOptions};

/// What to run and how to print it.
#[derive(Debug, Clone)]
pub struct RunArgs {
    /// Graph id.
    pub graph: String,
    /// The user's message.
    pub message: String,
    /// Input fields set outright.
    pub set: Vec<(String, Value)>,
    /// JSON lines instead of readable text.
    pub json: bool,
    /// Store the run (so it can be replayed and forked).
    pub store: bool,
    /// Where it pauses between steps (`--break-before`, `--break-after`).
    pub breakpoints: crate::events::Breakpoints,
}

/// Whose a stored run is: the local user, the one the studio and the API
/// answer loopback requests as, so a run started from the command line is
/// there to inspect; `cli` when the configuration has no local user.
pub(super) fn cli_user(auth: &crate::config::AuthConfig) -> &str {
    if auth.local_user.is_empty() {
        "cli"
    } else {
        &auth.local_user
    }
}

/// How a run ended.
struct Ended {
    ok: bool,
    state: Option<Value>,
}

/// Runs a graph once with a one-message conversation as input (placed as
/// its `chat:` section places a chat request), writing events to `out` as
/// they arrive and then the answer field. Returns whether the run finished.
pub(super) async fn run(
    ctx: &Ctx,
    args: RunArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<bool> {
    let graphs = ctx.graphs();
    let graph = ctx.graph(&graphs, &args.graph)?;
    let input = input_state(&graph.chat, &args.message, &args.set, &graph.id)?;
    crate::runs::breaks::check(&graph, &args.breakpoints)?;
    let services = ctx.services()?;
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(256);
    let printer = async {
        let (mut open_text, mut streamed) = (None, false);
        while let Some(ev) = rx.recv().await {
            streamed |= answer_text(&graph, &ev);
            if args.json {
                writeln!(out, "{}", serde_json::to_string(&*ev).unwrap_or_default())?;
            } else {
                readable(&ev, &mut open_text, out)?;
            }
            out.flush()?;
        }
        std::io::Result::Ok(streamed)
    };
    let (streamed, ended) = if args.store {
        let store = ctx.store().await?;
        let (services, recorder) =
            crate::runs::calls::recording(&services, Arc::clone(&store), &ctx.config.calls, None)
                .map_err(anyhow::Error::msg)?;
        let runs = ctx.runs(Arc::clone(&store), services, graphs);
        let upkeep = runs.spawn_upkeep();
        let started = runs
            .start(RunStart {
                graph: Arc::clone(&graph),
                input,
                user_id: cli_user(&ctx.config.auth).into(),
                request_id: String::new(),
                tap: Some(tx),
                breakpoints: args.breakpoints.clone(),
            })
            .await?;
        eprintln!("run {} (stored; `stategraph replay {0}`)", started.run_id);
        let streamed = printer.await?;
        started.hub.wait().await;
        runs.shutdown(std::time::Duration::ZERO).await;
        upkeep.abort();
        if let Some(r) = recorder {
            r.flush().await;
        }
        (streamed, stored_end(&*store, &graph, started.run_id).await?)
    } else {
        let opts = RunOptions {
            events: Some(tx),
            breakpoints: Some(args.breakpoints.clone()),
            record_breakpoints: !args.breakpoints.is_empty(),
            ..Default::default()
        };
        let handle = tokio::spawn(runtime::run(graph.clone(), Arc::new(services), input, opts));
        let streamed = printer.await?;
        let ended = match handle.await? {
            Ok(outcome) => Ended {
                ok: true,
                state: Some(outcome.state.to_json()),
            },
            Err(_) => Ended {
                ok: false,
                state: None,
            },
        };
        (streamed, ended)
    };
    // A streamed answer is on screen already; one a node only set is not.
    if !args.json && !streamed {
        print_answer(&graph.chat, ended.state.as_ref(), out)?;
    }
    Ok(ended.ok)
}

/// Whether the event is answer text the chat would show (a node with
/// the `answer` surface; nested nodes take their parent's).
fn answer_text(graph: &crate::nodes::Graph, ev: &Event) -> bool {
    let top = ev.node.as_deref().and_then(|n| n.split('/').next());
    matches!(ev.event, EventKind::TextDelta { .. })
        && top.is_some_and(|n| graph.surface(n) == crate::graph::spec::Surface::Answer)
}

/// The input a chat request with this one message gives the graph (the
/// turn's own builder, [`crate::runs::turn::input_state`]), plus the
/// `--set` fields.
fn input_state(
    io: &ChatIo,
    message: &str,
    set: &[(String, Value)],
    graph: &str,
) -> anyhow::Result<Value> {
    if io.history.is_none() && io.text.is_none() {
        bail!(
            "graph `{graph}` takes no message: its state has no `messages` field and no `query` string (set `chat.history` or `chat.text` in its file)"
        );
    }
    let conversation = [crate::runs::turn::TurnMessage::user("m1", message)];
    let mut input = crate::runs::turn::input_state(io, &conversation, &Map::new());
    if let Value::Object(fields) = &mut input {
        fields.extend(set.iter().cloned());
    }
    Ok(input)
}

/// Whether the stored run finished, and its final state.
async fn stored_end(
    store: &dyn crate::store::Store,
    graph: &crate::nodes::Graph,
    run: Uuid,
) -> anyhow::Result<Ended> {
    let record = store
        .get_run(run)
        .await?
        .ok_or_else(|| anyhow::anyhow!("run {run} vanished from the store"))?;
    let ok = record.status == runtime::RunStatus::Finished;
    let state = if ok {
        Some(
            crate::replay::state_at(store, graph, run, record.last_step)
                .await?
                .to_json(),
        )
    } else {
        None
    };
    Ok(Ended { ok, state })
}

/// Prints the answer field (`chat.answer`) of the final state, if any.
fn print_answer(
    io: &ChatIo,
    state: Option<&Value>,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    let (Some(field), Some(state)) = (&io.answer, state) else {
        return Ok(());
    };
    match state.get(&**field) {
        Some(Value::String(s)) if !s.is_empty() => writeln!(out, "\n{field}: {s}"),
        _ => Ok(()),
    }
}

fn readable(
    ev: &Event,
    open_text: &mut Option<Arc<str>>,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    let node = ev.node.as_deref().unwrap_or("-");
    if let EventKind::TextDelta { delta, .. } = &ev.event {
        if open_text.as_deref() != Some(node) {
            write!(out, "\n  [{node}] ")?;
            *open_text = ev.node.clone();
        }
        return write!(out, "{delta}");
    }
    if open_text.take().is_some() {
        writeln!(out)?;
    }
    let line = match &ev.event {
        EventKind::NodeStarted { attempt, .. } if *attempt > 1 => {
            format!("step {} ▶ {node} (attempt {attempt})", ev.step)
        }
        EventKind::NodeStarted { .. } => format!("step {} ▶ {node}", ev.step),
        EventKind::NodeFinished { patch, duration_us } => {
            let fields: Vec<&str> = patch.iter().map(|(f, _)| f).collect();
            format!(
                "step {} ✓ {node} in {:.1} ms, wrote [{}]",
                ev.step,
                *duration_us as f64 / 1000.0,
                fields.join(", ")
            )
        }
        EventKind::NodeRetrying {
            attempt,
            error,
            delay_ms,
        } => format!("  {node}: attempt {attempt} failed ({error}); retrying in {delay_ms} ms"),
        EventKind::NodeFailed { error, .. } => format!("  {node} failed: {error}"),
        EventKind::LlmStarted(llm_start) => {
            let LlmStart { model, role, .. } = &**llm_start;
            format!("  {node}: model {model} (role {role})")
        }
        EventKind::LlmFailed(llm_failure) => {
            let LlmFailure { error, .. } = &**llm_failure;
            format!("  {node}: model call failed: {error}")
        }
        EventKind::ToolCallReady(tool_ready) => {
            let ToolReady { tool, args, .. } = &**tool_ready;
            format!("  {node}: tool {tool}({args})")
        }
        EventKind::ToolResult(tool_return) => {
            let ToolReturn { tool, output, .. } = &**tool_return;
            format!(
                "  {node}: tool {tool} → {}",
                truncate(&output.to_string(), 200)
            )
        }
        EventKind::ToolError(tool_fault) => {
            let ToolFault { tool, error, .. } = &**tool_fault;
            format!(
                "  {node}: tool {tool} failed [{}]: {}",
                error.kind, error.message
            )
        }
        EventKind::Thinking { text } => format!("  {node} thinks: {text}"),
        EventKind::Source(source_ref) => {
            let SourceRef { source_id, url, .. } = &**source_ref;
            format!("  {node} cites [{source_id}] {url}")
        }
        EventKind::Custom(custom_data) => {
            let CustomData { name, data, .. } = &**custom_data;
            format!("  {node} data-{name}: {}", truncate(&data.to_string(), 200))
        }
        _ => match run_line(ev) {
            Some(line) => line,
            None => return Ok(()),
        },
    };
    writeln!(out, "{line}")
}

/// The line of a run-level event (start, end, pause, resume), if any.
fn run_line(ev: &Event) -> Option<String> {
    let node = ev.node.as_deref().unwrap_or("-");
    Some(match &ev.event {
        EventKind::RunStarted(start) => format!(
            "run {} started: graph {} ({})",
            ev.run_id, start.graph, start.graph_version
        ),
        EventKind::RunFinished { steps, usage } => {
            format!(
                "run finished after {steps} steps, {} tokens ({} in, {} out)",
                usage.total(),
                usage.prompt_tokens,
                usage.completion_tokens
            )
        }
        EventKind::RunFailed { error } => format!("run FAILED [{}]: {}", error.code, error.message),
        EventKind::RunCancelled { reason } => format!("run cancelled: {reason}"),
        EventKind::RunInterrupted { interrupts }
            if interrupts
                .iter()
                .any(|i| matches!(i.ask, crate::events::Ask::Breakpoint { .. })) =>
        {
            let waits: Vec<String> = interrupts.iter().map(|i| i.summary()).collect();
            format!(
                "run paused at {} (look: `stategraph replay {1}`; go on: `stategraph resume {1} [--set FIELD=VALUE] [--step | --abort]`)",
                waits.join("; "),
                ev.run_id
            )
        }
        EventKind::RunInterrupted { interrupts } => {
            let waits: Vec<String> = interrupts.iter().map(|i| i.summary()).collect();
            format!(
                "run paused, waiting for {} (answer with `stategraph resume {} --value JSON`)",
                waits.join("; "),
                ev.run_id
            )
        }
        EventKind::BreakpointsSet { breakpoints } => format!(
            "breakpoints: before [{}], after [{}]",
            breakpoints.before.join(", "),
            breakpoints.after.join(", ")
        ),
        EventKind::RunResumed { answers } => format!(
            "run resumed with {}",
            serde_json::to_string(answers).unwrap_or_default()
        ),
        EventKind::ToolDenied(tool_denial) => {
            let ToolDenial { tool, .. } = &**tool_denial;
            format!("step {} ✗ {node} tool {tool} denied", ev.step)
        }
        _ => return None,
    })
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}
