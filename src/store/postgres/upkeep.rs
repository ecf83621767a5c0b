//! Leases and maintenance on PostgreSQL, where several instances share the
//! database.
//!
//! Each lease operation is one `UPDATE` whose `WHERE` states the rule, so
//! the row lock decides races: of two instances acquiring the same lease,
//! the second re-checks the condition against the first one's committed
//! row and gets `false`. `claim_orphans` picks its runs with
//! `FOR UPDATE SKIP LOCKED`, so concurrent claimers lock disjoint sets
//! instead of waiting on (and then re-checking) each other's rows.
//!
//! Pruning deletes [`PRUNE_BATCH`] runs (or chats) per statement, so no
//! transaction grows with the size of the backlog.

use futures::future::BoxFuture;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::PostgresStore;
use super::rows::{RUN_COLS, RunColumns, run_of};
use crate::store::sql;
use crate::store::{
    Appended, Lease, Leases, Maintenance, PRUNE_BATCH, PruneReport, RunRecord, StoreError,
    StoreResult,
};
use tokio_postgres::types::ToSql;

const CLAIM: &str = "
UPDATE runs SET lease_owner = $1, lease_until = $3
WHERE id IN (
    SELECT id FROM runs
    WHERE status = 'running' AND (lease_until IS NULL OR lease_until < $2)
    ORDER BY created_at, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED)
RETURNING ";

/// Extends every lease `$1` holds to `$2`, locking the rows in id order
/// first, as grouped appends do (`rows::APPEND_MANY`). Without the order, an
/// `UPDATE … WHERE lease_owner = $1` locks rows in its scan's order, which
/// changes as updates move row versions: two renewals, or a renewal and a
/// grouped append, deadlocked (`store_conformance::group`).
const RENEW: &str = "
UPDATE runs SET lease_until = $2
WHERE id IN (SELECT id FROM runs WHERE lease_owner = $1 AND status = 'running' ORDER BY id FOR UPDATE)
RETURNING id";

/// Up to `$2` runs over and created before `$1`, with their events,
/// checkpoints and verdicts (a data-modifying `WITH` runs to completion
/// though nothing reads it); answers the three counts.
const PRUNE_RUNS: &str = "
WITH gone AS (
    DELETE FROM runs
    WHERE id IN (SELECT id FROM runs WHERE status <> 'running' AND created_at < $1
                 ORDER BY created_at LIMIT $2)
      AND status <> 'running'
    RETURNING id
), events AS (
    DELETE FROM run_event_pages WHERE run_id IN (SELECT id FROM gone) RETURNING json_array_length(events::json) AS n
), checkpoints AS (
    DELETE FROM checkpoints WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), verdicts AS (
    DELETE FROM run_verdicts WHERE run_id IN (SELECT id FROM gone)
), calls AS (
    DELETE FROM model_calls WHERE run_id IN (SELECT id FROM gone)
)
SELECT (SELECT count(*) FROM gone), (SELECT coalesce(sum(n), 0)::bigint FROM events),
       (SELECT count(*) FROM checkpoints)";

/// Up to `$2` chats idle since `$1` with no running run, with their
/// messages. The outer `updated_at` test is re-checked against a row changed
/// meanwhile, so a chat that just became active again is kept.
const PRUNE_CHATS: &str = "
WITH gone AS (
    DELETE FROM chats
    WHERE id IN (SELECT c.id FROM chats c
                 WHERE c.updated_at < $1
                   AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.chat_id = c.id AND r.status = 'running')
                 LIMIT $2)
      AND updated_at < $1
    RETURNING id
), messages AS (
    DELETE FROM messages WHERE chat_id IN (SELECT id FROM gone) RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM messages)";

impl Leases for PostgresStore {
    fn create_leased_run(
        &self,
        run: RunRecord,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            let until = sql::i64_of(until, "lease time")?;
            let cols = RunColumns::new(&run)?;
            let mut params: Vec<&(dyn ToSql + Sync)> = cols.params().to_vec();
            params.push(&owner);
            params.push(&until);
            let sql = format!(
                "INSERT INTO runs ({RUN_COLS}, lease_owner, lease_until)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)"
            );
            match self.execute(&sql, &params).await {
                Err(StoreError::Conflict(_)) => {
                    Err(StoreError::Conflict(format!("run {} exists", run.id)))
                }
                other => other.map(|_| ()),
            }
        })
    }

    fn acquire_lease(
        &self,
        run: Uuid,
        owner: &str,
        now: u64,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            let (now, until) = (sql::i64_of(now, "time")?, sql::i64_of(until, "lease time")?);
            let n = self
                .execute(
                    "UPDATE runs SET lease_owner = $2, lease_until = $4
                     WHERE id = $1 AND status = 'running'
                       AND (lease_until IS NULL OR lease_until < $3 OR lease_owner = $2)",
                    &[&run, &owner, &now, &until],
                )
                .await?;
            Ok(n > 0)
        })
    }

    fn renew_leases(&self, owner: &str, until: u64) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            let until = sql::i64_of(until, "lease time")?;
            let rows = self.query(RENEW, &[&owner, &until]).await?;
            let mut held = rows
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<Vec<Uuid>, _>>()?;
            held.sort_unstable();
            Ok(held)
        })
    }

    fn claim_orphans(
        &self,
        owner: &str,
        now: u64,
        until: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            let (now, until) = (sql::i64_of(now, "time")?, sql::i64_of(until, "lease time")?);
            let rows = self
                .query(
                    &format!("{CLAIM}{RUN_COLS}"),
                    &[&owner, &now, &until, &sql::limit_of(limit)],
                )
                .await?;
            let mut claimed = rows.iter().map(run_of).collect::<StoreResult<Vec<_>>>()?;
            // RETURNING follows no ORDER BY.
            claimed.sort_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then_with(|| a.id.cmp(&b.id))
            });
            Ok(claimed)
        })
    }

    fn release_lease(&self, run: Uuid, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            self.execute(
                "UPDATE runs SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2",
                &[&run, &owner],
            )
            .await?;
            Ok(())
        })
    }

    fn lease(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Option<Lease>>> {
        Box::pin(async move {
            let Some(row) = self
                .query_opt(
                    "SELECT lease_owner, lease_until FROM runs WHERE id = $1",
                    &[&run],
                )
                .await?
            else {
                return Ok(None);
            };
            let (owner, until): (Option<String>, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
            match (owner, until) {
                (Some(owner), Some(until)) => Ok(Some(Lease {
                    owner,
                    until: sql::u64_of(until, "lease time")?,
                })),
                _ => Ok(None),
            }
        })
    }

    fn request_stop(&self, run: Uuid) -> BoxFuture<'_, StoreResult<bool>> {
        Box::pin(async move {
            let n = self
                .execute(
                    "UPDATE runs SET stop_requested = true WHERE id = $1 AND status = 'running'",
                    &[&run],
                )
                .await?;
            Ok(n > 0)
        })
    }

    fn claim_interrupted(
        &self,
        run: Uuid,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            let until = sql::i64_of(until, "lease time")?;
            let n = self
                .execute(
                    "UPDATE runs SET status = 'running', finished_at = NULL,
                            lease_owner = $2, lease_until = $3, stop_requested = false
                     WHERE id = $1 AND status = 'interrupted'",
                    &[&run, &owner, &until],
                )
                .await?;
            Ok(n > 0)
        })
    }

    fn stop_requests(&self, owner: &str) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT id FROM runs WHERE lease_owner = $1 AND status = 'running' AND stop_requested ORDER BY id",
                    &[&owner],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<Vec<Uuid>, _>>()?)
        })
    }
}

impl Maintenance for PostgresStore {
    fn prune(&self, before: u64, chats: bool) -> BoxFuture<'_, StoreResult<PruneReport>> {
        Box::pin(async move {
            let before = sql::i64_of(before, "time")?;
            let batch = sql::limit_of(PRUNE_BATCH);
            let mut report = PruneReport::default();
            loop {
                let row = self.query_opt(PRUNE_RUNS, &[&before, &batch]).await?;
                let counts = counts::<3>(row.as_ref())?;
                report.runs += counts[0];
                report.events += counts[1];
                report.checkpoints += counts[2];
                if counts[0] < PRUNE_BATCH as u64 {
                    break;
                }
            }
            if chats {
                loop {
                    let row = self.query_opt(PRUNE_CHATS, &[&before, &batch]).await?;
                    let counts = counts::<2>(row.as_ref())?;
                    report.chats += counts[0];
                    report.messages += counts[1];
                    if counts[0] < PRUNE_BATCH as u64 {
                        break;
                    }
                }
            }
            // Call content older than the runs kept goes too (a running
            // run's older calls keep their records, marked expired).
            crate::store::Calls::expire_calls(self, sql::u64_of(before, "time")?).await?;
            Ok(report)
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<Appended> {
        self.notify.subscribe()
    }
}

/// The `count(*)` columns of a prune statement's row.
fn counts<const N: usize>(row: Option<&tokio_postgres::Row>) -> StoreResult<[u64; N]> {
    let mut out = [0; N];
    if let Some(row) = row {
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = sql::u64_of(row.try_get(i)?, "count")?;
        }
    }
    Ok(out)
}
