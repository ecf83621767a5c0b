//! A finished run's stream, resumable for `linger` without keeping it in
//! memory.
//!
//! A client that lost its connection just before a run ended can still
//! resume (`GET /api/chat/{id}/stream`) for `linger` (30 s) afterwards. A
//! run whose every event is stored before clients see it (visible
//! durability, the default) needs nothing of its hub for that: the resume
//! reads the store. So when such a run ends its hub is dropped and only a
//! [`Finished`] note stays — a run id and a deadline, one small map entry —
//! and a resume builds a transient hub over the stored log, its stream
//! settings from the run's `run_started` (as recovery and followers do).
//!
//! Why not keep the hub: after a load of 1,000 chats, the lingering hubs'
//! few objects each, allocated all through the load, kept partly used
//! allocator pages resident — ~25 MB of RSS for 30 s after the load
//! (`docs/memory.md`). Runs whose stream differs from their recorded
//! settings (a paused run continuing, a recovered run, a follower) linger
//! as hubs as before: they are rare.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use uuid::Uuid;

use super::hub::HubInit;
use super::{RunHub, Runs};
use crate::store::StoreError;

/// A chat's last run, finished, still resumable until `until`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Finished {
    run_id: Uuid,
    until: Instant,
}

/// Finished notes kept before expired ones are swept out on the way (the
/// upkeep sweeps them too).
const SWEEP_AT: usize = 1024;

impl Runs {
    /// Lets a finished hub go, leaving a [`Finished`] note, if a resume can
    /// rebuild its stream from the store; false if it must linger as is.
    pub(super) fn retire(&self, hub: &Arc<RunHub>) -> bool {
        if !hub.stored_in_full() || hub.follower || hub.resumed > 0 || hub.recovered_at.is_some() {
            return false;
        }
        let note = Finished {
            run_id: hub.run_id,
            until: Instant::now() + self.config.linger,
        };
        {
            let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
            if finished.len() >= SWEEP_AT && finished.len().is_power_of_two() {
                drop_expired(&mut finished);
            }
            finished.insert(hub.chat_id.clone(), note);
        }
        self.remove(hub);
        true
    }

    /// Drops the notes whose linger is over.
    pub(super) fn sweep_finished(&self) {
        drop_expired(&mut self.finished.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Finished runs whose streams are still resumable.
    pub(super) fn finished_count(&self) -> usize {
        self.finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The stream of the chat's run that finished within `linger`, read
    /// from the store; `None` if there is none (or the store no longer has
    /// it).
    ///
    /// # Errors
    /// The store failed.
    pub async fn finished_stream(&self, chat_id: &str) -> Result<Option<Arc<RunHub>>, StoreError> {
        let note = self
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(chat_id)
            .copied();
        let Some(note) = note.filter(|n| n.until > Instant::now()) else {
            return Ok(None);
        };
        let Some(run) = self.store.get_run(note.run_id).await? else {
            return Ok(None);
        };
        let Some(bridge) = self.run_bridge(&run).await? else {
            return Ok(None);
        };
        let hub = Arc::new(RunHub::new(HubInit::reader(
            run.id,
            chat_id,
            bridge,
            run.last_seq,
        )));
        hub.finish();
        Ok(Some(hub))
    }
}

fn drop_expired(finished: &mut HashMap<String, Finished>) {
    let now = Instant::now();
    finished.retain(|_, f| f.until > now);
}
