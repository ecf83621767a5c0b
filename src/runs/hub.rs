//! One run in flight and its subscribers: a [`RunHub`] per run, decoupled
//! from any HTTP request.
//!
//! A run executes in its own task; its events flow through the hub, which
//! keeps only the events not yet in the store (everything before the last
//! `checkpoint_saved` is dropped from memory — the store has it). Streams
//! subscribe to the hub with a cursor and pull: events from the hub's
//! buffer, older ones from the store, so a slow or reconnecting client never
//! makes the server hold more than one unsaved step per run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::OnDisconnect;
use crate::events::{Event, EventKind};
use crate::sse::BridgeConfig;

/// What the hub publishes to its subscribers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
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
pub struct RunHub {
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
    /// A paused run continuing: its events up to this seq are from before
    /// the pause (the client has them; the pause does not end the stream).
    pub resumed: u64,
    /// Stops the run without ending it (shutdown): its last checkpoint
    /// stays, and another instance (or this one, restarted) resumes it.
    pub suspend: CancellationToken,
    buffer: Mutex<Buffer>,
    progress: watch::Sender<Progress>,
    subscribers: AtomicUsize,
    on_disconnect: OnDisconnect,
    /// Events arrive stored: memory keeps only the newest [`RECENT`].
    durable: bool,
    /// Why the run stopped short of its last event (its store gave out).
    failure: std::sync::OnceLock<String>,
}

/// With visible durability, how many events before the newest group a hub
/// keeps for subscribers a little behind (older ones are read from the
/// store). A subscriber that keeps up reads each group as it arrives. Each
/// event held cost ~350 bytes when an `Event` was 304 (152 now that its
/// large variants are boxed): at 64–128 held per run the windows were
/// ~29 MB of the peak heap at 1,000 paced chats (heaptrack), and ~17 are
/// ~6 MB.
const RECENT: usize = 16;

/// How a hub starts out.
pub(super) struct HubInit {
    pub(super) run_id: Uuid,
    pub(super) chat_id: String,
    pub(super) bridge: BridgeConfig,
    pub(super) follower: bool,
    pub(super) recovered_at: Option<u64>,
    pub(super) resumed: u64,
    /// Events up to this seq are in the store already.
    pub(super) stored: u64,
    /// Every event is stored before it is pushed (visible durability).
    pub(super) durable: bool,
    pub(super) on_disconnect: OnDisconnect,
}

impl HubInit {
    /// A hub over a run's stored log, executed elsewhere (or over): its
    /// events up to `stored` are in the store already.
    pub(super) fn reader(run_id: Uuid, chat_id: &str, bridge: BridgeConfig, stored: u64) -> Self {
        Self {
            run_id,
            chat_id: chat_id.to_owned(),
            bridge,
            follower: true,
            recovered_at: None,
            resumed: 0,
            stored,
            durable: true,
            on_disconnect: OnDisconnect::Finish,
        }
    }
}

/// What a subscriber reads next.
#[derive(Debug)]
pub enum Next {
    /// Events after the cursor, from memory.
    Events(Vec<Arc<Event>>),
    /// The events after the cursor are in the store (up to this seq).
    InStore(u64),
    /// Nothing new yet.
    Wait,
}

impl RunHub {
    /// A hub.
    pub(super) fn new(init: HubInit) -> Self {
        Self {
            run_id: init.run_id,
            chat_id: init.chat_id,
            bridge: init.bridge,
            follower: init.follower,
            recovered_at: init.recovered_at,
            resumed: init.resumed,
            cancel: CancellationToken::new(),
            suspend: CancellationToken::new(),
            buffer: Mutex::new(Buffer {
                events: Vec::new(),
                stored: init.stored,
            }),
            progress: watch::channel(Progress {
                last_seq: init.stored,
                done: false,
            })
            .0,
            subscribers: AtomicUsize::new(0),
            on_disconnect: init.on_disconnect,
            durable: init.durable,
            failure: std::sync::OnceLock::new(),
        }
    }

    /// Notes why the run stopped before its last event could be stored:
    /// streams that run out of events end with this as their `error`.
    pub(super) fn fail(&self, why: String) {
        let _ = self.failure.set(why);
    }

    /// Why the run stopped short of its last event, if it did (its store
    /// gave out): streams that run out of events end with this.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    /// Adds a group of events (in seq order) and wakes the subscribers
    /// once for all of them.
    pub(super) fn push(&self, group: &mut Vec<Arc<Event>>) {
        let Some(last) = group.last().map(|e| e.seq) else {
            return;
        };
        {
            let mut b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            if self.durable {
                // It is stored: memory is only a cache of the newest events,
                // this group and the `RECENT` before it.
                b.stored = last;
                let old = b.events.len().saturating_sub(RECENT);
                b.events.drain(..old);
                b.events.append(group);
            } else {
                for ev in group.drain(..) {
                    if let EventKind::CheckpointSaved { .. } = ev.event {
                        // Everything before this event has been committed.
                        b.stored = ev.seq - 1;
                        b.events.retain(|e| e.seq >= ev.seq);
                    }
                    b.events.push(ev);
                }
            }
        }
        self.progress.send_modify(|p| p.last_seq = last);
    }

    pub(super) fn finish(&self) {
        if self.durable {
            // Everything is stored: a lingering hub (kept for resumes) holds
            // no events; late readers read the store.
            let mut b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            b.events = Vec::new();
        }
        self.progress.send_modify(|p| p.done = true);
    }

    /// Notes that every event up to `seq` is in the store (follower hubs).
    pub(super) fn stored_up_to(&self, seq: u64) {
        {
            let mut b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            b.stored = b.stored.max(seq);
            b.events.retain(|e| e.seq > seq);
        }
        self.progress
            .send_modify(|p| p.last_seq = p.last_seq.max(seq));
    }

    /// Progress updates.
    pub fn watch(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Whether every event is stored before it is pushed (visible
    /// durability): a late reader needs nothing of the hub but the store.
    pub(super) fn stored_in_full(&self) -> bool {
        self.durable
    }

    /// Whether the run is over.
    pub fn is_done(&self) -> bool {
        self.progress.borrow().done
    }

    /// The events after `cursor`.
    pub fn next(&self, cursor: u64) -> Next {
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
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        self.subscribers.fetch_add(1, Ordering::SeqCst);
        Subscription(Arc::clone(self))
    }
}

/// A live subscription to a hub.
#[derive(Debug)]
pub struct Subscription(Arc<RunHub>);

impl Drop for Subscription {
    fn drop(&mut self) {
        let left = self.0.subscribers.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && self.0.on_disconnect == OnDisconnect::Cancel && !self.0.is_done() {
            tracing::info!(run_id = %self.0.run_id, "last client disconnected; cancelling the run");
            self.0.cancel.cancel();
        }
    }
}
