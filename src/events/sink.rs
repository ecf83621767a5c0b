//! Stamping and delivering events.
//!
//! A run has one [`EventSink`]. It assigns `seq` and the timestamp, keeps the
//! current superstep's events for the checkpoint hook, and sends each event on
//! a bounded channel. Stamping and sending happen under one short lock after a
//! channel slot has been reserved, so channel order always equals `seq` order
//! even when parallel tasks emit at once; a full channel makes emitters wait
//! (backpressure) instead of growing memory.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use uuid::Uuid;

use super::{CustomData, Event, EventKind, Usage};

/// Per-run event stamping and delivery. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct EventSink {
    run_id: Uuid,
    tx: Option<mpsc::Sender<Arc<Event>>>,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    seq: u64,
    usage: Usage,
    keep: bool,
    pending: Vec<Arc<Event>>,
    /// Events already in the log that a resumed run emits again, per
    /// (step, node, task): see [`EventSink::with_logged`].
    logged: HashMap<LogKey, VecDeque<Arc<Event>>>,
}

type LogKey = (u32, Option<Arc<str>>, u32);

/// Microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    // Seconds and sub-second micros separately: `as_micros` goes through u128.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() * 1_000_000 + u64::from(d.subsec_micros()))
        .unwrap_or(0)
}

impl EventSink {
    /// A sink for `run_id` whose first event gets `seq = last_seq + 1`.
    ///
    /// `tx` receives every event; `None` discards them (the pending buffer
    /// still collects them when `keep` is set, for the checkpoint hook).
    pub fn new(
        run_id: Uuid,
        tx: Option<mpsc::Sender<Arc<Event>>>,
        last_seq: u64,
        keep: bool,
    ) -> Self {
        Self {
            run_id,
            tx,
            inner: Mutex::new(Inner {
                seq: last_seq,
                usage: Usage::default(),
                keep,
                pending: Vec::new(),
                logged: HashMap::new(),
            }),
        }
    }

    /// A resumed run's sink that knows the events of the interrupted step
    /// already in the log (stored, and seen by clients). While a task
    /// emits exactly what it logged before the crash (the same model call,
    /// served from the recording; the same tool result), the logged event is
    /// returned and nothing is stamped, stored or sent again: clients never
    /// get a part twice and numbering stays contiguous. From a task's first
    /// difference on (a model call that was cut off and now answers
    /// otherwise), its events are new.
    #[must_use]
    pub fn with_logged(self, events: impl IntoIterator<Item = Event>) -> Self {
        {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            for e in events {
                let key = (e.step, e.node.clone(), e.task);
                inner.logged.entry(key).or_default().push_back(Arc::new(e));
            }
        }
        self
    }

    /// Counts `usage` as spent already (a continued run's earlier steps,
    /// which it does not emit again): `run_finished` reports the run's total.
    #[must_use]
    pub fn with_usage(self, usage: Usage) -> Self {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .usage += usage;
        self
    }

    /// The run this sink stamps.
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// Stamps and delivers one event. Waits while the channel is full.
    ///
    /// A closed channel (nobody listening) is not an error: the run goes on
    /// and its events still reach the checkpoint hook.
    pub fn emit(
        &self,
        step: u32,
        node: Option<&Arc<str>>,
        task: u32,
        event: EventKind,
    ) -> Emit<'_> {
        // Fast path, taken unless the channel is full: stamp and send now,
        // without building a future around the event.
        let permit = match &self.tx {
            Some(tx) => match tx.try_reserve() {
                Ok(permit) => Some(permit),
                Err(TrySendError::Closed(())) => None,
                Err(TrySendError::Full(())) => {
                    let node = node.cloned();
                    return Emit::Waiting(Box::pin(async move {
                        let permit = match &self.tx {
                            Some(tx) => tx.reserve().await.ok(),
                            None => None,
                        };
                        self.stamp(step, node.as_ref(), task, event, permit)
                    }));
                }
            },
            None => None,
        };
        Emit::Ready(Some(self.stamp(step, node, task, event, permit)))
    }

    fn stamp(
        &self,
        step: u32,
        node: Option<&Arc<str>>,
        task: u32,
        event: EventKind,
        permit: Option<mpsc::Permit<'_, Arc<Event>>>,
    ) -> Arc<Event> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if !inner.logged.is_empty()
            && let Some(logged) = replayed(&mut inner.logged, step, node, task, &event)
        {
            // Spent in this run all the same (the step it belongs to is the
            // one running again).
            inner.usage += logged.event.spent();
            return logged;
        }
        inner.usage += event.spent();
        inner.seq += 1;
        let ev = Arc::new(Event {
            run_id: self.run_id,
            seq: inner.seq,
            at: now_micros(),
            step,
            node: node.cloned(),
            task,
            event,
        });
        if inner.keep {
            inner.pending.push(Arc::clone(&ev));
        }
        if let Some(permit) = permit {
            permit.send(Arc::clone(&ev));
        }
        ev
    }

    /// The events emitted since the last call (for the checkpoint hook).
    pub fn take_pending(&self) -> Vec<Arc<Event>> {
        std::mem::take(
            &mut self
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pending,
        )
    }

    /// Tokens used by the model calls emitted so far.
    pub fn usage(&self) -> Usage {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .usage
    }

    /// The last `seq` assigned.
    pub fn last_seq(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seq
    }
}

/// The logged event `event` repeats, if it does (consumed); a difference
/// ends the task's replay.
fn replayed(
    logged: &mut HashMap<LogKey, VecDeque<Arc<Event>>>,
    step: u32,
    node: Option<&Arc<str>>,
    task: u32,
    event: &EventKind,
) -> Option<Arc<Event>> {
    let key = (step, node.cloned(), task);
    let queue = logged.get_mut(&key)?;
    match queue.front() {
        Some(front) if front.event.same_behaviour(event) => queue.pop_front(),
        _ => {
            logged.remove(&key);
            None
        }
    }
}

/// The future of [`EventSink::emit`]: already done unless the channel was
/// full, in which case it waits for room (backpressure).
pub enum Emit<'a> {
    /// Stamped and sent.
    Ready(Option<Arc<Event>>),
    /// Waiting for a channel slot.
    Waiting(Pin<Box<dyn Future<Output = Arc<Event>> + Send + 'a>>),
}

impl Future for Emit<'_> {
    type Output = Arc<Event>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Arc<Event>> {
        match self.get_mut() {
            Emit::Ready(ev) => match ev.take() {
                Some(ev) => Poll::Ready(ev),
                None => Poll::Pending,
            },
            Emit::Waiting(fut) => fut.as_mut().poll(cx),
        }
    }
}

/// A node's view of the sink: stamps its step, name and task.
#[derive(Clone, Debug)]
pub struct NodeEvents {
    sink: Arc<EventSink>,
    step: u32,
    node: Arc<str>,
    task: u32,
    /// Answer text streamed in the current attempt (what a node that fails
    /// after streaming can still keep; see `Node::recover`).
    streamed: Arc<std::sync::Mutex<String>>,
}

impl NodeEvents {
    /// A handle for one task.
    pub fn new(sink: Arc<EventSink>, step: u32, node: Arc<str>, task: u32) -> Self {
        Self {
            sink,
            step,
            node,
            task,
            streamed: Arc::default(),
        }
    }

    /// Notes answer text as streamed in this attempt.
    pub fn note_text(&self, delta: &str) {
        self.streamed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_str(delta);
    }

    /// Whether this attempt streamed any text yet.
    pub fn has_streamed(&self) -> bool {
        !self
            .streamed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }

    /// The answer text streamed since the last call (an attempt's text).
    pub fn take_streamed(&self) -> String {
        std::mem::take(
            &mut *self
                .streamed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Emits an event as this task; resolves to it as stamped.
    pub fn emit(&self, event: EventKind) -> Emit<'_> {
        self.sink
            .emit(self.step, Some(&self.node), self.task, event)
    }

    /// The node id.
    pub fn node(&self) -> &Arc<str> {
        &self.node
    }

    /// The superstep.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// The task index within the step.
    pub fn task(&self) -> u32 {
        self.task
    }

    /// The run id.
    pub fn run_id(&self) -> Uuid {
        self.sink.run_id()
    }

    /// The shared sink (subgraphs emit through it with their own names).
    pub fn sink(&self) -> &Arc<EventSink> {
        &self.sink
    }

    /// Emits a [`EventKind::Thinking`] note.
    pub async fn thinking(&self, text: impl Into<String>) {
        let _ = self.emit(EventKind::Thinking { text: text.into() }).await;
    }

    /// Emits [`EventKind::Custom`] data.
    pub async fn custom(&self, name: impl Into<String>, data: serde_json::Value) {
        self.custom_with_id(name, None, data).await;
    }

    /// Emits [`EventKind::Custom`] data under a part id: a later part with
    /// the same name and id replaces it (in the stream and the stored
    /// message). Without one, each task's part is its own.
    pub async fn custom_with_id(
        &self,
        name: impl Into<String>,
        id: Option<String>,
        data: serde_json::Value,
    ) {
        let _ = self
            .emit(EventKind::Custom(Box::new(CustomData {
                name: name.into(),
                data,
                id,
                transient: false,
            })))
            .await;
    }

    /// Emits progress: a transient `data-stage` part (one part, replaced by
    /// each newer stage) saying what the run is doing now.
    pub async fn stage(&self, status: impl Into<String>) {
        let _ = self
            .emit(EventKind::Custom(Box::new(CustomData {
                name: "stage".into(),
                data: serde_json::json!({ "node": &**self.node(), "status": status.into() }),
                id: Some("stage".into()),
                transient: true,
            })))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn seq_is_gapless_and_matches_channel_order_under_concurrency() {
        let (tx, mut rx) = mpsc::channel(2);
        let sink = Arc::new(EventSink::new(Uuid::nil(), Some(tx), 10, true));
        let node: Arc<str> = "n".into();
        let producers = (0..4).map(|t| {
            let sink = Arc::clone(&sink);
            let node = Arc::clone(&node);
            tokio::spawn(async move {
                for i in 0..50 {
                    sink.emit(
                        1,
                        Some(&node),
                        t,
                        EventKind::TextDelta {
                            call: 0,
                            delta: i.to_string(),
                        },
                    )
                    .await;
                }
            })
        });
        let handles: Vec<_> = producers.collect();
        let mut seqs = Vec::new();
        while seqs.len() < 200 {
            seqs.push(rx.recv().await.unwrap().seq);
        }
        for h in handles {
            h.await.unwrap();
        }
        assert_eq!(seqs, (11..=210).collect::<Vec<_>>());
        assert_eq!(sink.take_pending().len(), 200);
        assert!(sink.take_pending().is_empty());
    }

    #[tokio::test]
    async fn a_resumed_task_repeating_its_logged_events_emits_only_what_is_new() {
        let node: Arc<str> = "n".into();
        let delta = |d: &str| EventKind::TextDelta {
            call: 0,
            delta: d.into(),
        };
        let logged = ["The", " answer"].iter().enumerate().map(|(i, d)| Event {
            run_id: Uuid::nil(),
            seq: 5 + i as u64,
            at: 0,
            step: 2,
            node: Some(Arc::clone(&node)),
            task: 0,
            event: delta(d),
        });
        let (tx, mut rx) = mpsc::channel(16);
        let sink = EventSink::new(Uuid::nil(), Some(tx), 6, true).with_logged(logged);
        // Same as logged: the logged event comes back, nothing is sent.
        let again = sink.emit(2, Some(&node), 0, delta("The")).await;
        assert_eq!(again.seq, 5);
        // Another task is not replayed.
        let other = sink.emit(2, Some(&node), 1, delta("x")).await;
        assert_eq!(other.seq, 7);
        // The first difference ends the replay of that task for good.
        let new = sink.emit(2, Some(&node), 0, delta(" result")).await;
        assert_eq!(new.seq, 8);
        let later = sink.emit(2, Some(&node), 0, delta(" answer")).await;
        assert_eq!(later.seq, 9, "after a difference nothing is replayed");
        drop(sink);
        let mut sent = Vec::new();
        while let Some(e) = rx.recv().await {
            sent.push(e.seq);
        }
        assert_eq!(sent, [7, 8, 9]);
    }
}
