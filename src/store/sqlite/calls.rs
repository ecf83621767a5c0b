//! Model call records in SQLite (`model_calls`, `call_parts`, schema
//! version 13).

use futures::future::BoxFuture;
use rusqlite::{Connection, Row, params};
use uuid::Uuid;

use super::SqliteStore;
use super::rows::text;
use crate::store::calls::{CallPart, CallRecord, CallStorage, Calls, ExpiredCalls};
use crate::store::{StoreResult, sql};

impl Calls for SqliteStore {
    fn add_call(&self, call: CallRecord, parts: Vec<CallPart>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(self.writer.write(move |conn| {
            let at = sql::i64_of(call.created_at, "time")?;
            let mut part = conn.prepare_cached(
                "INSERT INTO call_parts (hash, body, last_used) VALUES (?1, ?2, ?3)
                 ON CONFLICT (hash) DO UPDATE SET last_used = max(last_used, excluded.last_used)",
            )?;
            for p in &parts {
                part.execute(params![p.hash, p.body, at])?;
            }
            conn.prepare_cached(
                "INSERT OR REPLACE INTO model_calls (run_id, seq, created_at, expired, request)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                call.run_id.to_string(),
                sql::i64_of(call.seq, "seq")?,
                at,
                call.expired,
                sql::to_json(&call.request, "call request")?,
            ])?;
            Ok(())
        }))
    }

    fn calls(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<CallRecord>>> {
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, created_at, expired, request FROM model_calls WHERE run_id = ?1 ORDER BY seq",
            )?;
            let mut rows = stmt.query([run.to_string()])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(record_of(run, r)?);
            }
            Ok(out)
        }))
    }

    fn call_parts(&self, hashes: Vec<String>) -> BoxFuture<'_, StoreResult<Vec<CallPart>>> {
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached("SELECT body FROM call_parts WHERE hash = ?1")?;
            let mut out = Vec::new();
            for hash in hashes {
                let mut rows = stmt.query([&hash])?;
                if let Some(r) = rows.next()? {
                    let body = text(r, 0)?.to_owned();
                    out.push(CallPart { hash, body });
                }
            }
            Ok(out)
        }))
    }

    fn expire_calls(&self, before: u64) -> BoxFuture<'_, StoreResult<ExpiredCalls>> {
        Box::pin(async move {
            let before = sql::i64_of(before, "time")?;
            self.writer.run(move |conn| expire(conn, before)).await
        })
    }

    fn call_storage(&self) -> BoxFuture<'_, StoreResult<CallStorage>> {
        Box::pin(self.readers.run(|conn| {
            let (calls, record_bytes): (i64, i64) = conn.query_row(
                "SELECT count(*), coalesce(sum(length(CAST(request AS BLOB))), 0) FROM model_calls",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let (parts, part_bytes): (i64, i64) = conn.query_row(
                "SELECT count(*), coalesce(sum(length(CAST(body AS BLOB))), 0) FROM call_parts",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            Ok(CallStorage {
                calls: sql::u64_of(calls, "count")?,
                record_bytes: sql::u64_of(record_bytes, "bytes")?,
                parts: sql::u64_of(parts, "count")?,
                part_bytes: sql::u64_of(part_bytes, "bytes")?,
            })
        }))
    }
}

/// Marks the records made before `before` expired and deletes the parts
/// last used before it, in one transaction.
fn expire(conn: &mut Connection, before: i64) -> StoreResult<ExpiredCalls> {
    let tx = conn.transaction()?;
    let calls = tx
        .prepare_cached("UPDATE model_calls SET expired = 1 WHERE expired = 0 AND created_at < ?1")?
        .execute([before])? as u64;
    let parts = tx
        .prepare_cached("DELETE FROM call_parts WHERE last_used < ?1")?
        .execute([before])? as u64;
    tx.commit()?;
    Ok(ExpiredCalls { calls, parts })
}

fn record_of(run_id: Uuid, r: &Row<'_>) -> StoreResult<CallRecord> {
    Ok(CallRecord {
        run_id,
        seq: sql::u64_of(r.get(0)?, "seq")?,
        created_at: sql::u64_of(r.get(1)?, "time")?,
        expired: r.get(2)?,
        request: sql::from_json(text(r, 3)?, "call request")?,
    })
}
