//! The event log as *pages*: one `run_event_pages` row per append, holding
//! its events as one JSON array, keyed by the run and the append's seq range
//! — on PostgreSQL and on SQLite alike (the memory store keeps events).
//! SQLite puts a streaming run's token pages in a recent log first, in
//! append order, and folds them into one page here at the step's end
//! (`sqlite::recent` says why); readers see one log either way.
//!
//! # Why pages and not a row per event
//! The log is written far more than it is queried, and always read as a
//! run's events in seq order from some point on — never by kind, node or
//! time. A row per event made PostgreSQL insert ~300 rows (tuple, index
//! entry, JSON validation, WAL record each) for one chat run: on the
//! development machine that was more than half of the server's CPU per run
//! (5.2 ms), and the reason the chat path stayed at ~260 runs/s. A page is
//! one tuple (its JSON compressed and TOASTed when large) and one index
//! entry per superstep, whatever the number of tokens. With pages (and
//! generic plans, see `postgres::SESSION_SETUP`) the same bench measures
//! 2.0–2.9 ms of server CPU and 420–640 runs/s, by how busy the host is;
//! rows per run fell from 312 to 12 and disk per run from 78 to 21 KB.
//!
//! # What the pages guarantee
//! - Ranges of one run never overlap, so a seq is stored once: a batch that
//!   repeats a stored seq is a [`StoreError::Conflict`] and stores nothing.
//!   PostgreSQL enforces it with an exclusion constraint
//!   (`run_id WITH =, int8range(first_seq, last_seq, '[]') WITH &&`),
//!   atomically with the rest of the append statement; SQLite checks in the
//!   append's transaction (it has one writer). A batch that repeats a seq
//!   within itself is refused before it is sent.
//! - Non-overlapping ranges sorted by `last_seq` are sorted by `first_seq`
//!   too, so the primary key `(run_id, last_seq)` serves "events after N":
//!   the pages with `last_seq > N`, in key order.
//! - Seqs of a run are contiguous (the executor numbers events from 1
//!   without gaps, and a resumed run continues after the last stored seq),
//!   so the events `N+1 ..= N+limit` lie in pages with `first_seq <= N +
//!   limit`; the reader also always takes the first page after `N`, so even
//!   a log with gaps is read to its end, page by page ([`EVENTS_AFTER`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::sql::{self, EncodedCheckpoint};
use super::{StoreError, StoreResult};
use crate::events::StepBatch;
use crate::events::{Event, EventKind};

/// One event in a page: the envelope without the run id (the row has it).
#[derive(Serialize)]
struct PagedRef<'a> {
    seq: u64,
    at: u64,
    step: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "is_zero")]
    task: u32,
    event: &'a EventKind,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// [`PagedRef`] as read back. `node` may be `null` (pages converted from the
/// row-per-event schema by migration 4 carry every column).
#[derive(Deserialize)]
struct Paged {
    seq: u64,
    at: u64,
    step: u32,
    #[serde(default)]
    node: Option<Arc<str>>,
    #[serde(default)]
    task: u32,
    event: EventKind,
}

impl Paged {
    fn into_event(self, run_id: Uuid) -> Event {
        Event {
            run_id,
            seq: self.seq,
            at: self.at,
            step: self.step,
            node: self.node,
            task: self.task,
            event: self.event,
        }
    }
}

/// Consecutive [`StepBatch`]es as the parameters of the append statement:
/// their events as one page (none when they have no events), and their
/// checkpoints column by column.
#[derive(Debug)]
pub(crate) struct EncodedPage {
    pub(crate) run_id: Uuid,
    pub(crate) first_seq: Option<i64>,
    pub(crate) last_seq: Option<i64>,
    /// The events as a JSON array, in seq order.
    pub(crate) events: Option<String>,
    pub(crate) steps: Vec<i32>,
    pub(crate) writes: Vec<String>,
    pub(crate) next: Vec<String>,
    pub(crate) joins: Vec<String>,
    pub(crate) snapshots: Vec<Option<String>>,
    /// The highest step.
    pub(crate) last_step: i32,
    /// The last batch's status (a final batch ends the run).
    pub(crate) status: &'static str,
    /// `finished_at` for a final batch.
    pub(crate) now: i64,
}

impl EncodedPage {
    /// Encodes `batches` (of one run).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when two of their events have the same seq;
    /// [`StoreError::Backend`] when a value does not fit its column, or the
    /// batches belong to different runs.
    /// Encodes events of `run_id` with no checkpoint.
    ///
    /// # Errors
    /// As [`EncodedPage::new`].
    pub(crate) fn events_only(run_id: Uuid, events: &[Arc<Event>]) -> StoreResult<Self> {
        let batch = StepBatch {
            run_id,
            step: 0,
            writes: Vec::new(),
            events: events.to_vec(),
            next: Vec::new(),
            joins: Vec::new(),
            snapshot: None,
            status: crate::events::RunStatus::Running,
        };
        let mut page = Self::new(std::slice::from_ref(&batch))?;
        page.steps.clear();
        page.writes.clear();
        page.next.clear();
        page.joins.clear();
        page.snapshots.clear();
        page.last_step = 0;
        Ok(page)
    }

    pub(crate) fn new(batches: &[StepBatch]) -> StoreResult<Self> {
        let Some(last) = batches.last() else {
            return Err(StoreError::Backend("an append needs a batch".into()));
        };
        let run_id = last.run_id;
        if batches.iter().any(|b| b.run_id != run_id) {
            return Err(StoreError::Backend(
                "one append stores the steps of one run".into(),
            ));
        }
        let mut out = Self {
            run_id,
            first_seq: None,
            last_seq: None,
            events: None,
            steps: Vec::with_capacity(batches.len()),
            writes: Vec::with_capacity(batches.len()),
            next: Vec::with_capacity(batches.len()),
            joins: Vec::with_capacity(batches.len()),
            snapshots: Vec::with_capacity(batches.len()),
            last_step: 0,
            status: sql::status_name(last.status),
            now: sql::i64_of(crate::events::now_micros(), "time")?,
        };
        for b in batches {
            let cp = EncodedCheckpoint::new(b)?;
            out.last_step = out.last_step.max(cp.step);
            out.steps.push(cp.step);
            out.writes.push(cp.writes);
            out.next.push(cp.next);
            out.joins.push(cp.joins);
            out.snapshots.push(cp.snapshot);
        }
        let mut order: Vec<&Event> = batches
            .iter()
            .flat_map(|b| b.events.iter().map(|e| &**e))
            .collect();
        // Already sorted in practice: the executor emits in seq order.
        if !order.is_sorted_by_key(|e| e.seq) {
            order.sort_by_key(|e| e.seq);
        }
        if let Some(pair) = order.windows(2).find(|p| p[0].seq == p[1].seq) {
            return Err(StoreError::Conflict(format!(
                "event {} of run {run_id} appears twice in one append",
                pair[0].seq
            )));
        }
        let (Some(first), Some(last)) = (order.first(), order.last()) else {
            return Ok(out);
        };
        out.first_seq = Some(sql::i64_of(first.seq, "event seq")?);
        out.last_seq = Some(sql::i64_of(last.seq, "event seq")?);
        let mut text = Vec::with_capacity(order.len() * 96);
        text.push(b'[');
        for (i, e) in order.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            let paged = PagedRef {
                seq: e.seq,
                at: e.at,
                step: e.step,
                node: e.node.as_deref(),
                task: e.task,
                event: &e.event,
            };
            serde_json::to_writer(&mut text, &paged)
                .map_err(|e| StoreError::Backend(format!("cannot encode event: {e}")))?;
        }
        text.push(b']');
        out.events = Some(
            String::from_utf8(text)
                .map_err(|e| StoreError::Backend(format!("cannot encode events: {e}")))?,
        );
        Ok(out)
    }
}

/// The pages holding the events of run `$1` after seq `$2`, at most `$3` of
/// them, in order (see the module docs for the bound). The same text serves
/// both backends: SQLite takes `$1`…`$3` as named parameters and numbers
/// them by first appearance, which is their order here.
pub(crate) const EVENTS_AFTER: &str = "
SELECT events FROM run_event_pages
WHERE run_id = $1 AND last_seq > $2
  AND (first_seq - $3 <= $2
       OR last_seq = (SELECT min(last_seq) FROM run_event_pages WHERE run_id = $1 AND last_seq > $2))
ORDER BY last_seq";

/// Decodes a stored page (the `events` column) and adds its events with
/// `seq > after` to `out`, until it holds `limit`.
///
/// # Errors
/// The page is not the JSON this module writes.
pub(crate) fn read_page(
    run: Uuid,
    page: &str,
    after: u64,
    limit: usize,
    out: &mut Vec<Event>,
) -> StoreResult<()> {
    let page: Vec<Paged> = sql::from_json(page, "events")?;
    let room = limit.saturating_sub(out.len());
    out.extend(
        page.into_iter()
            .filter(|e| e.seq > after)
            .take(room)
            .map(|e| e.into_event(run)),
    );
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::events::{CustomData, RunStatus};
    use serde_json::json;

    fn event(run: Uuid, seq: u64, node: Option<&str>, task: u32) -> Event {
        Event {
            run_id: run,
            seq,
            at: 1000 + seq,
            step: 2,
            node: node.map(Arc::from),
            task,
            event: EventKind::Custom(Box::new(CustomData {
                name: "n".into(),
                data: json!({"seq": seq}),
                id: None,
                transient: false,
            })),
        }
    }

    fn batch(run: Uuid, events: Vec<Event>) -> StepBatch {
        StepBatch {
            run_id: run,
            step: 2,
            writes: Vec::new(),
            events: events.into_iter().map(Arc::new).collect(),
            next: Vec::new(),
            joins: Vec::new(),
            snapshot: None,
            status: RunStatus::Running,
        }
    }

    #[test]
    fn a_page_holds_its_events_in_seq_order_and_reads_back_after_a_seq() {
        let run = Uuid::now_v7();
        let events = vec![
            event(run, 5, Some("b"), 1),
            event(run, 3, None, 0),
            event(run, 4, Some("a"), 0),
        ];
        let page = EncodedPage::new(&[batch(run, events.clone())]).unwrap();
        assert_eq!((page.first_seq, page.last_seq), (Some(3), Some(5)));
        let text = page.events.unwrap();
        assert!(!text.contains(&run.to_string()), "no run id per event");
        let mut out = Vec::new();
        read_page(run, &text, 3, 10, &mut out).unwrap();
        assert_eq!(out, vec![events[2].clone(), events[0].clone()]);
    }

    #[test]
    fn two_steps_make_one_page_and_two_checkpoints() {
        let run = Uuid::now_v7();
        let mut first = batch(run, vec![event(run, 1, None, 0)]);
        first.step = 0;
        first.snapshot = Some(json!({"a": 1}));
        let mut second = batch(
            run,
            vec![event(run, 2, Some("n"), 0), event(run, 3, Some("n"), 0)],
        );
        second.status = RunStatus::Finished;
        let page = EncodedPage::new(&[first, second.clone()]).unwrap();
        assert_eq!((page.first_seq, page.last_seq), (Some(1), Some(3)));
        assert_eq!(
            (page.steps, page.last_step, page.status),
            (vec![0, 2], 2, "finished")
        );
        assert_eq!(page.snapshots, vec![Some(r#"{"a":1}"#.to_owned()), None]);
        second.run_id = Uuid::now_v7();
        let mixed = EncodedPage::new(&[batch(run, Vec::new()), second]).unwrap_err();
        assert!(matches!(mixed, StoreError::Backend(_)), "{mixed}");
    }

    #[test]
    fn reading_stops_at_the_limit() {
        let run = Uuid::now_v7();
        let events: Vec<_> = (1..=4).map(|s| event(run, s, Some("n"), 0)).collect();
        let text = EncodedPage::new(&[batch(run, events)])
            .unwrap()
            .events
            .unwrap();
        let mut out = Vec::new();
        read_page(run, &text, 0, 2, &mut out).unwrap();
        read_page(run, &text, 0, 2, &mut out).unwrap();
        assert_eq!(out.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn a_seq_twice_in_one_batch_is_a_conflict_and_no_events_no_page() {
        let run = Uuid::now_v7();
        let twice = vec![event(run, 1, None, 0), event(run, 1, None, 0)];
        let err = EncodedPage::new(&[batch(run, twice)]).unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        let empty = EncodedPage::new(&[batch(run, Vec::new())]).unwrap();
        assert_eq!(
            (empty.first_seq, empty.last_seq, empty.events),
            (None, None, None)
        );
    }

    #[test]
    fn migrated_pages_with_null_node_and_unknown_kinds_read() {
        let run = Uuid::now_v7();
        let text = r#"[{"seq":1,"at":5,"step":0,"node":null,"task":0,"event":{"type":"hologram","beam":1}}]"#;
        let mut out = Vec::new();
        read_page(run, text, 0, 10, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].node.clone(), &out[0].event),
            (None, &EventKind::Unknown)
        );
    }
}
