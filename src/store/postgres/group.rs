//! Cross-run group commit: appends of many runs that wait at the same time
//! go to the server as one statement, so one transaction and one commit.
//!
//! # Why
//! Every superstep of every run, and with `stream_durability = "visible"`
//! every page of streamed tokens, is an append, and each was its own
//! statement on a pooled connection: its own round trip, its own plan
//! execution, its own transaction and commit record. PostgreSQL flushes
//! concurrent commits together (the WAL writer's flush covers whoever has
//! committed meanwhile), but it still runs one transaction per append and
//! holds one pooled connection per append in flight; at 1,000 paced chats
//! the appends queued for the 16 connections of the pool. SQLite's writer
//! shares one transaction among the writes waiting in its queue
//! (`store::sqlite::batch`); this does the same for PostgreSQL.
//!
//! # How
//! One task takes every append waiting for it and sends them as one
//! statement ([`APPEND_MANY`]: the pages, checkpoints and run rows of all of
//! them, as arrays), at most [`IN_FLIGHT`] statements at once, so that
//! while those run (a commit waits for its WAL flush) the next appends
//! gather into the next statement. An append that arrives while nothing
//! is in flight goes alone at once: batching never adds a wait.
//!
//! A run has at most one append in flight: a second append of a run
//! waits for the first's answer. So a statement updates each run row
//! once (a statement cannot change a row twice), two statements never lock
//! the same run rows, and a run's appends commit in the order they were
//! made. The lease renewal locks every run row its instance holds: it and
//! [`APPEND_MANY`] lock rows in id order, so neither waits for the other in
//! a cycle (orphan claims skip locked rows and never wait).
//!
//! # Failures stay with their append
//! When the statement fails (a duplicate seq after a lost reply, a
//! deadlock with another writer, a server restart), every append in it is
//! sent again on its own ([`APPEND`], the one-run statement), concurrently,
//! and answered with its own result, as if it had never been grouped.
//! Nothing of the failed statement was stored: it is one transaction.

use std::collections::{HashSet, VecDeque};

use deadpool_postgres::Pool;
use futures::future::join_all;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::rows::{APPEND, APPEND_MANY};
use crate::store::pages::EncodedPage;
use crate::store::{StoreError, StoreResult};

/// At most this many appends share a statement.
const MAX_APPENDS: usize = 128;

/// Sets how many appends may share a statement, for comparing: `1` sends
/// each append alone, with as many in flight as the pool has connections
/// (as before appends were grouped).
const APPENDS_VAR: &str = "STATEGRAPH_PG_APPENDS_PER_STATEMENT";

/// At most this many statements in flight (each holds a pooled connection),
/// and no more than a quarter of the pool, so that other statements (a
/// turn's start and end, reads) still find connections.
const IN_FLIGHT: usize = 4;

/// At most this many appends queued in the task, waiting for a statement;
/// beyond it senders wait (the channel in front of it is bounded too).
const MAX_WAITING: usize = 4 * MAX_APPENDS;

/// An append and where to answer it: the run's highest stored seq.
struct Pending {
    page: EncodedPage,
    reply: oneshot::Sender<StoreResult<i64>>,
}

/// The queue of appends; the task ends once it is dropped and the queued
/// appends are answered.
#[derive(Debug)]
pub(super) struct Appender(mpsc::Sender<Pending>);

impl Appender {
    /// Starts the task, which takes connections from `pool`.
    pub(super) fn start(pool: Pool) -> Self {
        let (tx, rx) = mpsc::channel(MAX_APPENDS);
        tokio::spawn(dispatch(pool, rx));
        Self(tx)
    }

    /// Stores `page` (with others that wait now); the run's highest seq.
    ///
    /// # Errors
    /// As the append statement's.
    pub(super) async fn append(&self, page: EncodedPage) -> StoreResult<i64> {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Unavailable("PostgreSQL: the appender stopped".into());
        self.0
            .send(Pending { page, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The task: takes appends as they come, sends as many statements as
/// it may have in flight, each with every waiting append of a run not in
/// flight.
async fn dispatch(pool: Pool, mut rx: mpsc::Receiver<Pending>) {
    let most = std::env::var(APPENDS_VAR)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(MAX_APPENDS, |n| n.clamp(1, MAX_APPENDS));
    let in_flight = match most {
        1 => pool.status().max_size.max(1),
        _ => (pool.status().max_size / 4).clamp(1, IN_FLIGHT),
    };
    let (done_tx, mut done_rx) = mpsc::channel::<Vec<Uuid>>(in_flight);
    let mut waiting: VecDeque<Pending> = VecDeque::new();
    let mut busy: HashSet<Uuid> = HashSet::new();
    let (mut running, mut closed) = (0usize, false);
    let mut arrived = Vec::with_capacity(MAX_APPENDS);
    loop {
        tokio::select! {
            biased;
            Some(runs) = done_rx.recv() => {
                running -= 1;
                for r in runs {
                    busy.remove(&r);
                }
            }
            n = rx.recv_many(&mut arrived, MAX_APPENDS),
                if !closed && waiting.len() < MAX_WAITING =>
            {
                closed = n == 0;
                waiting.extend(arrived.drain(..));
            }
        }
        while running < in_flight {
            let batch = take(&mut waiting, &mut busy, most);
            if batch.is_empty() {
                break;
            }
            running += 1;
            let (pool, done) = (pool.clone(), done_tx.clone());
            tokio::spawn(async move {
                let runs: Vec<Uuid> = batch.iter().map(|p| p.page.run_id).collect();
                write(&pool, batch).await;
                let _ = done.send(runs).await;
            });
        }
        if closed && running == 0 && waiting.is_empty() {
            return;
        }
    }
}

/// The waiting appends of runs not in flight, at most one per run and
/// `most`, oldest first; their runs are then in flight. The rest
/// keep their order.
fn take(waiting: &mut VecDeque<Pending>, busy: &mut HashSet<Uuid>, most: usize) -> Vec<Pending> {
    let mut batch = Vec::new();
    let mut kept = VecDeque::with_capacity(waiting.len());
    while let Some(p) = waiting.pop_front() {
        if batch.len() < most && busy.insert(p.page.run_id) {
            batch.push(p);
        } else {
            kept.push_back(p);
        }
    }
    *waiting = kept;
    batch
}

/// Stores `batch` in one statement and answers each append; when that
/// fails, each on its own (see the module docs).
async fn write(pool: &Pool, batch: Vec<Pending>) {
    if batch.len() > 1 {
        let pages: Vec<&EncodedPage> = batch.iter().map(|p| &p.page).collect();
        // `many` answers one seq per append, or fails.
        match many(pool, &pages).await {
            Ok(seqs) => {
                for (p, seq) in batch.into_iter().zip(seqs) {
                    let _ = p.reply.send(Ok(seq));
                }
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, appends = batch.len(), "grouped append failed; each alone")
            }
        }
    }
    join_all(batch.into_iter().map(|p| async move {
        let _ = p.reply.send(one(pool, &p.page).await);
    }))
    .await;
}

/// One append, as the one-run statement [`APPEND`].
async fn one(pool: &Pool, b: &EncodedPage) -> StoreResult<i64> {
    let params: [&(dyn ToSql + Sync); 12] = [
        &b.run_id,
        &b.first_seq,
        &b.last_seq,
        &b.events,
        &b.steps,
        &b.writes,
        &b.next,
        &b.joins,
        &b.snapshots,
        &b.last_step,
        &b.status,
        &b.now,
    ];
    let client = pool.get().await.map_err(super::pool_error)?;
    let stmt = client.prepare_cached(APPEND).await?;
    let row = client
        .query_opt(&stmt, &params)
        .await?
        .ok_or_else(|| StoreError::Backend("the append statement answered no row".into()))?;
    Ok(row.try_get(0)?)
}

/// Appends of distinct runs as one [`APPEND_MANY`]; each one's highest
/// seq, in order.
async fn many(pool: &Pool, pages: &[&EncodedPage]) -> StoreResult<Vec<i64>> {
    let runs: Vec<Uuid> = pages.iter().map(|p| p.run_id).collect();
    let first: Vec<Option<i64>> = pages.iter().map(|p| p.first_seq).collect();
    let last: Vec<Option<i64>> = pages.iter().map(|p| p.last_seq).collect();
    let events: Vec<Option<&str>> = pages.iter().map(|p| p.events.as_deref()).collect();
    let last_step: Vec<i32> = pages.iter().map(|p| p.last_step).collect();
    let status: Vec<&str> = pages.iter().map(|p| p.status).collect();
    let now: Vec<i64> = pages.iter().map(|p| p.now).collect();
    let (mut c_run, mut c_step, mut c_writes) = (Vec::new(), Vec::new(), Vec::new());
    let (mut c_next, mut c_joins, mut c_snap) = (Vec::new(), Vec::new(), Vec::new());
    for p in pages {
        for i in 0..p.steps.len() {
            c_run.push(p.run_id);
            c_step.push(p.steps[i]);
            c_writes.push(p.writes[i].as_str());
            c_next.push(p.next[i].as_str());
            c_joins.push(p.joins[i].as_str());
            c_snap.push(p.snapshots[i].as_deref());
        }
    }
    let params: [&(dyn ToSql + Sync); 13] = [
        &runs, &first, &last, &events, &last_step, &status, &now, &c_run, &c_step, &c_writes,
        &c_next, &c_joins, &c_snap,
    ];
    let client = pool.get().await.map_err(super::pool_error)?;
    let stmt = client.prepare_cached(APPEND_MANY).await?;
    let rows = client.query(&stmt, &params).await?;
    let mut seqs = vec![0i64; pages.len()];
    for r in &rows {
        let i: i32 = r.try_get(0)?;
        if let Some(slot) = usize::try_from(i - 1).ok().and_then(|i| seqs.get_mut(i)) {
            *slot = r.try_get(1)?;
        }
    }
    if rows.len() != pages.len() {
        return Err(StoreError::Backend(format!(
            "the grouped append answered {} rows for {} appends",
            rows.len(),
            pages.len()
        )));
    }
    Ok(seqs)
}
