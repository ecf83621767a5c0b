//! The executor's side of breakpoints (`runtime::breaks` decides): the
//! check before each step, the one at the end of a run, and recording the
//! breakpoints a run was given.

use super::{Exec, RunError};
use crate::events::{EventKind, EventSink};
use crate::graph::NodeIdx;
use crate::runtime::RunOptions;
use crate::runtime::breaks::{Decision, edited};

/// Records the run's breakpoints when they are new with this execution.
pub(super) async fn record_breakpoints(sink: &EventSink, opts: &RunOptions, step: u32) {
    if let (true, Some(b)) = (opts.record_breakpoints, &opts.breakpoints) {
        sink.emit(
            step,
            None,
            0,
            EventKind::BreakpointsSet {
                breakpoints: b.clone(),
            },
        )
        .await;
    }
}

impl Exec<'_> {
    /// The breakpoint check before the step numbered `self.step` (already
    /// counted): it runs, runs on an edited state, or the run pauses here
    /// (stored like any pause: the state before the step, its tasks next).
    pub(super) fn at_breakpoint(&mut self) -> Result<(), RunError> {
        let next: Vec<NodeIdx> = self.tasks.iter().map(|t| t.node).collect();
        match self
            .breaks
            .before_step(self.graph, self.services, self.step, &next)
        {
            Decision::Go => Ok(()),
            Decision::Edit(set) => {
                self.state = edited(self.graph, &*self.state, &set).map_err(RunError::State)?;
                self.edited = true;
                Ok(())
            }
            Decision::Pause(at) => Err(RunError::Interrupted(vec![at])),
        }
    }

    /// At the end of the run: a breakpoint after its last step pauses it
    /// with nothing left to run (that step is stored first, then the pause
    /// as an empty step after it).
    pub(super) async fn at_end(&mut self) -> Result<(), RunError> {
        self.step += 1;
        let outcome = self.at_breakpoint();
        self.step -= 1;
        if let Err(pause) = outcome {
            if let Some(writes) = self.last_writes.take() {
                self.checkpoint(writes, false)
                    .await
                    .map_err(RunError::Checkpoint)?;
            }
            self.step += 1;
            return Err(pause);
        }
        Ok(())
    }
}
