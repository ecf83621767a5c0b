//! Judge verdicts in memory: a list per run, forgotten with the run.

use futures::future::BoxFuture;
use uuid::Uuid;

use super::{MemoryStore, ready};
use crate::store::{StoreError, StoreResult, VerdictRecord, Verdicts};

/// The verdicts a store keeps (`skipped` is not one: nothing was judged).
const VERDICTS: [&str; 3] = ["pass", "fail", "error"];

impl Verdicts for MemoryStore {
    fn add_verdicts(&self, verdicts: Vec<VerdictRecord>) -> BoxFuture<'_, StoreResult<()>> {
        if let Some(v) = verdicts
            .iter()
            .find(|v| !VERDICTS.contains(&v.verdict.as_str()))
        {
            // As the SQL backends' CHECK: nothing of the batch is stored.
            return ready(Err(StoreError::Backend(format!(
                "verdict `{}` is not one of {VERDICTS:?}",
                v.verdict
            ))));
        }
        let mut g = self.lock();
        for v in verdicts {
            g.verdicts.entry(v.run_id).or_default().push(v);
        }
        ready(Ok(()))
    }

    fn verdicts(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<VerdictRecord>>> {
        let mut out = self.lock().verdicts.get(&run).cloned().unwrap_or_default();
        out.sort_by_key(|v| (v.created_at, v.id));
        ready(Ok(out))
    }
}
