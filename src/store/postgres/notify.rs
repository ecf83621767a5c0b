//! Sending the notifications of committed appends (the other half of
//! [`listen`](super::listen)).
//!
//! # Why not in the append statement
//! PostgreSQL serializes the commits of every transaction that has called
//! `NOTIFY`, cluster-wide: `PreCommit_Notify` takes a database-wide lock
//! that is held until the commit is over, WAL flush included. An append
//! that notifies in its own transaction therefore waits for every other
//! notifying append's `fsync`, one after the other, and group commit is
//! lost. Measured on the development machine (PostgreSQL 15, fdatasync
//! ≈ 3.5 ms, `pgbench`, 16 clients, a 50-row insert per transaction): 2,400
//! transactions/s without a notification, 310/s with `pg_notify` in the
//! same transaction, 2,300/s with it in a transaction of its own (which
//! writes no WAL, so its commit waits for no flush).
//!
//! So an append only stores, and answers the run's highest seq; the store
//! then hands `(run, seq)` to this module's task, which sends whatever has
//! queued up in one `pg_notify` statement of its own, on a connection of
//! its own (a pool of one, which reconnects by itself). The append stays one round trip; the notifications cost one
//! more statement per batch of appends, off the appends' path, and arrive
//! after their append committed, in commit order per store.
//!
//! Notifications are hints (see
//! [`Maintenance::subscribe`](crate::store::Maintenance::subscribe)): if the
//! queue is full, or the statement fails (the database is away), they are
//! dropped and followers find the events by polling.

use deadpool_postgres::Pool;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::listen::CHANNEL;
use crate::store::{Appended, NOTIFY_CAPACITY};

/// At most this many notifications per statement.
const BATCH: usize = 512;

/// The queue of notifications to send; the task ends when it is dropped.
#[derive(Debug)]
pub(super) struct Outbox(mpsc::Sender<Appended>);

impl Outbox {
    /// Starts the sending task, which uses a connection of `pool`.
    pub(super) fn start(pool: Pool) -> Self {
        let (tx, rx) = mpsc::channel(NOTIFY_CAPACITY);
        tokio::spawn(send_all(pool, rx));
        Self(tx)
    }

    /// Queues the notification of a committed append (dropped if the queue
    /// is full: it is a hint).
    pub(super) fn send(&self, appended: Appended) {
        if let Err(TrySendError::Full(_)) = self.0.try_send(appended) {
            tracing::debug!("notification queue full; dropping a notification");
        }
    }
}

async fn send_all(pool: Pool, mut rx: mpsc::Receiver<Appended>) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let payloads: Vec<String> = batch
            .drain(..)
            .map(|(run, seq)| format!("{run}:{seq}"))
            .collect();
        let sent = async {
            let client = pool.get().await.map_err(|e| e.to_string())?;
            let stmt = client
                .prepare_cached("SELECT count(pg_notify($1, p)) FROM unnest($2::text[]) AS p")
                .await
                .map_err(|e| e.to_string())?;
            client
                .execute(&stmt, &[&CHANNEL, &payloads])
                .await
                .map_err(|e| e.to_string())
        };
        if let Err(e) = sent.await {
            tracing::debug!(error = %e, dropped = payloads.len(), "could not send notifications");
        }
    }
}
