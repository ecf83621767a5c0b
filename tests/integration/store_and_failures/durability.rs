//! Visible stream durability (issue 37, Tests): with
//! `stream_durability = "visible"` a client never receives an event the
//! store does not hold yet. A wrapper around a real store holds every
//! event-log write for a while and notes what has committed; a chat runs
//! over real HTTP+SSE and, at every SSE event received, its seq must be
//! committed already. The same check against `"step"` durability (events
//! stored with their step's checkpoint, streamed at once — see
//! docs/server-cost.md) finds the stream ahead of the store, as designed
//! there: the check can fail.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use stategraph::internals::config::StreamDurability;
use stategraph::internals::events::{Event, RunStatus, StepBatch};
use stategraph::internals::sse::After;
use stategraph::internals::store::{CheckpointRecord, EventLog, Store, StoreResult};
use uuid::Uuid;

use crate::support::db::{Backend, with_store};
use crate::support::model::long_model;
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

/// How long each event-log write is held before it reaches the store.
const WRITE_DELAY: Duration = Duration::from_millis(30);

/// A store whose event-log writes commit `WRITE_DELAY` late; it notes the
/// highest seq of each run once the inner store has committed it. With
/// `end_reply`, the reply to a run's last step (its end, committed) is
/// held that long too.
struct Delayed {
    inner: Arc<dyn Store>,
    committed: Mutex<HashMap<Uuid, u64>>,
    end_reply: Duration,
}

impl Delayed {
    fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Self::holding_end_reply(inner, Duration::ZERO)
    }

    fn holding_end_reply(inner: Arc<dyn Store>, end_reply: Duration) -> Arc<Self> {
        Arc::new(Self {
            inner,
            committed: Mutex::default(),
            end_reply,
        })
    }

    fn note<'e>(&self, run: Uuid, events: impl IntoIterator<Item = &'e Arc<Event>>) {
        if let Some(top) = events.into_iter().map(|e| e.seq).max() {
            let mut committed = self.committed.lock().unwrap();
            let seq = committed.entry(run).or_default();
            *seq = (*seq).max(top);
        }
    }

    /// The runs written so far and the highest seq committed of each.
    fn committed(&self) -> HashMap<Uuid, u64> {
        self.committed.lock().unwrap().clone()
    }
}

impl EventLog for Delayed {
    fn append_events(&self, run: Uuid, events: &[Arc<Event>]) -> BoxFuture<'_, StoreResult<()>> {
        let events = events.to_vec();
        Box::pin(async move {
            tokio::time::sleep(WRITE_DELAY).await;
            self.inner.append_events(run, &events).await?;
            self.note(run, &events);
            Ok(())
        })
    }

    fn append_steps(&self, batches: &[StepBatch]) -> BoxFuture<'_, StoreResult<()>> {
        let batches = batches.to_vec();
        Box::pin(async move {
            tokio::time::sleep(WRITE_DELAY).await;
            self.inner.append_steps(&batches).await?;
            for b in &batches {
                self.note(b.run_id, &b.events);
            }
            if batches.iter().any(|b| b.status != RunStatus::Running) {
                tokio::time::sleep(self.end_reply).await;
            }
            Ok(())
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

crate::support::delegate::delegate_store!(Delayed, inner);

/// One SSE event as the client received it: its seq, and the highest seq
/// the store had committed at that moment.
struct Received {
    seq: u64,
    committed: u64,
}

/// Runs one chat (a 60-word answer, a word every 5 ms) on `store` with
/// `durability`, checking the store at every SSE event: what the client
/// received, the run, and the whole stream.
async fn chat(
    store: Arc<dyn Store>,
    durability: StreamDurability,
) -> (Vec<Received>, Uuid, String) {
    let delayed = Delayed::new(store);
    let server = TestServer::start_with_store(
        long_model(Duration::from_millis(5)),
        Arc::clone(&delayed) as Arc<dyn Store>,
        |c| c.server.stream_durability = durability,
    )
    .await;
    let client = reqwest::Client::new();
    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("durable", "tell me"),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let (mut text, mut received, mut parsed) = (String::new(), Vec::new(), 0);
    while let Some(bytes) = body.next().await {
        // What has committed now that these bytes are in hand (it can only
        // have grown since they were sent; `WRITE_DELAY` keeps that far
        // from hiding a stream that runs ahead).
        let committed = delayed.committed();
        assert!(committed.len() <= 1, "one run: {committed:?}");
        let committed = committed.values().copied().max().unwrap_or(0);
        text.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
        // The frames completed by these bytes.
        let end = text.rfind("\n\n").map_or(0, |i| i + 2).max(parsed);
        for line in text[parsed..end].lines() {
            if let Some(id) = line.strip_prefix("id: ") {
                let seq = After::parse(id).expect("an SSE id").seq;
                received.push(Received { seq, committed });
            }
        }
        parsed = end;
    }
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let run = *delayed
        .committed()
        .keys()
        .next()
        .expect("the run was written");
    server.shutdown().await;
    (received, run, text)
}

/// With visible durability no SSE event runs ahead of the store, and
/// every event the client saw is in the (inner) store's log.
async fn never_ahead(backend: Backend) {
    with_store(backend, |store| async move {
        let (received, run, text) = chat(Arc::clone(&store), StreamDurability::Visible).await;
        assert!(received.len() > 60, "every word is an event: {text}");
        for r in &received {
            assert!(
                r.seq <= r.committed,
                "{backend:?}: event {} reached the client when the store held up to {}",
                r.seq,
                r.committed
            );
        }
        let stored: Vec<u64> = store
            .events(run, 0, 10_000)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert!(
            received.iter().all(|r| stored.contains(&r.seq)),
            "{backend:?}: {stored:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visible_never_sends_an_event_the_memory_store_does_not_hold() {
    never_ahead(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visible_never_sends_an_event_sqlite_does_not_hold() {
    never_ahead(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visible_never_sends_an_event_postgres_does_not_hold() {
    never_ahead(Backend::Postgres).await;
}

/// The check above can fail: `"step"` durability streams a step's events
/// at once and stores them with the step's checkpoint, so with slow writes
/// the client receives tokens the store does not hold yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_durability_streams_ahead_of_a_slow_store() {
    with_store(Backend::Memory, |store| async move {
        let (received, _, text) = chat(store, StreamDurability::Step).await;
        let ahead = received.iter().filter(|r| r.seq > r.committed).count();
        assert!(ahead > 10, "only {ahead} events ahead of the store: {text}");
    })
    .await;
}

/// A run whose end is committed but whose executor hears of it late (the
/// store's reply held past a lease renewal, as under load) still records
/// its chat turn: the renewal no longer finds the run `running` and must
/// not take it for a run another instance took over (it used to: the run
/// was suspended, its stream ended with `finish` and the chat kept only
/// the question, its active run set, for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_end_is_acknowledged_late_still_records_its_turn() {
    let delayed = Delayed::holding_end_reply(
        Arc::new(stategraph::internals::store::memory::MemoryStore::new()),
        Duration::from_millis(1500),
    );
    let server = TestServer::start_with_store(
        long_model(Duration::from_millis(1)),
        Arc::clone(&delayed) as Arc<dyn Store>,
        |c| c.server.lease.0 = Duration::from_secs(1),
    )
    .await;
    let client = reqwest::Client::new();
    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("late", "tell me"),
    )
    .await;
    let text = resp.text().await.unwrap();
    assert!(text.contains(r#""finishReason":"stop""#), "{text}");
    let chat: serde_json::Value = client
        .get(server.url("/api/chat/late"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(chat["messages"].as_array().unwrap().len(), 2, "{chat}");
    assert!(chat["activeRun"].is_null(), "{chat}");
    server.shutdown().await;
}
