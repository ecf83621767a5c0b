//! Syncing the write-ahead log ahead of checkpoints, off the writer thread.
//!
//! In WAL mode with `synchronous = NORMAL` a commit only appends to the log;
//! the connection that commits also checkpoints once the log passes
//! `wal_autocheckpoint` pages, and a checkpoint first fsyncs the log (so
//! nothing it copies into the database can be lost), then copies, then
//! fsyncs the database. With visible durability every streamed token is a
//! commit, so every run's next token waits behind that checkpoint: at
//! 1,000 paced chats the log's fsync alone took 130–190 ms every 0.5–1 s
//! (`strace -T`; the log grows ~90 MB/s there, one page per token), and
//! that was the p99 token delay while the median was a few ms.
//!
//! This thread fsyncs the log file every [`EVERY`] while the writer is
//! busy, so what a checkpoint's own fsync finds to flush is what was
//! written since, not the whole log. (An fsync flushes the file whichever
//! descriptor asks; an extra one only makes commits durable sooner.)
//!
//! Moving the checkpoint itself to another connection was tried and
//! dropped: a `PASSIVE` checkpoint running beside a writer that commits
//! every few ms never finds the log fully copied, so the writer never
//! starts it over, and the log grew to 460 MB in a 6 s load.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use crate::store::{StoreError, StoreResult};

/// The least time between two syncs.
const EVERY: Duration = Duration::from_millis(100);

/// The handle the writer nudges after each job; dropping it (the writer
/// thread ending) stops the sync thread.
pub(super) struct SyncAhead(SyncSender<()>);

impl SyncAhead {
    /// Starts the thread for the database at `db` (its log is `db-wal`).
    pub(super) fn start(db: &Path) -> StoreResult<Self> {
        let mut log = db.as_os_str().to_owned();
        log.push("-wal");
        let log = PathBuf::from(log);
        let (tx, rx) = sync_channel(1);
        std::thread::Builder::new()
            .name("sqlite-wal-sync".into())
            .spawn(move || serve(&log, &rx))
            .map_err(|e| StoreError::Backend(format!("cannot start WAL sync thread: {e}")))?;
        Ok(Self(tx))
    }

    /// Tells the thread the log has grown (never blocks).
    pub(super) fn nudge(&self) {
        if let Err(TrySendError::Disconnected(())) = self.0.try_send(()) {
            tracing::warn!("the SQLite WAL sync thread has stopped");
        }
    }
}

/// Keeps one descriptor on the log, opened at the first sync: the log is
/// only deleted when the last connection closes, and the store's stay open
/// as long as this thread runs. Closing it (when the thread ends) drops no
/// lock of SQLite's: SQLite locks the database and `-shm` files, never the
/// log, so POSIX's "any close drops the process's locks on that file" does
/// not reach it.
fn serve(log: &Path, nudges: &Receiver<()>) {
    let mut file = None;
    while nudges.recv().is_ok() {
        std::thread::sleep(EVERY);
        if file.is_none() {
            // Not made yet: nothing to sync.
            file = std::fs::File::open(log).ok();
        }
        if let Some(f) = &file
            && let Err(e) = f.sync_data()
        {
            tracing::debug!(error = %e, "could not sync the WAL");
        }
    }
}
