//! The threads that own SQLite connections (see the parent module's docs
//! for why threads and not `spawn_blocking`).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Barrier, Mutex, PoisonError};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::store::{StoreError, StoreResult};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Called on a lane's thread after each job (the writer nudges the WAL
/// sync thread with it, `wal`).
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
        let job: Job = Box::new(move |conn| {
            let _ = reply.send(f(conn));
        });
        self.tx
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable(format!("{} threads have stopped", self.name)))?;
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
    loop {
        // The guard is a temporary: released as soon as a job is taken.
        let job = rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .blocking_recv();
        let Some(job) = job else { break };
        // A panicking job loses its reply (its caller gets an error); an open
        // transaction rolls back on unwind, and the thread keeps serving.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
        if let Some(after) = after {
            after();
        }
    }
}
