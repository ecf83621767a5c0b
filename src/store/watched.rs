//! [`Watched`]: a store that knows whether it takes writes.
//!
//! A store can answer reads while refusing writes — a full disk, files or
//! a filesystem made read-only, a PostgreSQL server out of disk — and a
//! read (`SELECT 1`) then calls it healthy while every run stalls. So the
//! server's store is wrapped: every write's outcome is noted, and from the
//! first write that fails with a fault retrying may outlive (a transient
//! [`StoreError`]) until one succeeds, [`Store::ping`] fails, saying since
//! when and why — `/readyz` answers 503. While writes fail, each ping also
//! tries a write of its own ([`Store::probe_write`]), so an idle server
//! notices the store is back without waiting for traffic. Errors retrying
//! cannot fix (a conflict, bad data) say nothing about the store's health.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::future::BoxFuture;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{
    Appended, ChatRecord, ChatStore, CheckpointRecord, EventLog, Leases, Maintenance,
    MessageRecord, PruneReport, RunQuery, RunRecord, RunStore, Store, StoreError, StoreResult,
    TurnEnd, TurnOutcome, TurnStart,
};
use crate::events::{ErrorInfo, Event, Usage};
use crate::events::{RunStatus, StepBatch};

/// A store whose writes are watched (see the module docs).
pub(crate) struct Watched {
    inner: Arc<dyn Store>,
    /// Since when writes have failed, and the last failure.
    failing: Mutex<Option<(Instant, String)>>,
    /// When a write of the server's own (not a probe) last failed.
    last_failure: Mutex<Option<Instant>>,
}

/// How long after a failed write of its own a probe's success does not
/// count: a probe is one tiny `UPDATE`, and on a full disk it can fit in
/// space SQLite already holds (its WAL file) while every real write, which
/// needs more, still fails. It speaks for an idle server, not over writes
/// that keep failing.
const PROBE_QUIET: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("backend", &self.inner.backend())
            .field("failing", &self.failing())
            .finish()
    }
}

impl Watched {
    /// Watches `inner`'s writes.
    pub(crate) fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            failing: Mutex::new(None),
            last_failure: Mutex::new(None),
        }
    }

    /// Why writes fail, and for how long they have: `None` while the last
    /// write succeeded.
    pub(crate) fn failing(&self) -> Option<String> {
        self.failing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(since, why)| {
                format!(
                    "writes have failed for {}s: {why}",
                    since.elapsed().as_secs()
                )
            })
    }

    fn note<T>(&self, result: &StoreResult<T>) {
        if matches!(result, Err(e) if e.is_transient()) {
            *self
                .last_failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
        self.note_outcome(result);
    }

    /// A probe's outcome: a success clears the failure only when no write
    /// of the server's own failed within [`PROBE_QUIET`].
    fn note_probe<T>(&self, result: &StoreResult<T>) {
        let recent = self
            .last_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < PROBE_QUIET);
        if result.is_ok() && recent {
            return;
        }
        self.note_outcome(result);
    }

    fn note_outcome<T>(&self, result: &StoreResult<T>) {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(_) => *failing = None,
            Err(e) if e.is_transient() => match failing.as_mut() {
                Some((_, why)) => *why = e.to_string(),
                None => *failing = Some((Instant::now(), e.to_string())),
            },
            Err(_) => {}
        }
    }

    /// `write`, its outcome noted.
    fn noted<'a, T: Send + 'a>(
        &'a self,
        write: BoxFuture<'a, StoreResult<T>>,
    ) -> BoxFuture<'a, StoreResult<T>> {
        Box::pin(async move {
            let result = write.await;
            self.note(&result);
            result
        })
    }
}

impl ChatStore for Watched {
    fn begin_turn(&self, turn: TurnStart) -> BoxFuture<'_, StoreResult<TurnOutcome>> {
        self.noted(self.inner.begin_turn(turn))
    }
    fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>> {
        self.noted(self.inner.ensure_chat(chat))
    }
    fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>> {
        self.inner.get_chat(id)
    }
    fn list_chats(&self, user: &str, limit: usize) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>> {
        self.inner.list_chats(user, limit)
    }
    fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        self.noted(self.inner.delete_chat(id))
    }
    fn set_active_run(&self, chat_id: &str, run: Option<Uuid>) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.set_active_run(chat_id, run))
    }
    fn release_chat(&self, chat_id: &str, run: Uuid) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.release_chat(chat_id, run))
    }
    fn replace_messages_from(
        &self,
        chat_id: &str,
        position: i64,
        messages: Vec<MessageRecord>,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(
            self.inner
                .replace_messages_from(chat_id, position, messages),
        )
    }
    fn upsert_message(&self, message: MessageRecord) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.upsert_message(message))
    }
    fn messages(&self, chat_id: &str) -> BoxFuture<'_, StoreResult<Vec<MessageRecord>>> {
        self.inner.messages(chat_id)
    }
    fn end_turn(&self, end: TurnEnd) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.end_turn(end))
    }
    fn chats_metadata(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, serde_json::Value>>> {
        self.inner.chats_metadata(user_id)
    }
    fn set_chat_metadata(
        &self,
        chat_id: &str,
        metadata: serde_json::Value,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        self.noted(self.inner.set_chat_metadata(chat_id, metadata))
    }
}

impl RunStore for Watched {
    fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.create_run(run))
    }
    fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>> {
        self.inner.get_run(id)
    }
    fn list_runs(&self, query: &RunQuery) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        self.inner.list_runs(query)
    }
    fn newest_run_status_by_chat(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, RunStatus>>> {
        self.inner.newest_run_status_by_chat(user_id)
    }
    fn finish_run(
        &self,
        id: Uuid,
        status: RunStatus,
        error: Option<ErrorInfo>,
        usage: Usage,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.finish_run(id, status, error, usage))
    }
    fn usage_since(&self, user: &str, since: u64) -> BoxFuture<'_, StoreResult<Usage>> {
        self.inner.usage_since(user, since)
    }
}

impl EventLog for Watched {
    fn append_steps(&self, batches: &[StepBatch]) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.append_steps(batches))
    }
    fn append_events(&self, run: Uuid, events: &[Arc<Event>]) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.append_events(run, events))
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

impl Leases for Watched {
    fn create_leased_run(
        &self,
        run: RunRecord,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.create_leased_run(run, owner, until))
    }
    fn acquire_lease(
        &self,
        run: Uuid,
        owner: &str,
        now: u64,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        self.noted(self.inner.acquire_lease(run, owner, now, until))
    }
    fn renew_leases(&self, owner: &str, until: u64) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        self.noted(self.inner.renew_leases(owner, until))
    }
    fn claim_orphans(
        &self,
        owner: &str,
        now: u64,
        until: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        self.noted(self.inner.claim_orphans(owner, now, until, limit))
    }
    fn release_lease(&self, run: Uuid, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.release_lease(run, owner))
    }
    fn lease(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Option<super::Lease>>> {
        self.inner.lease(run)
    }
    fn request_stop(&self, run: Uuid) -> BoxFuture<'_, StoreResult<bool>> {
        self.noted(self.inner.request_stop(run))
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
        self.noted(self.inner.claim_interrupted(run, owner, until))
    }
}

impl Maintenance for Watched {
    fn prune(&self, before: u64, chats: bool) -> BoxFuture<'_, StoreResult<PruneReport>> {
        self.noted(self.inner.prune(before, chats))
    }
    fn subscribe(&self) -> broadcast::Receiver<Appended> {
        self.inner.subscribe()
    }
    fn release_memory(&self) -> BoxFuture<'_, ()> {
        self.inner.release_memory()
    }
}

impl super::Verdicts for Watched {
    fn add_verdicts(&self, verdicts: Vec<super::VerdictRecord>) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.add_verdicts(verdicts))
    }
    fn verdicts(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<super::VerdictRecord>>> {
        self.inner.verdicts(run)
    }
}

impl super::Calls for Watched {
    fn add_call(
        &self,
        call: super::CallRecord,
        parts: Vec<super::CallPart>,
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.add_call(call, parts))
    }
    fn calls(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<super::CallRecord>>> {
        self.inner.calls(run)
    }
    fn call_parts(&self, hashes: Vec<String>) -> BoxFuture<'_, StoreResult<Vec<super::CallPart>>> {
        self.inner.call_parts(hashes)
    }
    fn expire_calls(&self, before: u64) -> BoxFuture<'_, StoreResult<super::calls::ExpiredCalls>> {
        self.noted(self.inner.expire_calls(before))
    }
    fn call_storage(&self) -> BoxFuture<'_, StoreResult<super::CallStorage>> {
        self.inner.call_storage()
    }
}

impl Store for Watched {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    /// The backend answers a read and — after a write failed — takes a
    /// write again.
    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            self.inner.ping().await?;
            if self.failing().is_none() {
                return Ok(());
            }
            let probe = self.inner.probe_write().await;
            self.note_probe(&probe);
            match self.failing() {
                None => Ok(()),
                Some(why) => Err(StoreError::Unavailable(why)),
            }
        })
    }

    fn probe_write(&self) -> BoxFuture<'_, StoreResult<()>> {
        self.noted(self.inner.probe_write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn a_transient_write_failure_fails_the_ping_until_a_write_succeeds() {
        let store = Watched::new(Arc::new(MemoryStore::new()));
        store.ping().await.expect("healthy at first");
        store.note::<()>(&Err(StoreError::Conflict("a stored seq".into())));
        store
            .ping()
            .await
            .expect("a conflict says nothing of health");
        store.note::<()>(&Err(StoreError::Unavailable("disk full".into())));
        assert!(store.failing().is_some_and(|w| w.contains("disk full")));
        // The memory store's probe succeeds, but a write of the server's
        // own failed just now: that failure wins (a probe can fit where
        // real writes do not).
        assert!(
            store.ping().await.is_err(),
            "a fresh failure outweighs the probe"
        );
        // Once the server's writes have been quiet for a while, the probe
        // speaks: the ping finds the store back.
        *store.last_failure.lock().unwrap() = Some(Instant::now() - PROBE_QUIET);
        store.ping().await.expect("the probe write succeeded");
        assert!(store.failing().is_none());
        // A real write's success clears a failure at once.
        store.note::<()>(&Err(StoreError::Unavailable("disk full".into())));
        store.note::<()>(&Ok(()));
        store.ping().await.expect("a write succeeded");
    }
}
