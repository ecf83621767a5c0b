//! Conformance checks for judge verdicts: stored per run, read back oldest
//! first, refused whole when one is not a verdict, and pruned with their run.

use super::*;
use stategraph::internals::store::VerdictRecord;

fn verdict(run: Uuid, at: u64, criterion: &str, verdict: &str) -> VerdictRecord {
    VerdictRecord {
        id: Uuid::now_v7(),
        run_id: run,
        criterion: criterion.into(),
        verdict: verdict.into(),
        reason: format!("the reason for {criterion} — ünïcödé ✓"),
        judge: "judge".into(),
        model: "gpt-judge".into(),
        answer: "Kenya's capital is Nairobi.".into(),
        source: "eval".into(),
        created_at: at,
    }
}

pub(super) async fn verdicts_are_kept_per_run_and_pruned_with_it(store: Arc<dyn Store>) {
    let old = run(None, 1);
    let kept = run(
        None,
        stategraph::internals::events::now_micros() + 60_000_000,
    );
    for r in [&old, &kept] {
        store.create_run(r.clone()).await.unwrap();
        store
            .finish_run(r.id, RunStatus::Finished, None, Usage::default())
            .await
            .unwrap();
    }
    assert!(store.verdicts(old.id).await.unwrap().is_empty());
    assert!(store.verdicts(Uuid::now_v7()).await.unwrap().is_empty());

    let later = verdict(old.id, 20, "the answer is polite", "fail");
    let first = verdict(old.id, 10, "the answer cites a source", "pass");
    let other = verdict(kept.id, 10, "the answer is short", "error");
    store
        .add_verdicts(vec![later.clone(), first.clone(), other.clone()])
        .await
        .unwrap();
    assert_eq!(
        store.verdicts(old.id).await.unwrap(),
        vec![first.clone(), later.clone()],
        "a run's verdicts, oldest first, each as it was stored"
    );
    assert_eq!(store.verdicts(kept.id).await.unwrap(), vec![other.clone()]);

    let refused = store
        .add_verdicts(vec![
            verdict(kept.id, 30, "fine", "pass"),
            verdict(kept.id, 31, "not judged", "skipped"),
        ])
        .await;
    assert!(refused.is_err(), "`skipped` is no verdict: {refused:?}");
    assert_eq!(
        store.verdicts(kept.id).await.unwrap(),
        vec![other.clone()],
        "nothing of a refused batch is stored"
    );

    store.prune(2, false).await.unwrap();
    assert!(store.get_run(old.id).await.unwrap().is_none());
    assert!(
        store.verdicts(old.id).await.unwrap().is_empty(),
        "a pruned run's verdicts go with it"
    );
    assert_eq!(store.verdicts(kept.id).await.unwrap(), vec![other]);
}
