//! The threads that own SQLite connections (see the parent module's docs
//! for why threads and not `spawn_blocking`).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Barrier, Mutex, PoisonError};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::batch::{self, Call, Write};
use crate::store::{StoreError, StoreResult};

enum Job {
    /// Runs on its own, with the connection to itself (reads, upkeep).
    Alone(Box<dyn FnOnce(&mut Connection) + Send>),
    /// Shares a transaction with the writes queued beside it (`batch`).
    Write(Box<dyn Write>),
}

/// Called on a lane's thread after each job (the writer nudges the
/// checkpoint thread with it, `wal`).
pub(super) type After = Arc<dyn Fn() + Send + Sync>;

/// A bounded queue of jobs served by threads that each own a connection.
pub(super) struct Lane {
    tx: mpsc::Sender<Job>,
    name: &'static str,
    threads: usize,
}

impl Lane {
    pub(super) fn start(
        name: &'static str,
        conns: Vec<Connection>,
        depth: usize,
        after: Option<After>,
    ) -> StoreResult<Self> {
        let (tx, rx) = mpsc::channel::<Job>(depth);
        let rx = Arc::new(Mutex::new(rx));
        let threads = conns.len();
        for (i, conn) in conns.into_iter().enumerate() {
            let (rx, after) = (Arc::clone(&rx), after.clone());
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || serve(conn, &rx, after.as_deref()))
                .map_err(|e| StoreError::Backend(format!("cannot start {name} thread: {e}")))?;
        }
        Ok(Self { tx, name, threads })
    }

    /// Runs `f` once on every thread of the lane (each with its own
    /// connection) and waits for all. A thread that has run it waits at a
    /// barrier for the others, so no thread takes two of the jobs.
    pub(super) async fn on_each(&self, f: fn(&mut Connection)) -> StoreResult<()> {
        let barrier = Arc::new(Barrier::new(self.threads));
        let jobs = (0..self.threads).map(|_| {
            let barrier = Arc::clone(&barrier);
            self.run(move |conn| {
                f(conn);
                barrier.wait();
                Ok(())
            })
        });
        futures::future::try_join_all(jobs).await.map(drop)
    }

    /// Runs `f` on one of the lane's connections and waits for its result.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (reply, answer) = oneshot::channel();
        let job = Job::Alone(Box::new(move |conn| {
            let _ = reply.send(f(conn));
        }));
        self.send(job).await?;
        self.answer(answer).await
    }

    /// Runs `f` inside a transaction shared with the other writes waiting
    /// in the queue (`batch`) and waits until that transaction committed.
    /// `f` must not open a transaction of its own; an error from it rolls
    /// back only what it wrote. It may be called twice (`batch::run`).
    pub(super) async fn write<T: Send + 'static>(
        &self,
        f: impl FnMut(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Write(Box::new(Call::new(f, reply)))).await?;
        self.answer(answer).await
    }

    /// Queues a write that answers its callers itself (the group commit).
    pub(super) async fn write_with(&self, w: Box<dyn Write>) -> StoreResult<()> {
        self.send(Job::Write(w)).await
    }

    async fn send(&self, job: Job) -> StoreResult<()> {
        self.tx
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable(format!("{} threads have stopped", self.name)))
    }

    async fn answer<T>(&self, answer: oneshot::Receiver<StoreResult<T>>) -> StoreResult<T> {
        answer
            .await
            .map_err(|_| StoreError::Backend(format!("a {} job panicked", self.name)))?
    }
}

/// A thread's loop: until the store (and so the sender) is dropped.
fn serve(
    mut conn: Connection,
    rx: &Mutex<mpsc::Receiver<Job>>,
    after: Option<&(dyn Fn() + Send + Sync)>,
) {
    let mut next = None;
    loop {
        // The guard is a temporary: released as soon as a job is taken.
        let job = match next.take() {
            Some(job) => job,
            None => match rx
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .blocking_recv()
            {
                Some(job) => job,
                None => break,
            },
        };
        match job {
            // A panicking job loses its reply (its caller gets an error); an
            // open transaction rolls back on unwind, and the thread keeps
            // serving.
            Job::Alone(job) => {
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
            }
            Job::Write(first) => {
                let mut writes = vec![first];
                let mut rx = rx.lock().unwrap_or_else(PoisonError::into_inner);
                while writes.len() < batch::MAX_WRITES {
                    match rx.try_recv() {
                        Ok(Job::Write(w)) => writes.push(w),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                drop(rx);
                batch::run(&mut conn, writes);
            }
        }
        if let Some(after) = after {
            after();
        }
    }
}
