//! The threads that own SQLite connections (see the parent module's docs
//! for why threads and not `spawn_blocking`).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::store::{StoreError, StoreResult};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A bounded queue of jobs served by threads that each own a connection.
pub(super) struct Lane {
    tx: mpsc::Sender<Job>,
    name: &'static str,
}

impl Lane {
    pub(super) fn start(
        name: &'static str,
        conns: Vec<Connection>,
        depth: usize,
    ) -> StoreResult<Self> {
        let (tx, rx) = mpsc::channel::<Job>(depth);
        let rx = Arc::new(Mutex::new(rx));
        for (i, conn) in conns.into_iter().enumerate() {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || serve(conn, &rx))
                .map_err(|e| StoreError::Backend(format!("cannot start {name} thread: {e}")))?;
        }
        Ok(Self { tx, name })
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
fn serve(mut conn: Connection, rx: &Mutex<mpsc::Receiver<Job>>) {
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
    }
}
