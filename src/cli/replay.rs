//! `stategraph replay RUN [--calls]` and `stategraph fork RUN [--at STEP] [--after|--before NODE] --set F=V`.

use std::io::Write;

use anyhow::anyhow;
use uuid::Uuid;

use super::setup::{Ctx, field_values};
use crate::events::ForkMode;
use crate::replay::{self, Edit};
use crate::runs::ForkRequest;
use crate::runtime::RunStatus;

/// What `replay` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReplayView {
    /// The run's timeline.
    Timeline,
    /// The exact SSE bytes its client received.
    Sse,
    /// Its events as JSON lines.
    Json,
    /// A re-execution from the recording, and the first divergence.
    Reexecute,
    /// Its model calls: request and answer.
    Calls,
}

/// Characters of a message `replay --calls` shows on its line.
const CALL_TEXT_WIDTH: usize = 160;

/// Shows a stored run. Returns whether a re-execution matched (always true
/// for the other views).
pub(super) async fn replay_run(
    ctx: &Ctx,
    run: Uuid,
    view: ReplayView,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    let store = ctx.store().await?;
    let (record, events) = replay::load(&*store, run).await?;
    match view {
        ReplayView::Sse => write!(out, "{}", replay::sse(&events)?)?,
        ReplayView::Json => {
            for e in &events {
                writeln!(out, "{}", serde_json::to_string(e)?)?;
            }
        }
        ReplayView::Timeline => write!(out, "{}", replay::timeline(&record, &events))?,
        ReplayView::Calls => {
            let mut calls = replay::calls(&*store, run, &events).await?;
            let mut parts = replay::Parts::default();
            for c in &mut calls {
                replay::expand(&*store, c, &mut parts).await?;
            }
            write!(out, "{}", replay::calls_text(&calls, CALL_TEXT_WIDTH))?;
        }
        ReplayView::Reexecute => {
            let graphs = ctx.graphs();
            let graph = ctx.graph(&graphs, &record.graph)?;
            let services = ctx.services()?;
            let r = replay::reexecute(graph, services, &events).await?;
            writeln!(out, "{}", r.report())?;
            return Ok(r.divergence.is_none());
        }
    }
    Ok(true)
}

/// What `stategraph fork` was asked.
#[derive(Debug)]
pub(super) struct Fork {
    pub(super) run: Uuid,
    pub(super) at: Option<u32>,
    pub(super) mode: ForkMode,
    pub(super) node: Option<String>,
    pub(super) set: Vec<String>,
    pub(super) attach: bool,
}

/// Forks a stored run (after or before a node, with edited fields), waits
/// for the fork and prints its timeline. Returns whether the fork finished.
/// A refused edit is an error naming its code, e.g. `fork refused
/// [no_route]: …`.
pub(super) async fn fork_run(ctx: &Ctx, fork: Fork, out: &mut dyn Write) -> anyhow::Result<bool> {
    let run = fork.run;
    let set = field_values(&fork.set)?;
    let store = ctx.store().await?;
    let parent = store
        .get_run(run)
        .await?
        .ok_or_else(|| anyhow!("no run {run}"))?;
    let runs = ctx.runs(std::sync::Arc::clone(&store), ctx.services()?, ctx.graphs());
    let upkeep = runs.spawn_upkeep();
    let started = runs
        .fork(ForkRequest {
            user_id: parent.user_id.clone(),
            parent,
            edit: Edit {
                step: fork.at,
                mode: fork.mode,
                node: fork.node,
                set,
            },
            attach: fork.attach,
            request_id: String::new(),
        })
        .await;
    let started = match started {
        Ok(s) => s,
        Err(e) => {
            runs.shutdown(std::time::Duration::ZERO).await;
            upkeep.abort();
            return Err(anyhow!("fork refused [{}]: {e}", e.code()));
        }
    };
    started.hub.wait().await;
    runs.shutdown(std::time::Duration::ZERO).await;
    upkeep.abort();
    let (record, events) = replay::load(&*store, started.run_id).await?;
    write!(out, "{}", replay::timeline(&record, &events))?;
    let o = &started.origin;
    let place = match (o.mode, o.nodes.as_slice()) {
        (_, []) => String::new(),
        (Some(ForkMode::Before), nodes) => format!(", before {}", nodes.join(", ")),
        (_, nodes) => format!(", after {}", nodes.join(", ")),
    };
    writeln!(
        out,
        "fork {} of run {run} at step {}{place}",
        started.run_id, o.step
    )?;
    Ok(record.status == RunStatus::Finished)
}

/// What `stategraph resume` does at a breakpoint (docs/breakpoints.md).
#[derive(Debug, Default)]
pub(super) struct AtBreakpoint {
    /// Edits of the paused state.
    pub(super) set: Vec<(String, serde_json::Value)>,
    /// One step, then pause again.
    pub(super) step: bool,
    /// End the run instead.
    pub(super) abort: bool,
    /// The run's breakpoints from now on (`None`: as they were).
    pub(super) breakpoints: Option<crate::events::Breakpoints>,
}

/// `stategraph resume RUN --value JSON | --answer ID=JSON… | [--set F=V]
/// [--step] | --abort`: continues a paused run with the answer(s) (at a
/// breakpoint: the edit and the action) and prints its timeline; true when
/// it finished.
pub(super) async fn resume_run(
    ctx: &Ctx,
    run: uuid::Uuid,
    (value, answer): (Option<String>, Vec<String>),
    at_break: AtBreakpoint,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    let store = ctx.store().await?;
    let record = store
        .get_run(run)
        .await?
        .ok_or_else(|| anyhow!("no run {run}"))?;
    let runs = ctx.runs(std::sync::Arc::clone(&store), ctx.services()?, ctx.graphs());
    if at_break.abort {
        let aborted = runs.set_aside(&record, "aborted while paused").await?;
        if !aborted {
            return Err(anyhow!(
                "run {run} is not paused (it is {})",
                record.status.as_str()
            ));
        }
        let (record, events) = replay::load(&*store, run).await?;
        write!(out, "{}", replay::timeline(&record, &events))?;
        return Ok(false);
    }
    let waiting = runs.waiting_at(&record).await?;
    let answers = answers_from(&waiting, (value, answer), &at_break)?;
    let upkeep = runs.spawn_upkeep();
    let started = runs
        .resume(crate::runs::ResumeRequest {
            breakpoints: at_break.breakpoints,
            run_id: run,
            user_id: record.user_id.clone(),
            request_id: String::new(),
            answers,
            new_message: None,
            messages: Vec::new(),
        })
        .await;
    let started = match started {
        Ok(s) => s,
        Err(e) => {
            runs.shutdown(std::time::Duration::ZERO).await;
            upkeep.abort();
            return Err(anyhow!("resume refused: {e}"));
        }
    };
    started.hub.wait().await;
    runs.shutdown(std::time::Duration::ZERO).await;
    upkeep.abort();
    let (record, events) = replay::load(&*store, run).await?;
    write!(out, "{}", replay::timeline(&record, &events))?;
    Ok(record.status == RunStatus::Finished)
}

/// The answers `stategraph resume` gives: at a breakpoint its action and
/// edit, else `--value` (the one interrupt) and `--answer ID=JSON`.
fn answers_from(
    waiting: &[crate::events::Interrupt],
    (value, answer): (Option<String>, Vec<String>),
    at_break: &AtBreakpoint,
) -> anyhow::Result<std::collections::BTreeMap<String, serde_json::Value>> {
    let mut answers = std::collections::BTreeMap::new();
    let breakpoint = waiting
        .iter()
        .find(|i| matches!(i.ask, crate::events::Ask::Breakpoint { .. }));
    if let Some(b) = breakpoint
        && value.is_none()
        && answer.is_empty()
    {
        let set: serde_json::Map<String, serde_json::Value> =
            at_break.set.iter().cloned().collect();
        let action = if at_break.step { "step" } else { "continue" };
        answers.insert(
            b.id.clone(),
            serde_json::json!({"action": action, "set": set}),
        );
    } else if at_break.step || !at_break.set.is_empty() {
        return Err(anyhow!(
            "the run is not paused at a breakpoint: --set and --step apply there"
        ));
    }
    for a in &answer {
        let (id, json) = a
            .split_once('=')
            .ok_or_else(|| anyhow!("`--answer {a}`: write ID=JSON"))?;
        let v = serde_json::from_str(json)
            .map_err(|e| anyhow!("`--answer {a}`: the answer is not JSON: {e}"))?;
        answers.insert(id.to_owned(), v);
    }
    if let Some(v) = value {
        let v: serde_json::Value =
            serde_json::from_str(&v).map_err(|e| anyhow!("`--value`: not JSON: {e}"))?;
        match waiting {
            [one] => {
                answers.insert(one.id.clone(), v);
            }
            [] => {}
            many => {
                let ids: Vec<String> = many.iter().map(|i| i.summary()).collect();
                return Err(anyhow!(
                    "the run waits at {} interrupts; answer each with --answer ID=JSON:\n  {}",
                    many.len(),
                    ids.join("\n  ")
                ));
            }
        }
    }
    Ok(answers)
}
