//! The in-memory store: for tests, and the reference behaviour the
//! conformance suite checks the other backends against.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use uuid::Uuid;

use super::{ChatRecord, ChatStore, CheckpointRecord, EventLog, MessageRecord, RunRecord, RunStore, Store, StoreError, StoreResult};
use crate::events::{ErrorInfo, Event, Usage, now_micros};
use crate::runtime::{RunStatus, StepBatch};

#[derive(Default)]
struct Inner {
    chats: HashMap<String, ChatRecord>,
    messages: HashMap<String, Vec<MessageRecord>>,
    runs: HashMap<Uuid, RunRecord>,
    events: HashMap<Uuid, BTreeMap<u64, Event>>,
    checkpoints: HashMap<Uuid, BTreeMap<u32, CheckpointRecord>>,
}

/// Everything in process memory.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryStore")
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn ready<T: Send + 'static>(v: T) -> BoxFuture<'static, T> {
    Box::pin(async move { v })
}

impl ChatStore for MemoryStore {
    fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>> {
        let mut g = self.lock();
        let stored = g.chats.entry(chat.id.clone()).or_insert(chat).clone();
        ready(Ok(stored))
    }

    fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>> {
        ready(Ok(self.lock().chats.get(id).cloned()))
    }

    fn list_chats(&self, user_id: &str, limit: usize) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>> {
        let g = self.lock();
        let mut v: Vec<ChatRecord> = g.chats.values().filter(|c| c.user_id == user_id).cloned().collect();
        v.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| b.id.cmp(&a.id)));
        v.truncate(limit);
        ready(Ok(v))
    }

    fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let mut g = self.lock();
        g.messages.remove(id);
        ready(Ok(g.chats.remove(id).is_some()))
    }

    fn set_active_run(&self, chat_id: &str, run: Option<Uuid>) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let r = match g.chats.get_mut(chat_id) {
            Some(c) => {
                c.active_run = run;
                c.updated_at = now_micros().max(c.updated_at + 1);
                Ok(())
            }
            None => Err(StoreError::NotFound(format!("chat {chat_id}"))),
        };
        ready(r)
    }

    fn replace_messages_from(&self, chat_id: &str, position: i64, messages: Vec<MessageRecord>) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let list = g.messages.entry(chat_id.to_owned()).or_default();
        list.retain(|m| m.position < position);
        list.extend(messages);
        list.sort_by_key(|m| m.position);
        if let Some(c) = g.chats.get_mut(chat_id) {
            c.updated_at = now_micros().max(c.updated_at + 1);
        }
        ready(Ok(()))
    }

    fn upsert_message(&self, message: MessageRecord) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let chat_id = message.chat_id.clone();
        let list = g.messages.entry(chat_id.clone()).or_default();
        match list.iter_mut().find(|m| m.id == message.id) {
            Some(m) => *m = message,
            None => list.push(message),
        }
        list.sort_by_key(|m| m.position);
        if let Some(c) = g.chats.get_mut(&chat_id) {
            c.updated_at = now_micros().max(c.updated_at + 1);
        }
        ready(Ok(()))
    }

    fn messages(&self, chat_id: &str) -> BoxFuture<'_, StoreResult<Vec<MessageRecord>>> {
        ready(Ok(self.lock().messages.get(chat_id).cloned().unwrap_or_default()))
    }
}

impl RunStore for MemoryStore {
    fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let r = if g.runs.contains_key(&run.id) {
            Err(StoreError::Conflict(format!("run {} exists", run.id)))
        } else {
            g.runs.insert(run.id, run);
            Ok(())
        };
        ready(r)
    }

    fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>> {
        ready(Ok(self.lock().runs.get(&id).cloned()))
    }

    fn list_runs(&self, chat_id: Option<&str>, limit: usize) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        let g = self.lock();
        let mut v: Vec<RunRecord> =
            g.runs.values().filter(|r| chat_id.is_none_or(|c| r.chat_id.as_deref() == Some(c))).cloned().collect();
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
        v.truncate(limit);
        ready(Ok(v))
    }

    fn finish_run(&self, id: Uuid, status: RunStatus, error: Option<ErrorInfo>, usage: Usage) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let r = match g.runs.get_mut(&id) {
            Some(run) => {
                run.status = status;
                run.error = error;
                run.usage = usage;
                run.finished_at = Some(now_micros());
                Ok(())
            }
            None => Err(StoreError::NotFound(format!("run {id}"))),
        };
        ready(r)
    }
}

impl EventLog for MemoryStore {
    fn append(&self, batch: &StepBatch) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let log = g.events.entry(batch.run_id).or_default();
        if let Some(dup) = batch.events.iter().find(|e| log.contains_key(&e.seq)) {
            return ready(Err(StoreError::Conflict(format!("event {} of run {} exists", dup.seq, batch.run_id))));
        }
        for e in &batch.events {
            log.insert(e.seq, (**e).clone());
        }
        let last_seq = log.keys().next_back().copied().unwrap_or(0);
        g.checkpoints.entry(batch.run_id).or_default().insert(batch.step, CheckpointRecord::from_batch(batch));
        if let Some(run) = g.runs.get_mut(&batch.run_id) {
            run.last_seq = run.last_seq.max(last_seq);
            run.last_step = run.last_step.max(batch.step);
            if batch.status != RunStatus::Running {
                run.status = batch.status;
                run.finished_at = Some(now_micros());
            }
        }
        ready(Ok(()))
    }

    fn events(&self, run: Uuid, after: u64, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Event>>> {
        let g = self.lock();
        let v = g
            .events
            .get(&run)
            .map(|log| log.range(after + 1..).take(limit).map(|(_, e)| e.clone()).collect())
            .unwrap_or_default();
        ready(Ok(v))
    }

    fn checkpoints(&self, run: Uuid, upto: u32) -> BoxFuture<'_, StoreResult<Vec<CheckpointRecord>>> {
        let g = self.lock();
        let v = g.checkpoints.get(&run).map(|c| c.range(..=upto).map(|(_, r)| r.clone()).collect()).unwrap_or_default();
        ready(Ok(v))
    }
}

impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        ready(Ok(()))
    }
}
