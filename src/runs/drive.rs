//! Executing one run: the executor and the event pump side by side, then
//! the bookkeeping once it is over.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

use super::LogCheckpointer;
use super::{Begin, Launch, RunHub, Runs};
use crate::config::StreamDurability;
use crate::events::{ErrorInfo, Event, EventKind, Usage};
use crate::replay::Recording;
use crate::runtime::{
    self, CheckpointError, RunError, RunOptions, RunOutcome, RunStatus, Services,
};
use crate::sse::{Assembler, Bridge, Chunk};

type RunFuture = Pin<Box<dyn Future<Output = Result<RunOutcome, RunError>> + Send>>;

/// What the pump saw: the assembled message and the tokens spent.
pub(super) struct Pumped {
    /// The stream state the message was assembled with.
    pub(super) bridge: Bridge,
    pub(super) assembler: Assembler,
    pub(super) usage: Usage,
    /// Why the run's events could no longer be stored (it was stopped
    /// there: nothing after the last stored event reached a client).
    pub(super) unstored: Option<String>,
}

/// Drives one run to its end (or suspends it at shutdown); `permit` is its
/// slot of the concurrency limit, released when this task ends.
pub(super) async fn drive(
    runs: Arc<Runs>,
    hub: Arc<RunHub>,
    mut launch: Launch,
    permit: OwnedSemaphorePermit,
) {
    let (tx, rx) = mpsc::channel::<Arc<Event>>(256);
    let (checkpointer, durable) = checkpointing(&runs, launch.hold.end_mark());
    let opts = RunOptions {
        run_id: launch.run_id,
        events: Some(tx),
        cancel: hub.cancel.clone(),
        checkpointer: Some(Arc::new(checkpointer)),
        stream: Some(hub.bridge.to_json()),
        durability: runs.config.durability,
        forked_from: launch.forked_from.clone(),
        breakpoints: Some(launch.breakpoints.0.clone()),
        record_breakpoints: launch.breakpoints.1,
        ..Default::default()
    };
    let graph_id = launch.graph.id.to_string();
    let (history, run, fresh_message) = start(&runs, &mut launch, opts);
    let tap = launch.tap.take();
    let shown = Shown {
        history: &history,
        in_message: !fresh_message,
    };
    let pump = pump(&runs, &hub, &graph_id, shown, tap.as_ref(), durable, rx);
    let (result, pumped) = tokio::select! {
        r = async { tokio::join!(run, pump) } => r,
        _ = hub.suspend.cancelled() => {
            suspend(&runs, &hub, launch.run_id).await;
            drop(permit);
            return;
        }
    };
    // The watcher's stream ends with the run's events, not after the linger.
    drop(tap);
    let (status, error) = outcome(&result, launch.run_id);
    launch.hold.ending();
    let status = match store_failure(&pumped, &result) {
        // The store gave out: the streams end now, saying so; the end is
        // recorded once the store takes writes again.
        Some(why) => {
            hub.fail(format!("the run stopped: {why}"));
            hub.finish();
            super::end::record_store_failure(&runs, &launch, why, pumped).await
        }
        None => {
            super::end::record_end(&runs, &launch, status, error, pumped).await;
            Some(status)
        }
    };
    if let Some(status) = status {
        runs.observer.finished(&graph_id, status.as_str());
        tracing::info!(outcome = status.as_str(), "run over");
    }
    drop(permit);
    hub.finish();
    drop((result, history, launch));
    linger(runs, hub);
}

/// How the run's steps are stored: the checkpointer (which marks the run
/// as ending, `end`, before its last step), and with `visible`
/// stream durability what the pump needs to store events before anyone
/// sees them.
fn checkpointing(runs: &Runs, end: super::held::EndMark) -> (LogCheckpointer, Option<Durable>) {
    let writer = LogCheckpointer::new(Arc::clone(&runs.store))
        .with_outage_limit(runs.config.store_outage_limit)
        .marking_end(end);
    match runs.config.stream_durability {
        StreamDurability::Step => (writer, None),
        StreamDurability::Visible => {
            let (stored, seen) = watch::channel(0);
            let durable = Durable {
                writer: writer.clone(),
                stored,
                flush: runs.config.stream_flush,
            };
            (writer.after_events(seen), Some(durable))
        }
    }
}

/// Starts the executor as `launch` begins (fresh, again, continued after a
/// pause or resumed after a crash): the events logged before this
/// execution, the run, and whether it continues into a new message.
fn start(runs: &Runs, launch: &mut Launch, mut opts: RunOptions) -> (Vec<Event>, RunFuture, bool) {
    let begin = std::mem::replace(&mut launch.begin, Begin::Fresh(Value::Null));
    // A continuation into a new message: the history counts (tokens) but
    // is not part of the message.
    let mut fresh_message = false;
    let (history, run): (Vec<Event>, RunFuture) = match begin {
        Begin::Fresh(input) => (
            Vec::new(),
            Box::pin(runtime::run(
                Arc::clone(&launch.graph),
                replaying(runs, &[], &launch.user_id),
                input,
                opts,
            )),
        ),
        Begin::Again { input, history } => {
            opts.logged = history.clone();
            let services = replaying(runs, &opts.logged, &launch.user_id);
            let run = runtime::run(Arc::clone(&launch.graph), services, input, opts);
            (history, Box::pin(run))
        }
        Begin::Continued {
            from,
            history,
            answers,
            new_message,
        } => {
            // What the paused step did is served from the log; the pause
            // itself and other run-level events are not repeated.
            let again = |e: &&Event| e.step > from.step && e.node.is_some();
            opts.logged = history.iter().filter(again).cloned().collect();
            opts.spent_before = spent_outside(&history, again);
            opts.answers = Some(answers);
            let services = replaying(runs, &opts.logged, &launch.user_id);
            let run = runtime::resume(Arc::clone(&launch.graph), services, from, opts);
            fresh_message = new_message;
            (history, Box::pin(run))
        }
        Begin::Resumed { from, history } => {
            let again = |e: &&Event| e.step > from.step;
            opts.logged = history.iter().filter(again).cloned().collect();
            opts.spent_before = spent_outside(&history, again);
            let services = replaying(runs, &opts.logged, &launch.user_id);
            let run = runtime::resume(Arc::clone(&launch.graph), services, from, opts);
            (history, Box::pin(run))
        }
    };
    (history, run, fresh_message)
}

/// The tokens `history` records as spent outside the events a new
/// execution replays (`again`).
fn spent_outside(history: &[Event], again: impl Fn(&&Event) -> bool) -> Usage {
    let mut usage = Usage::default();
    for e in history.iter().filter(|e| !again(e)) {
        usage += e.event.spent();
    }
    usage
}

/// Keeps a finished run's hub for resumes (which read the store) for
/// `linger`, in a small task of its own: the run's task ends now, and with
/// it everything its state machine held.
pub(super) fn linger(runs: Arc<Runs>, hub: Arc<RunHub>) {
    // Most runs leave only a note; resumes read the store (`finished`).
    if runs.retire(&hub) {
        return;
    }
    let tracker = runs.tracker.clone();
    tracker.spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(runs.config.linger) => {}
            _ = runs.shutdown.cancelled() => {}
        }
        runs.remove(&hub);
    });
}

/// The services for a run acting for `user` (bound tool arguments read
/// it); for a recovered run, calls whose answers `logged` holds (finished
/// model calls, tool results) are served from it, not repeated.
fn replaying(runs: &Runs, logged: &[Event], user: &str) -> Arc<Services> {
    let mut s = runs.services.for_user(user);
    if !logged.is_empty() {
        s.playback = Some(Arc::new(Recording::from_events(logged)));
    }
    Arc::new(s)
}

/// How the pump stores events before anyone sees them (visible durability).
struct Durable {
    writer: LogCheckpointer,
    /// The highest seq stored, for the checkpointer (which then stores only
    /// checkpoints).
    stored: watch::Sender<u64>,
    flush: Duration,
}

/// Most events written in one group.
const GROUP: usize = 512;

/// The events a run logged before this execution of it.
struct Shown<'a> {
    history: &'a [Event],
    /// Whether they are part of the message this execution stores.
    in_message: bool,
}

/// Passes the run's events to the hub and the observer, and assembles the
/// UI message (what the client saw before a crash included). With
/// [`Durable`], each group of events is stored first: a group is what
/// arrived within `flush` of the previous write, written at once when a
/// node ends (the executor is about to checkpoint and waits for it).
#[allow(clippy::too_many_arguments)]
async fn pump(
    runs: &Runs,
    hub: &RunHub,
    graph_id: &str,
    shown: Shown<'_>,
    tap: Option<&mpsc::Sender<Arc<Event>>>,
    mut durable: Option<Durable>,
    mut rx: mpsc::Receiver<Arc<Event>>,
) -> Pumped {
    let mut pumped = Pumped::new(hub);
    let mut chunks = Vec::new();
    for ev in shown.history {
        pumped.feed(ev, &mut chunks, shown.in_message);
    }
    let mut last_write = Instant::now();
    let mut group = Vec::new();
    // `run_started` time until the first visible event (then `None`).
    let mut unseen: Option<u64> = None;
    while let Some(first) = rx.recv().await {
        group.clear();
        group.push(first);
        // The window is not widened by the number of runs (it was 50 µs
        // per run: 50 ms at 1,000, the whole gap between two paced tokens).
        // The store's own pace already bounds the write rate: a run has one
        // write in flight, what arrives meanwhile is its next group, and
        // SQLite commits the groups of all runs together
        // (`SqliteStore::append_events`).
        let deadline = durable.as_ref().map(|d| last_write + d.flush);
        gather(&mut rx, &mut group, deadline).await;
        if let Some(d) = &durable {
            // `flush` apart from the start of one write to the next (a
            // slow write does not push the next group further out).
            last_write = Instant::now();
            if let Err(e) = d.store(&group).await {
                // Nothing more can be made durable, so nothing more is
                // shown: the run stops (its checkpointer fails as the
                // watermark goes away) and its last events go nowhere.
                tracing::error!(error = %e, "could not store the run's events; stopping the run");
                pumped.unstored = Some(e.to_string());
                hub.cancel.cancel();
                drop(durable.take());
                while rx.recv().await.is_some() {}
                break;
            }
        }
        for ev in &group {
            observe(runs, graph_id, ev, &mut unseen);
            pumped.feed(ev, &mut chunks, true);
            if let Some(tap) = tap {
                // A watcher that went away stops watching; the run goes on.
                let _ = tap.send(Arc::clone(ev)).await;
            }
        }
        hub.push(&mut group);
    }
    pumped
}

impl Pumped {
    fn new(hub: &RunHub) -> Self {
        let mut bridge = Bridge::new(hub.bridge.clone());
        bridge.resumed_after(hub.resumed);
        Pumped {
            bridge,
            assembler: Assembler::new(),
            usage: Usage::default(),
            unstored: None,
        }
    }

    /// Passes one event through the bridge (its state and the tokens always
    /// count); with `assemble`, the message takes its chunks too.
    /// `chunks` is scratch space reused between events.
    fn feed(&mut self, ev: &Event, chunks: &mut Vec<Chunk>, assemble: bool) {
        chunks.clear();
        self.bridge.on_event(ev, chunks);
        if assemble {
            chunks.iter().for_each(|c| self.assembler.push(c));
        }
        self.usage += ev.event.spent();
    }
}

impl Durable {
    /// Stores one group and raises the watermark the checkpointer waits on.
    async fn store(&self, group: &[Arc<Event>]) -> Result<(), CheckpointError> {
        self.writer.save_events(group[0].run_id, group).await?;
        self.stored.send_replace(group.last().map_or(0, |e| e.seq));
        Ok(())
    }
}

/// Tells the observer about one event, and the time from `run_started` to
/// the run's first visible event (what a user waits before seeing anything).
fn observe(runs: &Runs, graph_id: &str, ev: &Event, unseen: &mut Option<u64>) {
    runs.observer.event(graph_id, ev);
    match &ev.event {
        EventKind::RunStarted(_) => *unseen = Some(ev.at),
        k if k.is_visible() => {
            if let Some(start) = unseen.take() {
                let seconds = ev.at.saturating_sub(start) as f64 / 1e6;
                runs.observer.first_visible(graph_id, seconds);
            }
        }
        _ => {}
    }
}

/// Adds to `group` what is already waiting, then — until `deadline`, unless
/// a node ended (its step is about to be checkpointed) — what arrives.
async fn gather(
    rx: &mut mpsc::Receiver<Arc<Event>>,
    group: &mut Vec<Arc<Event>>,
    deadline: Option<Instant>,
) {
    loop {
        while group.len() < GROUP {
            match rx.try_recv() {
                Ok(ev) => group.push(ev),
                Err(_) => break,
            }
        }
        let Some(deadline) = deadline else { return };
        let step_end = group.iter().any(|e| {
            matches!(
                e.event,
                EventKind::NodeFinished { .. } | EventKind::NodeFailed { .. }
            ) || e.event.is_terminal()
        });
        if group.len() >= GROUP || step_end {
            return;
        }
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(ev)) => group.push(ev),
            Ok(None) | Err(_) => return,
        }
    }
}

/// Shutdown: leaves the run `running` at its last checkpoint for another
/// instance (or this one, restarted) to take over.
async fn suspend(runs: &Runs, hub: &Arc<RunHub>, run_id: uuid::Uuid) {
    if let Err(e) = runs.store.release_lease(run_id, &runs.instance).await {
        tracing::warn!(error = %e, "could not release the lease of a suspended run");
    }
    hub.finish();
    tracing::info!("run suspended at its last checkpoint");
    runs.remove(hub);
}

/// Why the run's store gave out, if it did: the pump could not store its
/// events, or the executor its checkpoints (after the outage policy's
/// retries, or at once for a write no retry could fix).
fn store_failure(pumped: &Pumped, result: &Result<RunOutcome, RunError>) -> Option<String> {
    match result {
        _ if pumped.unstored.is_some() => pumped.unstored.clone(),
        Err(RunError::Checkpoint(e)) => Some(e.to_string()),
        _ => None,
    }
}

fn outcome(
    result: &Result<RunOutcome, RunError>,
    run_id: uuid::Uuid,
) -> (RunStatus, Option<ErrorInfo>) {
    match result {
        Ok(_) => (RunStatus::Finished, None),
        Err(RunError::Cancelled) => (RunStatus::Cancelled, None),
        Err(RunError::Interrupted(_)) => (RunStatus::Interrupted, None),
        Err(e) => {
            // The client saw only the reference (the run id); the detail is here.
            tracing::error!(reference = %run_id, error = %e, "run failed");
            (RunStatus::Failed, Some(e.info()))
        }
    }
}
