//! An evaluation's verdicts kept with the runs they judge: each judged
//! criterion of a stored run becomes a [`VerdictRecord`] (the store's
//! `run_verdicts`), so the run's page shows it later. Criteria that were
//! not judged (no judge model) are not verdicts and are not kept, and
//! neither are those of inputs from a file (no stored run to keep them
//! with).

use uuid::Uuid;

use super::eval::RunEval;
use super::judge::Judge;
use crate::store::VerdictRecord;

/// The verdicts of `evals` (of stored runs) to store, judged by `judge`
/// (`source`: `eval` or `studio`).
pub(crate) fn verdict_records(
    evals: &[RunEval],
    judge: &Judge,
    source: &str,
) -> Vec<VerdictRecord> {
    let now = crate::events::now_micros();
    let model = judge.model.name();
    let mut out = Vec::new();
    for e in evals {
        let answer = e.after.as_ref().map_or("", |a| a.answer.as_str());
        for j in e.judged.iter().filter(|j| j.verdict != "skipped") {
            out.push(VerdictRecord {
                id: Uuid::now_v7(),
                run_id: e.run,
                criterion: j.criterion.clone(),
                verdict: j.verdict.to_owned(),
                reason: j.reason.clone(),
                judge: judge.role.clone(),
                model: model.to_owned(),
                answer: answer.to_owned(),
                source: source.to_owned(),
                created_at: now,
            });
        }
    }
    out
}
