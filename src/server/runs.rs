//! Runs in flight: one [`RunHub`] per run, decoupled from any HTTP request.
//!
//! A run executes in its own task; its events flow through the hub, which
//! keeps only the events not yet in the store (everything before the last
//! `checkpoint_saved` is dropped from memory — the store has it). Streams
//! subscribe to the hub with a cursor and pull: events from the hub's
//! buffer, older ones from the store, so a slow or reconnecting client never
//! makes the server hold more than one unsaved step per run. When the run
//! ends the hub saves the assistant message, clears the chat's active run
//! and lingers briefly so a quick reconnect still gets the whole stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use super::AppState;
use crate::config::OnDisconnect;
use crate::events::{Event, EventKind, now_micros};
use crate::nodes::Graph;
use std::future::Future;
use std::pin::Pin;

use crate::runtime::{self, Resume, RunError, RunOptions, RunOutcome, RunStatus};
use crate::sse::{Assembler, Bridge, BridgeConfig};
use crate::store::{LogCheckpointer, MessageRecord};

/// Follows a run executing elsewhere: reads its events from the log as
/// they land (woken by store notifications, polling as a fallback) until
/// its last event.
async fn follow(state: Arc<AppState>, hub: Arc<RunHub>) {
    let mut notes = state.store.subscribe();
    let mut cursor = 0u64;
    loop {
        match state.store.events(hub.run_id, cursor, 512).await {
            Ok(events) if !events.is_empty() => {
                let terminal = events.iter().any(|e| e.event.is_terminal());
                cursor = events.last().map_or(cursor, |e| e.seq);
                hub.stored_up_to(cursor);
                if terminal {
                    break;
                }
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(run_id = %hub.run_id, error = %e, "following a run: the event log is unavailable")
            }
        }
        tokio::select! {
            _ = async {
                while let Ok((run, _)) = notes.recv().await {
                    if run == hub.run_id {
                        break;
                    }
                }
            } => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = state.runs.shutdown.cancelled() => break,
        }
    }
    // The executing instance stores the message and the run's status just
    // after the last event; streams end (`[DONE]`) once that is visible.
    for _ in 0..100 {
        match state.store.get_run(hub.run_id).await {
            Ok(Some(r)) if r.status == crate::runtime::RunStatus::Running => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ => break,
        }
    }
    hub.finish();
    tokio::select! {
        _ = tokio::time::sleep(state.config.server.linger.0) => {}
        _ = state.runs.shutdown.cancelled() => {}
    }
    state.runs.remove(&hub);
}

/// What the hub publishes to its subscribers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Progress {
    /// Highest seq received.
    pub last_seq: u64,
    /// The run is over and every event has arrived.
    pub done: bool,
}

#[derive(Debug, Default)]
struct Buffer {
    /// Events not yet known to be stored, in seq order.
    events: Vec<Arc<Event>>,
    /// Every event with `seq <= stored` is in the store.
    stored: u64,
}

/// A run in flight (or just finished).
#[derive(Debug)]
pub(super) struct RunHub {
    /// The run.
    pub run_id: Uuid,
    /// The chat it answers.
    pub chat_id: String,
    /// Stream configuration (message id, metadata, surfaces).
    pub bridge: BridgeConfig,
    /// Cancels the run.
    pub cancel: CancellationToken,
    /// This hub only follows the log of a run executing elsewhere.
    pub follower: bool,
    /// Events after this seq were lost in a crash and executed again: a
    /// client's `Last-Event-ID` beyond it refers to lost events, so resumes
    /// replay the whole stream.
    pub recovered_at: Option<u64>,
    /// Stops the run without ending it (shutdown): its last checkpoint
    /// stays, and another instance (or this one, restarted) resumes it.
    pub suspend: CancellationToken,
    buffer: Mutex<Buffer>,
    progress: watch::Sender<Progress>,
    subscribers: AtomicUsize,
    on_disconnect: OnDisconnect,
}

/// What a subscriber reads next.
#[derive(Debug)]
pub(super) enum Next {
    /// Events after the cursor, from memory.
    Events(Vec<Arc<Event>>),
    /// The events after the cursor are in the store (up to this seq).
    InStore(u64),
    /// Nothing new yet.
    Wait,
}

impl RunHub {
    fn push(&self, ev: Arc<Event>) {
        let seq = ev.seq;
        {
            let mut b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            if let EventKind::CheckpointSaved { .. } = ev.event {
                // Everything before this event has been committed.
                b.stored = seq - 1;
                b.events.retain(|e| e.seq >= seq);
            }
            b.events.push(ev);
        }
        self.progress.send_modify(|p| p.last_seq = seq);
    }

    fn finish(&self) {
        self.progress.send_modify(|p| p.done = true);
    }

    /// Notes that every event up to `seq` is in the store (follower hubs).
    fn stored_up_to(&self, seq: u64) {
        {
            let mut b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            b.stored = b.stored.max(seq);
            b.events.retain(|e| e.seq > seq);
        }
        self.progress
            .send_modify(|p| p.last_seq = p.last_seq.max(seq));
    }

    /// Progress updates.
    pub(super) fn watch(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Whether the run is over.
    pub(super) fn is_done(&self) -> bool {
        self.progress.borrow().done
    }

    /// The events after `cursor`.
    pub(super) fn next(&self, cursor: u64) -> Next {
        let b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        match b.events.first() {
            Some(first) if first.seq <= cursor + 1 => {
                let from = b.events.partition_point(|e| e.seq <= cursor);
                if from == b.events.len() {
                    Next::Wait
                } else {
                    Next::Events(b.events[from..].to_vec())
                }
            }
            _ if cursor < b.stored => Next::InStore(b.stored),
            Some(_) => Next::InStore(b.events[0].seq - 1),
            None => Next::Wait,
        }
    }

    /// Registers a subscriber; dropping the guard unregisters it (and, with
    /// `on_disconnect = cancel`, cancels the run when the last one leaves).
    pub(super) fn subscribe(self: &Arc<Self>) -> Subscription {
        self.subscribers.fetch_add(1, Ordering::SeqCst);
        Subscription(Arc::clone(self))
    }
}

/// A live subscription to a hub.
#[derive(Debug)]
pub(super) struct Subscription(Arc<RunHub>);

impl Drop for Subscription {
    fn drop(&mut self) {
        let left = self.0.subscribers.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && self.0.on_disconnect == OnDisconnect::Cancel && !self.0.is_done() {
            tracing::info!(run_id = %self.0.run_id, "last client disconnected; cancelling the run");
            self.0.cancel.cancel();
        }
    }
}

/// Why a run could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StartError {
    /// The chat already has a run streaming.
    Busy,
    /// Too many runs at once.
    Full,
    /// The server is shutting down.
    ShuttingDown,
}

/// Everything about a run the manager needs to start it.
#[derive(Debug)]
pub(super) struct RunStart {
    /// Run id.
    pub run_id: Uuid,
    /// Chat id.
    pub chat_id: String,
    /// Owner.
    pub user_id: String,
    /// Correlation id.
    pub request_id: String,
    /// The assistant message id.
    pub message_id: String,
    /// Its position in the chat.
    pub position: i64,
    /// Stream metadata.
    pub metadata: Value,
    /// The graph.
    pub graph: Arc<Graph>,
    /// A fresh run, or one resumed from its checkpoint.
    pub begin: Begin,
}

/// How a run begins.
#[derive(Debug)]
pub(super) enum Begin {
    /// From its input state.
    Fresh(Value),
    /// From its last checkpoint (crash recovery); `history` are its stored
    /// events, which the stored message must include.
    Resumed {
        /// State and frontier.
        from: Resume,
        /// Events already in the log.
        history: Vec<Event>,
    },
}

/// All hubs, by chat.
#[derive(Debug, Default)]
pub struct RunManager {
    by_chat: Mutex<HashMap<String, Arc<RunHub>>>,
    running: AtomicUsize,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl RunManager {
    /// The chat's current (or lingering) hub.
    pub(super) fn for_chat(&self, chat_id: &str) -> Option<Arc<RunHub>> {
        self.by_chat
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(chat_id)
            .cloned()
    }

    /// Cancels the run if this process executes it; false otherwise.
    pub(super) fn cancel_run(&self, run_id: Uuid) -> bool {
        let chats = self.by_chat.lock().unwrap_or_else(PoisonError::into_inner);
        match chats
            .values()
            .find(|h| h.run_id == run_id && !h.follower && !h.is_done())
        {
            Some(h) => {
                h.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether the chat has a run that is not over.
    pub(super) fn is_busy(&self, chat_id: &str) -> bool {
        self.for_chat(chat_id).is_some_and(|h| !h.is_done())
    }

    /// Runs executing now.
    pub(super) fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Starts a run in the background and returns its hub.
    ///
    /// # Errors
    /// The chat is busy, the server is full or shutting down.
    pub(super) fn start(
        &self,
        state: &Arc<AppState>,
        start: RunStart,
    ) -> Result<Arc<RunHub>, StartError> {
        if self.shutdown.is_cancelled() {
            return Err(StartError::ShuttingDown);
        }
        let mut chats = self.by_chat.lock().unwrap_or_else(PoisonError::into_inner);
        // A hub that only follows the log of this very run (it executed
        // elsewhere until now) gives way; its subscribers keep following.
        if chats
            .get(&start.chat_id)
            .is_some_and(|h| !h.is_done() && (!h.follower || h.run_id != start.run_id))
        {
            return Err(StartError::Busy);
        }
        if self.running.load(Ordering::SeqCst) >= state.config.server.max_concurrent_runs {
            return Err(StartError::Full);
        }
        self.running.fetch_add(1, Ordering::SeqCst);
        let recovered_at = match &start.begin {
            Begin::Fresh(_) => None,
            Begin::Resumed { from, .. } => Some(from.last_seq),
        };
        let (bridge, stored) = match &start.begin {
            Begin::Fresh(_) => (
                BridgeConfig::for_graph(
                    &start.graph,
                    start.message_id.clone(),
                    start.metadata.clone(),
                ),
                0,
            ),
            Begin::Resumed { from, history } => {
                let recorded = history.iter().find_map(|e| match &e.event {
                    EventKind::RunStarted {
                        stream: Some(s), ..
                    } => BridgeConfig::from_json(s),
                    _ => None,
                });
                let bridge = recorded.unwrap_or_else(|| {
                    BridgeConfig::for_graph(
                        &start.graph,
                        start.message_id.clone(),
                        start.metadata.clone(),
                    )
                });
                (bridge, from.last_seq)
            }
        };
        let hub = Arc::new(RunHub {
            run_id: start.run_id,
            chat_id: start.chat_id.clone(),
            bridge,
            follower: false,
            recovered_at,
            cancel: CancellationToken::new(),
            suspend: CancellationToken::new(),
            buffer: Mutex::new(Buffer {
                events: Vec::new(),
                stored,
            }),
            progress: watch::channel(Progress {
                last_seq: stored,
                done: false,
            })
            .0,
            subscribers: AtomicUsize::new(0),
            on_disconnect: state.config.server.on_disconnect,
        });
        chats.insert(start.chat_id.clone(), Arc::clone(&hub));
        drop(chats);
        let span = tracing::info_span!(
            "run",
            run_id = %start.run_id,
            request_id = %start.request_id,
            chat_id = %start.chat_id,
            user = %start.user_id,
            graph = %start.graph.id,
        );
        self.tracker
            .spawn(drive(Arc::clone(state), Arc::clone(&hub), start).instrument(span));
        Ok(hub)
    }

    fn remove(&self, hub: &Arc<RunHub>) {
        let mut chats = self.by_chat.lock().unwrap_or_else(PoisonError::into_inner);
        if chats.get(&hub.chat_id).is_some_and(|h| Arc::ptr_eq(h, hub)) {
            chats.remove(&hub.chat_id);
        }
    }

    /// A hub that follows a run executing on another instance through the
    /// event log (every event it has is in the store).
    pub(super) fn follow(
        &self,
        state: &Arc<AppState>,
        chat_id: &str,
        run_id: Uuid,
        bridge: BridgeConfig,
    ) -> Arc<RunHub> {
        let mut chats = self.by_chat.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = chats.get(chat_id).filter(|h| h.run_id == run_id) {
            return Arc::clone(h);
        }
        let hub = Arc::new(RunHub {
            run_id,
            chat_id: chat_id.to_owned(),
            bridge,
            follower: true,
            recovered_at: None,
            cancel: CancellationToken::new(),
            suspend: CancellationToken::new(),
            buffer: Mutex::new(Buffer::default()),
            progress: watch::channel(Progress::default()).0,
            subscribers: AtomicUsize::new(0),
            on_disconnect: OnDisconnect::Finish,
        });
        chats.insert(chat_id.to_owned(), Arc::clone(&hub));
        drop(chats);
        self.tracker
            .spawn(follow(Arc::clone(state), Arc::clone(&hub)));
        hub
    }

    /// Stops accepting runs, waits up to `grace` for the running ones to
    /// finish, then suspends the rest: each keeps its last checkpoint and
    /// gives up its lease, so another instance (or this one, restarted)
    /// resumes it.
    pub(super) async fn shutdown(&self, grace: Duration) {
        self.shutdown.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            let hubs: Vec<Arc<RunHub>> = self
                .by_chat
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .cloned()
                .collect();
            tracing::warn!(
                runs = hubs.len(),
                "shutdown grace period over; suspending runs still in flight at their last checkpoint"
            );
            for h in hubs {
                h.suspend.cancel();
            }
            self.tracker.wait().await;
        }
    }
}

/// Executes one run: the executor and the event pump side by side, then
/// the bookkeeping once it is over.
async fn drive(state: Arc<AppState>, hub: Arc<RunHub>, start: RunStart) {
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(256);
    let opts = RunOptions {
        run_id: start.run_id,
        events: Some(tx),
        cancel: hub.cancel.clone(),
        checkpointer: Some(Arc::new(
            LogCheckpointer::new(Arc::clone(&state.store))
                .with_outage_limit(state.config.server.store_outage_limit.0),
        )),
        stream: Some(hub.bridge.to_json()),
        durability: state.config.server.durability,
        ..Default::default()
    };
    let graph_id = start.graph.id.to_string();
    type RunFuture = Pin<Box<dyn Future<Output = Result<RunOutcome, RunError>> + Send>>;
    let (history, run): (Vec<Event>, RunFuture) = match start.begin {
        Begin::Fresh(input) => (
            Vec::new(),
            Box::pin(runtime::run(
                Arc::clone(&start.graph),
                Arc::clone(&state.services),
                input,
                opts,
            )),
        ),
        Begin::Resumed { from, history } => (
            history,
            Box::pin(runtime::resume(
                Arc::clone(&start.graph),
                Arc::clone(&state.services),
                from,
                opts,
            )),
        ),
    };
    let pump = async {
        let mut bridge = Bridge::new(hub.bridge.clone());
        let mut assembler = Assembler::new();
        let mut chunks = Vec::new();
        // What the client saw before a crash is part of the message too.
        for ev in &history {
            chunks.clear();
            bridge.on_event(ev, &mut chunks);
            chunks.iter().for_each(|c| assembler.push(c));
        }
        while let Some(ev) = rx.recv().await {
            state.metrics.observe_event(&graph_id, &ev);
            chunks.clear();
            bridge.on_event(&ev, &mut chunks);
            chunks.iter().for_each(|c| assembler.push(c));
            hub.push(ev);
        }
        assembler
    };
    let (result, assembler) = tokio::select! {
        r = async { tokio::join!(run, pump) } => r,
        _ = hub.suspend.cancelled() => {
            // Shutdown: leave the run `running` at its last checkpoint and
            // let another instance take it over.
            if let Err(e) = state.store.release_lease(start.run_id, &state.instance).await {
                tracing::warn!(error = %e, "could not release the lease of a suspended run");
            }
            state.runs.running.fetch_sub(1, Ordering::SeqCst);
            hub.finish();
            tracing::info!("run suspended at its last checkpoint");
            state.runs.remove(&hub);
            return;
        }
    };
    let (status, error, usage) = match &result {
        Ok(out) => (RunStatus::Finished, None, out.usage),
        Err(runtime::RunError::Cancelled) => (RunStatus::Cancelled, None, Default::default()),
        Err(e) => {
            // The client saw only the reference (the run id); the detail is here.
            tracing::error!(reference = %start.run_id, error = %e, "run failed");
            (RunStatus::Failed, Some(e.info()), Default::default())
        }
    };
    let outcome = match status {
        RunStatus::Finished => "finished",
        RunStatus::Cancelled => "cancelled",
        _ => "failed",
    };
    let message = MessageRecord {
        chat_id: start.chat_id.clone(),
        id: start.message_id.clone(),
        role: "assistant".into(),
        parts: Value::Array(assembler.parts().to_vec()),
        metadata: assembler.metadata(),
        position: start.position,
        created_at: now_micros(),
    };
    // A chat deleted while it was answering stays deleted.
    match state.store.get_chat(&start.chat_id).await {
        Ok(Some(_)) => {
            if let Err(e) = state.store.upsert_message(message).await {
                tracing::error!(error = %e, "could not store the assistant message");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "could not store the assistant message"),
    }
    if let Err(e) = state
        .store
        .finish_run(start.run_id, status, error, usage)
        .await
    {
        tracing::error!(error = %e, "could not record the end of the run");
    }
    if let Err(e) = state.store.set_active_run(&start.chat_id, None).await {
        tracing::debug!(error = %e, "could not clear the chat's active run");
    }
    state.metrics.run_finished(&graph_id, outcome);
    state.runs.running.fetch_sub(1, Ordering::SeqCst);
    hub.finish();
    tracing::info!(outcome, "run over");
    let linger = state.config.server.linger.0;
    tokio::select! {
        _ = tokio::time::sleep(linger) => {}
        _ = state.runs.shutdown.cancelled() => {}
    }
    state.runs.remove(&hub);
}
