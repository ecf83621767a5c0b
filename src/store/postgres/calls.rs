//! Model call records in PostgreSQL (`model_calls`, `call_parts`, schema
//! version 13).

//!
//! # Written in groups
//! Every call of every chat lists the same few parts (the system prompt,
//! the tool definitions), so every record's statement updated the same
//! `call_parts` rows (`last_used`) and held their row locks until its
//! commit (a WAL flush): concurrent records queued on those rows one commit
//! after another, each holding a pooled connection meanwhile. Under the
//! load bench (32 clients, PostgreSQL) half of the 16 connections were
//! waiting there (`Lock:transactionid` in `pg_stat_activity`), and appends
//! and turns waited for connections. So records go through one task
//! ([`Writer`]) that writes every record waiting as one statement
//! ([`ADD_CALLS`]), one statement at a time: the shared parts are locked by
//! one transaction at a time, once per group. When a group's statement
//! fails, each of its records is written alone and answered with its own
//! result.

use std::collections::BTreeMap;

use deadpool_postgres::Pool;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::PostgresStore;
use crate::store::calls::{CallPart, CallRecord, CallStorage, Calls, ExpiredCalls};
use crate::store::{StoreError, StoreResult, sql};

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

/// [`ADD_CALL`] for several records at once: the parts of all of them
/// (`$1` hashes, each once, in hash order; `$2` bodies; `$3` the newest
/// record using each) and one element per record in `$4`–`$8` (run, seq,
/// at, expired, request; each (run, seq) once).
const ADD_CALLS: &str = "
WITH parts AS (
    INSERT INTO call_parts (hash, body, last_used)
    SELECT h, b, u FROM unnest($1::text[], $2::text[], $3::bigint[]) AS p(h, b, u)
    ON CONFLICT (hash) DO UPDATE
      SET last_used = greatest(call_parts.last_used, excluded.last_used)
)
INSERT INTO model_calls (run_id, seq, created_at, expired, request)
SELECT * FROM unnest($4::uuid[], $5::bigint[], $6::bigint[], $7::bool[], $8::text[])
ON CONFLICT (run_id, seq) DO UPDATE
  SET created_at = excluded.created_at, expired = excluded.expired, request = excluded.request";

/// At most this many records share a statement.
const MAX_GROUP: usize = 64;

/// A record ready for a statement, and where to answer it.
struct Pending {
    run: Uuid,
    seq: i64,
    at: i64,
    expired: bool,
    request: String,
    parts: Vec<CallPart>,
    reply: oneshot::Sender<StoreResult<()>>,
}

/// The queue of records to write (see the module docs); the task ends
/// once it is dropped and the queued records are written.
#[derive(Debug)]
pub(super) struct Writer(mpsc::Sender<Pending>);

impl Writer {
    /// Starts the task, which takes connections from `pool`.
    pub(super) fn start(pool: Pool) -> Self {
        let (tx, rx) = mpsc::channel(MAX_GROUP);
        tokio::spawn(write_all(pool, rx));
        Self(tx)
    }

    async fn add(&self, call: CallRecord, parts: Vec<CallPart>) -> StoreResult<()> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            run: call.run_id,
            seq: sql::i64_of(call.seq, "seq")?,
            at: sql::i64_of(call.created_at, "time")?,
            expired: call.expired,
            request: sql::to_json(&call.request, "call request")?,
            parts,
            reply,
        };
        let stopped = || StoreError::Unavailable("PostgreSQL: the call writer stopped".into());
        self.0.send(pending).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The task: every record waiting as one statement, one at a time.
async fn write_all(pool: Pool, mut rx: mpsc::Receiver<Pending>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while rx.recv_many(&mut group, MAX_GROUP).await > 0 {
        if group.len() > 1 {
            match many(&pool, &group).await {
                Ok(()) => {
                    for p in group.drain(..) {
                        let _ = p.reply.send(Ok(()));
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!(error = %e, records = group.len(), "grouped call records failed; each alone")
                }
            }
        }
        for p in group.drain(..) {
            let result = one(&pool, &p).await;
            let _ = p.reply.send(result);
        }
    }
}

/// One record, as [`ADD_CALL`]: the parts in hash order (concurrent
/// statements sharing parts lock them in one order), then the record.
async fn one(pool: &Pool, p: &Pending) -> StoreResult<()> {
    let mut parts: Vec<&CallPart> = p.parts.iter().collect();
    parts.sort_by(|a, b| a.hash.cmp(&b.hash));
    parts.dedup_by(|a, b| a.hash == b.hash);
    let hashes: Vec<&str> = parts.iter().map(|c| c.hash.as_str()).collect();
    let bodies: Vec<&str> = parts.iter().map(|c| c.body.as_str()).collect();
    let params: [&(dyn ToSql + Sync); 7] = [
        &hashes, &bodies, &p.at, &p.run, &p.seq, &p.expired, &p.request,
    ];
    let client = pool.get().await.map_err(super::pool_error)?;
    let stmt = client.prepare_cached(ADD_CALL).await?;
    client.execute(&stmt, &params).await?;
    Ok(())
}

/// Several records as one [`ADD_CALLS`].
async fn many(pool: &Pool, group: &[Pending]) -> StoreResult<()> {
    // Each part once, in hash order, with the newest record using it.
    let mut parts: BTreeMap<&str, (&str, i64)> = BTreeMap::new();
    for p in group {
        for c in &p.parts {
            let e = parts
                .entry(c.hash.as_str())
                .or_insert((c.body.as_str(), p.at));
            e.1 = e.1.max(p.at);
        }
    }
    let hashes: Vec<&str> = parts.keys().copied().collect();
    let bodies: Vec<&str> = parts.values().map(|v| v.0).collect();
    let used: Vec<i64> = parts.values().map(|v| v.1).collect();
    let runs: Vec<Uuid> = group.iter().map(|p| p.run).collect();
    let seqs: Vec<i64> = group.iter().map(|p| p.seq).collect();
    let ats: Vec<i64> = group.iter().map(|p| p.at).collect();
    let expired: Vec<bool> = group.iter().map(|p| p.expired).collect();
    let requests: Vec<&str> = group.iter().map(|p| p.request.as_str()).collect();
    let params: [&(dyn ToSql + Sync); 8] = [
        &hashes, &bodies, &used, &runs, &seqs, &ats, &expired, &requests,
    ];
    let client = pool.get().await.map_err(super::pool_error)?;
    let stmt = client.prepare_cached(ADD_CALLS).await?;
    client.execute(&stmt, &params).await?;
    Ok(())
}

impl Calls for PostgresStore {
    fn add_call(&self, call: CallRecord, parts: Vec<CallPart>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(self.calls.add(call, parts))
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
