//! The in-memory store: for tests, and the reference behaviour the
//! conformance suite checks the other backends against.
//!
//! One std mutex guards everything: no operation awaits while holding it, so
//! an async lock would only add cost. Notifications go out after the lock is
//! released.
//!
//! Served as a backend (`[store] backend = "memory"`), it is bounded: it
//! keeps the newest `memory_max_runs` finished runs (with their events and
//! checkpoints) and `memory_max_chats` chats, forgetting the oldest beyond
//! (a server kept every chat and event before, 3–5 GB after ~22k chats).
//! [`MemoryStore::new`] keeps everything (tests).

mod calls;
mod verdicts;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{
    Appended, ChatRecord, ChatStore, CheckpointRecord, EventLog, Lease, Leases, Maintenance,
    MessageRecord, NOTIFY_CAPACITY, PruneReport, RunQuery, RunRecord, RunStore, Store, StoreError,
    StoreResult, TurnEnd, TurnOutcome, TurnStart,
};
use crate::events::{ErrorInfo, Event, Usage, now_micros};
use crate::events::{RunStatus, StepBatch};

#[derive(Default)]
struct Inner {
    chats: HashMap<String, ChatRecord>,
    messages: HashMap<String, Vec<MessageRecord>>,
    /// Chats' metadata (only those that have any).
    metadata: HashMap<String, serde_json::Value>,
    runs: HashMap<Uuid, RunRecord>,
    events: HashMap<Uuid, BTreeMap<u64, Event>>,
    checkpoints: HashMap<Uuid, BTreeMap<u32, CheckpointRecord>>,
    leases: HashMap<Uuid, Lease>,
    stops: HashSet<Uuid>,
    verdicts: HashMap<Uuid, Vec<super::VerdictRecord>>,
    /// Model call records by run and seq.
    calls: HashMap<Uuid, BTreeMap<u64, super::calls::CallRecord>>,
    /// Call content by hash: body and last use.
    call_parts: HashMap<String, (String, u64)>,
    /// Finished runs, oldest first (for the bound).
    finished: VecDeque<Uuid>,
    /// Chats in the order they were created (for the bound).
    chat_order: VecDeque<String>,
    limits: Limits,
}

/// What a bounded store keeps (`usize::MAX`: everything).
#[derive(Clone, Copy, Debug)]
struct Limits {
    runs: usize,
    chats: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            runs: usize::MAX,
            chats: usize::MAX,
        }
    }
}

impl Inner {
    /// Notes that `id` finished; forgets the oldest finished runs beyond
    /// the bound.
    fn finished(&mut self, id: Uuid) {
        if self.limits.runs == usize::MAX {
            return;
        }
        self.finished.push_back(id);
        while self.finished.len() > self.limits.runs {
            let Some(old) = self.finished.pop_front() else {
                break;
            };
            self.runs.remove(&old);
            self.events.remove(&old);
            self.checkpoints.remove(&old);
            self.stops.remove(&old);
            self.verdicts.remove(&old);
            self.calls.remove(&old);
        }
    }

    /// Notes a new chat; forgets the oldest idle chats beyond the bound.
    fn chat_created(&mut self, id: &str) {
        if self.limits.chats == usize::MAX {
            return;
        }
        self.chat_order.push_back(id.to_owned());
        let mut kept = 0;
        while self.chat_order.len() > self.limits.chats && kept < self.chat_order.len() {
            let Some(old) = self.chat_order.pop_front() else {
                break;
            };
            if !self.chats.contains_key(&old) {
                continue;
            }
            if self.chats.get(&old).is_some_and(|c| c.active_run.is_some()) {
                // Answering now: keep it, look further.
                self.chat_order.push_back(old);
                kept += 1;
                continue;
            }
            self.chats.remove(&old);
            self.messages.remove(&old);
            self.metadata.remove(&old);
        }
    }
}

/// Everything in process memory.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    notify: broadcast::Sender<Appended>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            notify: broadcast::channel(NOTIFY_CAPACITY).0,
        }
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryStore")
    }
}

impl MemoryStore {
    /// An empty store that keeps everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that keeps the newest `runs` finished runs and
    /// `chats` chats (see the module docs).
    pub fn bounded(runs: usize, chats: usize) -> Self {
        let store = Self::default();
        store.lock().limits = Limits {
            runs: runs.max(1),
            chats: chats.max(1),
        };
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn ready<T: Send + 'static>(v: T) -> BoxFuture<'static, T> {
    Box::pin(async move { v })
}

impl ChatStore for MemoryStore {
    fn begin_turn(&self, turn: TurnStart) -> BoxFuture<'_, StoreResult<TurnOutcome>> {
        let mut g = self.lock();
        let new = !g.chats.contains_key(&turn.chat.id);
        let mut chat = g
            .chats
            .entry(turn.chat.id.clone())
            .or_insert_with(|| ChatRecord {
                active_run: None,
                ..turn.chat.clone()
            })
            .clone();
        if chat.user_id != turn.chat.user_id {
            return ready(Ok(TurnOutcome::NotOwner));
        }
        if let Some(active) = chat.active_run
            && g.runs
                .get(&active)
                .is_some_and(|r| r.status == RunStatus::Running)
        {
            return ready(Ok(TurnOutcome::Busy(active)));
        }
        if g.runs.contains_key(&turn.run.id) {
            return ready(Err(StoreError::Conflict(format!(
                "run {} exists",
                turn.run.id
            ))));
        }
        let id = turn.run.id;
        g.runs.insert(id, turn.run);
        g.leases.insert(
            id,
            Lease {
                owner: turn.owner,
                until: turn.lease_until,
            },
        );
        let mut messages = turn.messages;
        messages.sort_by_key(|m| m.position);
        g.messages.insert(chat.id.clone(), messages);
        chat.active_run = Some(id);
        chat.updated_at = now_micros().max(chat.updated_at + 1);
        g.chats.insert(chat.id.clone(), chat.clone());
        if new {
            g.chat_created(&chat.id);
        }
        ready(Ok(TurnOutcome::Started(chat)))
    }

    fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>> {
        let mut g = self.lock();
        let new = !g.chats.contains_key(&chat.id);
        let stored = g.chats.entry(chat.id.clone()).or_insert(chat).clone();
        if new {
            g.chat_created(&stored.id);
        }
        ready(Ok(stored))
    }

    fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>> {
        ready(Ok(self.lock().chats.get(id).cloned()))
    }

    fn list_chats(
        &self,
        user_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>> {
        let g = self.lock();
        let mut v: Vec<ChatRecord> = g
            .chats
            .values()
            .filter(|c| c.user_id == user_id)
            .cloned()
            .collect();
        v.sort_by(|a, b| {
            b.updated_at
                .cmp(&a.updated_at)
                .then_with(|| b.id.cmp(&a.id))
        });
        v.truncate(limit);
        ready(Ok(v))
    }

    fn chats_metadata(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<HashMap<String, serde_json::Value>>> {
        let g = self.lock();
        let out = g
            .metadata
            .iter()
            .filter(|(id, _)| g.chats.get(*id).is_some_and(|c| c.user_id == user_id))
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect();
        ready(Ok(out))
    }

    fn set_chat_metadata(
        &self,
        chat_id: &str,
        metadata: serde_json::Value,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let mut g = self.lock();
        let Some(c) = g.chats.get_mut(chat_id) else {
            return ready(Ok(false));
        };
        c.updated_at = now_micros().max(c.updated_at + 1);
        if metadata.as_object().is_some_and(|m| m.is_empty()) {
            g.metadata.remove(chat_id);
        } else {
            g.metadata.insert(chat_id.to_owned(), metadata);
        }
        ready(Ok(true))
    }

    fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let mut g = self.lock();
        g.messages.remove(id);
        g.metadata.remove(id);
        ready(Ok(g.chats.remove(id).is_some()))
    }

    fn release_chat(&self, chat_id: &str, run: Uuid) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        if let Some(c) = g
            .chats
            .get_mut(chat_id)
            .filter(|c| c.active_run == Some(run))
        {
            c.active_run = None;
            c.updated_at = now_micros().max(c.updated_at + 1);
        }
        ready(Ok(()))
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

    fn replace_messages_from(
        &self,
        chat_id: &str,
        position: i64,
        messages: Vec<MessageRecord>,
    ) -> BoxFuture<'_, StoreResult<()>> {
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
        ready(Ok(self
            .lock()
            .messages
            .get(chat_id)
            .cloned()
            .unwrap_or_default()))
    }

    fn end_turn(&self, end: TurnEnd) -> BoxFuture<'_, StoreResult<()>> {
        // One lock: no reader sees the message without the run's end.
        let mut guard = self.lock();
        let g = &mut *guard;
        let chat_id = end.message.chat_id.clone();
        if let Some(c) = g.chats.get_mut(&chat_id) {
            c.updated_at = now_micros().max(c.updated_at + 1);
            let list = g.messages.entry(chat_id.clone()).or_default();
            match list.iter_mut().find(|m| m.id == end.message.id) {
                Some(m) => *m = end.message,
                None => list.push(end.message),
            }
            list.sort_by_key(|m| m.position);
        }
        let finished = match g.runs.get_mut(&end.run_id) {
            Some(run) => {
                run.status = end.status;
                run.error = end.error;
                run.usage = end.usage;
                run.finished_at = Some(now_micros());
                g.leases.remove(&end.run_id);
                g.finished(end.run_id);
                Ok(())
            }
            None => Err(StoreError::NotFound(format!("run {}", end.run_id))),
        };
        if end.release
            && let Some(c) = g
                .chats
                .get_mut(&chat_id)
                .filter(|c| c.active_run == Some(end.run_id))
        {
            c.active_run = None;
            c.updated_at = now_micros().max(c.updated_at + 1);
        }
        ready(finished)
    }
}

impl RunStore for MemoryStore {
    fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let r = match g.runs.entry(run.id) {
            std::collections::hash_map::Entry::Occupied(_) => {
                Err(StoreError::Conflict(format!("run {} exists", run.id)))
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(run);
                Ok(())
            }
        };
        ready(r)
    }

    fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>> {
        ready(Ok(self.lock().runs.get(&id).cloned()))
    }

    fn list_runs(&self, query: &RunQuery) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        let g = self.lock();
        let mut v: Vec<RunRecord> = g
            .runs
            .values()
            .filter(|r| query.matches(r))
            .cloned()
            .collect();
        v.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| b.id.cmp(&a.id))
        });
        v.truncate(query.limit);
        ready(Ok(v))
    }

    fn newest_run_status_by_chat(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<HashMap<String, RunStatus>>> {
        let g = self.lock();
        let mut newest: HashMap<String, &RunRecord> = HashMap::new();
        for r in g.runs.values().filter(|r| r.user_id == user_id) {
            let Some(chat) = &r.chat_id else { continue };
            let e = newest.entry(chat.clone()).or_insert(r);
            if (r.created_at, r.id) > (e.created_at, e.id) {
                *e = r;
            }
        }
        let out = newest.into_iter().map(|(c, r)| (c, r.status)).collect();
        ready(Ok(out))
    }

    fn finish_run(
        &self,
        id: Uuid,
        status: RunStatus,
        error: Option<ErrorInfo>,
        usage: Usage,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let r = match g.runs.get_mut(&id) {
            Some(run) => {
                run.status = status;
                run.error = error;
                run.usage = usage;
                run.finished_at = Some(now_micros());
                g.leases.remove(&id);
                g.finished(id);
                Ok(())
            }
            None => Err(StoreError::NotFound(format!("run {id}"))),
        };
        ready(r)
    }

    fn usage_since(&self, user: &str, since: u64) -> BoxFuture<'_, StoreResult<Usage>> {
        let mut total = Usage::default();
        for r in self.lock().runs.values() {
            if r.user_id == user && r.created_at >= since {
                total += r.usage;
            }
        }
        ready(Ok(total))
    }
}

impl EventLog for MemoryStore {
    fn append_steps(&self, batches: &[StepBatch]) -> BoxFuture<'_, StoreResult<()>> {
        let Some(last) = batches.last() else {
            return ready(Ok(()));
        };
        let run_id = last.run_id;
        let mut g = self.lock();
        let log = g.events.entry(run_id).or_default();
        let mut seen = std::collections::HashSet::new();
        let events = batches.iter().flat_map(|b| &b.events);
        if let Some(dup) = events
            .clone()
            .find(|e| log.contains_key(&e.seq) || !seen.insert(e.seq))
        {
            return ready(Err(StoreError::Conflict(format!(
                "event {} of run {run_id} exists",
                dup.seq
            ))));
        }
        for e in events.clone() {
            log.insert(e.seq, (**e).clone());
        }
        let checkpoints = g.checkpoints.entry(run_id).or_default();
        for b in batches {
            checkpoints.insert(b.step, CheckpointRecord::from_batch(b));
        }
        let mut last_seq = events.map(|e| e.seq).max().unwrap_or(0);
        if let Some(run) = g.runs.get_mut(&run_id) {
            run.last_seq = run.last_seq.max(last_seq);
            last_seq = run.last_seq;
            run.last_step = batches.iter().map(|b| b.step).fold(run.last_step, u32::max);
            if last.status != RunStatus::Running {
                run.status = last.status;
                run.finished_at = Some(now_micros());
                g.leases.remove(&run_id);
                g.finished(run_id);
            }
        }
        drop(g);
        // No subscriber is not an error.
        let _ = self.notify.send((run_id, last_seq));
        ready(Ok(()))
    }

    fn append_events(
        &self,
        run: Uuid,
        events: &[std::sync::Arc<Event>],
    ) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let log = g.events.entry(run).or_default();
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = events
            .iter()
            .find(|e| log.contains_key(&e.seq) || !seen.insert(e.seq))
        {
            return ready(Err(StoreError::Conflict(format!(
                "event {} of run {run} exists",
                dup.seq
            ))));
        }
        for e in events {
            log.insert(e.seq, (**e).clone());
        }
        let mut last_seq = events.iter().map(|e| e.seq).max().unwrap_or(0);
        if let Some(r) = g.runs.get_mut(&run) {
            r.last_seq = r.last_seq.max(last_seq);
            last_seq = r.last_seq;
        }
        drop(g);
        let _ = self.notify.send((run, last_seq));
        ready(Ok(()))
    }

    fn events(
        &self,
        run: Uuid,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<Event>>> {
        let g = self.lock();
        let v = g
            .events
            .get(&run)
            .map(|log| {
                log.range(after + 1..)
                    .take(limit)
                    .map(|(_, e)| e.clone())
                    .collect()
            })
            .unwrap_or_default();
        ready(Ok(v))
    }

    fn checkpoints(
        &self,
        run: Uuid,
        upto: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<CheckpointRecord>>> {
        let g = self.lock();
        let v = g
            .checkpoints
            .get(&run)
            .map(|c| c.range(..=upto).map(|(_, r)| r.clone()).collect())
            .unwrap_or_default();
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

impl Leases for MemoryStore {
    fn create_leased_run(
        &self,
        run: RunRecord,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let id = run.id;
        let r = match g.runs.entry(id) {
            std::collections::hash_map::Entry::Occupied(_) => {
                Err(StoreError::Conflict(format!("run {id} exists")))
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(run);
                Ok(())
            }
        };
        if r.is_ok() {
            g.leases.insert(
                id,
                Lease {
                    owner: owner.to_owned(),
                    until,
                },
            );
        }
        ready(r)
    }

    fn acquire_lease(
        &self,
        run: Uuid,
        owner: &str,
        now: u64,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let mut g = self.lock();
        let running = g
            .runs
            .get(&run)
            .is_some_and(|r| r.status == RunStatus::Running);
        let free = g
            .leases
            .get(&run)
            .is_none_or(|l| l.until < now || l.owner == owner);
        let taken = running && free;
        if taken {
            g.leases.insert(
                run,
                Lease {
                    owner: owner.to_owned(),
                    until,
                },
            );
        }
        ready(Ok(taken))
    }

    fn renew_leases(&self, owner: &str, until: u64) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        let mut g = self.lock();
        let Inner { runs, leases, .. } = &mut *g;
        let mut held: Vec<Uuid> = leases
            .iter_mut()
            .filter(|(id, l)| {
                l.owner == owner && runs.get(id).is_some_and(|r| r.status == RunStatus::Running)
            })
            .map(|(id, l)| {
                l.until = until;
                *id
            })
            .collect();
        held.sort_unstable();
        ready(Ok(held))
    }

    fn claim_orphans(
        &self,
        owner: &str,
        now: u64,
        until: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        let mut g = self.lock();
        let Inner { runs, leases, .. } = &mut *g;
        let mut orphans: Vec<RunRecord> = runs
            .values()
            .filter(|r| {
                r.status == RunStatus::Running && leases.get(&r.id).is_none_or(|l| l.until < now)
            })
            .cloned()
            .collect();
        orphans.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        orphans.truncate(limit);
        for r in &orphans {
            leases.insert(
                r.id,
                Lease {
                    owner: owner.to_owned(),
                    until,
                },
            );
        }
        ready(Ok(orphans))
    }

    fn release_lease(&self, run: Uuid, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        if g.leases.get(&run).is_some_and(|l| l.owner == owner) {
            g.leases.remove(&run);
        }
        ready(Ok(()))
    }

    fn lease(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Option<Lease>>> {
        ready(Ok(self.lock().leases.get(&run).cloned()))
    }

    fn request_stop(&self, run: Uuid) -> BoxFuture<'_, StoreResult<bool>> {
        let mut g = self.lock();
        let running = g
            .runs
            .get(&run)
            .is_some_and(|r| r.status == RunStatus::Running);
        if running {
            g.stops.insert(run);
        }
        ready(Ok(running))
    }

    fn claim_interrupted(
        &self,
        run: Uuid,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let mut g = self.lock();
        let taken = match g.runs.get_mut(&run) {
            Some(r) if r.status == RunStatus::Interrupted => {
                r.status = RunStatus::Running;
                r.finished_at = None;
                true
            }
            _ => false,
        };
        if taken {
            g.leases.insert(
                run,
                Lease {
                    owner: owner.to_owned(),
                    until,
                },
            );
        }
        ready(Ok(taken))
    }

    fn stop_requests(&self, owner: &str) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
        let g = self.lock();
        let mut out: Vec<Uuid> = g
            .stops
            .iter()
            .filter(|id| {
                g.runs
                    .get(id)
                    .is_some_and(|r| r.status == RunStatus::Running)
                    && g.leases.get(id).is_some_and(|l| l.owner == owner)
            })
            .copied()
            .collect();
        out.sort_unstable();
        ready(Ok(out))
    }
}

impl Maintenance for MemoryStore {
    fn prune(&self, before: u64, chats: bool) -> BoxFuture<'_, StoreResult<PruneReport>> {
        let mut g = self.lock();
        let mut report = PruneReport::default();
        let old: Vec<Uuid> = g
            .runs
            .values()
            .filter(|r| r.status != RunStatus::Running && r.created_at < before)
            .map(|r| r.id)
            .collect();
        for id in old {
            g.runs.remove(&id);
            g.leases.remove(&id);
            g.stops.remove(&id);
            g.verdicts.remove(&id);
            g.calls.remove(&id);
            report.runs += 1;
            report.events += g.events.remove(&id).map_or(0, |l| l.len() as u64);
            report.checkpoints += g.checkpoints.remove(&id).map_or(0, |c| c.len() as u64);
        }
        if chats {
            let busy: HashSet<&str> = g
                .runs
                .values()
                .filter(|r| r.status == RunStatus::Running)
                .filter_map(|r| r.chat_id.as_deref())
                .collect();
            let stale: Vec<String> = g
                .chats
                .values()
                .filter(|c| c.updated_at < before && !busy.contains(c.id.as_str()))
                .map(|c| c.id.clone())
                .collect();
            for id in stale {
                g.chats.remove(&id);
                g.metadata.remove(&id);
                report.chats += 1;
                report.messages += g.messages.remove(&id).map_or(0, |m| m.len() as u64);
            }
        }
        // Call content older than the runs kept goes too.
        calls::expire(&mut g, before);
        ready(Ok(report))
    }

    fn subscribe(&self) -> broadcast::Receiver<Appended> {
        self.notify.subscribe()
    }
}
