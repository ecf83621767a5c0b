//! Fault injection: what clients, disks and databases do to a server, and
//! what must hold through it — no chat wedged, nothing shown that was not
//! stored, every stream ending with what was stored (and why, when early),
//! every error JSON.
//!
//! - `contended`: parallel POSTs to one chat leave exactly one run record
//!   (SQLite and PostgreSQL, 50 rounds each);
//! - `vanishing`: clients that POST and reset the connection at once, and
//!   runs stored but executed nowhere (stranded) — taken over, stoppable,
//!   resumable;
//! - `disk`: SQLite on a small tmpfs filled mid-run (a real `ENOSPC`);
//! - `pg_outage`: a throwaway PostgreSQL cluster stopped mid-run, longer
//!   and shorter than `store_outage_limit`;
//! - `nul`: NUL in every path and query parameter and body, on PostgreSQL;
//! - `malformed`: a raw-socket corpus of requests hyper itself refuses.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use stategraph::internals::llm::{ChatModel, ChatRequest, ChunkStream};
use tokio::sync::watch;

mod contended;
mod disk;
mod malformed;
mod nul;
mod pg_outage;
mod vanishing;

/// A model whose calls wait until the test opens the gate (a new, closed
/// gate with [`Gated::close`]); it counts its calls.
#[derive(Debug)]
pub struct Gated {
    inner: Arc<dyn ChatModel>,
    gate: Mutex<watch::Receiver<bool>>,
    calls: std::sync::atomic::AtomicUsize,
}

impl Gated {
    /// Gated calls of `inner`, the gate open.
    pub fn new(inner: Arc<dyn ChatModel>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            gate: Mutex::new(watch::channel(true).1),
            calls: Default::default(),
        })
    }

    /// Closes the gate: calls from now on wait until the sender opens it
    /// (sends `true`) or is dropped.
    pub fn close(&self) -> watch::Sender<bool> {
        let (tx, rx) = watch::channel(false);
        *self.gate.lock().unwrap_or_else(PoisonError::into_inner) = rx;
        tx
    }

    /// Calls made so far.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl ChatModel for Gated {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(&self, request: &ChatRequest) -> ChunkStream {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut gate = self
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let inner = self.inner.stream(request);
        Box::pin(
            futures::stream::once(async move {
                let _ = gate.wait_for(|open| *open).await;
                inner
            })
            .flatten(),
        )
    }
}

/// The SSE frames of a capture: each `(event seq, data JSON)` (`[DONE]`
/// as a string value; the seq is the id's, `SEQ` or `SEQ.N`).
pub fn frames(sse: &str) -> Vec<(Option<u64>, Value)> {
    sse.split("\n\n")
        .filter(|f| f.contains("data: "))
        .map(|f| {
            let id = f
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .and_then(|v| v.trim().split('.').next()?.parse().ok());
            let data = f
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("");
            let v = serde_json::from_str(data).unwrap_or(Value::String(data.to_owned()));
            (id, v)
        })
        .collect()
}

/// The text of a capture's `text-delta` parts.
pub fn streamed_text(sse: &str) -> String {
    frames(sse)
        .iter()
        .filter(|(_, v)| v["type"] == "text-delta")
        .filter_map(|(_, v)| v["delta"].as_str().map(str::to_owned))
        .collect()
}

/// Polls `check` every 50 ms until it is true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if started.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
