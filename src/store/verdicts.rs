//! Verdicts of a judge model on a run's answer (`stategraph eval
//! --criterion … --judge ROLE`, the studio's Eval page): each criterion with
//! its verdict and the judge's reason, kept with the run they judge so the
//! run's page and `GET /api/runs/{id}/verdicts` show them later.
//!
//! A verdict is added, never changed: evaluating a run again adds the new
//! verdicts beside the old ones (each names when and by which model). They
//! go when their run is pruned.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StoreResult;

/// One judged criterion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictRecord {
    /// Its own id (time-ordered).
    pub id: Uuid,
    /// The run whose input was judged (for `eval`, the stored run it ran
    /// again: the answer judged is the one the graphs give now).
    pub run_id: Uuid,
    /// The criterion, e.g. "the answer cites a source".
    pub criterion: String,
    /// `pass`, `fail` or `error` (the judge failed or answered out of form).
    pub verdict: String,
    /// The judge's reason (or why there is no verdict).
    pub reason: String,
    /// The `[llm]` role that judged.
    pub judge: String,
    /// The judge's model.
    pub model: String,
    /// The answer judged.
    pub answer: String,
    /// What judged it: `eval` (the CLI) or `studio` (the Eval page).
    pub source: String,
    /// When, µs since the epoch.
    pub created_at: u64,
}

/// Judge verdicts, per run.
pub trait Verdicts: Send + Sync {
    /// Stores verdicts (of any runs) in one transaction.
    fn add_verdicts(&self, verdicts: Vec<VerdictRecord>) -> BoxFuture<'_, StoreResult<()>>;
    /// A run's verdicts, oldest first (empty for a run without any, or an
    /// unknown one).
    fn verdicts(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<VerdictRecord>>>;
}
