//! The recent event log: streamed tokens in append order, folded into the
//! run's pages when its step ends.
//!
//! # Why
//! With `stream_durability = "visible"` every streamed token is its own
//! page, committed before a client sees it. In `run_event_pages` each page
//! lands in its run's own leaf of the `(run_id, last_seq)` key, so a group
//! commit of N runs' tokens wrote N index leaves — one 4 KB WAL frame per
//! run per commit, whatever the token's size. At 1,000 paced chats that was
//! ~90 MB/s of log, the writer's time, and the checkpoints it forced.
//!
//! `run_event_recent` has no key but its rowid, so every insert goes to the
//! right edge of one B-tree: many runs' tokens share a page, and a commit
//! writes a few frames however many runs it holds. The price is that a
//! run's rows there cannot be found by key. This process remembers them
//! ([`Recent`]: run → rowids and seq ranges) and reads and folds by rowid;
//! what it does not know (rows left by a process that died, or written by
//! another process) is found by scanning the table, which stays small
//! because rows leave it at every step's end ([`FOLD_AT`] bounds a long
//! step).
//!
//! # The rules that keep it exact
//! - Only a run this process has appended a step for ([`Recent`] holds an
//!   entry for it) streams into the table; any other append goes to the
//!   pages as before.
//! - A step's append (a checkpoint, or the run's end) first folds the run's
//!   recent rows into one page, in the same transaction: after it, every
//!   event before the step is in `run_event_pages`. A fold moves rows (insert
//!   the page, delete the rows) atomically, so a reader's snapshot sees each
//!   event once.
//! - The entry is changed only after the transaction that changed the rows
//!   committed, and before the append's notification: a reader woken by the
//!   notification finds the row in the entry. A rowid in an entry may be
//!   stale (another process folded it); every statement by rowid also names
//!   the run, so a reused rowid never reads another run's row.
//! - A run with no entry that is still running is read by scanning; a run
//!   that ended was folded by its last append (or by [`fold_all`] when the
//!   store opens, or by [`fold_run`] when a run is claimed after a crash).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::events::Event;
use crate::store::pages;
use crate::store::{StoreError, StoreResult};

/// A run's rows in the table before its step ends; the next token page of
/// a run that has this many folds them instead (one page per this many
/// tokens even in a step that streams for minutes).
const FOLD_AT: usize = 64;

/// One of a run's rows in `run_event_recent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Row {
    pub(super) id: i64,
    pub(super) first: i64,
    pub(super) last: i64,
}

/// What an append did to a run's recent rows, applied to [`Recent`] once
/// its transaction committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Effect {
    /// The page went to `run_event_recent` as this row.
    Added(Row),
    /// The run's rows (if any) were folded; it keeps streaming here. The
    /// run's highest seq in its row and pages after the append.
    Folded(i64),
    /// The run's rows were folded and the run ended.
    Ended,
}

/// A run this process streams.
#[derive(Debug, Default)]
struct Entry {
    /// The run's highest seq in its row and pages (the run's own appends
    /// are the only ones that move it while this process holds its lease):
    /// a token page after it overlaps no page, and the notification's seq
    /// is known without a read.
    floor: i64,
    /// Its rows in `run_event_recent`, in append order.
    rows: Vec<Row>,
}

/// The rows this process has in `run_event_recent`, by run.
#[derive(Debug, Default)]
pub(super) struct Recent(Mutex<HashMap<Uuid, Entry>>);

impl Recent {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// For a token page `first..=last` of `run`: `Some((floor, stored))`
    /// when it goes to the recent log — this process streams the run and
    /// its rows have room — with the run's highest seq in its row and
    /// pages before it and the run's highest seq with it; `None` when it
    /// goes to the pages. Decided under the lock, without copying the
    /// run's rows (this is every token's path).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when it overlaps one of the run's rows.
    pub(super) fn streams(
        &self,
        run: Uuid,
        first: i64,
        last: i64,
    ) -> StoreResult<Option<(i64, i64)>> {
        let map = self.map();
        let Some(entry) = map.get(&run).filter(|e| e.rows.len() < FOLD_AT) else {
            return Ok(None);
        };
        if let Some(r) = entry
            .rows
            .iter()
            .find(|r| r.last >= first && r.first <= last)
        {
            return Err(StoreError::Conflict(format!(
                "events {first}..={last} of run {run} overlap stored events {}..={}",
                r.first, r.last
            )));
        }
        let stored = entry
            .rows
            .iter()
            .map(|r| r.last)
            .fold(entry.floor.max(last), i64::max);
        Ok(Some((entry.floor, stored)))
    }

    /// The run's rows, or `None` when this process does not stream it.
    pub(super) fn rows(&self, run: Uuid) -> Option<Vec<Row>> {
        self.map().get(&run).map(|e| e.rows.clone())
    }

    /// The highest seq of the run's recent rows.
    pub(super) fn last(&self, run: Uuid) -> Option<i64> {
        self.map()
            .get(&run)
            .and_then(|e| e.rows.iter().map(|r| r.last).max())
    }

    /// Records a committed append's effect.
    pub(super) fn apply(&self, run: Uuid, effect: Effect) {
        let mut map = self.map();
        match effect {
            Effect::Added(row) => map.entry(run).or_default().rows.push(row),
            Effect::Folded(floor) => {
                let entry = map.entry(run).or_default();
                entry.rows.clear();
                entry.floor = floor;
            }
            Effect::Ended => {
                map.remove(&run);
            }
        }
    }

    /// Forgets the run (its rows were folded by a write that ended it).
    pub(super) fn forget(&self, run: Uuid) {
        self.map().remove(&run);
    }
}

/// Inserts a page of a streaming run; returns its row.
pub(super) fn insert(
    tx: &Connection,
    run: &str,
    first: i64,
    last: i64,
    events: &str,
) -> StoreResult<Row> {
    tx.prepare_cached(
        "INSERT INTO run_event_recent (run_id, first_seq, last_seq, events) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![run, first, last, events])?;
    Ok(Row {
        id: tx.last_insert_rowid(),
        first,
        last,
    })
}

/// A row as read back for a fold or a read.
struct Stored {
    id: i64,
    first: i64,
    last: i64,
    events: String,
}

/// Folds the run's `rows` (those still there) into one page.
pub(super) fn fold(tx: &Connection, run: &str, rows: &[Row]) -> StoreResult<()> {
    let mut stored = Vec::with_capacity(rows.len());
    {
        // Read and deleted in one seek.
        let mut take = tx.prepare_cached(
            "DELETE FROM run_event_recent WHERE rowid = ?1 AND run_id = ?2
             RETURNING first_seq, last_seq, events",
        )?;
        for row in rows {
            let found = take
                .query_row(params![row.id, run], |r| {
                    Ok(Stored {
                        id: row.id,
                        first: r.get(0)?,
                        last: r.get(1)?,
                        events: r.get(2)?,
                    })
                })
                .optional()?;
            stored.extend(found);
        }
    }
    write_page(tx, run, &mut stored)
}

/// Folds every row the table holds for `run` (found by scanning): for a
/// run this process did not stream, before it takes the run over.
pub(super) fn fold_run(tx: &Connection, run: &str) -> StoreResult<()> {
    let mut stored = {
        let mut scan = tx.prepare_cached(
            "SELECT rowid, first_seq, last_seq, events FROM run_event_recent WHERE run_id = ?1",
        )?;
        let rows = scan.query_map([run], |r| {
            Ok(Stored {
                id: r.get(0)?,
                first: r.get(1)?,
                last: r.get(2)?,
                events: r.get(3)?,
            })
        })?;
        rows.collect::<Result<Vec<_>, _>>()?
    };
    write_page(tx, run, &mut stored)?;
    let mut delete = tx.prepare_cached("DELETE FROM run_event_recent WHERE rowid = ?1")?;
    for s in &stored {
        delete.execute([s.id])?;
    }
    Ok(())
}

/// Folds every run's rows (the store opening: what is there was left by a
/// process that stopped, or belongs to another one, which reads by rowid
/// and finds its rows in the pages after).
pub(super) fn fold_all(tx: &Connection) -> StoreResult<usize> {
    let runs: Vec<String> = {
        let mut stmt = tx.prepare("SELECT DISTINCT run_id FROM run_event_recent")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for run in &runs {
        fold_run(tx, run)?;
    }
    Ok(runs.len())
}

/// Writes `stored` as one page of `run`.
fn write_page(tx: &Connection, run: &str, stored: &mut [Stored]) -> StoreResult<()> {
    let (Some(first), Some(last)) = (
        stored.iter().map(|s| s.first).min(),
        stored.iter().map(|s| s.last).max(),
    ) else {
        return Ok(());
    };
    stored.sort_by_key(|s| s.first);
    let mut page = String::with_capacity(stored.iter().map(|s| s.events.len()).sum());
    page.push('[');
    for (i, s) in stored.iter().enumerate() {
        let inner = s
            .events
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .ok_or_else(|| {
                StoreError::Backend(format!("a recent page of run {run} is not an array"))
            })?;
        if i > 0 {
            page.push(',');
        }
        page.push_str(inner);
    }
    page.push(']');
    tx.prepare_cached(
        "INSERT INTO run_event_pages (run_id, first_seq, last_seq, events) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![run, first, last, page])?;
    Ok(())
}

/// Adds the run's recent events after `after` to `out` (which holds its
/// stored pages' events, all before these), up to `limit`: by rowid when
/// this process streams the run (`rows`), else by scanning if it is still
/// running. Call it in the same read transaction as the pages' read.
pub(super) fn read(
    conn: &Connection,
    run: Uuid,
    rows: Option<&[Row]>,
    after: u64,
    limit: usize,
    out: &mut Vec<Event>,
) -> StoreResult<()> {
    let id = run.to_string();
    let after_sql = i64::try_from(after).unwrap_or(i64::MAX);
    let mut texts: Vec<(i64, String)> = Vec::new();
    match rows {
        Some(rows) => {
            let mut get = conn.prepare_cached(
                "SELECT first_seq, events FROM run_event_recent WHERE rowid = ?1 AND run_id = ?2",
            )?;
            for row in rows.iter().filter(|r| r.last > after_sql) {
                texts.extend(
                    get.query_row(params![row.id, id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?,
                );
            }
        }
        None => {
            let running: Option<bool> = conn
                .prepare_cached("SELECT status = 'running' FROM runs WHERE id = ?1")?
                .query_row([&id], |r| r.get(0))
                .optional()?;
            if running != Some(true) {
                return Ok(());
            }
            let mut scan = conn.prepare_cached(
                "SELECT first_seq, events FROM run_event_recent WHERE run_id = ?1 AND last_seq > ?2",
            )?;
            let found = scan.query_map(params![id, after_sql], |r| Ok((r.get(0)?, r.get(1)?)))?;
            texts = found.collect::<Result<_, _>>()?;
        }
    }
    texts.sort_by_key(|(first, _)| *first);
    // A rowid another process folded and this run's own later row reused
    // stands twice in the entry: one row, read once.
    texts.dedup_by_key(|(first, _)| *first);
    for (_, text) in &texts {
        if out.len() >= limit {
            break;
        }
        pages::read_page(run, text, after, limit, out)?;
    }
    Ok(())
}
