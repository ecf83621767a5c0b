//! Handing memory back once the process goes quiet ([`crate::memory`]).
//!
//! The upkeep looks every [`QUIET_CHECK`]. While runs execute it does
//! nothing; once none does, it releases at every look for
//! `memory_release` (60 s by default) after the last activity — a run
//! executing, or the set of live and lingering streams changing — and then
//! stops until something happens again.
//!
//! Why at every look for a while, not once: memory keeps being freed after
//! the last run ends (lingering streams drop away after `linger`, idle
//! model connections close, SQLite and mimalloc finish deferred frees), and
//! a release only returns what is free at that moment. Measured with the
//! load bench (1,000 paced chats, offline model, `linger` 5 s): releasing
//! only when the last run ended and when the streams dropped away left
//! 61 MB 30 s after the load; releasing at every look for the following
//! minute, 30 MB (idle: 24 MB). A release is one allocator call on each
//! runtime worker and SQLite thread, `PRAGMA shrink_memory` on each SQLite
//! connection and one `malloc_trim`.

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use super::Runs;
use crate::memory;

/// How often the upkeep looks whether the process went quiet.
pub(super) const QUIET_CHECK: Duration = Duration::from_secs(2);

/// Parked runtime workers woken after a release request, so that each
/// parks again and honours it ([`memory::idle_point`] runs on park): a
/// handful of empty tasks, which idle workers steal.
const WAKE_TASKS: usize = 8;

/// What the upkeep saw at its last look.
#[derive(Debug, Default)]
pub(super) struct Quiet {
    busy: bool,
    streams: usize,
    /// The last activity, while releases are still due after it.
    active_at: Option<Instant>,
}

impl Quiet {
    /// One look at `running` runs and `streams` live or lingering streams:
    /// whether to release now.
    fn look(&mut self, running: usize, streams: usize, now: Instant, tail: Duration) -> bool {
        let changed = self.busy || streams != self.streams;
        self.busy = running > 0;
        self.streams = streams;
        if running > 0 || changed {
            self.active_at = Some(now);
        }
        if running > 0 {
            return false;
        }
        match self.active_at {
            Some(at) if now.duration_since(at) <= tail => true,
            _ => {
                self.active_at = None;
                false
            }
        }
    }
}

impl Runs {
    /// One look (see the module docs); releases when due. Also drops the
    /// finished runs' notes whose linger is over (`finished`).
    pub(super) async fn release_if_quiet(&self, seen: &mut Quiet) {
        self.sweep_finished();
        let tail = self.config.memory_release;
        if !memory::installed() || tail.is_zero() {
            return;
        }
        let live = self
            .hubs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        let streams = live + self.finished_count();
        if !seen.look(self.running(), streams, Instant::now(), tail) {
            return;
        }
        memory::request();
        self.store.release_memory().await;
        memory::release_process();
        for _ in 0..WAKE_TASKS {
            tokio::spawn(async {});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAIL: Duration = Duration::from_secs(10);

    #[test]
    fn releases_after_activity_for_the_tail_then_stops() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut q = Quiet::default();
        assert!(!q.look(0, 0, at(0), TAIL), "nothing has happened yet");
        assert!(!q.look(3, 3, at(2), TAIL), "never while runs execute");
        assert!(!q.look(1, 3, at(4), TAIL));
        // The last run ended: released at every look within the tail.
        assert!(q.look(0, 3, at(6), TAIL));
        assert!(q.look(0, 3, at(8), TAIL));
        assert!(q.look(0, 3, at(16), TAIL));
        assert!(!q.look(0, 3, at(18), TAIL), "tail over");
        assert!(!q.look(0, 3, at(20), TAIL));
        // A lingering stream dropping away is activity too.
        assert!(q.look(0, 2, at(22), TAIL));
        assert!(q.look(0, 2, at(32), TAIL));
        assert!(!q.look(0, 2, at(34), TAIL));
        // So is a run that came and went between two looks.
        assert!(q.look(0, 3, at(36), TAIL));
    }
}
