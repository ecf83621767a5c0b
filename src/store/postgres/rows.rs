//! How records map to PostgreSQL rows and statement parameters: the SQL
//! texts, the column lists, and the row decoders.

use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::{Json, ToSql};
use uuid::Uuid;

use crate::events::{ErrorInfo, ForkOrigin, Usage, now_micros};
use crate::store::sql;
use crate::store::{ChatRecord, MessageRecord, RunRecord, StoreResult};

/// The append statement (see the module docs): the events as one page
/// (the `pages` module), the checkpoints, and the run's progress (a final
/// batch also clears the lease) — one statement, so one round trip and one
/// transaction. It answers the run's highest seq, for the notification sent
/// after it commits (never from within: see the `notify` module).
///
/// Parameters: run; first and last seq and the events (all null without
/// events); per checkpoint (arrays): step, writes, next, joins, snapshot;
/// the highest step, the last batch's status, now.
///
/// Every page advances the run row, also a page of streamed tokens, which
/// SQLite no longer does (its `rows::append_in`): here appends run in
/// parallel on pooled connections, not in a writer thread's queue, and
/// cost a commit each; without the update, token pages showed no gain
/// beyond noise with `synchronous_commit` on and ~10% more pages/s with
/// it off (pgbench, 16 clients). The row lock is also what keeps `greatest`
/// exact when two instances append to one run at once: a CTE cannot see
/// the page its own statement inserts, and a snapshot can miss another's.
pub(super) const APPEND: &str = "
WITH events AS (
    INSERT INTO run_event_pages (run_id, first_seq, last_seq, events)
    SELECT $1, $2::bigint, $3::bigint, $4::text WHERE $2::bigint IS NOT NULL
), checkpoint AS (
    INSERT INTO checkpoints (run_id, step, writes, next, joins, snapshot)
    SELECT $1, c.step, c.writes::json, c.next::json, c.joins::json, c.snapshot::json
    FROM unnest($5::int[], $6::text[], $7::text[], $8::text[], $9::text[])
        AS c(step, writes, next, joins, snapshot)
    ON CONFLICT (run_id, step) DO UPDATE SET writes = excluded.writes, next = excluded.next,
        joins = excluded.joins, snapshot = excluded.snapshot
), progress AS (
    UPDATE runs SET last_seq = greatest(last_seq, $3::bigint), last_step = greatest(last_step, $10::int),
        status = CASE WHEN $11::text = 'running' THEN status ELSE $11::text END,
        finished_at = CASE WHEN $11::text = 'running' THEN finished_at ELSE $12::bigint END,
        lease_owner = CASE WHEN $11::text = 'running' THEN lease_owner END,
        lease_until = CASE WHEN $11::text = 'running' THEN lease_until END
    WHERE id = $1
    RETURNING last_seq
)
SELECT coalesce((SELECT last_seq FROM progress), $3::bigint, 0)";

/// [`APPEND`] for several runs at once (the `group` module): one element
/// per append in `$1`–`$7` (run, first and last seq, events, highest step,
/// status, now; each run once), one per checkpoint in `$8`–`$13` (run,
/// step, writes, next, joins, snapshot). Answers, per append, its position
/// in the arrays (from 1) and the run's highest seq.
///
/// It locks its run rows in id order (`locked`; the update only reaches a
/// row through it), as the lease renewal does (`upkeep`): an `UPDATE … FROM`
/// locks rows in whatever order its join yields them, and a grouped append
/// and a renewal locking the same rows in two orders deadlocked (PostgreSQL
/// then aborts one; the group was retried append by append).
pub(super) const APPEND_MANY: &str = "
WITH a AS MATERIALIZED (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::int[], $6::text[],
        $7::bigint[]) WITH ORDINALITY AS a(run_id, first_seq, last_seq, events, last_step, status, now, i)
), events AS (
    INSERT INTO run_event_pages (run_id, first_seq, last_seq, events)
    SELECT run_id, first_seq, last_seq, events FROM a WHERE first_seq IS NOT NULL
), checkpoint AS (
    INSERT INTO checkpoints (run_id, step, writes, next, joins, snapshot)
    SELECT c.run_id, c.step, c.writes::json, c.next::json, c.joins::json, c.snapshot::json
    FROM unnest($8::uuid[], $9::int[], $10::text[], $11::text[], $12::text[], $13::text[])
        AS c(run_id, step, writes, next, joins, snapshot)
    ON CONFLICT (run_id, step) DO UPDATE SET writes = excluded.writes, next = excluded.next,
        joins = excluded.joins, snapshot = excluded.snapshot
), locked AS (
    SELECT id FROM runs WHERE id IN (SELECT run_id FROM a) ORDER BY id FOR UPDATE
), progress AS (
    UPDATE runs SET last_seq = greatest(runs.last_seq, a.last_seq),
        last_step = greatest(runs.last_step, a.last_step),
        status = CASE WHEN a.status = 'running' THEN runs.status ELSE a.status END,
        finished_at = CASE WHEN a.status = 'running' THEN runs.finished_at ELSE a.now END,
        lease_owner = CASE WHEN a.status = 'running' THEN runs.lease_owner END,
        lease_until = CASE WHEN a.status = 'running' THEN runs.lease_until END
    FROM a JOIN locked l ON l.id = a.run_id WHERE runs.id = l.id
    RETURNING runs.id, runs.last_seq
)
SELECT a.i::int, coalesce(p.last_seq, a.last_seq, 0) FROM a LEFT JOIN progress p ON p.id = a.run_id";

pub(super) const CHAT_COLS: &str = "id, user_id, title, created_at, updated_at, active_run";

pub(super) fn chat_of(r: &Row) -> StoreResult<ChatRecord> {
    Ok(ChatRecord {
        id: r.try_get(0)?,
        user_id: r.try_get(1)?,
        title: r.try_get(2)?,
        created_at: sql::u64_of(r.try_get(3)?, "chat time")?,
        updated_at: sql::u64_of(r.try_get(4)?, "chat time")?,
        active_run: r.try_get(5)?,
    })
}

pub(super) const MESSAGE_COLS: &str = "chat_id, id, role, parts, metadata, position, created_at";

pub(super) fn message_of(r: &Row) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        chat_id: r.try_get(0)?,
        id: r.try_get(1)?,
        role: r.try_get(2)?,
        parts: r.try_get(3)?,
        metadata: r.try_get(4)?,
        position: r.try_get(5)?,
        created_at: sql::u64_of(r.try_get(6)?, "message time")?,
    })
}

/// Upserts messages (one row per array element) and touches the chat.
pub(super) const UPSERT_MESSAGES: &str = "
WITH upserted AS (
    INSERT INTO messages (chat_id, id, role, parts, metadata, position, created_at)
    SELECT $1, m.id, m.role, m.parts, m.metadata, m.position, m.created_at
    FROM unnest($2::text[], $3::text[], $4::json[], $5::json[], $6::bigint[], $7::bigint[])
        AS m(id, role, parts, metadata, position, created_at)
    ON CONFLICT (chat_id, id) DO UPDATE SET role = excluded.role, parts = excluded.parts,
        metadata = excluded.metadata, position = excluded.position, created_at = excluded.created_at
)
UPDATE chats SET updated_at = greatest($8, updated_at + 1) WHERE id = $1";

/// Parameters of [`UPSERT_MESSAGES`]: the chat, one array per column, now.
pub(super) struct MessageColumns<'a> {
    chat: &'a str,
    id: Vec<&'a str>,
    role: Vec<&'a str>,
    parts: Vec<&'a Value>,
    metadata: Vec<&'a Value>,
    position: Vec<i64>,
    created_at: Vec<i64>,
    now: i64,
}

impl<'a> MessageColumns<'a> {
    pub(super) fn new(chat: &'a str, messages: &'a [MessageRecord]) -> StoreResult<Self> {
        Ok(Self {
            chat,
            id: messages.iter().map(|m| m.id.as_str()).collect(),
            role: messages.iter().map(|m| m.role.as_str()).collect(),
            parts: messages.iter().map(|m| &m.parts).collect(),
            metadata: messages.iter().map(|m| &m.metadata).collect(),
            position: messages.iter().map(|m| m.position).collect(),
            created_at: messages
                .iter()
                .map(|m| sql::i64_of(m.created_at, "message time"))
                .collect::<StoreResult<_>>()?,
            now: sql::i64_of(now_micros(), "time")?,
        })
    }

    /// The messages' arrays alone (id, role, parts, metadata, position,
    /// created_at), for statements with other parameters around them.
    pub(super) fn columns(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.id,
            &self.role,
            &self.parts,
            &self.metadata,
            &self.position,
            &self.created_at,
        ]
    }

    /// The chat, the messages' arrays ([`Self::columns`]) and now.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 8] {
        let [id, role, parts, metadata, position, created_at] = self.columns();
        [
            &self.chat, id, role, parts, metadata, position, created_at, &self.now,
        ]
    }
}

pub(super) const RUN_COLS: &str = "id, chat_id, user_id, graph, graph_version, status, input, created_at, finished_at, error, \
     prompt_tokens, completion_tokens, parent_run, parent_step, request_id, message_id, last_seq, last_step, parent_fork, cost_nano_usd";

pub(super) fn run_of(r: &Row) -> StoreResult<RunRecord> {
    let finished_at: Option<i64> = r.try_get(8)?;
    let error: Option<Json<ErrorInfo>> = r.try_get(9)?;
    let parent_run: Option<Uuid> = r.try_get(12)?;
    let parent_step: Option<i32> = r.try_get(13)?;
    let last_step: i32 = r.try_get(17)?;
    let fork: Option<Json<ForkOrigin>> = r.try_get(18)?;
    Ok(RunRecord {
        id: r.try_get(0)?,
        chat_id: r.try_get(1)?,
        user_id: r.try_get(2)?,
        graph: r.try_get(3)?,
        graph_version: r.try_get(4)?,
        status: sql::status_of(r.try_get(5)?)?,
        input: r.try_get(6)?,
        created_at: sql::u64_of(r.try_get(7)?, "run time")?,
        finished_at: finished_at
            .map(|t| sql::u64_of(t, "run time"))
            .transpose()?,
        error: error.map(|Json(e)| e),
        usage: Usage {
            prompt_tokens: sql::u64_of(r.try_get(10)?, "token count")?,
            completion_tokens: sql::u64_of(r.try_get(11)?, "token count")?,
            cost_nano_usd: sql::u64_of(r.try_get(19)?, "cost")?,
            // The run row keeps the totals; the cache and reasoning split
            // is in the run's events (each call's usage).
            ..Usage::default()
        },
        parent: match (parent_run, parent_step, fork) {
            (Some(_), Some(_), Some(Json(origin))) => Some(origin),
            (Some(run_id), Some(step), None) => Some(ForkOrigin {
                run_id,
                step: sql::u32_of(i64::from(step), "parent step")?,
                ..ForkOrigin::default()
            }),
            _ => None,
        },
        request_id: r.try_get(14)?,
        message_id: r.try_get(15)?,
        last_seq: sql::u64_of(r.try_get(16)?, "last seq")?,
        last_step: sql::u32_of(i64::from(last_step), "last step")?,
    })
}

/// A [`RunRecord`] as the parameters of an `INSERT INTO runs ({RUN_COLS})`.
pub(super) struct RunColumns<'a> {
    run: &'a RunRecord,
    status: &'static str,
    created: i64,
    finished: Option<i64>,
    error: Option<Json<&'a ErrorInfo>>,
    prompt: i64,
    completion: i64,
    cost: i64,
    parent_run: Option<Uuid>,
    parent_step: Option<i32>,
    fork: Option<Json<&'a ForkOrigin>>,
    last_seq: i64,
    last_step: i32,
}

impl<'a> RunColumns<'a> {
    pub(super) fn new(run: &'a RunRecord) -> StoreResult<Self> {
        Ok(Self {
            run,
            status: sql::status_name(run.status),
            created: sql::i64_of(run.created_at, "run time")?,
            finished: run
                .finished_at
                .map(|t| sql::i64_of(t, "run time"))
                .transpose()?,
            error: run.error.as_ref().map(Json),
            prompt: sql::i64_of(run.usage.prompt_tokens, "token count")?,
            completion: sql::i64_of(run.usage.completion_tokens, "token count")?,
            cost: sql::i64_of(run.usage.cost_nano_usd, "cost")?,
            parent_run: run.parent.as_ref().map(|p| p.run_id),
            parent_step: run
                .parent
                .as_ref()
                .map(|p| sql::i32_of(p.step, "parent step"))
                .transpose()?,
            fork: run.parent.as_ref().map(Json),
            last_seq: sql::i64_of(run.last_seq, "last seq")?,
            last_step: sql::i32_of(run.last_step, "last step")?,
        })
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 20] {
        let r = self.run;
        [
            &r.id,
            &r.chat_id,
            &r.user_id,
            &r.graph,
            &r.graph_version,
            &self.status,
            &r.input,
            &self.created,
            &self.finished,
            &self.error,
            &self.prompt,
            &self.completion,
            &self.parent_run,
            &self.parent_step,
            &r.request_id,
            &r.message_id,
            &self.last_seq,
            &self.last_step,
            &self.fork,
            &self.cost,
        ]
    }
}
