//! A store wrapper that injects faults into `append`, for checking what
//! `LogCheckpointer` does with them on top of every backend.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use stategraph::store::{
    Appended, ChatStore, Lease, Leases, Maintenance, PruneReport, RunStore, StoreResult,
    TurnOutcome, TurnStart,
};
use tokio::sync::broadcast;

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

impl ChatStore for Flaky {
    fn begin_turn(&self, turn: TurnStart) -> BoxFuture<'_, StoreResult<TurnOutcome>> {
        self.inner.begin_turn(turn)
    }
    fn release_chat(&self, chat_id: &str, run: Uuid) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.release_chat(chat_id, run)
    }
    fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>> {
        self.inner.ensure_chat(chat)
    }
    fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>> {
        self.inner.get_chat(id)
    }
    fn list_chats(
        &self,
        user_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>> {
        self.inner.list_chats(user_id, limit)
    }
    fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        self.inner.delete_chat(id)
    }
    fn set_active_run(&self, chat_id: &str, run: Option<Uuid>) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.set_active_run(chat_id, run)
    }
    fn replace_messages_from(
        &self,
        chat_id: &str,
        position: i64,
        messages: Vec<MessageRecord>,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.inner
            .replace_messages_from(chat_id, position, messages)
    }
    fn upsert_message(&self, message: MessageRecord) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.upsert_message(message)
    }
    fn messages(&self, chat_id: &str) -> BoxFuture<'_, StoreResult<Vec<MessageRecord>>> {
        self.inner.messages(chat_id)
    }
    fn end_turn(&self, end: store::TurnEnd) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.end_turn(end)
    }
}

impl RunStore for Flaky {
    fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.create_run(run)
    }
    fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>> {
        self.inner.get_run(id)
    }
    fn list_runs(&self, query: &RunQuery) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        self.inner.list_runs(query)
    }
    fn finish_run(
        &self,
        id: Uuid,
        status: RunStatus,
        error: Option<ErrorInfo>,
        usage: Usage,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.finish_run(id, status, error, usage)
    }
    fn usage_since(&self, user: &str, since: u64) -> BoxFuture<'_, StoreResult<Usage>> {
        self.inner.usage_since(user, since)
    }
}

impl Leases for Flaky {
    fn create_leased_run(
        &self,
        run: RunRecord,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.create_leased_run(run, owner, until)
    }

    fn acquire_lease(
        &self,
        run: Uuid,
        owner: &str,
        now: u64,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        self.inner.acquire_lease(run, owner, now, until)
    }
    fn renew_leases(&self, owner: &str, until: u64) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        self.inner.renew_leases(owner, until)
    }
    fn claim_orphans(
        &self,
        owner: &str,
        now: u64,
        until: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        self.inner.claim_orphans(owner, now, until, limit)
    }
    fn release_lease(&self, run: Uuid, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.release_lease(run, owner)
    }
    fn lease(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Option<Lease>>> {
        self.inner.lease(run)
    }
    fn request_stop(&self, run: Uuid) -> BoxFuture<'_, StoreResult<bool>> {
        self.inner.request_stop(run)
    }
    fn stop_requests(&self, owner: &str) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        self.inner.stop_requests(owner)
    }
    fn claim_interrupted(
        &self,
        run: Uuid,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        self.inner.claim_interrupted(run, owner, until)
    }
}

impl Maintenance for Flaky {
    fn prune(&self, before: u64, chats: bool) -> BoxFuture<'_, StoreResult<PruneReport>> {
        self.inner.prune(before, chats)
    }
    fn subscribe(&self) -> broadcast::Receiver<Appended> {
        self.inner.subscribe()
    }
}

impl store::Verdicts for Flaky {
    fn add_verdicts(&self, verdicts: Vec<store::VerdictRecord>) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.add_verdicts(verdicts)
    }
    fn verdicts(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<store::VerdictRecord>>> {
        self.inner.verdicts(run)
    }
}

/// Call records pass through (they are not what this double tests).
impl store::Calls for Flaky {
    fn add_call(
        &self,
        call: store::CallRecord,
        parts: Vec<store::CallPart>,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.add_call(call, parts)
    }
    fn calls(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<store::CallRecord>>> {
        self.inner.calls(run)
    }
    fn call_parts(&self, hashes: Vec<String>) -> BoxFuture<'_, StoreResult<Vec<store::CallPart>>> {
        self.inner.call_parts(hashes)
    }
}

impl Store for Flaky {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        self.inner.ping()
    }
}
