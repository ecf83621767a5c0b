//! `stategraph replay RUN` and `stategraph fork RUN --at STEP`.

use std::io::Write;

use anyhow::anyhow;
use uuid::Uuid;

use super::setup::{Ctx, field_values};
use crate::replay;
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
}

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

/// Forks a stored run at a step with edited fields, waits for the fork and
/// prints its timeline. Returns whether the fork finished.
pub(super) async fn fork_run(
    ctx: &Ctx,
    run: Uuid,
    at: u32,
    set: &[String],
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    let set = field_values(set)?;
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
            at,
            set,
            request_id: String::new(),
        })
        .await?;
    started.hub.wait().await;
    runs.shutdown(std::time::Duration::ZERO).await;
    upkeep.abort();
    let (record, events) = replay::load(&*store, started.run_id).await?;
    write!(out, "{}", replay::timeline(&record, &events))?;
    writeln!(out, "fork {} of run {run} at step {at}", started.run_id)?;
    Ok(record.status == RunStatus::Finished)
}
