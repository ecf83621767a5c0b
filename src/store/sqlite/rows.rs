//! How records map to SQLite rows: the column lists, the row decoders and
//! the write transactions.

use rusqlite::{Connection, ErrorCode, OptionalExtension, Row, params};
use uuid::Uuid;

use super::recent::{self, Effect, Recent};
use crate::events::RunStatus;
use crate::events::{ErrorInfo, ForkOrigin, Usage, now_micros};
use crate::store::pages::EncodedPage;
use crate::store::sql;
use crate::store::{ChatRecord, MessageRecord, RunRecord, StoreError, StoreResult};

/// A UUID stored in its hyphenated text form.
pub(super) fn uuid_of(text: &str) -> StoreResult<Uuid> {
    Uuid::parse_str(text)
        .map_err(|e| StoreError::Backend(format!("stored id `{text}` is not a UUID: {e}")))
}

/// Now, as a column value.
pub(super) fn now() -> StoreResult<i64> {
    sql::i64_of(now_micros(), "time")
}

/// A text column, borrowed.
pub(super) fn text<'r>(r: &'r Row<'_>, i: usize) -> StoreResult<&'r str> {
    r.get_ref(i)?
        .as_str()
        .map_err(|e| StoreError::Backend(format!("column {i}: {e}")))
}

pub(super) const CHAT_COLS: &str = "id, user_id, title, created_at, updated_at, active_run";

pub(super) fn chat_of(r: &Row<'_>) -> StoreResult<ChatRecord> {
    let active: Option<String> = r.get(5)?;
    Ok(ChatRecord {
        id: r.get(0)?,
        user_id: r.get(1)?,
        title: r.get(2)?,
        created_at: sql::u64_of(r.get(3)?, "chat time")?,
        updated_at: sql::u64_of(r.get(4)?, "chat time")?,
        active_run: active.as_deref().map(uuid_of).transpose()?,
    })
}

pub(super) const MESSAGE_COLS: &str = "chat_id, id, role, parts, metadata, position, created_at";

pub(super) fn message_of(r: &Row<'_>) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        chat_id: r.get(0)?,
        id: r.get(1)?,
        role: r.get(2)?,
        parts: sql::from_json(text(r, 3)?, "message parts")?,
        metadata: sql::from_json(text(r, 4)?, "message metadata")?,
        position: r.get(5)?,
        created_at: sql::u64_of(r.get(6)?, "message time")?,
    })
}

pub(super) const UPSERT_MESSAGE: &str = "INSERT INTO messages (chat_id, id, role, parts, metadata, position, created_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
     ON CONFLICT (chat_id, id) DO UPDATE SET role = excluded.role, parts = excluded.parts,
         metadata = excluded.metadata, position = excluded.position, created_at = excluded.created_at";

pub(super) const TOUCH_CHAT: &str =
    "UPDATE chats SET updated_at = max(?2, updated_at + 1) WHERE id = ?1";

/// Clears the chat `?1`'s active run if it still is `?2`.
pub(super) const RELEASE_CHAT: &str = "UPDATE chats SET active_run = NULL, updated_at = max(?3, updated_at + 1) WHERE id = ?1 AND active_run = ?2";

/// Records how run `id` ended (and drops its lease), and brings the row's
/// `last_seq` up to its streamed events (see [`RUN_COLS`]), folding the
/// run's recent rows first. The caller forgets the run in `recent` once the
/// write committed (the closure may run twice: it must find them again).
pub(super) fn finish_run(
    conn: &Connection,
    recent: &Recent,
    id: Uuid,
    status: RunStatus,
    error: Option<&ErrorInfo>,
    usage: Usage,
) -> StoreResult<()> {
    if let Some(rows) = recent.rows(id)
        && !rows.is_empty()
    {
        recent::fold(conn, &id.to_string(), &rows)?;
    }
    let n = conn
        .prepare_cached(
            "UPDATE runs SET status = ?2, error = ?3, prompt_tokens = ?4, completion_tokens = ?5, finished_at = ?6,
                 cost_nano_usd = ?7,
                 lease_owner = NULL, lease_until = NULL,
                 last_seq = max(last_seq, coalesce((SELECT max(p.last_seq) FROM run_event_pages p WHERE p.run_id = ?1), 0))
             WHERE id = ?1",
        )?
        .execute(params![
            id.to_string(),
            sql::status_name(status),
            error.map(|e| sql::to_json(e, "run error")).transpose()?,
            sql::i64_of(usage.prompt_tokens, "token count")?,
            sql::i64_of(usage.completion_tokens, "token count")?,
            now()?,
            sql::i64_of(usage.cost_nano_usd, "cost")?,
        ])?;
    if n == 0 {
        Err(StoreError::NotFound(format!("run {id}")))
    } else {
        Ok(())
    }
}

pub(super) fn upsert_message(
    conn: &Connection,
    chat_id: &str,
    m: &MessageRecord,
) -> StoreResult<()> {
    conn.prepare_cached(UPSERT_MESSAGE)?.execute(params![
        chat_id,
        m.id,
        m.role,
        sql::to_json(&m.parts, "message parts")?,
        sql::to_json(&m.metadata, "message metadata")?,
        m.position,
        sql::i64_of(m.created_at, "message time")?,
    ])?;
    Ok(())
}

/// The columns of a run as stored, for `INSERT`.
const RUN_INSERT_COLS: &str = "id, chat_id, user_id, graph, graph_version, status, input, created_at, finished_at, error, \
     prompt_tokens, completion_tokens, parent_run, parent_step, request_id, message_id, last_seq, last_step, parent_fork, cost_nano_usd";

/// The columns [`run_of`] decodes, for `SELECT` and `RETURNING` on `runs`.
///
/// `last_seq` is derived: the row's `last_seq` is only a lower bound while
/// the run runs, because a page of streamed events leaves the row alone
/// (see [`append_in`]), so a read takes the higher of it and the run's last
/// stored page — one seek at the end of the run's range in the pages'
/// primary key `(run_id, last_seq)`; tokens streamed since the run's last
/// step are in the recent log, which the store adds from what it knows
/// (`SqliteStore::with_recent`). Every write that touches the row for
/// another reason (a checkpoint, the run's end) brings `last_seq` up to
/// date, so the row alone is exact once the run is over.
pub(super) const RUN_COLS: &str = "id, chat_id, user_id, graph, graph_version, status, input, created_at, finished_at, error, \
     prompt_tokens, completion_tokens, parent_run, parent_step, request_id, message_id, \
     max(runs.last_seq, coalesce((SELECT max(p.last_seq) FROM run_event_pages p WHERE p.run_id = runs.id), 0)), \
     last_step, parent_fork, cost_nano_usd";

pub(super) fn run_of(r: &Row<'_>) -> StoreResult<RunRecord> {
    let error: Option<String> = r.get(9)?;
    let parent_run: Option<String> = r.get(12)?;
    let parent_step: Option<i64> = r.get(13)?;
    let finished_at: Option<i64> = r.get(8)?;
    let fork: Option<String> = r.get(18)?;
    Ok(RunRecord {
        id: uuid_of(text(r, 0)?)?,
        chat_id: r.get(1)?,
        user_id: r.get(2)?,
        graph: r.get(3)?,
        graph_version: r.get(4)?,
        status: sql::status_of(text(r, 5)?)?,
        input: sql::from_json(text(r, 6)?, "run input")?,
        created_at: sql::u64_of(r.get(7)?, "run time")?,
        finished_at: finished_at
            .map(|t| sql::u64_of(t, "run time"))
            .transpose()?,
        error: error
            .as_deref()
            .map(|e| sql::from_json::<ErrorInfo>(e, "run error"))
            .transpose()?,
        usage: Usage {
            prompt_tokens: sql::u64_of(r.get(10)?, "token count")?,
            completion_tokens: sql::u64_of(r.get(11)?, "token count")?,
            cost_nano_usd: sql::u64_of(r.get(19)?, "cost")?,
            // The run row keeps the totals; the cache and reasoning split
            // is in the run's events (each call's usage).
            ..Usage::default()
        },
        parent: match (parent_run, parent_step, fork) {
            (Some(_), Some(_), Some(fork)) => Some(sql::from_json(&fork, "fork origin")?),
            (Some(run), Some(step), None) => Some(ForkOrigin {
                run_id: uuid_of(&run)?,
                step: sql::u32_of(step, "parent step")?,
                ..ForkOrigin::default()
            }),
            _ => None,
        },
        request_id: r.get(14)?,
        message_id: r.get(15)?,
        last_seq: sql::u64_of(r.get(16)?, "last seq")?,
        last_step: sql::u32_of(r.get(17)?, "last step")?,
    })
}

pub(super) fn insert_run(conn: &Connection, run: &RunRecord) -> StoreResult<()> {
    let sql_text = format!(
        "INSERT INTO runs ({RUN_INSERT_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
    );
    let result = conn.prepare_cached(&sql_text)?.execute(params![
        run.id.to_string(),
        run.chat_id,
        run.user_id,
        run.graph,
        run.graph_version,
        sql::status_name(run.status),
        sql::to_json(&run.input, "run input")?,
        sql::i64_of(run.created_at, "run time")?,
        run.finished_at
            .map(|t| sql::i64_of(t, "run time"))
            .transpose()?,
        run.error
            .as_ref()
            .map(|e| sql::to_json(e, "run error"))
            .transpose()?,
        sql::i64_of(run.usage.prompt_tokens, "token count")?,
        sql::i64_of(run.usage.completion_tokens, "token count")?,
        run.parent.as_ref().map(|p| p.run_id.to_string()),
        run.parent.as_ref().map(|p| p.step),
        run.request_id,
        run.message_id,
        sql::i64_of(run.last_seq, "last seq")?,
        run.last_step,
        run.parent
            .as_ref()
            .map(|p| sql::to_json(p, "fork origin"))
            .transpose()?,
        sql::i64_of(run.usage.cost_nano_usd, "cost")?,
    ]);
    match result {
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
            Err(StoreError::Conflict(format!("run {} exists", run.id)))
        }
        other => other.map(|_| ()).map_err(StoreError::from),
    }
}

/// Appends several runs' pages inside the writer's transaction (group
/// commit: one WAL commit for all of them). A page holds consecutive
/// batches of one run: their events, their checkpoints and the run's
/// progress (a final batch also clears the lease). Returns each page's
/// highest stored seq for its run (for the notification), or the first
/// failure, after which the caller rolls back and uses [`append_each`].
///
/// No savepoint per page: a conflict is rare (a repeated append after a
/// crash), and a savepoint makes SQLite journal every page it changes.
pub(super) fn append_all(
    conn: &Connection,
    pages: &[&EncodedPage],
    recent: &Recent,
) -> StoreResult<Vec<Appended>> {
    pages
        .iter()
        .map(|page| append_in(conn, page, recent))
        .collect()
}

/// As [`append_all`], each page in its own savepoint, so that one page's
/// failure (a conflict) fails only its own append.
pub(super) fn append_each(
    conn: &Connection,
    pages: &[&EncodedPage],
    recent: &Recent,
) -> StoreResult<Vec<StoreResult<Appended>>> {
    let mut out = Vec::with_capacity(pages.len());
    for page in pages {
        conn.execute_batch("SAVEPOINT append_page")?;
        let r = append_in(conn, page, recent);
        if r.is_err() {
            conn.execute_batch("ROLLBACK TO append_page")?;
        }
        conn.execute_batch("RELEASE append_page")?;
        out.push(r);
    }
    Ok(out)
}

/// What one page's append stored: the run's highest stored seq (for the
/// notification) and what it did to the run's recent rows.
pub(super) type Appended = (u64, Effect);

/// One page (events and/or checkpoints) inside an open transaction. A
/// page that overlaps a stored one fails before it writes anything.
///
/// A page of streamed events of a run this process streams goes to the
/// recent log (`recent`: the right edge of one table, not its run's own
/// index leaf); any other page first folds the run's recent rows into the
/// pages, so a step's end leaves the run's whole log in `run_event_pages`.
fn append_in(tx: &Connection, b: &EncodedPage, recent: &Recent) -> StoreResult<Appended> {
    let run = b.run_id.to_string();
    let running = b.status == sql::status_name(RunStatus::Running);
    if let (true, Some(events), Some(first), Some(last)) = (
        running && b.steps.is_empty(),
        &b.events,
        b.first_seq,
        b.last_seq,
    ) && let Some((floor, stored)) = recent.streams(b.run_id, first, last)?
    {
        // A page after the run's highest stored seq overlaps no page.
        if first <= floor {
            let clash: Option<(i64, i64)> = tx
                .prepare_cached(
                    "SELECT first_seq, last_seq FROM run_event_pages
                     WHERE run_id = ?1 AND last_seq >= ?2 AND first_seq <= ?3 ORDER BY last_seq LIMIT 1",
                )?
                .query_row(params![run, first, last], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((f, l)) = clash {
                return Err(StoreError::Conflict(format!(
                    "events {first}..={last} of run {} overlap stored events {f}..={l}",
                    b.run_id
                )));
            }
        }
        let row = recent::insert(tx, &run, first, last, events)?;
        return Ok((sql::u64_of(stored, "last seq")?, Effect::Added(row)));
    }
    if let Some(rows) = recent.rows(b.run_id)
        && !rows.is_empty()
    {
        recent::fold(tx, &run, &rows)?;
    }
    let stored = append_paged(tx, b, &run, running)?;
    let effect = if running {
        Effect::Folded(sql::i64_of(stored, "last seq")?)
    } else {
        Effect::Ended
    };
    Ok((stored, effect))
}

/// The run's highest seq in its row and pages (0 for an unknown run).
fn stored_last(tx: &Connection, run: &str) -> StoreResult<i64> {
    let stored: Option<i64> = tx
        .prepare_cached(
            "SELECT max(last_seq, coalesce((SELECT max(p.last_seq) FROM run_event_pages p WHERE p.run_id = ?1), 0))
             FROM runs WHERE id = ?1",
        )?
        .query_row(params![run], |r| r.get(0))
        .optional()?;
    Ok(stored.unwrap_or(0))
}

/// [`append_in`] for a page that goes to `run_event_pages`.
fn append_paged(tx: &Connection, b: &EncodedPage, run: &str, running: bool) -> StoreResult<u64> {
    if let (Some(first), Some(last), Some(events)) = (b.first_seq, b.last_seq, &b.events) {
        // The overlap check rides in the insert: ranges of a run never
        // overlap (the `pages` module), so a stored page overlaps this one
        // iff it ends at or after `first` and starts at or before `last`;
        // appends at the end of the log find none in one index seek.
        let inserted = tx
            .prepare_cached(
                "INSERT INTO run_event_pages (run_id, first_seq, last_seq, events)
                 SELECT ?1, ?2, ?3, ?4 WHERE NOT EXISTS (
                     SELECT 1 FROM run_event_pages WHERE run_id = ?1 AND last_seq >= ?2 AND first_seq <= ?3)",
            )?
            .execute(params![run, first, last, events])?;
        if inserted == 0 {
            // The stored page with the lowest `last_seq >= first` is the
            // one that clashes, named in the error.
            let (f, l): (i64, i64) = tx
                .prepare_cached(
                    "SELECT first_seq, last_seq FROM run_event_pages
                     WHERE run_id = ?1 AND last_seq >= ?2 ORDER BY last_seq LIMIT 1",
                )?
                .query_row(params![run, first], |r| Ok((r.get(0)?, r.get(1)?)))?;
            return Err(StoreError::Conflict(format!(
                "events {first}..={last} of run {} overlap stored events {f}..={l}",
                b.run_id
            )));
        }
    }
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO checkpoints (run_id, step, writes, next, joins, snapshot) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (run_id, step) DO UPDATE SET writes = excluded.writes, next = excluded.next,
                 joins = excluded.joins, snapshot = excluded.snapshot",
        )?;
        for i in 0..b.steps.len() {
            insert.execute(params![
                run,
                b.steps[i],
                b.writes[i],
                b.next[i],
                b.joins[i],
                b.snapshots[i]
            ])?;
        }
    }
    // Most pages are a few streamed tokens of a running run (one page per
    // token with `server.stream_durability`): they leave the run row alone.
    // Rewriting it — a lookup by its text key and the whole row written
    // again, its input included — was about a quarter of the writer
    // thread's time (the store bench's streamed tokens: 26 → 17 µs of
    // writer CPU per page without it); reads derive `last_seq` from the
    // pages instead (`RUN_COLS`). What the notification needs is only
    // read: the run's highest stored seq, which for a page stored out of
    // order is not its own last, and which counts the row's own value.
    if b.steps.is_empty() && running {
        let stored = stored_last(tx, run)?.max(b.last_seq.unwrap_or(0));
        return sql::u64_of(stored, "last seq");
    }
    // A checkpoint or the run's end: the row advances, and its `last_seq`
    // catches up with the pages streamed since it last did (this page is
    // among them, inserted above). A step of a running run sets only the
    // two columns no index holds: naming `status` or the lease in the SET,
    // even unchanged, makes SQLite rewrite the row's entries in the
    // indexes over them (the lease and status ones) at every step.
    let (statement, values): (&str, &[&dyn rusqlite::ToSql]) = if running {
        (STEP_RUN, &[&run, &b.last_step])
    } else {
        (END_RUN, &[&run, &b.last_step, &b.status, &b.now])
    };
    let stored: Option<i64> = tx
        .prepare_cached(statement)?
        .query_row(values, |r| r.get(0))
        .optional()?;
    sql::u64_of(stored.or(b.last_seq).unwrap_or(0), "last seq")
}

/// A running run's step: `?1` the run, `?2` the step.
const STEP_RUN: &str = "UPDATE runs SET last_seq = max(last_seq, coalesce((SELECT max(p.last_seq) FROM run_event_pages p WHERE p.run_id = ?1), 0)),
         last_step = max(last_step, ?2)
     WHERE id = ?1 RETURNING last_seq";

/// A run's last step: as [`STEP_RUN`], with `?3` its status and `?4` the time.
const END_RUN: &str = "UPDATE runs SET last_seq = max(last_seq, coalesce((SELECT max(p.last_seq) FROM run_event_pages p WHERE p.run_id = ?1), 0)),
         last_step = max(last_step, ?2), status = ?3, finished_at = ?4,
         lease_owner = NULL, lease_until = NULL
     WHERE id = ?1 RETURNING last_seq";
