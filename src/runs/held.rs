//! Which runs this process answers for, so that none of them is leased
//! here and executed nowhere.
//!
//! A run is *held* from just before its record (or its claim) is written
//! until its end is recorded, its lease is given up, or its start failed:
//! a [`Hold`] guard, moved into the run's task, lets go when it drops — so
//! a task that ended any other way (a panic) lets go too. The lease upkeep
//! compares the store's answer with this set (`recover::Runs::renew`):
//!
//! - a run the store says this process leases but nothing here holds is
//!   **stranded** — written, never executed (the start was cut off) or its
//!   task is gone — and is taken over at once, as recovery would after a
//!   crash;
//! - a run held here whose lease the store no longer gives this process,
//!   although the lease was in the store before the renewal began, was
//!   **lost** to another instance (this one could not renew it for longer
//!   than the lease, during an outage): it stops executing here, so two
//!   instances never write one run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use uuid::Uuid;

/// The runs this process answers for.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Run → when its lease was known to be in the store (`None` while the
    /// write that takes it is under way).
    runs: Mutex<HashMap<Uuid, Option<Instant>>>,
}

impl Held {
    /// Holds `run` until the guard drops; `None` if it is held already
    /// (another task of this process answers for it).
    pub(super) fn hold(self: &Arc<Self>, run: Uuid) -> Option<Hold> {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if runs.contains_key(&run) {
            return None;
        }
        runs.insert(run, None);
        Some(Hold {
            held: Arc::clone(self),
            run,
        })
    }

    /// Whether `run` is held.
    pub(super) fn contains(&self, run: Uuid) -> bool {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&run)
    }

    /// Compares the runs the store leases to this process (`leased`, as a
    /// renewal that began at `began` found them) with the held ones: the
    /// stranded (leased, not held) and the lost (held with a lease stored
    /// before `began`, not leased).
    pub(super) fn compare(&self, leased: &[Uuid], began: Instant) -> (Vec<Uuid>, Vec<Uuid>) {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let stranded = leased
            .iter()
            .filter(|id| !runs.contains_key(id))
            .copied()
            .collect();
        let lost = runs
            .iter()
            .filter(|(id, at)| at.is_some_and(|at| at < began) && !leased.contains(id))
            .map(|(id, _)| *id)
            .collect();
        (stranded, lost)
    }
}

/// Holds a run (see [`Held`]); lets go when dropped.
#[derive(Debug)]
pub(super) struct Hold {
    held: Arc<Held>,
    run: Uuid,
}

impl Hold {
    /// The lease is in the store now (the write that took it returned).
    pub(super) fn leased(&self) {
        let mut runs = self
            .held
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = runs.get_mut(&self.run) {
            *at = Some(Instant::now());
        }
    }
}

impl Hold {
    /// The run's end is being written: its lease leaves the store's answer
    /// (an ended run is not `running`) before this guard drops. Until then
    /// it counts as being written, neither lost nor stranded — without
    /// this, a renewal that ran between the two took each run ending under
    /// load for one another instance had taken over.
    pub(super) fn ending(&self) {
        self.end_mark().mark();
    }

    /// What marks the run's end as being written from where it is first
    /// written: the checkpointer's last step, which already stores the
    /// run as ended (see [`EndMark`]).
    pub(super) fn end_mark(&self) -> EndMark {
        EndMark {
            held: Arc::clone(&self.held),
            run: self.run,
        }
    }
}

/// Marks a held run as ending ([`Hold::ending`]) from the checkpointer,
/// before it writes the run's last step: that write takes the run out of
/// the store's `running` runs, and a renewal between it and the executor's
/// return (a slow reply, under load) took the run for lost and suspended
/// it — the stream ended, the chat's turn was never recorded.
#[derive(Clone, Debug)]
pub(super) struct EndMark {
    held: Arc<Held>,
    run: Uuid,
}

impl EndMark {
    /// The run's end is being written (nothing once it is no longer held).
    pub(super) fn mark(&self) {
        let mut runs = self
            .held
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = runs.get_mut(&self.run) {
            *at = None;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.held
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stranded_are_leased_not_held_and_lost_are_held_not_leased() {
        let held = Arc::new(Held::default());
        let (a, b, c, d) = (
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
        );
        let ha = held.hold(a).unwrap();
        ha.leased();
        let hb = held.hold(b).unwrap();
        hb.leased();
        // `c` is being written: its lease may or may not be in the answer.
        let _hc = held.hold(c).unwrap();
        assert!(held.hold(a).is_none(), "one holder per run");
        let began = Instant::now();
        // The store leases a (held), d (not held); b went to another instance.
        let (stranded, lost) = held.compare(&[a, d], began);
        assert_eq!(stranded, vec![d]);
        assert_eq!(lost, vec![b]);
        // A lease stored after the renewal began is not lost yet.
        let hd = held.hold(d).unwrap();
        hd.leased();
        let (_, lost) = held.compare(&[a], began);
        assert!(!lost.contains(&d), "{lost:?}");
        // A run whose end is being written is not lost when its lease is
        // gone from the answer.
        hd.ending();
        let (_, lost) = held.compare(&[a], Instant::now());
        assert!(!lost.contains(&d), "{lost:?}");
        // So is one whose checkpointer is writing its last step.
        ha.end_mark().mark();
        let (_, lost) = held.compare(&[], Instant::now());
        assert!(!lost.contains(&a), "{lost:?}");
        drop(hb);
        assert!(!held.contains(b));
        assert!(held.contains(a) && held.contains(c) && held.contains(d));
    }
}
