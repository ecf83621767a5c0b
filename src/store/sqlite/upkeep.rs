//! Leases and maintenance on SQLite.
//!
//! Every write goes through the single writer thread, so a lease statement
//! is atomic with respect to every other write without any locking of its
//! own: two claimers in this process get disjoint runs because their
//! statements run one after the other. (Several *processes* sharing one file
//! would serialize on SQLite's write lock, with the same result.)
//!
//! Pruning deletes [`PRUNE_BATCH`] runs (or chats) per transaction, each its
//! own job on the writer queue, so appends queued meanwhile wait for one
//! batch, not for the whole prune.

use futures::future::BoxFuture;
use rusqlite::{Connection, TransactionBehavior, params};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::SqliteStore;
use super::recent;
use super::rows::{RUN_COLS, insert_run, run_of, text, uuid_of};
use crate::store::sql;
use crate::store::{
    Appended, Lease, Leases, Maintenance, PRUNE_BATCH, PruneReport, RunRecord, StoreResult,
};

/// The runs `claim_orphans` takes: running, lease expired (`?2` now) or
/// never taken, oldest first, at most `?4` (`?1`, the owner, and `?3`, the
/// new lease's end, belong to the claim; bound but unused here).
const ORPHANS: &str = "SELECT id FROM runs
     WHERE status = 'running' AND (lease_until IS NULL OR lease_until < ?2)
     ORDER BY created_at, id LIMIT ?4";

impl Leases for SqliteStore {
    fn create_leased_run(
        &self,
        run: RunRecord,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let owner = owner.to_owned();
        Box::pin(self.writer.write(move |tx| {
            insert_run(tx, &run)?;
            tx.prepare_cached("UPDATE runs SET lease_owner = ?2, lease_until = ?3 WHERE id = ?1")?
                .execute(params![
                    run.id.to_string(),
                    owner,
                    sql::i64_of(until, "lease time")?
                ])?;
            Ok(())
        }))
    }

    fn acquire_lease(
        &self,
        run: Uuid,
        owner: &str,
        now: u64,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let owner = owner.to_owned();
        Box::pin(self.writer.write(move |conn| {
            let n = conn
                .prepare_cached(
                    "UPDATE runs SET lease_owner = ?2, lease_until = ?4
                     WHERE id = ?1 AND status = 'running'
                       AND (lease_until IS NULL OR lease_until < ?3 OR lease_owner = ?2)",
                )?
                .execute(params![
                    run.to_string(),
                    owner,
                    sql::i64_of(now, "time")?,
                    sql::i64_of(until, "lease time")?
                ])?;
            if n > 0 {
                // Taken over: what the last owner streamed is read from the
                // pages from now on (`recent`).
                recent::fold_run(conn, &run.to_string())?;
            }
            Ok(n > 0)
        }))
    }

    fn renew_leases(&self, owner: &str, until: u64) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        let owner = owner.to_owned();
        Box::pin(self.writer.write(move |conn| {
            let mut stmt = conn.prepare_cached(
                "UPDATE runs SET lease_until = ?2 WHERE lease_owner = ?1 AND status = 'running' RETURNING id",
            )?;
            let mut rows = stmt.query(params![owner, sql::i64_of(until, "lease time")?])?;
            let mut held = Vec::new();
            while let Some(r) = rows.next()? {
                held.push(uuid_of(text(r, 0)?)?);
            }
            held.sort_unstable();
            Ok(held)
        }))
    }

    fn claim_orphans(
        &self,
        owner: &str,
        now: u64,
        until: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        let owner = owner.to_owned();
        Box::pin(self.writer.write(move |conn| {
            // The runs' last owners may have died streaming: their recent
            // rows are folded first, so the records read back are exact.
            let values = params![
                owner,
                sql::i64_of(now, "time")?,
                sql::i64_of(until, "lease time")?,
                sql::limit_of(limit)
            ];
            let orphans: Vec<String> = {
                let mut stmt = conn.prepare_cached(ORPHANS)?;
                let rows = stmt.query_map(values, |r| r.get(0))?;
                rows.collect::<Result<_, _>>()?
            };
            for run in &orphans {
                recent::fold_run(conn, run)?;
            }
            let mut stmt = conn.prepare_cached(&format!(
                "UPDATE runs SET lease_owner = ?1, lease_until = ?3 WHERE id IN ({ORPHANS}) RETURNING {RUN_COLS}"
            ))?;
            let mut rows = stmt.query(values)?;
            let mut claimed = Vec::new();
            while let Some(r) = rows.next()? {
                claimed.push(run_of(r)?);
            }
            // RETURNING follows no ORDER BY.
            claimed.sort_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then_with(|| a.id.cmp(&b.id))
            });
            Ok(claimed)
        }))
    }

    fn release_lease(&self, run: Uuid, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let owner = owner.to_owned();
        Box::pin(self.writer.write(move |conn| {
            conn.prepare_cached(
                "UPDATE runs SET lease_owner = NULL, lease_until = NULL WHERE id = ?1 AND lease_owner = ?2",
            )?
            .execute(params![run.to_string(), owner])?;
            Ok(())
        }))
    }

    fn lease(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Option<Lease>>> {
        Box::pin(self.readers.run(move |conn| {
            let mut stmt =
                conn.prepare_cached("SELECT lease_owner, lease_until FROM runs WHERE id = ?1")?;
            let mut rows = stmt.query([run.to_string()])?;
            let Some(r) = rows.next()? else {
                return Ok(None);
            };
            let (owner, until): (Option<String>, Option<i64>) = (r.get(0)?, r.get(1)?);
            match (owner, until) {
                (Some(owner), Some(until)) => Ok(Some(Lease {
                    owner,
                    until: sql::u64_of(until, "lease time")?,
                })),
                _ => Ok(None),
            }
        }))
    }

    fn request_stop(&self, run: Uuid) -> BoxFuture<'_, StoreResult<bool>> {
        Box::pin(self.writer.write(move |conn| {
            let n = conn
                .prepare_cached(
                    "UPDATE runs SET stop_requested = 1 WHERE id = ?1 AND status = 'running'",
                )?
                .execute([run.to_string()])?;
            Ok(n > 0)
        }))
    }

    fn claim_interrupted(
        &self,
        run: Uuid,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let owner = owner.to_owned();
        Box::pin(self.writer.write(move |conn| {
            let n = conn
                .prepare_cached(
                    "UPDATE runs SET status = 'running', finished_at = NULL,
                            lease_owner = ?2, lease_until = ?3, stop_requested = 0
                     WHERE id = ?1 AND status = 'interrupted'",
                )?
                .execute(params![
                    run.to_string(),
                    owner,
                    sql::i64_of(until, "lease time")?
                ])?;
            Ok(n > 0)
        }))
    }

    fn stop_requests(&self, owner: &str) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        let owner = owner.to_owned();
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM runs WHERE lease_owner = ?1 AND status = 'running' AND stop_requested = 1 ORDER BY id",
            )?;
            let mut rows = stmt.query([owner])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(uuid_of(text(r, 0)?)?);
            }
            Ok(out)
        }))
    }
}

impl Maintenance for SqliteStore {
    fn prune(&self, before: u64, chats: bool) -> BoxFuture<'_, StoreResult<PruneReport>> {
        Box::pin(async move {
            let before = sql::i64_of(before, "time")?;
            let mut report = PruneReport::default();
            loop {
                let (n, part) = self
                    .writer
                    .run(move |conn| prune_runs(conn, before))
                    .await?;
                report += part;
                if n < PRUNE_BATCH {
                    break;
                }
            }
            if chats {
                loop {
                    let (n, part) = self
                        .writer
                        .run(move |conn| prune_chats(conn, before))
                        .await?;
                    report += part;
                    if n < PRUNE_BATCH {
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

    fn release_memory(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for lane in [&self.writer, &self.readers] {
                if let Err(e) = lane.on_each(release_connection).await {
                    tracing::debug!(error = %e, "could not release SQLite memory");
                }
            }
        })
    }
}

/// Empties the connection's page cache (SQLite frees what no statement
/// holds; the next reads fill it again from the OS's file cache) and hands
/// this thread's free allocator memory back.
fn release_connection(conn: &mut Connection) {
    if let Err(e) = conn.execute_batch("PRAGMA shrink_memory") {
        tracing::debug!(error = %e, "PRAGMA shrink_memory failed");
    }
    crate::memory::idle_point();
}

/// Deletes up to [`PRUNE_BATCH`] runs that are over and older than
/// `before`, with their events and checkpoints, in one transaction; returns
/// how many runs it found and what it deleted.
fn prune_runs(conn: &mut Connection, before: i64) -> StoreResult<(usize, PruneReport)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut report = PruneReport::default();
    let ids: Vec<String> = {
        let mut stmt = tx.prepare_cached(
            "SELECT id FROM runs WHERE status <> 'running' AND created_at < ?1 ORDER BY created_at LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![before, sql::limit_of(PRUNE_BATCH)], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for id in &ids {
        let events: i64 = tx
            .prepare_cached(
                "SELECT coalesce(sum(json_array_length(events)), 0) FROM run_event_pages WHERE run_id = ?1",
            )?
            .query_row([id], |r| r.get(0))?;
        report.events += events as u64;
        tx.prepare_cached("DELETE FROM run_event_pages WHERE run_id = ?1")?
            .execute([id])?;
        report.checkpoints += tx
            .prepare_cached("DELETE FROM checkpoints WHERE run_id = ?1")?
            .execute([id])? as u64;
        tx.prepare_cached("DELETE FROM run_verdicts WHERE run_id = ?1")?
            .execute([id])?;
        tx.prepare_cached("DELETE FROM model_calls WHERE run_id = ?1")?
            .execute([id])?;
        report.runs += tx
            .prepare_cached("DELETE FROM runs WHERE id = ?1")?
            .execute([id])? as u64;
    }
    tx.commit()?;
    Ok((ids.len(), report))
}

/// Deletes up to [`PRUNE_BATCH`] chats idle since `before` with no running
/// run, with their messages, in one transaction.
fn prune_chats(conn: &mut Connection, before: i64) -> StoreResult<(usize, PruneReport)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut report = PruneReport::default();
    let ids: Vec<String> = {
        let mut stmt = tx.prepare_cached(
            "SELECT id FROM chats c WHERE updated_at < ?1
               AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.chat_id = c.id AND r.status = 'running')
             LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![before, sql::limit_of(PRUNE_BATCH)], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for id in &ids {
        report.messages += tx
            .prepare_cached("DELETE FROM messages WHERE chat_id = ?1")?
            .execute([id])? as u64;
        report.chats += tx
            .prepare_cached("DELETE FROM chats WHERE id = ?1")?
            .execute([id])? as u64;
    }
    tx.commit()?;
    Ok((ids.len(), report))
}
