//! A chat turn's start and end, each one statement: one round trip.
//!
//! Starting a turn used to be a transaction of seven to nine statements
//! (`BEGIN`, create the chat, lock it, look at its active run, delete and
//! upsert its messages, insert the run, claim the chat, `COMMIT`), each a
//! round trip to the server and a plan to execute; ending one was six. On
//! the chat path those were most of a run's round trips: a run of the
//! RESEARCH graph appends once per superstep and nothing else (issue 37
//! asks for at most one round trip per superstep, the run's creation
//! included). Both are now a single statement of data-modifying CTEs.
//!
//! # Starting: optimistic, on one row
//! A statement sees one snapshot, so the transaction's `SELECT … FOR
//! UPDATE` (wait for a concurrent turn, then look again) cannot be written
//! inside it. Instead the statement reads the chat as its snapshot has it
//! (`seen`: its owner, its active run, whether that run is running) and
//! claims the chat with an `UPDATE` that also requires the active run to be
//! still the one it saw. `UPDATE` locks the row and, when a concurrent
//! transaction changed it, re-checks its condition against the newest
//! version: if another turn (or the end of one) got there first, the claim
//! matches nothing, nothing is written, and [`begin_turn`] runs the
//! statement again with a new snapshot. A chat the snapshot does not have
//! is inserted already claimed; if another turn inserted it meanwhile, the
//! insert does nothing and the statement runs again too. Only a claimed
//! chat gets the messages and the run, so concurrent turns still start
//! exactly one run and the refused ones write nothing, as the trait says.
//!
//! Messages: the transaction deleted them all and upserted the new ones in
//! two statements (an upsert must not touch rows its own statement
//! deletes). Here the delete takes only the ids the turn does not carry,
//! so the two sets of rows are disjoint; the stored result is the same.

use std::sync::LazyLock;

use tokio_postgres::Row;
use tokio_postgres::types::{Json, ToSql};

use super::PostgresStore;
use super::rows::{CHAT_COLS, MessageColumns, RUN_COLS, RunColumns, chat_of};
use crate::events::now_micros;
use crate::store::{StoreError, StoreResult, TurnEnd, TurnOutcome, TurnStart, sql};

/// How many times a turn's start is tried when concurrent writes to its
/// chat keep winning (each loss means one of them made progress).
const ATTEMPTS: usize = 8;

/// Parameters: the run's 20 columns (`RunColumns`) at $1–$20, the lease
/// owner and end ($21, $22), the chat's id, user, title, created_at,
/// updated_at ($23–$27), now ($28), and the messages as arrays ($29–$34:
/// id, role, parts, metadata, position, created_at). Answers one row: the
/// started chat's columns (null when not started), then what the snapshot
/// saw: the chat's user, its active run, whether that run is running.
/// Built once: a turn's start sends the same text, prepared once per
/// connection.
static BEGIN_TURN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "
WITH seen AS (
    SELECT c.user_id, c.active_run,
        EXISTS (SELECT 1 FROM runs r WHERE r.id = c.active_run AND r.status = 'running') AS busy
    FROM chats c WHERE c.id = $23
), created AS (
    INSERT INTO chats ({CHAT_COLS})
    SELECT $23, $24, $25, $26, greatest($28::bigint, $27::bigint + 1), $1
    WHERE NOT EXISTS (SELECT 1 FROM seen)
    ON CONFLICT (id) DO NOTHING
    RETURNING {CHAT_COLS}
), claimed AS (
    UPDATE chats c SET active_run = $1, updated_at = greatest($28::bigint, c.updated_at + 1)
    FROM seen
    WHERE c.id = $23 AND seen.user_id = $24 AND NOT seen.busy
        AND c.active_run IS NOT DISTINCT FROM seen.active_run
    RETURNING c.id, c.user_id, c.title, c.created_at, c.updated_at, c.active_run
), started AS (
    SELECT * FROM created UNION ALL SELECT * FROM claimed
), cleared AS (
    DELETE FROM messages
    WHERE chat_id = $23 AND id <> ALL($29::text[]) AND EXISTS (SELECT 1 FROM started)
), upserted AS ({upsert}
), run AS (
    INSERT INTO runs ({RUN_COLS}, lease_owner, lease_until)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
        $21, $22
    WHERE EXISTS (SELECT 1 FROM started)
)
SELECT s.id, s.user_id, s.title, s.created_at, s.updated_at, s.active_run,
    seen.user_id, seen.active_run, seen.busy
FROM (SELECT 1) AS one LEFT JOIN started s ON true LEFT JOIN seen ON true",
        upsert = upsert_messages(23, 29, "started"),
    )
});

/// The CTE body that writes a turn's messages (arrays at `$first`…
/// `$first+5`: id, role, parts, metadata, position, created_at) into chat
/// `$chat`, when the CTE `guard` has a row: the same upsert for a turn's
/// start and its end.
fn upsert_messages(chat: u8, first: u8, guard: &str) -> String {
    let [id, role, parts, metadata, position, created] =
        std::array::from_fn(|i| first as usize + i);
    format!(
        "
    INSERT INTO messages (chat_id, id, role, parts, metadata, position, created_at)
    SELECT ${chat}, m.id, m.role, m.parts, m.metadata, m.position, m.created_at
    FROM unnest(${id}::text[], ${role}::text[], ${parts}::json[], ${metadata}::json[], ${position}::bigint[], ${created}::bigint[])
        AS m(id, role, parts, metadata, position, created_at)
    WHERE EXISTS (SELECT 1 FROM {guard})
    ON CONFLICT (chat_id, id) DO UPDATE SET role = excluded.role, parts = excluded.parts,
        metadata = excluded.metadata, position = excluded.position, created_at = excluded.created_at"
    )
}

/// Starts a turn (see the module docs and
/// [`ChatStore::begin_turn`](crate::store::ChatStore::begin_turn)).
pub(super) async fn begin_turn(
    store: &PostgresStore,
    turn: &TurnStart,
) -> StoreResult<TurnOutcome> {
    let c = &turn.chat;
    let (created, updated) = (
        sql::i64_of(c.created_at, "chat time")?,
        sql::i64_of(c.updated_at, "chat time")?,
    );
    let until = sql::i64_of(turn.lease_until, "lease time")?;
    let messages = MessageColumns::new(&c.id, &turn.messages)?;
    let run = RunColumns::new(&turn.run)?;
    for _ in 0..ATTEMPTS {
        let now = sql::i64_of(now_micros(), "time")?;
        let mut params: Vec<&(dyn ToSql + Sync)> = run.params().to_vec();
        params.extend_from_slice(&[&turn.owner, &until, &c.id, &c.user_id, &c.title]);
        params.extend_from_slice(&[&created, &updated, &now]);
        params.extend_from_slice(&messages.columns());
        let row = store
            .query_opt(&BEGIN_TURN, &params)
            .await?
            .ok_or_else(|| StoreError::Backend("the turn statement answered no row".into()))?;
        if let Some(outcome) = outcome_of(&row, &c.user_id)? {
            return Ok(outcome);
        }
    }
    Err(StoreError::Unavailable(format!(
        "chat {}: concurrent writes kept winning over a new turn",
        c.id
    )))
}

/// What the statement did; `None` when it lost a race and must run again.
fn outcome_of(row: &Row, user: &str) -> StoreResult<Option<TurnOutcome>> {
    let started: Option<String> = row.try_get(0)?;
    if started.is_some() {
        return Ok(Some(TurnOutcome::Started(chat_of(row)?)));
    }
    let seen_user: Option<String> = row.try_get(6)?;
    let Some(seen_user) = seen_user else {
        return Ok(None);
    };
    if seen_user != user {
        return Ok(Some(TurnOutcome::NotOwner));
    }
    let active: Option<uuid::Uuid> = row.try_get(7)?;
    let busy: Option<bool> = row.try_get(8)?;
    Ok(match (busy, active) {
        (Some(true), Some(run)) => Some(TurnOutcome::Busy(run)),
        _ => None,
    })
}

/// Ends a turn in one statement: touches the chat (and frees it when
/// `$15`), upserts the answer if the chat still exists (the chat's row lock,
/// taken by the `UPDATE`, keeps a concurrent delete from racing the upsert),
/// records how the run ended and drops its lease. One `UPDATE` of the chat,
/// not two: a statement may change a row only once. Parameters: the
/// message's columns as [`MessageColumns::params`] ($1–$8, `$8` now), the
/// run, status, error, prompt and completion tokens, cost ($9–$14), release
/// ($15). Answers how many runs it finished (0 or 1).
static END_TURN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "
WITH touched AS (
    UPDATE chats SET updated_at = greatest($8::bigint, updated_at + 1),
        active_run = CASE WHEN $15::boolean AND active_run = $9 THEN NULL ELSE active_run END
    WHERE id = $1
    RETURNING id
), upserted AS ({upsert}
), finished AS (
    UPDATE runs SET status = $10, error = $11, prompt_tokens = $12, completion_tokens = $13,
        finished_at = $8, cost_nano_usd = $14, lease_owner = NULL, lease_until = NULL
    WHERE id = $9
    RETURNING 1
)
SELECT count(*) FROM finished",
        upsert = upsert_messages(1, 2, "touched"),
    )
});

/// Ends a turn (see [`END_TURN`] and
/// [`ChatStore::end_turn`](crate::store::ChatStore::end_turn)).
pub(super) async fn end_turn(store: &PostgresStore, end: &TurnEnd) -> StoreResult<()> {
    let cols = MessageColumns::new(&end.message.chat_id, std::slice::from_ref(&end.message))?;
    let (prompt, completion, cost) = (
        sql::i64_of(end.usage.prompt_tokens, "token count")?,
        sql::i64_of(end.usage.completion_tokens, "token count")?,
        sql::i64_of(end.usage.cost_nano_usd, "cost")?,
    );
    let status = sql::status_name(end.status);
    let error = end.error.as_ref().map(Json);
    let mut params: Vec<&(dyn ToSql + Sync)> = cols.params().to_vec();
    params.extend_from_slice(&[&end.run_id, &status, &error, &prompt, &completion, &cost]);
    params.push(&end.release);
    let finished: i64 = store
        .query_opt(&END_TURN, &params)
        .await?
        .ok_or_else(|| StoreError::Backend("the end statement answered no row".into()))?
        .try_get(0)?;
    match finished {
        0 => Err(StoreError::NotFound(format!("run {}", end.run_id))),
        _ => Ok(()),
    }
}
