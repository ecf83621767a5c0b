//! Where a run's time went, from its events: the time to the first part a
//! client saw, and each node task's latency (first start to its end, retries
//! included). `GET /api/runs/{id}` reports it; `/metrics` has the same
//! figures as histograms.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::events::{Event, EventKind};

/// One node task's latency.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeTiming {
    /// The node.
    pub node: String,
    /// The superstep.
    pub step: u32,
    /// The task within the step (map items).
    pub task: u32,
    /// From its first start to its finish or failure, in ms.
    pub ms: f64,
    /// Attempts made.
    pub attempts: u32,
}

/// A run's timing.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Timing {
    /// From `run_started` to the first visible event, in ms (none: nothing
    /// was shown).
    pub first_visible_ms: Option<f64>,
    /// From `run_started` to the run's end, in ms (none: still running).
    pub total_ms: Option<f64>,
    /// Node tasks in the order they ended.
    pub nodes: Vec<NodeTiming>,
}

/// The timing of a run from its events (in seq order).
pub(crate) fn timing(events: &[Event]) -> Timing {
    let mut t = Timing::default();
    let mut started_at = None;
    let mut open: BTreeMap<(u32, &str, u32), (u64, u32)> = BTreeMap::new();
    let ms = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1000.0;
    for e in events {
        let node = e.node.as_deref().unwrap_or("");
        match &e.event {
            EventKind::RunStarted(_) => started_at = Some(e.at),
            EventKind::NodeStarted { attempt, .. } => {
                let entry = open.entry((e.step, node, e.task)).or_insert((e.at, 0));
                entry.1 = (*attempt).max(entry.1);
            }
            EventKind::NodeFinished { .. } | EventKind::NodeFailed { .. } => {
                if let Some((from, attempts)) = open.remove(&(e.step, node, e.task)) {
                    t.nodes.push(NodeTiming {
                        node: node.to_owned(),
                        step: e.step,
                        task: e.task,
                        ms: ms(from, e.at),
                        attempts,
                    });
                }
            }
            k if k.is_terminal() => {
                t.total_ms = started_at.map(|s| ms(s, e.at));
            }
            _ => {}
        }
        if t.first_visible_ms.is_none()
            && e.event.is_visible()
            && let Some(s) = started_at
        {
            t.first_visible_ms = Some(ms(s, e.at));
        }
    }
    t
}
