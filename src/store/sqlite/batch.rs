//! Writes that share one transaction: the writer thread runs every write
//! waiting in its queue in one `BEGIN IMMEDIATE … COMMIT` and answers them
//! all once the commit is done.
//!
//! Why: a WAL commit writes one frame per page it changed, and separate
//! transactions each write their own copy of the pages they share (the
//! right-hand leaves of `runs`, its time-ordered indexes, `checkpoints`,
//! `run_event_pages`). Measured at 32 concurrent chats before this: 3.5
//! commits and 48 frames (two `pwrite`s each) per chat, the writer thread
//! 45% of the server's CPU. One transaction for what is waiting writes each
//! shared page once: 1.6 commits and 30 frames per chat.
//!
//! A write's own failure rolls back only its own writes (`run`); a failure of the transaction (it cannot start, SQLite rolls it back,
//! the commit fails) fails every write in it, as when each had its own. A
//! write is answered only after the commit, so a read queued after it sees
//! it.

use std::panic::AssertUnwindSafe;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::store::{StoreError, StoreResult};

/// At most this many writes share a transaction, so the first of them is
/// not held back long by the rest (each is well under a millisecond).
pub(super) const MAX_WRITES: usize = 64;

/// A write that runs inside the writer's shared transaction.
pub(super) trait Write: Send {
    /// Runs in the transaction; `false` when it failed (`finish` will say
    /// so), and what it wrote is then rolled back. It may be run a second
    /// time, in a savepoint, when another write of the transaction failed:
    /// the second run stands.
    fn run(&mut self, conn: &Connection) -> bool;

    /// Told the transaction's outcome: after `run`, or without it when the
    /// transaction could not start or ended before its turn.
    fn finish(self: Box<Self>, committed: Result<(), &StoreError>);
}

/// A closure's write, answered on a oneshot channel. The closure may run
/// twice (`run`): the second run's result is the answer.
pub(super) struct Call<F, T> {
    f: F,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<F, T> Call<F, T> {
    pub(super) fn new(f: F, reply: oneshot::Sender<StoreResult<T>>) -> Self {
        Self {
            f,
            result: None,
            reply,
        }
    }
}

impl<F, T> Write for Call<F, T>
where
    F: FnMut(&Connection) -> StoreResult<T> + Send,
    T: Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let r = (self.f)(conn);
        let ok = r.is_ok();
        self.result = Some(r);
        ok
    }

    fn finish(self: Box<Self>, committed: Result<(), &StoreError>) {
        let answer = match (self.result, committed) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(_)) | None, Err(e)) => Err(e.clone()),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (None, Ok(())) => Err(StoreError::Backend("a write was not run".into())),
        };
        let _ = self.reply.send(answer);
    }
}

/// Runs `writes` in one transaction and answers each.
///
/// They first run with no savepoints: a savepoint makes SQLite copy every
/// page a write first changes into its statement journal, which cost more
/// than sharing the commit saved (writer CPU per chat at 32 concurrent
/// chats 0.54–0.55 ms with a savepoint per write, 0.46–0.49 without, 0.50–
/// 0.59 before writes shared a transaction). Writes rarely fail (a repeated
/// append after a crash, a chat that is gone); when one does, or panics,
/// the transaction rolls back and they all run again, each in a savepoint,
/// so that only the failed one's writes stay out.
pub(super) fn run(conn: &mut Connection, mut writes: Vec<Box<dyn Write>>) {
    if let Err(e) = begin(conn) {
        return fail(writes, &e);
    }
    let mut clean = true;
    for i in 0..writes.len() {
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| writes[i].run(conn)));
        match ran {
            Ok(true) if !conn.is_autocommit() => {}
            Ok(_) => clean = false,
            Err(_) => {
                // Dropped unanswered: its caller gets an error.
                writes.remove(i);
                clean = false;
            }
        }
        if !clean {
            break;
        }
    }
    if clean {
        return commit(conn, writes);
    }
    rollback(conn);
    with_savepoints(conn, writes);
}

fn begin(conn: &Connection) -> StoreResult<()> {
    Ok(conn.execute_batch("BEGIN IMMEDIATE")?)
}

/// Commits the open transaction and answers `done` with its outcome.
fn commit(conn: &Connection, done: Vec<Box<dyn Write>>) {
    match conn.execute_batch("COMMIT") {
        Ok(()) => done.into_iter().for_each(|w| w.finish(Ok(()))),
        Err(e) => {
            rollback(conn);
            fail(done, &StoreError::from(e));
        }
    }
}

fn fail(writes: impl IntoIterator<Item = Box<dyn Write>>, e: &StoreError) {
    writes.into_iter().for_each(|w| w.finish(Err(e)));
}

/// Rolls back the open transaction, if SQLite has not already.
fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
}

/// Runs `writes` each in its own savepoint of one transaction (several, if
/// SQLite ends one early) and answers each.
fn with_savepoints(conn: &mut Connection, writes: Vec<Box<dyn Write>>) {
    let mut pending = writes.into_iter();
    while pending.len() > 0 {
        if let Err(e) = begin(conn) {
            return fail(pending, &e);
        }
        let mut done: Vec<Box<dyn Write>> = Vec::with_capacity(pending.len());
        let mut ended = None;
        for mut w in pending.by_ref() {
            // A panicking write unwinds through its savepoint (rolled back
            // on drop) and is dropped unanswered.
            let ran = std::panic::catch_unwind(AssertUnwindSafe(|| in_savepoint(conn, &mut *w)));
            match ran {
                Ok(Ok(())) => done.push(w),
                Ok(Err(e)) => {
                    w.finish(Err(&e));
                    ended = Some(e);
                }
                Err(_) => {}
            }
            if ended.is_none() && conn.is_autocommit() {
                // SQLite rolled the transaction back (a full disk, an I/O
                // error): what ran before is gone.
                ended = Some(StoreError::Unavailable(
                    "SQLite rolled back the write transaction".into(),
                ));
            }
            if ended.is_some() {
                break;
            }
        }
        match ended {
            Some(e) => {
                // The writes after it get a transaction of their own.
                rollback(conn);
                fail(done, &e);
            }
            None => commit(conn, done),
        }
    }
}

/// Runs one write in a savepoint; an error is the savepoint's own (the
/// transaction is then in an unknown state).
fn in_savepoint(conn: &mut Connection, w: &mut dyn Write) -> StoreResult<()> {
    let sp = conn.savepoint()?;
    if w.run(&sp) {
        sp.commit()?;
    } else {
        sp.finish()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().expect("temp dir");
        let conn = Connection::open(dir.path().join("t.db")).expect("open");
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (k TEXT PRIMARY KEY) STRICT")
            .expect("schema");
        (dir, conn)
    }

    type Answer = oneshot::Receiver<StoreResult<usize>>;

    /// A write inserting `key`, counting how often it ran.
    fn insert(key: &'static str, runs: &Arc<AtomicUsize>) -> (Box<dyn Write>, Answer) {
        let (reply, answer) = oneshot::channel();
        let runs = Arc::clone(runs);
        let f = move |conn: &Connection| {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(conn.execute("INSERT INTO t (k) VALUES (?1)", [key])?)
        };
        (Box::new(Call::new(f, reply)), answer)
    }

    fn keys(conn: &Connection) -> Vec<String> {
        let mut stmt = conn.prepare("SELECT k FROM t ORDER BY k").expect("select");
        stmt.query_map([], |r| r.get(0))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("keys")
    }

    #[test]
    fn writes_share_one_commit_and_a_failed_one_loses_only_itself() {
        let (_dir, mut conn) = db();
        conn.execute("INSERT INTO t (k) VALUES ('taken')", [])
            .expect("seed");
        let runs = Arc::new(AtomicUsize::new(0));
        let (a, ra) = insert("a", &runs);
        let (dup, rdup) = insert("taken", &runs);
        let (b, rb) = insert("b", &runs);
        run(&mut conn, vec![a, dup, b]);

        assert_eq!(ra.blocking_recv().expect("answered").expect("a stored"), 1);
        assert!(matches!(
            rdup.blocking_recv().expect("answered"),
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(rb.blocking_recv().expect("answered").expect("b stored"), 1);
        assert_eq!(keys(&conn), ["a", "b", "taken"]);
        // a and the duplicate ran twice (the second time in savepoints), b once.
        assert_eq!(runs.load(Ordering::SeqCst), 5);
        assert!(conn.is_autocommit(), "no transaction is left open");
    }

    #[test]
    fn a_clean_batch_runs_each_write_once() {
        let (_dir, mut conn) = db();
        let runs = Arc::new(AtomicUsize::new(0));
        let (writes, answers): (Vec<_>, Vec<_>) = ["x", "y", "z"]
            .into_iter()
            .map(|k| insert(k, &runs))
            .unzip();
        run(&mut conn, writes);
        for a in answers {
            assert_eq!(a.blocking_recv().expect("answered").expect("stored"), 1);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(keys(&conn), ["x", "y", "z"]);
    }

    #[test]
    fn a_panicking_write_is_dropped_and_the_others_commit() {
        let (_dir, mut conn) = db();
        let runs = Arc::new(AtomicUsize::new(0));
        let (a, ra) = insert("a", &runs);
        let (reply, rp) = oneshot::channel::<StoreResult<()>>();
        let boom = Call::new(
            |conn: &Connection| -> StoreResult<()> {
                conn.execute("INSERT INTO t (k) VALUES ('half')", [])?;
                panic!("a bug in a write");
            },
            reply,
        );
        let (b, rb) = insert("b", &runs);
        run(&mut conn, vec![a, Box::new(boom), b]);
        assert!(ra.blocking_recv().expect("answered").is_ok());
        assert!(rb.blocking_recv().expect("answered").is_ok());
        assert!(
            rp.blocking_recv().is_err(),
            "the panicked write is unanswered"
        );
        assert_eq!(
            keys(&conn),
            ["a", "b"],
            "nothing of the panicked write stays"
        );
    }

    #[test]
    fn a_transaction_that_cannot_start_fails_every_write() {
        let (dir, mut conn) = db();
        conn.busy_timeout(std::time::Duration::ZERO)
            .expect("timeout");
        let other = Connection::open(dir.path().join("t.db")).expect("open");
        other.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let runs = Arc::new(AtomicUsize::new(0));
        let (a, ra) = insert("a", &runs);
        let (b, rb) = insert("b", &runs);
        run(&mut conn, vec![a, b]);
        for r in [ra, rb] {
            assert!(matches!(
                r.blocking_recv().expect("answered"),
                Err(StoreError::Unavailable(_))
            ));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        other.execute_batch("ROLLBACK").expect("unlock");
        assert!(keys(&conn).is_empty());
    }
}
