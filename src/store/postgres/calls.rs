//! Model call records in PostgreSQL (`model_calls`, `call_parts`, schema
//! version 13).

use futures::future::BoxFuture;
use tokio_postgres::Row;
use uuid::Uuid;

use super::PostgresStore;
use crate::store::calls::{CallPart, CallRecord, CallStorage, Calls, ExpiredCalls};
use crate::store::{StoreResult, sql};

/// Stores a call's parts (`$1` hashes, `$2` bodies, used at `$3`) and its
/// record (run `$4`, seq `$5`, at `$3`, expired `$6`, request `$7`).
const ADD_CALL: &str = "
WITH parts AS (
    INSERT INTO call_parts (hash, body, last_used)
    SELECT h, b, $3 FROM unnest($1::text[], $2::text[]) AS p(h, b)
    ON CONFLICT (hash) DO UPDATE
      SET last_used = greatest(call_parts.last_used, excluded.last_used)
)
INSERT INTO model_calls (run_id, seq, created_at, expired, request)
VALUES ($4, $5, $3, $6, $7)
ON CONFLICT (run_id, seq) DO UPDATE
  SET created_at = excluded.created_at, expired = excluded.expired, request = excluded.request";

impl Calls for PostgresStore {
    fn add_call(&self, call: CallRecord, parts: Vec<CallPart>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let at = sql::i64_of(call.created_at, "time")?;
            let seq = sql::i64_of(call.seq, "seq")?;
            let request = sql::to_json(&call.request, "call request")?;
            // One statement: the parts, in hash order (concurrent calls
            // sharing parts then lock them in the same order), then the
            // record — one round trip instead of a four-statement
            // transaction (three model calls per chat made these the chat
            // path's largest share of round trips).
            let mut parts = parts;
            parts.sort_by(|a, b| a.hash.cmp(&b.hash));
            parts.dedup_by(|a, b| a.hash == b.hash);
            let hashes: Vec<&str> = parts.iter().map(|p| p.hash.as_str()).collect();
            let bodies: Vec<&str> = parts.iter().map(|p| p.body.as_str()).collect();
            self.execute(
                ADD_CALL,
                &[
                    &hashes,
                    &bodies,
                    &at,
                    &call.run_id,
                    &seq,
                    &call.expired,
                    &request,
                ],
            )
            .await?;
            Ok(())
        })
    }

    fn calls(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<CallRecord>>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT seq, created_at, expired, request FROM model_calls WHERE run_id = $1 ORDER BY seq",
                    &[&run],
                )
                .await?;
            rows.iter().map(|r| record_of(run, r)).collect()
        })
    }

    fn call_parts(&self, hashes: Vec<String>) -> BoxFuture<'_, StoreResult<Vec<CallPart>>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT hash, body FROM call_parts WHERE hash = ANY($1)",
                    &[&hashes],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(CallPart {
                        hash: r.try_get(0)?,
                        body: r.try_get(1)?,
                    })
                })
                .collect()
        })
    }

    fn expire_calls(&self, before: u64) -> BoxFuture<'_, StoreResult<ExpiredCalls>> {
        Box::pin(async move {
            let before = sql::i64_of(before, "time")?;
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let calls = tx
                .execute(
                    "UPDATE model_calls SET expired = TRUE WHERE NOT expired AND created_at < $1",
                    &[&before],
                )
                .await?;
            let parts = tx
                .execute("DELETE FROM call_parts WHERE last_used < $1", &[&before])
                .await?;
            tx.commit().await?;
            Ok(ExpiredCalls { calls, parts })
        })
    }

    fn call_storage(&self) -> BoxFuture<'_, StoreResult<CallStorage>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT (SELECT count(*) FROM model_calls),
                            (SELECT coalesce(sum(octet_length(request)), 0)::bigint FROM model_calls),
                            (SELECT count(*) FROM call_parts),
                            (SELECT coalesce(sum(octet_length(body)), 0)::bigint FROM call_parts)",
                    &[],
                )
                .await?;
            let mut out = [0u64; 4];
            if let Some(r) = rows.first() {
                for (i, slot) in out.iter_mut().enumerate() {
                    *slot = sql::u64_of(r.try_get(i)?, "count")?;
                }
            }
            Ok(CallStorage {
                calls: out[0],
                record_bytes: out[1],
                parts: out[2],
                part_bytes: out[3],
            })
        })
    }
}

fn record_of(run_id: Uuid, r: &Row) -> StoreResult<CallRecord> {
    Ok(CallRecord {
        run_id,
        seq: sql::u64_of(r.try_get(0)?, "seq")?,
        created_at: sql::u64_of(r.try_get(1)?, "time")?,
        expired: r.try_get(2)?,
        request: sql::from_json(&r.try_get::<_, String>(3)?, "call request")?,
    })
}
