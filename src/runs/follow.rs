//! Streaming a run another instance executes (or that awaits recovery):
//! a hub that follows its event log.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use uuid::Uuid;

use super::hub::HubInit;
use super::{RunHub, Runs};
use crate::events::EventKind;
use crate::runtime::RunStatus;
use crate::sse::BridgeConfig;
use crate::store::{ChatRecord, RunRecord, StoreError};

impl Runs {
    /// The hub of the chat's run when this process does not execute it: one
    /// that follows the log (`None` when the chat has no run in flight).
    ///
    /// # Errors
    /// The store failed.
    pub async fn follow_chat(
        self: &Arc<Self>,
        chat: &ChatRecord,
    ) -> Result<Option<Arc<RunHub>>, StoreError> {
        let Some(run_id) = chat.active_run else {
            return Ok(None);
        };
        let Some(run) = self.store.get_run(run_id).await? else {
            return Ok(None);
        };
        if run.status != RunStatus::Running {
            return Ok(None);
        }
        // Executed nowhere (stranded here, or its instance died): it runs
        // here now, and the stream is its own.
        match self.take_over(run_id).await {
            Ok(Some(hub)) => return Ok(Some(hub)),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(run_id = %run_id, error = %e, "could not take over a run nobody executes")
            }
        }
        let bridge = self.run_bridge(&run).await?;
        Ok(bridge.map(|b| self.follow(&chat.id, run_id, b)))
    }

    /// The stream settings of a stored run: as recorded in its
    /// `run_started`, or (if it never got that far) as its chat response
    /// began them.
    ///
    /// # Errors
    /// The store failed.
    pub async fn run_bridge(&self, run: &RunRecord) -> Result<Option<BridgeConfig>, StoreError> {
        let first = self.store.events(run.id, 0, 1).await?;
        if let Some(b) = first.iter().find_map(|e| match &e.event {
            EventKind::RunStarted(start) => start.stream.as_ref().and_then(BridgeConfig::from_json),
            _ => None,
        }) {
            return Ok(Some(b));
        }
        let (Some(graph), Some(message_id), Some(chat)) =
            (self.graphs.get(&run.graph), &run.message_id, &run.chat_id)
        else {
            return Ok(None);
        };
        let metadata = super::stream_metadata(
            &self.services,
            run.id,
            run.request_id.as_deref().unwrap_or(""),
            chat,
            &graph,
        );
        Ok(Some(BridgeConfig::for_graph(
            &graph,
            message_id.clone(),
            metadata,
        )))
    }

    /// A hub that follows a run executing on another instance through the
    /// event log (every event it has is in the store).
    pub fn follow(
        self: &Arc<Self>,
        chat_id: &str,
        run_id: Uuid,
        bridge: BridgeConfig,
    ) -> Arc<RunHub> {
        let mut hubs = self.hubs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = hubs.get(chat_id).filter(|h| h.run_id == run_id) {
            return Arc::clone(h);
        }
        let hub = Arc::new(RunHub::new(HubInit::reader(run_id, chat_id, bridge, 0)));
        hubs.insert(chat_id.to_owned(), Arc::clone(&hub));
        drop(hubs);
        self.tracker
            .spawn(follow(Arc::clone(self), Arc::clone(&hub)));
        hub
    }
}

/// Reads a run's events from the log as they land (woken by store
/// notifications, polling as a fallback) until its last event.
async fn follow(runs: Arc<Runs>, hub: Arc<RunHub>) {
    let mut notes = runs.store.subscribe();
    let mut cursor = 0u64;
    loop {
        match runs.store.events(hub.run_id, cursor, 512).await {
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
            _ = runs.shutdown.cancelled() => break,
        }
    }
    // The executing instance stores the message and the run's status just
    // after the last event; streams end (`[DONE]`) once that is visible.
    for _ in 0..100 {
        if settled(&runs, hub.run_id).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    hub.finish();
    super::drive::linger(runs, hub);
}

/// Whether the executing instance is done with the run: it is no longer
/// running and, for a chat turn, its message is stored. The final batch
/// sets the status a moment before the turn's end stores the message and
/// frees the chat (one transaction, `ChatStore::end_turn`), so a client
/// that reloads the chat when its stream ends would otherwise find the
/// answer missing. A paused run keeps its chat: its status is enough.
async fn settled(runs: &Runs, run_id: Uuid) -> bool {
    let run = match runs.store.get_run(run_id).await {
        Ok(Some(r)) => r,
        _ => return true,
    };
    if run.status == RunStatus::Running {
        return false;
    }
    let Some(chat) = run
        .chat_id
        .as_deref()
        .filter(|_| run.status != RunStatus::Interrupted)
    else {
        return true;
    };
    match runs.store.get_chat(chat).await {
        Ok(Some(c)) => c.active_run != Some(run_id),
        _ => true,
    }
}
