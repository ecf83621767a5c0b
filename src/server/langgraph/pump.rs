//! Feeding a run's events to a [`Wire`] and out as an SSE response.
//!
//! A run's events come from its hub while it runs here (older ones from
//! the store, as `server/stream.rs` reads them), or from the store alone
//! once it is over. Every stream reads from the run's first event (the
//! wire rebuilds the state from them) and sends the frames after the point
//! it starts from: a new run's stream all of them, a continued run's those
//! after the pause, a rejoin those after its `Last-Event-ID`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::watch;

use super::super::AppState;
use super::ids::LastEvent;
use super::queue::{Queued, Status};
use super::wire::{self, Frame, Modes, Wire};
use crate::events::Event;
use crate::runs::{Next, Progress, RunHub, Subscription};

/// Events read from the store per query.
const PAGE: usize = 512;

/// The longest the end of a stream waits for the run to be recorded.
const DONE_WAIT: Duration = Duration::from_secs(5);

/// How often an idle stream sends a heartbeat (LangGraph: 5 s).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// What the source has next.
pub(super) enum Pulled {
    /// Events, in order.
    Events(Vec<Arc<Event>>),
    /// Nothing for a while.
    Idle,
    /// The run's last event was read (or the run is gone).
    End,
}

/// A run's events, in order, from its first.
pub(super) struct Source {
    state: Arc<AppState>,
    run_id: uuid::Uuid,
    hub: Option<(Arc<RunHub>, watch::Receiver<Progress>, Subscription)>,
    cursor: u64,
    /// A continued run's events up to here are from before its pause: the
    /// pause (a terminal event) does not end its stream.
    resumed: u64,
    ended: bool,
    heartbeat: Duration,
    /// A queued run not started yet: its events come once it starts.
    queued: Option<watch::Receiver<Status>>,
    /// Its answer's message id, once it started (for the wire).
    started: Option<String>,
}

impl Source {
    /// Over `hub` (a run executing, or lingering), or the store.
    pub(super) fn new(state: Arc<AppState>, run_id: uuid::Uuid, hub: Option<Arc<RunHub>>) -> Self {
        let heartbeat = state
            .config
            .server
            .keep_alive
            .0
            .clamp(Duration::from_millis(10), HEARTBEAT_EVERY);
        Self {
            state,
            run_id,
            resumed: hub.as_ref().map_or(0, |h| h.resumed),
            hub: hub.map(|h| {
                let rx = h.watch();
                let sub = h.subscribe();
                (h, rx, sub)
            }),
            cursor: 0,
            ended: false,
            heartbeat,
            queued: None,
            started: None,
        }
    }

    /// Over a queued run: nothing (heartbeats) until it starts, then its
    /// events as [`Source::new`]'s.
    pub(super) fn queued(state: Arc<AppState>, queued: &Queued) -> Self {
        let mut source = Self::new(state, queued.run_id, None);
        source.queued = Some(queued.watch());
        source
    }

    /// The queued run's answer's message id, once when it started.
    pub(super) fn take_started(&mut self) -> Option<String> {
        self.started.take()
    }

    /// Waits (a heartbeat's time at most) for the queued run to start;
    /// `None` once it did (the hub is set), else what to answer now.
    async fn await_start(
        &mut self,
        mut rx: watch::Receiver<Status>,
    ) -> Result<Option<Pulled>, String> {
        let waited = {
            let started = rx.wait_for(|s| *s != Status::Pending);
            match tokio::time::timeout(self.heartbeat, started).await {
                Err(_) => None,
                Ok(Err(_)) => Some(Status::Failed("the run queue is gone".into())),
                Ok(Ok(s)) => Some(s.clone()),
            }
        };
        let Some(status) = waited else {
            self.queued = Some(rx);
            return Ok(Some(Pulled::Idle));
        };
        match status {
            Status::Started => {
                let run = self.state.store.get_run(self.run_id).await;
                let run = run.ok().flatten().ok_or("a started run has no record")?;
                let hub = run
                    .chat_id
                    .as_deref()
                    .and_then(|c| self.state.runs.for_chat(c))
                    .filter(|h| h.run_id == self.run_id);
                self.started = Some(super::state::answer_id(&run));
                self.resumed = hub.as_ref().map_or(0, |h| h.resumed);
                self.hub = hub.map(|h| {
                    let rx = h.watch();
                    let sub = h.subscribe();
                    (h, rx, sub)
                });
                Ok(None)
            }
            Status::Cancelled => {
                self.ended = true;
                Ok(Some(Pulled::End))
            }
            Status::Failed(why) => {
                self.ended = true;
                Err(why)
            }
            Status::Pending => Ok(Some(Pulled::Idle)),
        }
    }

    async fn read_store(&mut self, limit: usize) -> Result<Vec<Arc<Event>>, String> {
        self.state
            .store
            .events(self.run_id, self.cursor, limit)
            .await
            .map(|evs| evs.into_iter().map(Arc::new).collect())
            .map_err(|e| format!("the event log is unavailable: {e}"))
    }

    /// The next events.
    ///
    /// # Errors
    /// The store failed, or the run ended without its last event.
    pub(super) async fn pull(&mut self) -> Result<Pulled, String> {
        if let Some(rx) = self.queued.take()
            && let Some(now) = self.await_start(rx).await?
        {
            return Ok(now);
        }
        loop {
            if self.ended {
                // The end goes out once the run's status (and a chat turn's
                // message) is stored and the thread is free again, so a
                // client that starts its next run on it is not told the
                // thread is busy (bounded, as `server/stream.rs` bounds it).
                if let Some((_, rx, _)) = &mut self.hub {
                    let _ = tokio::time::timeout(DONE_WAIT, rx.wait_for(|p| p.done)).await;
                }
                return Ok(Pulled::End);
            }
            let Some((hub, rx, _)) = &mut self.hub else {
                let evs = self.read_store(PAGE).await?;
                return Ok(self.took(evs));
            };
            let progress = *rx.borrow_and_update();
            match hub.next(self.cursor) {
                Next::Events(evs) => return Ok(self.took(evs)),
                Next::InStore(upto) => {
                    let limit = usize::try_from(upto.saturating_sub(self.cursor))
                        .unwrap_or(PAGE)
                        .clamp(1, PAGE);
                    let evs = self.read_store(limit).await?;
                    if evs.is_empty() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    return Ok(self.took(evs));
                }
                Next::Wait if progress.done => {
                    // Over, but its last event never came (its store gave
                    // out, or its task died).
                    let why = hub
                        .failure()
                        .unwrap_or("the run ended unexpectedly")
                        .to_owned();
                    self.ended = true;
                    return Err(why);
                }
                Next::Wait => {
                    let every = self.heartbeat;
                    tokio::select! {
                        changed = rx.changed() => {
                            if changed.is_err() {
                                self.ended = true;
                                return Err("the run ended unexpectedly".into());
                            }
                        }
                        _ = tokio::time::sleep(every) => return Ok(Pulled::Idle),
                    }
                }
            }
        }
    }

    fn took(&mut self, evs: Vec<Arc<Event>>) -> Pulled {
        if evs.is_empty() {
            self.ended = true;
            return Pulled::End;
        }
        let mut out = Vec::with_capacity(evs.len());
        // From the store alone (a run that is over) the log ends where the
        // run does: a pause it was resumed from is followed by more.
        let live = self.hub.is_some();
        for e in evs {
            self.cursor = e.seq;
            let last = live && e.event.is_terminal() && e.seq > self.resumed;
            out.push(e);
            if last {
                self.ended = true;
                break;
            }
        }
        Pulled::Events(out)
    }
}

/// Where a stream starts sending.
#[derive(Clone, Copy, Debug)]
pub(super) enum From {
    /// Every frame (a new run).
    Start,
    /// The `metadata` frame, then the frames of events after this seq (a
    /// run continued after its pause).
    AfterSeq(u64),
    /// The frames after this id (a rejoin); nothing before (LangGraph's
    /// join without `Last-Event-ID` sends only what comes next: its
    /// current `last_seq`).
    After(LastEvent),
}

impl From {
    fn sends(self, f: &Frame) -> bool {
        match self {
            From::Start => true,
            From::AfterSeq(seq) => f.seq == 0 || f.seq > seq,
            From::After(LastEvent::Start) => true,
            From::After(LastEvent::After(seq, n)) => (f.seq, f.n) > (seq, n),
        }
    }
}

struct Pump {
    source: Source,
    wire: Wire,
    modes: Modes,
    from: From,
    with_ids: bool,
    started: bool,
    done: bool,
}

impl Pump {
    fn emit(&self, frames: &[Frame], out: &mut String) {
        for f in frames
            .iter()
            .filter(|f| self.from.sends(f) && self.modes.wants(f.event))
        {
            wire::encode(f, self.with_ids, out);
        }
    }

    async fn next(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        let mut out = String::new();
        if !self.started {
            self.started = true;
            let meta = self.wire.metadata();
            self.emit(&[meta], &mut out);
        }
        loop {
            let pulled = self.source.pull().await;
            if let Some(id) = self.source.take_started() {
                self.wire.set_message_id(id);
            }
            match pulled {
                Ok(Pulled::Events(evs)) => {
                    for ev in &evs {
                        let frames = self.wire.feed(ev);
                        self.emit(&frames, &mut out);
                    }
                    if !out.is_empty() {
                        return Some(out);
                    }
                }
                Ok(Pulled::Idle) => {
                    out.push_str(wire::HEARTBEAT);
                    return Some(out);
                }
                Ok(Pulled::End) => {
                    self.done = true;
                    return (!out.is_empty()).then_some(out);
                }
                Err(why) => {
                    self.done = true;
                    let f = Frame {
                        seq: u64::MAX,
                        n: 0,
                        event: "error",
                        data: serde_json::json!({"error": "StreamError", "message": why}),
                    };
                    wire::encode(&f, false, &mut out);
                    return Some(out);
                }
            }
        }
    }
}

/// How a stream is made.
pub(super) struct StreamSpec {
    pub(super) source: Source,
    pub(super) wire: Wire,
    pub(super) modes: Modes,
    pub(super) from: From,
    pub(super) with_ids: bool,
    /// `Content-Location` (and, for a thread's run, `Location`: its
    /// stream, where the SDKs reconnect).
    pub(super) location: String,
}

/// The SSE response.
pub(super) fn response(spec: StreamSpec) -> Response {
    let location = spec.location.clone();
    let pump = Pump {
        source: spec.source,
        wire: spec.wire,
        modes: spec.modes,
        from: spec.from,
        with_ids: spec.with_ids,
        started: false,
        done: false,
    };
    let stream = futures::stream::unfold(pump, |mut p| async move {
        p.next()
            .await
            .map(|text| (Ok::<_, Infallible>(Bytes::from(text)), p))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(v) = HeaderValue::from_str(&format!("{location}/stream")) {
        h.insert(header::LOCATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&location) {
        h.insert(header::CONTENT_LOCATION, v);
    }
    resp
}

/// Reads a run to its end (`wait`, `join`): the wire with its last values,
/// interrupts and error.
pub(super) async fn drain(mut source: Source, mut wire: Wire) -> Result<Wire, String> {
    loop {
        let pulled = source.pull().await?;
        if let Some(id) = source.take_started() {
            wire.set_message_id(id);
        }
        match pulled {
            Pulled::Events(evs) => {
                for ev in &evs {
                    wire.feed(ev);
                }
            }
            Pulled::Idle => {}
            Pulled::End => return Ok(wire),
        }
    }
}
