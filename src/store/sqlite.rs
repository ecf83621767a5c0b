//! The SQLite backend: the embedded default, one file under the data
//! directory.
//!
//! # Threads
//! rusqlite is blocking, so no call runs on a tokio worker. The store owns
//! dedicated threads, each with its own connection, fed by bounded queues:
//! - one **writer** thread owns the only read-write connection. SQLite lets
//!   one writer commit at a time whatever we do, so a single thread turns
//!   contention into a queue instead of a pile of blocked threads retrying on
//!   `SQLITE_BUSY`; its statement cache stays warm; and the bounded queue
//!   gives callers backpressure (they wait on `send().await`, not a thread).
//!   The writes waiting in its queue share one transaction (`batch`).
//! - a few **reader** threads share one queue; WAL lets them read while the
//!   writer writes, so resume and replay never wait behind appends.
//!
//! `spawn_blocking` plus a mutex would also keep workers free, but every
//! waiting call would then park a blocking-pool thread, and under load the
//! pool grows to hundreds of threads all waiting on one lock.
//!
//! Notifications ([`Maintenance::subscribe`](super::Maintenance::subscribe)) are an in-process broadcast
//! sent after each append commits: another process writing the same file
//! (the CLI) is not heard, which is fine for a single-node deployment.
//!
//! Each connection runs in WAL mode with `synchronous = NORMAL` (a commit is
//! durable against a process crash; a power loss may lose the last commits
//! but never corrupts), a busy timeout for other processes (the CLI's
//! `migrate`), and foreign keys on. A write is acknowledged only after its
//! transaction commits, so a read queued after it sees it.

mod batch;
mod calls;
mod lane;
mod recent;
mod rows;
mod upkeep;
mod verdicts;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, TryFutureExt};
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{broadcast, oneshot};
use uuid::Uuid;

use super::pages::{self, EVENTS_AFTER, EncodedPage};
use super::query::SqlParam;
use super::sql::{self, Migration, MigrationReport};
use super::{
    Appended, ChatRecord, ChatStore, CheckpointRecord, EventLog, MessageRecord, NOTIFY_CAPACITY,
    RunQuery, RunRecord, RunStore, Store, StoreError, StoreResult, TurnEnd, TurnOutcome, TurnStart,
};
use crate::events::{ErrorInfo, Event, Usage, now_micros};
use crate::events::{RunStatus, StepBatch};

use lane::Lane;
use recent::Recent;
use rows::{
    CHAT_COLS, MESSAGE_COLS, RELEASE_CHAT, RUN_COLS, TOUCH_CHAT, append_all, append_each, chat_of,
    finish_run, insert_run, message_of, now, run_of, text, upsert_message,
};

/// The schema, in order. Append new files; never edit an applied one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("migrations/sqlite/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "leases",
        sql: include_str!("migrations/sqlite/0002_leases.sql"),
    },
    Migration {
        version: 3,
        name: "stop_requests",
        sql: include_str!("migrations/sqlite/0003_stop_requests.sql"),
    },
    Migration {
        version: 4,
        name: "event_pages",
        sql: include_str!("migrations/sqlite/0004_event_pages.sql"),
    },
    Migration {
        version: 5,
        name: "runs_by_user",
        sql: include_str!("migrations/sqlite/0005_runs_by_user.sql"),
    },
    Migration {
        version: 6,
        name: "usage_by_user",
        sql: include_str!("migrations/sqlite/0006_usage_by_user.sql"),
    },
    Migration {
        version: 7,
        name: "fork_detail",
        sql: include_str!("migrations/sqlite/0007_fork_detail.sql"),
    },
    Migration {
        version: 8,
        name: "interrupts",
        sql: include_str!("migrations/sqlite/0008_interrupts.sql"),
    },
    Migration {
        version: 9,
        name: "run_cost",
        sql: include_str!("migrations/sqlite/0009_run_cost.sql"),
    },
    Migration {
        version: 10,
        name: "chat_metadata",
        sql: include_str!("migrations/sqlite/0010_chat_metadata.sql"),
    },
    Migration {
        version: 11,
        name: "verdicts",
        sql: include_str!("migrations/sqlite/0011_verdicts.sql"),
    },
    Migration {
        version: 12,
        name: "runs_by_status",
        sql: include_str!("migrations/sqlite/0012_runs_by_status.sql"),
    },
    Migration {
        version: 13,
        name: "model_calls",
        sql: include_str!("migrations/sqlite/0013_model_calls.sql"),
    },
    Migration {
        version: 14,
        name: "recent_events",
        sql: include_str!("migrations/sqlite/0014_recent_events.sql"),
    },
];

/// Settings for [`SqliteStore::open_with`].
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// Reader threads (connections), at least 1.
    pub readers: usize,
    /// How long a connection waits for a lock held by another process.
    pub busy_timeout: Duration,
    /// Jobs that may wait in each queue before callers wait to enqueue.
    pub queue_depth: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            readers: 4,
            busy_timeout: Duration::from_secs(5),
            queue_depth: 1024,
        }
    }
}

/// A store in one SQLite file.
pub struct SqliteStore {
    /// Event pages waiting for the next group commit.
    grouped: Arc<Mutex<Vec<Grouped>>>,
    /// This process's rows in the recent event log (`recent`).
    recent: Arc<Recent>,
    writer: Lane,
    readers: Lane,
    path: PathBuf,
    notify: broadcast::Sender<Appended>,
}

/// An event page waiting for a group commit, and who waits for it.
type Grouped = (EncodedPage, oneshot::Sender<StoreResult<()>>);

/// The group commit's write: takes every page waiting in `grouped` when
/// the writer first runs it, appends them in the writer's transaction and,
/// once that committed, notifies subscribers and answers each waiter.
struct GroupCommit {
    grouped: Arc<Mutex<Vec<Grouped>>>,
    recent: Arc<Recent>,
    notify: broadcast::Sender<Appended>,
    /// The pages it took, from its first run on.
    taken: Option<Vec<Grouped>>,
    results: Option<StoreResult<Vec<StoreResult<rows::Appended>>>>,
}

impl batch::Write for GroupCommit {
    fn run(&mut self, conn: &Connection) -> bool {
        let again = self.taken.is_some();
        let grouped = &self.grouped;
        let taken = self.taken.get_or_insert_with(|| {
            std::mem::take(&mut *grouped.lock().unwrap_or_else(PoisonError::into_inner))
        });
        let pages: Vec<&EncodedPage> = taken.iter().map(|(page, _)| page).collect();
        let r = if again {
            // Run again, in a savepoint: a page's failure is its own.
            append_each(conn, &pages, &self.recent)
        } else {
            append_all(conn, &pages, &self.recent).map(|lasts| lasts.into_iter().map(Ok).collect())
        };
        let ok = r.is_ok();
        self.results = Some(r);
        ok
    }

    fn finish(self: Box<Self>, committed: Result<(), &StoreError>) {
        let (Some(taken), Some(results)) = (self.taken, self.results) else {
            // Not run (the transaction could not start): the pages are
            // still waiting, and no later page queues a commit while they
            // are, so they are answered here.
            let waiting =
                std::mem::take(&mut *self.grouped.lock().unwrap_or_else(PoisonError::into_inner));
            let e = committed
                .err()
                .cloned()
                .unwrap_or_else(|| StoreError::Backend("the group commit was not run".into()));
            return answer_all(waiting, &e);
        };
        let results = match (results, committed) {
            (Ok(results), Ok(())) => results,
            (Err(e), _) => return answer_all(taken, &e),
            (Ok(_), Err(e)) => return answer_all(taken, e),
        };
        for ((page, reply), r) in taken.into_iter().zip(results) {
            if let Ok((last, effect)) = r {
                // Before the notification: a reader it wakes finds the row.
                self.recent.apply(page.run_id, effect);
                // No subscriber is not an error.
                let _ = self.notify.send((page.run_id, last));
            }
            let _ = reply.send(r.map(|_| ()));
        }
    }
}

fn answer_all(waiting: Vec<Grouped>, e: &StoreError) {
    for (_, reply) in waiting {
        let _ = reply.send(Err(e.clone()));
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating the file and its directory if missing) and migrates
    /// the database at `path`, with default [`SqliteOptions`].
    ///
    /// # Errors
    /// The file cannot be created or opened, a migration fails, or the
    /// database has a newer schema than this build knows.
    pub async fn open(path: impl Into<PathBuf>) -> StoreResult<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// As [`SqliteStore::open`], with settings.
    ///
    /// # Errors
    /// As [`SqliteStore::open`]; also if a thread cannot be started.
    pub async fn open_with(path: impl Into<PathBuf>, options: SqliteOptions) -> StoreResult<Self> {
        let path = path.into();
        let (p, o) = (path.clone(), options.clone());
        let (writer, readers, checkpointer) = blocking(move || {
            let mut writer = connect(&p, &o, false)?;
            apply_migrations(&mut writer)?;
            fold_left_over(&mut writer)?;
            let readers = (0..o.readers.max(1))
                .map(|_| connect(&p, &o, true))
                .collect::<StoreResult<Vec<_>>>()?;
            Ok((writer, readers, connect(&p, &o, false)?))
        })
        .await?;
        let depth = options.queue_depth.max(1);
        let ahead = wal::CheckpointAhead::start(checkpointer)?;
        let nudge: lane::After = Arc::new(move || ahead.nudge());
        Ok(Self {
            grouped: Arc::default(),
            recent: Arc::default(),
            writer: Lane::start("sqlite-writer", vec![writer], depth, Some(nudge))?,
            readers: Lane::start("sqlite-reader", readers, depth, None)?,
            path,
            notify: broadcast::channel(NOTIFY_CAPACITY).0,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `run` with its `last_seq` counting the events it streamed into the
    /// recent log (the row and the pages know only those before its last
    /// step). A run another process streams reads as of its last step.
    fn with_recent(&self, mut run: RunRecord) -> RunRecord {
        if let Some(last) = self.recent.last(run.id).and_then(|l| u64::try_from(l).ok()) {
            run.last_seq = run.last_seq.max(last);
        }
        run
    }

    /// Appends `page` in the next group commit and waits for it: the first
    /// page of a group queues the writer job that takes every page waiting
    /// when it runs (one WAL commit for many runs' events and checkpoints);
    /// later pages ride with it.
    async fn append_grouped(&self, page: EncodedPage) -> StoreResult<()> {
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut q = self.grouped.lock().unwrap_or_else(PoisonError::into_inner);
            q.push((page, reply));
            q.len() == 1
        };
        if first {
            let commit = GroupCommit {
                grouped: Arc::clone(&self.grouped),
                recent: Arc::clone(&self.recent),
                notify: self.notify.clone(),
                taken: None,
                results: None,
            };
            self.writer.write_with(Box::new(commit)).await?;
        }
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the SQLite writer stopped".into()))?
    }
}

/// Folds the recent event log's rows left by a process that stopped (this
/// store streams nothing yet, so every row there is someone else's).
fn fold_left_over(conn: &mut Connection) -> StoreResult<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let runs = recent::fold_all(&tx)?;
    tx.commit()?;
    if runs > 0 {
        tracing::info!(runs, "folded the recent events a stopped process left");
    }
    Ok(())
}

/// Brings the database at `path` (created if missing) to the schema this
/// build knows; `stategraph migrate` calls this.
///
/// # Errors
/// As [`SqliteStore::open`].
pub async fn migrate(path: impl Into<PathBuf>) -> StoreResult<MigrationReport> {
    let path = path.into();
    blocking(move || apply_migrations(&mut connect(&path, &SqliteOptions::default(), false)?)).await
}

/// Runs blocking work (opening, migrating) on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Backend(format!("SQLite open task failed: {e}")))?
}

fn connect(path: &Path, o: &SqliteOptions, reader: bool) -> StoreResult<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
    }
    if !reader {
        writable(path)?;
    }
    let conn = Connection::open(path).map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot open SQLite database {}: {e}",
            path.display()
        ))
    })?;
    conn.busy_timeout(o.busy_timeout)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    if reader {
        conn.pragma_update(None, "query_only", "ON")?;
    }
    conn.set_prepared_statement_cache_capacity(64);
    // Page cache: 8 MiB for the writer (appends touch the right edge of the
    // event tables), 4 MiB per reader (the default is 2 MiB). A cache stays
    // filled after load, so these bound what SQLite keeps: with 16 MiB each
    // a server stayed ~85 MB above its idle size after 3,000 chats.
    let kib = if reader { 4_000 } else { 8_000 };
    conn.pragma_update(None, "cache_size", -kib)?;
    if !reader {
        // The writer's own checkpoint every ~40 MB of WAL instead of every
        // ~4 MB: checkpoints were a fifth of the writer thread's time at
        // 1,000 paced chats (one commit per token). Most of the copying and
        // both fsyncs are now done ahead of it on another thread (`wal`);
        // this one copies what is left and lets the log start over.
        conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
    }
    Ok(conn)
}

/// Refuses, with the file's name, a database whose file or whose `-wal` or
/// `-shm` beside it exists but cannot be opened for writing.
///
/// SQLite maps `-shm` (its WAL index) into memory. Had it been left to SQLite,
/// an unwritable `-shm` would be opened read-only and fail later with a vague
/// `SQLITE_READONLY_*`. Once mapped, a `-shm` truncated or removed under the
/// running server cannot be caught as an error at all: the next access to the
/// mapping raises SIGBUS in the kernel, and no handler can resume a thread in
/// the middle of SQLite's code. Keeping the WAL index in heap memory instead
/// (`locking_mode = EXCLUSIVE` or the `unix-excl` VFS) would avoid the mapping,
/// but would lock every other process out of the file — the CLI's `run`, a
/// second `serve`, a `sqlite3` backup — which this store supports. So the
/// check is made here, where it can still be a clear error; the running case
/// is documented (docs/server.md, "Several instances, crashes and outages").
fn writable(path: &Path) -> StoreResult<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let file = PathBuf::from(file);
        let exists = std::fs::symlink_metadata(&file).is_ok();
        if exists
            && let Err(e) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&file)
        {
            return Err(StoreError::Unavailable(format!(
                "cannot write {}: {e} (the server writes the database and SQLite's -wal and -shm files beside it)",
                file.display()
            )));
        }
    }
    Ok(())
}

/// Applies pending migrations in one `IMMEDIATE` transaction (which also
/// keeps a second process from migrating at the same time).
fn apply_migrations(conn: &mut Connection) -> StoreResult<MigrationReport> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
    )?;
    let found: i64 = tx.query_row(
        "SELECT coalesce(max(version), 0) FROM schema_migrations",
        [],
        |r| r.get(0),
    )?;
    let found = sql::u32_of(found, "schema version")?;
    sql::check_not_newer(found, MIGRATIONS, "SQLite")?;
    let mut applied = Vec::new();
    for m in sql::pending(found, MIGRATIONS) {
        tx.execute_batch(m.sql).map_err(|e| {
            StoreError::Backend(format!(
                "SQLite migration {} ({}) failed: {e}",
                m.version, m.name
            ))
        })?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![m.version, m.name, sql::i64_of(now_micros(), "time")?],
        )?;
        applied.push(m.version);
    }
    tx.commit()?;
    Ok(MigrationReport {
        from: found,
        to: found.max(sql::latest(MIGRATIONS)),
        applied,
    })
}

/// What SQLite's error codes mean for a caller: a conflict, a fault of the
/// file or its disk that retrying may outlive (the outage policy retries
/// these, as it does PostgreSQL's connection errors), or a failure that
/// retrying cannot fix (bad SQL, a corrupt file, data that does not fit).
///
/// The faults: another process holding the lock; a file that cannot be
/// opened; a full disk (`SQLITE_FULL`: the operator frees space); an I/O
/// error of the file or of its `-wal`/`-shm` (`SQLITE_IOERR_*`: a failing
/// or detached disk, a filesystem remounted read-only); a database or
/// directory made read-only (`SQLITE_READONLY_*`); memory exhausted.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(ErrorCode::ConstraintViolation) => StoreError::Conflict(e.to_string()),
            Some(
                ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::ReadOnly
                | ErrorCode::OutOfMemory,
            ) => StoreError::Unavailable(e.to_string()),
            _ => StoreError::Backend(e.to_string()),
        }
    }
}

impl ChatStore for SqliteStore {
    fn begin_turn(&self, turn: TurnStart) -> BoxFuture<'_, StoreResult<TurnOutcome>> {
        Box::pin(self.writer.write(move |tx| {
            // The writer's transaction is IMMEDIATE (it takes the write lock
            // first): concurrent turns, from any process sharing the file,
            // run one after the other.
            let c = &turn.chat;
            tx.prepare_cached(
                "INSERT INTO chats (id, user_id, title, created_at, updated_at, active_run) VALUES (?1, ?2, ?3, ?4, ?5, NULL)
                 ON CONFLICT (id) DO NOTHING",
            )?
            .execute(params![
                c.id,
                c.user_id,
                c.title,
                sql::i64_of(c.created_at, "chat time")?,
                sql::i64_of(c.updated_at, "chat time")?,
            ])?;
            let stored = {
                let mut stmt = tx.prepare_cached(&format!("SELECT {CHAT_COLS} FROM chats WHERE id = ?1"))?;
                let mut rows = stmt.query([&c.id])?;
                match rows.next()? {
                    Some(r) => chat_of(r)?,
                    None => return Err(StoreError::NotFound(format!("chat {}", c.id))),
                }
            };
            if stored.user_id != c.user_id {
                return Ok(TurnOutcome::NotOwner);
            }
            if let Some(active) = stored.active_run {
                let running: bool = tx
                    .prepare_cached("SELECT count(*) > 0 FROM runs WHERE id = ?1 AND status = 'running'")?
                    .query_row([active.to_string()], |r| r.get(0))?;
                if running {
                    return Ok(TurnOutcome::Busy(active));
                }
            }
            tx.prepare_cached("DELETE FROM messages WHERE chat_id = ?1")?
                .execute([&c.id])?;
            for m in &turn.messages {
                upsert_message(tx, &c.id, m)?;
            }
            insert_run(tx, &turn.run)?;
            tx.prepare_cached("UPDATE runs SET lease_owner = ?2, lease_until = ?3 WHERE id = ?1")?
                .execute(params![
                    turn.run.id.to_string(),
                    turn.owner,
                    sql::i64_of(turn.lease_until, "lease time")?
                ])?;
            let now = now()?;
            tx.prepare_cached("UPDATE chats SET active_run = ?2, updated_at = max(?3, updated_at + 1) WHERE id = ?1")?
                .execute(params![c.id, turn.run.id.to_string(), now])?;
            let chat = {
                let mut stmt = tx.prepare_cached(&format!("SELECT {CHAT_COLS} FROM chats WHERE id = ?1"))?;
                let mut rows = stmt.query([&c.id])?;
                match rows.next()? {
                    Some(r) => chat_of(r)?,
                    None => return Err(StoreError::NotFound(format!("chat {}", c.id))),
                }
            };
            Ok(TurnOutcome::Started(chat))
        }))
    }

    fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>> {
        Box::pin(self.writer.write(move |conn| {
            conn.prepare_cached(
                "INSERT INTO chats (id, user_id, title, created_at, updated_at, active_run) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id) DO NOTHING",
            )?
            .execute(params![
                chat.id,
                chat.user_id,
                chat.title,
                sql::i64_of(chat.created_at, "chat time")?,
                sql::i64_of(chat.updated_at, "chat time")?,
                chat.active_run.map(|r| r.to_string()),
            ])?;
            let mut stmt = conn.prepare_cached(&format!("SELECT {CHAT_COLS} FROM chats WHERE id = ?1"))?;
            let mut rows = stmt.query([&chat.id])?;
            match rows.next()? {
                Some(r) => chat_of(r),
                None => Err(StoreError::NotFound(format!("chat {}", chat.id))),
            }
        }))
    }

    fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>> {
        let id = id.to_owned();
        Box::pin(self.readers.run(move |conn| {
            let mut stmt =
                conn.prepare_cached(&format!("SELECT {CHAT_COLS} FROM chats WHERE id = ?1"))?;
            let mut rows = stmt.query([&id])?;
            rows.next()?.map(chat_of).transpose()
        }))
    }

    fn list_chats(
        &self,
        user_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>> {
        let user = user_id.to_owned();
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {CHAT_COLS} FROM chats WHERE user_id = ?1 ORDER BY updated_at DESC, id DESC LIMIT ?2"
            ))?;
            let mut rows = stmt.query(params![user, sql::limit_of(limit)])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(chat_of(r)?);
            }
            Ok(out)
        }))
    }

    fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = id.to_owned();
        Box::pin(self.writer.write(move |tx| {
            tx.prepare_cached("DELETE FROM messages WHERE chat_id = ?1")?
                .execute([&id])?;
            let deleted = tx
                .prepare_cached("DELETE FROM chats WHERE id = ?1")?
                .execute([&id])?;
            Ok(deleted > 0)
        }))
    }

    fn chats_metadata(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, serde_json::Value>>> {
        let user = user_id.to_owned();
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, metadata FROM chats WHERE user_id = ?1 AND metadata <> '{}'",
            )?;
            let mut rows = stmt.query([&user])?;
            let mut out = std::collections::HashMap::new();
            while let Some(r) = rows.next()? {
                let text: String = r.get(1)?;
                let v = serde_json::from_str(&text)
                    .map_err(|e| StoreError::Backend(format!("chat metadata: {e}")))?;
                out.insert(r.get(0)?, v);
            }
            Ok(out)
        }))
    }

    fn set_chat_metadata(
        &self,
        chat_id: &str,
        metadata: serde_json::Value,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let chat = chat_id.to_owned();
        let text = metadata.to_string();
        Box::pin(self.writer.write(move |conn| {
            let n = conn
                .prepare_cached("UPDATE chats SET metadata = ?2, updated_at = max(?3, updated_at + 1) WHERE id = ?1")?
                .execute(params![chat, text, now()?])?;
            Ok(n > 0)
        }))
    }

    fn release_chat(&self, chat_id: &str, run: Uuid) -> BoxFuture<'_, StoreResult<()>> {
        let chat = chat_id.to_owned();
        Box::pin(self.writer.write(move |conn| {
            conn.prepare_cached(RELEASE_CHAT)?
                .execute(params![chat, run.to_string(), now()?])?;
            Ok(())
        }))
    }

    fn set_active_run(&self, chat_id: &str, run: Option<Uuid>) -> BoxFuture<'_, StoreResult<()>> {
        let chat = chat_id.to_owned();
        Box::pin(self.writer.write(move |conn| {
            let n = conn
                .prepare_cached("UPDATE chats SET active_run = ?2, updated_at = max(?3, updated_at + 1) WHERE id = ?1")?
                .execute(params![chat, run.map(|r| r.to_string()), now()?])?;
            if n == 0 { Err(StoreError::NotFound(format!("chat {chat}"))) } else { Ok(()) }
        }))
    }

    fn replace_messages_from(
        &self,
        chat_id: &str,
        position: i64,
        messages: Vec<MessageRecord>,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let chat = chat_id.to_owned();
        Box::pin(self.writer.write(move |tx| {
            tx.prepare_cached("DELETE FROM messages WHERE chat_id = ?1 AND position >= ?2")?
                .execute(params![chat, position])?;
            for m in &messages {
                upsert_message(tx, &chat, m)?;
            }
            tx.prepare_cached(TOUCH_CHAT)?
                .execute(params![chat, now()?])?;
            Ok(())
        }))
    }

    fn upsert_message(&self, message: MessageRecord) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(self.writer.write(move |tx| {
            upsert_message(tx, &message.chat_id, &message)?;
            tx.prepare_cached(TOUCH_CHAT)?
                .execute(params![message.chat_id, now()?])?;
            Ok(())
        }))
    }

    fn messages(&self, chat_id: &str) -> BoxFuture<'_, StoreResult<Vec<MessageRecord>>> {
        let chat = chat_id.to_owned();
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {MESSAGE_COLS} FROM messages WHERE chat_id = ?1 ORDER BY position, id"
            ))?;
            let mut rows = stmt.query([&chat])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(message_of(r)?);
            }
            Ok(out)
        }))
    }

    fn end_turn(&self, end: TurnEnd) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            // A run that is not found still records the message and
            // releases the chat: the write succeeds and says so after.
            let (run, recent) = (end.run_id, Arc::clone(&self.recent));
            let finished = self
                .writer
                .write(move |tx| {
                    let chat = &end.message.chat_id;
                    let exists: bool = tx
                        .prepare_cached("SELECT count(*) > 0 FROM chats WHERE id = ?1")?
                        .query_row([chat], |r| r.get(0))?;
                    if exists {
                        upsert_message(tx, chat, &end.message)?;
                        tx.prepare_cached(TOUCH_CHAT)?
                            .execute(params![chat, now()?])?;
                    }
                    let finished = match finish_run(
                        tx,
                        &recent,
                        end.run_id,
                        end.status,
                        end.error.as_ref(),
                        end.usage,
                    ) {
                        Err(e) if !matches!(e, StoreError::NotFound(_)) => return Err(e),
                        other => other,
                    };
                    if end.release {
                        tx.prepare_cached(RELEASE_CHAT)?.execute(params![
                            chat,
                            end.run_id.to_string(),
                            now()?
                        ])?;
                    }
                    Ok(finished)
                })
                .await?;
            self.recent.forget(run);
            finished
        })
    }
}

impl RunStore for SqliteStore {
    fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(self.writer.write(move |conn| insert_run(conn, &run)))
    }

    fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>> {
        Box::pin(self.readers.run(move |conn| {
            let mut stmt =
                conn.prepare_cached(&format!("SELECT {RUN_COLS} FROM runs WHERE id = ?1"))?;
            let mut rows = stmt.query([id.to_string()])?;
            rows.next()?.map(run_of).transpose()
        }))
        .map_ok(|run| run.map(|r| self.with_recent(r)))
        .boxed()
    }

    fn list_runs(&self, query: &RunQuery) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        let (sql, params) = super::query::select(RUN_COLS, query, |n| format!("?{n}"));
        Box::pin(self.readers.run(move |conn| {
            let values: Vec<rusqlite::types::Value> = params
                .into_iter()
                .map(|p| match p {
                    SqlParam::Text(t) => rusqlite::types::Value::Text(t),
                    SqlParam::Int(i) => rusqlite::types::Value::Integer(i),
                    SqlParam::Id(id) => rusqlite::types::Value::Text(id.to_string()),
                })
                .collect();
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(run_of(r)?);
            }
            Ok(out)
        }))
        .map_ok(|runs| runs.into_iter().map(|r| self.with_recent(r)).collect())
        .boxed()
    }

    fn newest_run_status_by_chat(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, RunStatus>>> {
        let user = user_id.to_owned();
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT chat_id, status FROM (SELECT chat_id, status, ROW_NUMBER() OVER \
             (PARTITION BY chat_id ORDER BY created_at DESC, id DESC) AS n \
             FROM runs WHERE user_id = ?1 AND chat_id IS NOT NULL) AS newest WHERE n = 1",
            )?;
            let mut rows = stmt.query([&user])?;
            let mut out = std::collections::HashMap::new();
            while let Some(r) = rows.next()? {
                let status: String = r.get(1)?;
                out.insert(r.get(0)?, sql::status_of(&status)?);
            }
            Ok(out)
        }))
    }

    fn finish_run(
        &self,
        id: Uuid,
        status: RunStatus,
        error: Option<ErrorInfo>,
        usage: Usage,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let recent = Arc::clone(&self.recent);
        Box::pin(async move {
            self.writer
                .write(move |conn| finish_run(conn, &recent, id, status, error.as_ref(), usage))
                .await?;
            self.recent.forget(id);
            Ok(())
        })
    }
    fn usage_since(&self, user: &str, since: u64) -> BoxFuture<'_, StoreResult<Usage>> {
        let user = user.to_owned();
        Box::pin(self.readers.run(move |conn| {
            let since = sql::i64_of(since, "time")?;
            let (prompt, completion, cost): (i64, i64, i64) = conn
                .prepare_cached(
                    "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0),
                         coalesce(sum(cost_nano_usd), 0)
                     FROM runs INDEXED BY runs_usage_by_user
                     WHERE user_id = ?1 AND created_at >= ?2",
                )?
                .query_row(params![user, since], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
            Ok(Usage {
                prompt_tokens: u64::try_from(prompt).unwrap_or(0),
                completion_tokens: u64::try_from(completion).unwrap_or(0),
                cost_nano_usd: u64::try_from(cost).unwrap_or(0),
                ..Usage::default()
            })
        }))
    }
}

impl EventLog for SqliteStore {
    fn append_steps(&self, batches: &[StepBatch]) -> BoxFuture<'_, StoreResult<()>> {
        let encoded = EncodedPage::new(batches);
        // Checkpoints ride in the group commit too: a step's end no longer
        // costs a WAL commit of its own.
        Box::pin(async move { self.append_grouped(encoded?).await })
    }

    fn append_events(
        &self,
        run: Uuid,
        events: &[std::sync::Arc<Event>],
    ) -> BoxFuture<'_, StoreResult<()>> {
        let encoded = EncodedPage::events_only(run, events);
        Box::pin(async move { self.append_grouped(encoded?).await })
    }

    fn events(
        &self,
        run: Uuid,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<Event>>> {
        // Taken before the snapshot: a row committed since is newer than
        // what the caller was told of, a row folded since is in the pages.
        let recent = self.recent.rows(run);
        Box::pin(self.readers.run(move |conn| {
            let Ok(after_sql) = i64::try_from(after) else {
                return Ok(Vec::new());
            };
            // One snapshot for both tables: a fold moves rows between them.
            let tx = conn.transaction()?;
            let mut out = Vec::new();
            {
                let mut stmt = tx.prepare_cached(EVENTS_AFTER)?;
                let mut rows =
                    stmt.query(params![run.to_string(), after_sql, sql::limit_of(limit)])?;
                while let Some(r) = rows.next()? {
                    pages::read_page(run, text(r, 0)?, after, limit, &mut out)?;
                }
            }
            if out.len() < limit {
                recent::read(&tx, run, recent.as_deref(), after, limit, &mut out)?;
            }
            tx.commit()?;
            Ok(out)
        }))
    }

    fn checkpoints(
        &self,
        run: Uuid,
        upto: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<CheckpointRecord>>> {
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT step, writes, next, joins, snapshot FROM checkpoints WHERE run_id = ?1 AND step <= ?2 ORDER BY step",
            )?;
            let mut rows = stmt.query(params![run.to_string(), upto])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                let snapshot: Option<String> = r.get(4)?;
                out.push(CheckpointRecord {
                    step: sql::u32_of(r.get(0)?, "checkpoint step")?,
                    writes: sql::from_json(text(r, 1)?, "checkpoint writes")?,
                    next: sql::from_json(text(r, 2)?, "checkpoint frontier")?,
                    joins: sql::from_json(text(r, 3)?, "checkpoint joins")?,
                    snapshot: snapshot.as_deref().map(|s| sql::from_json(s, "snapshot")).transpose()?,
                });
            }
            Ok(out)
        }))
    }
}

impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(self.readers.run(|conn| {
            conn.query_row("SELECT 1", [], |_| Ok(())).optional()?;
            Ok(())
        }))
    }

    fn probe_write(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(self.writer.write(|conn| {
            conn.prepare_cached(sql::PROBE_WRITE)?.execute([])?;
            Ok(())
        }))
    }
}
