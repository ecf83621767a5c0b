//! One client's SSE stream over a run hub.
//!
//! The stream pulls: it keeps a cursor, reads the events after it (from the
//! hub's buffer, or from the store for what the hub no longer holds), runs
//! them through its own [`Bridge`] and sends the bytes of events after
//! `after` (the client's `Last-Event-ID`). Idle streams get keep-alive
//! comments. A client that reads slowly only slows its own stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::watch;

use super::AppState;
use crate::events::Event;
use crate::runs::{Next, Progress, RunHub, Subscription};
use crate::sse::{self, Bridge, Chunk};

/// Events read from the store per query.
const PAGE: usize = 512;

/// The longest `[DONE]` waits for the run to be recorded.
const DONE_WAIT: Duration = Duration::from_secs(5);

struct Reader {
    hub: Arc<RunHub>,
    state: Arc<AppState>,
    bridge: Bridge,
    cursor: u64,
    after: sse::After,
    progress: watch::Receiver<Progress>,
    keep_alive: Duration,
    /// The run's last event was sent; `[DONE]` follows once the run is
    /// recorded (see [`Reader::next`]).
    ending: bool,
    finished: bool,
    /// Record token delays (the original response, not resumes).
    live: bool,
    scratch: Vec<Chunk>,
    _subscription: Subscription,
    _gauge: StreamGauge,
}

/// Counts open streams in the metrics.
struct StreamGauge(Arc<AppState>);

impl Drop for StreamGauge {
    fn drop(&mut self) {
        self.0
            .metrics
            .active_streams
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Reader {
    fn render<'e>(&mut self, events: impl IntoIterator<Item = &'e Event>, out: &mut String) {
        for ev in events {
            if self.ending || self.finished {
                break;
            }
            self.cursor = ev.seq;
            let before = out.len();
            let done = sse::render_event(&mut self.bridge, ev, self.after, &mut self.scratch, out);
            // Token delay: the token's event time (the model's chunk
            // arriving) to its SSE bytes, for tokens that produce bytes now
            // (hidden nodes send none; thinking updates are throttled).
            if self.live
                && out.len() > before
                && matches!(ev.event, crate::events::EventKind::TextDelta { .. })
            {
                let delay = crate::events::now_micros().saturating_sub(ev.at);
                self.state.metrics.token_delay(delay as f64 / 1e6);
            }
            if done {
                self.ending = true;
                break;
            }
        }
    }

    /// The next piece of the response body, or `None` at the end.
    async fn next(&mut self) -> Option<String> {
        loop {
            if self.finished {
                return None;
            }
            if self.ending {
                // The stream ends only once the run's message and status
                // are stored and the chat is free again, so a client that
                // sends its next message on `[DONE]` is not told the chat
                // is still busy. (Bounded: a store that hangs does not hold
                // the stream open forever.)
                self.finished = true;
                let waited = tokio::time::timeout(DONE_WAIT, self.progress.wait_for(|p| p.done));
                if waited.await.is_err() {
                    // Said in the log: a client that asks at once may find
                    // the chat still busy and its answer not yet stored.
                    tracing::warn!(run_id = %self.hub.run_id, "the run's end was not recorded within {DONE_WAIT:?}; the stream ends without it");
                }
                return Some(sse::DONE.to_owned());
            }
            let progress = *self.progress.borrow_and_update();
            let mut out = String::new();
            match self.hub.next(self.cursor) {
                Next::Events(evs) => self.render(evs.iter().map(|e| &**e), &mut out),
                Next::InStore(upto) => {
                    let limit = usize::try_from(upto.saturating_sub(self.cursor))
                        .unwrap_or(PAGE)
                        .clamp(1, PAGE);
                    match self
                        .state
                        .store
                        .events(self.hub.run_id, self.cursor, limit)
                        .await
                    {
                        Ok(evs) if !evs.is_empty() => self.render(&evs, &mut out),
                        Ok(_) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(run_id = %self.hub.run_id, error = %e, "stream could not read the event log");
                            return Some(
                                self.fail("the event log is unavailable; reconnect to resume"),
                            );
                        }
                    }
                }
                Next::Wait if progress.done => {
                    // Over, but the message never closed (its store gave
                    // out, or the run task died): end the stream in a way
                    // the client understands.
                    let why = self
                        .hub
                        .failure()
                        .unwrap_or("the run ended unexpectedly")
                        .to_owned();
                    return Some(self.fail(&why));
                }
                Next::Wait => {
                    tokio::select! {
                        changed = self.progress.changed() => {
                            if changed.is_err() {
                                return Some(self.fail("the run ended unexpectedly"));
                            }
                            continue;
                        }
                        _ = tokio::time::sleep(self.keep_alive) => return Some(sse::KEEP_ALIVE.to_owned()),
                    }
                }
            }
            if !out.is_empty() {
                return Some(out);
            }
        }
    }

    fn fail(&mut self, why: &str) -> String {
        self.finished = true;
        let mut out = String::new();
        let seq = self.cursor;
        // Ids after any chunk the event could have made (see `sse::After`).
        sse::frame(
            &mut out,
            seq,
            u32::MAX - 1,
            &Chunk::Error {
                error_text: format!("{why} (reference {})", self.hub.run_id),
            },
        );
        sse::frame(
            &mut out,
            seq,
            u32::MAX,
            &Chunk::Finish {
                finish_reason: "error".into(),
                message_metadata: serde_json::json!({"reference": self.hub.run_id}),
            },
        );
        out.push_str(sse::DONE);
        out
    }
}

/// The SSE response for `hub`, sending the chunks after `after` (an event
/// seq, or the point a client's `Last-Event-ID` names).
pub(super) fn response(
    state: Arc<AppState>,
    hub: Arc<RunHub>,
    after: impl Into<sse::After>,
    live: bool,
) -> Response {
    let after = after.into();
    state.metrics.active_streams.fetch_add(1, Ordering::Relaxed);
    let mut bridge = Bridge::new(hub.bridge.clone());
    bridge.resumed_after(hub.resumed);
    let reader = Reader {
        bridge,
        progress: hub.watch(),
        _subscription: hub.subscribe(),
        _gauge: StreamGauge(Arc::clone(&state)),
        keep_alive: state
            .config
            .server
            .keep_alive
            .0
            .max(Duration::from_millis(10)),
        hub,
        state,
        cursor: 0,
        after,
        ending: false,
        finished: false,
        live: after.seq == 0 && live,
        scratch: Vec::new(),
    };
    let stream = futures::stream::unfold(reader, |mut r| async move {
        r.next()
            .await
            .map(|text| (Ok::<_, Infallible>(Bytes::from(text)), r))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    h.insert(
        "x-vercel-ai-ui-message-stream",
        HeaderValue::from_static("v1"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}
