//! A store wrapper that injects faults into `append`, for checking what
//! `LogCheckpointer` does with them on top of every backend.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use stategraph::internals::store::StoreResult;

use super::*;

/// What the next `append` does instead of (or besides) appending.
pub(super) enum Fault {
    /// Appends normally.
    Pass,
    /// Fails as if the connection were refused; stores nothing.
    Unavailable,
    /// Stores the batch, then fails as if the reply were lost.
    ReplyLost,
    /// Another writer stores this batch first; then fails as unavailable.
    Raced(StepBatch),
    /// A non-transient failure.
    Backend,
}

pub(super) struct Flaky {
    inner: Arc<dyn Store>,
    faults: Mutex<VecDeque<Fault>>,
    /// Every append fails as unavailable while set.
    down: AtomicBool,
    attempts: AtomicUsize,
}

impl Flaky {
    pub(super) fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            faults: Mutex::default(),
            down: AtomicBool::new(false),
            attempts: AtomicUsize::new(0),
        })
    }

    pub(super) fn inject(&self, faults: impl IntoIterator<Item = Fault>) {
        self.faults.lock().unwrap().extend(faults);
    }

    pub(super) fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Append calls so far (attempts, including failed ones).
    pub(super) fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

impl EventLog for Flaky {
    fn append_events(&self, run: Uuid, events: &[Arc<Event>]) -> BoxFuture<'_, StoreResult<()>> {
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(StoreError::Unavailable("injected: down".into())) });
        }
        self.inner.append_events(run, events)
    }
    fn append_steps(&self, batches: &[StepBatch]) -> BoxFuture<'_, StoreResult<()>> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let fault = if self.down.load(Ordering::SeqCst) {
            Some(Fault::Unavailable)
        } else {
            self.faults.lock().unwrap().pop_front()
        };
        let batches = batches.to_vec();
        Box::pin(async move {
            match fault {
                None | Some(Fault::Pass) => self.inner.append_steps(&batches).await,
                Some(Fault::Unavailable) => Err(StoreError::Unavailable(
                    "injected: connection refused".into(),
                )),
                Some(Fault::ReplyLost) => {
                    self.inner.append_steps(&batches).await?;
                    Err(StoreError::Unavailable(
                        "injected: connection closed after the commit".into(),
                    ))
                }
                Some(Fault::Raced(other)) => {
                    self.inner.append(&other).await?;
                    Err(StoreError::Unavailable(
                        "injected: connection refused".into(),
                    ))
                }
                Some(Fault::Backend) => Err(StoreError::Backend("injected: cannot encode".into())),
            }
        })
    }

    fn events(
        &self,
        run: Uuid,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<Event>>> {
        self.inner.events(run, after, limit)
    }

    fn checkpoints(
        &self,
        run: Uuid,
        upto: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<CheckpointRecord>>> {
        self.inner.checkpoints(run, upto)
    }
}

crate::support::delegate::delegate_store!(Flaky, inner);
