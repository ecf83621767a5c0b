//! Checkpointing ahead of the writer, on a thread of its own.
//!
//! In WAL mode with `synchronous = NORMAL` a commit only appends to the log;
//! the connection that commits also checkpoints once the log passes
//! `wal_autocheckpoint` pages, and a checkpoint first fsyncs the log (so
//! nothing it copies into the database can be lost), then copies the frames
//! into the database file, then fsyncs that. With visible durability every
//! streamed token waits for a commit, so every run's next token waited
//! behind the writer's checkpoint: at 1,000 paced chats the log's fsync
//! alone took 130–190 ms every 0.5–1 s (`strace -T`), then the database's
//! 4–90 ms — the p99 token delay while the median was a few ms.
//!
//! This thread runs a `PASSIVE` checkpoint on its own connection every
//! [`EVERY`] while the writer is busy: it syncs the log, copies the frames
//! committed so far and syncs the database, all beside the writer (SQLite
//! lets a checkpoint run while another connection commits; it copies only
//! frames no reader still needs). The writer's own checkpoint, at
//! `wal_autocheckpoint` pages, then finds only the frames of the last
//! [`EVERY`] to sync and copy. The writer keeps it because the log only
//! starts over when a write transaction begins and finds every frame
//! copied, which a checkpoint beside a writer committing every few ms never
//! sees: with this thread's checkpoints alone the log grew to 460 MB in a
//! 6 s load (tried on Nov 27). A `PASSIVE` checkpoint never waits for a
//! lock: while the writer checkpoints, this one is skipped, and the other
//! way round the writer's automatic one is.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use rusqlite::Connection;

use crate::store::{StoreError, StoreResult};

/// The least time between two checkpoints.
const EVERY: Duration = Duration::from_millis(100);

/// The handle the writer nudges after each job; dropping it (the writer
/// thread ending) stops the checkpoint thread and closes its connection.
pub(super) struct CheckpointAhead(SyncSender<()>);

impl CheckpointAhead {
    /// Starts the thread with `conn`, a read-write connection to the
    /// database the writer writes (it never writes through it).
    pub(super) fn start(conn: Connection) -> StoreResult<Self> {
        let (tx, rx) = sync_channel(1);
        std::thread::Builder::new()
            // `comm` keeps 15 bytes of a thread name.
            .name("sqlite-ckpt".into())
            .spawn(move || serve(&conn, &rx))
            .map_err(|e| StoreError::Backend(format!("cannot start checkpoint thread: {e}")))?;
        Ok(Self(tx))
    }

    /// Tells the thread the log has grown (never blocks).
    pub(super) fn nudge(&self) {
        if let Err(TrySendError::Disconnected(())) = self.0.try_send(()) {
            tracing::warn!("the SQLite checkpoint thread has stopped");
        }
    }
}

fn serve(conn: &Connection, nudges: &Receiver<()>) {
    while nudges.recv().is_ok() {
        std::thread::sleep(EVERY);
        // (busy, frames in the log, frames copied); busy only means another
        // checkpoint was running.
        let r = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        });
        if let Err(e) = r {
            tracing::debug!(error = %e, "the checkpoint ahead of the writer failed");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn open(path: &std::path::Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn
    }

    /// A database file grows only when a checkpoint copies pages into it:
    /// until then new pages live in the log. The writer here is far below
    /// its automatic checkpoint, so a grown file is this thread's work.
    #[test]
    fn frames_reach_the_database_file_without_the_writer_checkpointing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let writer = open(&path);
        writer
            .pragma_update(None, "wal_autocheckpoint", 10_000)
            .unwrap();
        writer
            .execute_batch("CREATE TABLE t (v BLOB); PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let ahead = CheckpointAhead::start(open(&path)).unwrap();
        for _ in 0..50 {
            writer
                .execute("INSERT INTO t VALUES (zeroblob(4000))", [])
                .unwrap();
            ahead.nudge();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut grown = before;
        while grown < before + 50 * 4000 && std::time::Instant::now() < deadline {
            ahead.nudge();
            std::thread::sleep(Duration::from_millis(20));
            grown = std::fs::metadata(&path).unwrap().len();
        }
        assert!(
            grown >= before + 50 * 4000,
            "the database file stayed at {grown} bytes (was {before}): nothing was checkpointed"
        );
        let rows: i64 = open(&path)
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 50);
    }
}
