//! `stategraph run GRAPH "message"`: run a graph once, streaming events.

use std::io::Write;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;

use crate::events::{Event, EventKind};
use crate::nodes::Graph;
use crate::runtime::{self, RunOptions, Services};

/// What to run and how to print it.
#[derive(Debug, Clone)]
pub struct RunArgs {
    /// The user's message.
    pub message: String,
    /// An intent to force (chat graph).
    pub forced_intent: Option<String>,
    /// JSON lines instead of readable text.
    pub json: bool,
}

/// Runs `graph` once with a one-message conversation as input, writing
/// events to `out` as they arrive. Returns whether the run finished.
///
/// # Errors
/// Writing to `out` failed.
pub async fn run(
    graph: Arc<Graph>,
    services: Arc<Services>,
    args: RunArgs,
    out: &mut (dyn Write + Send),
) -> std::io::Result<bool> {
    let input = json!({
        "messages": [{"id": "m1", "role": "user", "content": args.message}],
        "query": args.message,
        "forced_intent": args.forced_intent,
    });
    let (tx, mut rx) = mpsc::channel(256);
    let opts = RunOptions {
        events: Some(tx),
        ..Default::default()
    };
    let handle = tokio::spawn(runtime::run(graph, services, input, opts));
    let mut open_text: Option<Arc<str>> = None;
    while let Some(ev) = rx.recv().await {
        if args.json {
            writeln!(out, "{}", serde_json::to_string(&*ev).unwrap_or_default())?;
        } else {
            readable(&ev, &mut open_text, out)?;
        }
        out.flush()?;
    }
    match handle.await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(_)) => Ok(false),
        Err(e) => {
            writeln!(out, "run task failed: {e}")?;
            Ok(false)
        }
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
        EventKind::RunStarted {
            graph,
            graph_version,
            ..
        } => format!("run {} started: graph {graph} ({graph_version})", ev.run_id),
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
        EventKind::LlmStarted { model, role, .. } => {
            format!("  {node}: model {model} (role {role})")
        }
        EventKind::LlmFailed { error, .. } => format!("  {node}: model call failed: {error}"),
        EventKind::ToolCallReady { tool, args, .. } => format!("  {node}: tool {tool}({args})"),
        EventKind::ToolResult { tool, output, .. } => format!(
            "  {node}: tool {tool} → {}",
            truncate(&output.to_string(), 200)
        ),
        EventKind::ToolError { tool, error, .. } => format!(
            "  {node}: tool {tool} failed [{}]: {}",
            error.kind, error.message
        ),
        EventKind::Thinking { text } => format!("  {node} thinks: {text}"),
        EventKind::Source { source_id, url, .. } => format!("  {node} cites [{source_id}] {url}"),
        EventKind::Custom { name, data, .. } => {
            format!("  {node} data-{name}: {}", truncate(&data.to_string(), 200))
        }
        _ => return Ok(()),
    };
    writeln!(out, "{line}")
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}
