//! Executing one run: the executor and the event pump side by side, then
//! the bookkeeping once it is over.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::{Begin, Launch, RunHub, Runs};
use crate::events::{ErrorInfo, Event, EventKind, Usage, now_micros};
use crate::runtime::{self, RunError, RunOptions, RunOutcome, RunStatus};
use crate::sse::{Assembler, Bridge};
use crate::store::{LogCheckpointer, MessageRecord};

type RunFuture = Pin<Box<dyn Future<Output = Result<RunOutcome, RunError>> + Send>>;

/// What the pump saw: the assembled message and the tokens spent.
struct Pumped {
    assembler: Assembler,
    usage: Usage,
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
    let opts = RunOptions {
        run_id: launch.run_id,
        events: Some(tx),
        cancel: hub.cancel.clone(),
        checkpointer: Some(Arc::new(
            LogCheckpointer::new(Arc::clone(&runs.store))
                .with_outage_limit(runs.config.store_outage_limit),
        )),
        stream: Some(hub.bridge.to_json()),
        durability: runs.config.durability,
        forked_from: launch.forked_from.clone(),
        ..Default::default()
    };
    let graph_id = launch.graph.id.to_string();
    let begin = std::mem::replace(&mut launch.begin, Begin::Fresh(Value::Null));
    let (history, run): (Vec<Event>, RunFuture) = match begin {
        Begin::Fresh(input) => (
            Vec::new(),
            Box::pin(runtime::run(
                Arc::clone(&launch.graph),
                Arc::clone(&runs.services),
                input,
                opts,
            )),
        ),
        Begin::Resumed { from, history } => (
            history,
            Box::pin(runtime::resume(
                Arc::clone(&launch.graph),
                Arc::clone(&runs.services),
                from,
                opts,
            )),
        ),
    };
    let tap = launch.tap.take();
    let pump = pump(&runs, &hub, &graph_id, &history, tap.as_ref(), rx);
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
    record_end(&runs, &launch, status, error, pumped).await;
    runs.observer.finished(&graph_id, status_name(status));
    drop(permit);
    hub.finish();
    tracing::info!(outcome = status_name(status), "run over");
    tokio::select! {
        _ = tokio::time::sleep(runs.config.linger) => {}
        _ = runs.shutdown.cancelled() => {}
    }
    runs.remove(&hub);
}

/// Passes the run's events to the hub and the observer, and assembles the
/// UI message (what the client saw before a crash included).
async fn pump(
    runs: &Runs,
    hub: &RunHub,
    graph_id: &str,
    history: &[Event],
    tap: Option<&mpsc::Sender<Arc<Event>>>,
    mut rx: mpsc::Receiver<Arc<Event>>,
) -> Pumped {
    let mut bridge = Bridge::new(hub.bridge.clone());
    let mut pumped = Pumped {
        assembler: Assembler::new(),
        usage: Usage::default(),
    };
    let mut chunks = Vec::new();
    let mut feed = |ev: &Event, pumped: &mut Pumped| {
        chunks.clear();
        bridge.on_event(ev, &mut chunks);
        chunks.iter().for_each(|c| pumped.assembler.push(c));
        if let EventKind::LlmFinished { usage, .. } = &ev.event {
            pumped.usage += *usage;
        }
    };
    for ev in history {
        feed(ev, &mut pumped);
    }
    while let Some(ev) = rx.recv().await {
        runs.observer.event(graph_id, &ev);
        feed(&ev, &mut pumped);
        if let Some(tap) = tap {
            // A watcher that went away stops watching; the run goes on.
            let _ = tap.send(Arc::clone(&ev)).await;
        }
        hub.push(ev);
    }
    pumped
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

fn outcome(
    result: &Result<RunOutcome, RunError>,
    run_id: uuid::Uuid,
) -> (RunStatus, Option<ErrorInfo>) {
    match result {
        Ok(_) => (RunStatus::Finished, None),
        Err(RunError::Cancelled) => (RunStatus::Cancelled, None),
        Err(e) => {
            // The client saw only the reference (the run id); the detail is here.
            tracing::error!(reference = %run_id, error = %e, "run failed");
            (RunStatus::Failed, Some(e.info()))
        }
    }
}

fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Finished => "finished",
        RunStatus::Cancelled => "cancelled",
        _ => "failed",
    }
}

/// Records how the run ended: its status and usage (spent tokens count
/// whatever the outcome), the chat's assistant message and active run.
async fn record_end(
    runs: &Runs,
    launch: &Launch,
    status: RunStatus,
    error: Option<ErrorInfo>,
    pumped: Pumped,
) {
    if let Some(chat) = &launch.chat {
        let message = MessageRecord {
            chat_id: chat.chat_id.clone(),
            id: chat.message_id.clone(),
            role: "assistant".into(),
            parts: Value::Array(pumped.assembler.parts().to_vec()),
            metadata: pumped.assembler.metadata(),
            position: chat.position,
            created_at: now_micros(),
        };
        // A chat deleted while it was answering stays deleted.
        match runs.store.get_chat(&chat.chat_id).await {
            Ok(Some(_)) => {
                if let Err(e) = runs.store.upsert_message(message).await {
                    tracing::error!(error = %e, "could not store the assistant message");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "could not store the assistant message"),
        }
    }
    if let Err(e) = runs
        .store
        .finish_run(launch.run_id, status, error, pumped.usage)
        .await
    {
        tracing::error!(error = %e, "could not record the end of the run");
    }
    if let Some(chat) = &launch.chat
        && let Err(e) = runs.store.release_chat(&chat.chat_id, launch.run_id).await
    {
        tracing::debug!(error = %e, "could not clear the chat's active run");
    }
}
