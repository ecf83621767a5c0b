//! Conformance checks for run leases: acquiring, renewing, expiring,
//! releasing, claiming orphans, and leases ending with their run.
//!
//! Lease times here are small numbers: the store never reads the clock for
//! leases, the caller passes `now`.

use super::*;
use stategraph::internals::store::Lease;

fn lease(owner: &str, until: u64) -> Option<Lease> {
    Some(Lease {
        owner: owner.into(),
        until,
    })
}

async fn running(store: &dyn Store, created_at: u64) -> Uuid {
    let r = run(None, created_at);
    store.create_run(r.clone()).await.unwrap();
    r.id
}

pub(super) async fn a_run_created_leased_is_never_an_orphan_while_its_lease_lasts(
    store: Arc<dyn Store>,
) {
    let r = run(None, 1);
    store.create_leased_run(r.clone(), "a", 200).await.unwrap();
    assert_eq!(store.get_run(r.id).await.unwrap().unwrap(), r);
    assert_eq!(store.lease(r.id).await.unwrap(), lease("a", 200));
    // A plain run created at the same time is an orphan at once; this one is not.
    let bare = running(&*store, 2).await;
    let claimed = store.claim_orphans("b", 100, 1_000, 10).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [bare]);
    assert!(!store.acquire_lease(r.id, "b", 150, 300).await.unwrap());
    assert!(store.acquire_lease(r.id, "a", 150, 300).await.unwrap());
    assert_eq!(store.renew_leases("a", 400).await.unwrap(), [r.id]);
    // Once it lapses, it is claimed like any other.
    let claimed = store.claim_orphans("b", 401, 900, 10).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [r.id]);
    assert!(matches!(
        store.create_leased_run(r.clone(), "c", 1_000).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.lease(r.id).await.unwrap(),
        lease("b", 900),
        "unchanged"
    );
}

pub(super) async fn leases_are_acquired_renewed_expire_and_are_released(store: Arc<dyn Store>) {
    let r = running(&*store, 1).await;
    assert!(store.acquire_lease(r, "a", 100, 200).await.unwrap());
    assert_eq!(store.lease(r).await.unwrap(), lease("a", 200));
    assert!(
        !store.acquire_lease(r, "b", 150, 300).await.unwrap(),
        "another owner's live lease"
    );
    assert_eq!(store.lease(r).await.unwrap(), lease("a", 200), "unchanged");
    assert!(
        store.acquire_lease(r, "a", 150, 400).await.unwrap(),
        "the owner extends it"
    );
    assert!(
        !store.acquire_lease(r, "b", 400, 500).await.unwrap(),
        "a lease ending exactly now has not expired"
    );

    assert_eq!(store.renew_leases("a", 1_000).await.unwrap(), [r]);
    assert_eq!(store.lease(r).await.unwrap(), lease("a", 1_000));
    assert!(store.renew_leases("b", 1_000).await.unwrap().is_empty());

    assert!(
        store.acquire_lease(r, "b", 1_001, 2_000).await.unwrap(),
        "an expired lease is taken over"
    );
    assert_eq!(store.lease(r).await.unwrap(), lease("b", 2_000));
    assert!(
        store.renew_leases("a", 3_000).await.unwrap().is_empty(),
        "the previous owner learns it lost the run"
    );
    assert_eq!(store.lease(r).await.unwrap(), lease("b", 2_000));

    store.release_lease(r, "a").await.unwrap();
    assert_eq!(
        store.lease(r).await.unwrap(),
        lease("b", 2_000),
        "only the owner releases"
    );
    store.release_lease(r, "b").await.unwrap();
    assert_eq!(store.lease(r).await.unwrap(), None);
    assert!(
        store.acquire_lease(r, "c", 0, 10).await.unwrap(),
        "a released lease is free"
    );

    let unknown = Uuid::now_v7();
    assert!(!store.acquire_lease(unknown, "a", 0, 10).await.unwrap());
    assert_eq!(store.lease(unknown).await.unwrap(), None);
    store.release_lease(unknown, "a").await.unwrap();

    let done = run(None, 2);
    store
        .create_run(RunRecord {
            status: RunStatus::Finished,
            finished_at: Some(3),
            ..done.clone()
        })
        .await
        .unwrap();
    assert!(
        !store.acquire_lease(done.id, "a", 0, 10).await.unwrap(),
        "a run that is over has no lease to take"
    );

    // Renewal answers every running run the owner holds, and only those.
    let (x, y) = (running(&*store, 3).await, running(&*store, 4).await);
    assert!(store.acquire_lease(x, "d", 0, 10).await.unwrap());
    assert!(store.acquire_lease(y, "d", 0, 10).await.unwrap());
    let mut both = vec![x, y];
    both.sort();
    assert_eq!(store.renew_leases("d", 20).await.unwrap(), both);
    store
        .finish_run(y, RunStatus::Cancelled, None, Usage::default())
        .await
        .unwrap();
    assert_eq!(store.renew_leases("d", 30).await.unwrap(), [x]);
    assert_eq!(store.lease(x).await.unwrap(), lease("d", 30));
}

pub(super) async fn finishing_a_run_clears_its_lease(store: Arc<dyn Store>) {
    let a = running(&*store, 1).await;
    assert!(store.acquire_lease(a, "me", 0, 100).await.unwrap());
    store
        .finish_run(a, RunStatus::Failed, None, Usage::default())
        .await
        .unwrap();
    assert_eq!(store.lease(a).await.unwrap(), None, "finish_run clears it");
    assert!(store.renew_leases("me", 200).await.unwrap().is_empty());

    let b = running(&*store, 2).await;
    assert!(store.acquire_lease(b, "me", 0, 100).await.unwrap());
    store
        .append(&batch(b, 0, vec![text(b, 1, 0)]))
        .await
        .unwrap();
    assert_eq!(
        store.lease(b).await.unwrap(),
        lease("me", 100),
        "a running batch keeps it"
    );
    let mut last = batch(
        b,
        1,
        vec![event(
            b,
            2,
            1,
            EventKind::RunFinished {
                steps: 1,
                usage: Usage::default(),
            },
        )],
    );
    last.status = RunStatus::Finished;
    store.append(&last).await.unwrap();
    assert_eq!(
        store.lease(b).await.unwrap(),
        None,
        "the final batch clears it"
    );
    assert_eq!(
        store.get_run(b).await.unwrap().unwrap().status,
        RunStatus::Finished
    );
    assert!(
        store
            .claim_orphans("other", 1_000, 2_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub(super) async fn orphans_are_running_runs_with_an_expired_or_no_lease(store: Arc<dyn Store>) {
    let never = running(&*store, 1).await;
    let expired = running(&*store, 2).await;
    assert!(store.acquire_lease(expired, "dead", 0, 50).await.unwrap());
    let live = running(&*store, 3).await;
    assert!(store.acquire_lease(live, "x", 0, 10_000).await.unwrap());
    let over = run(None, 4);
    store
        .create_run(RunRecord {
            status: RunStatus::Finished,
            ..over.clone()
        })
        .await
        .unwrap();
    let mine_expired = running(&*store, 5).await;
    assert!(
        store
            .acquire_lease(mine_expired, "me", 0, 60)
            .await
            .unwrap()
    );
    let (late1, late2) = (running(&*store, 6).await, running(&*store, 7).await);

    let ids = |v: &[RunRecord]| v.iter().map(|r| r.id).collect::<Vec<_>>();
    let first = store.claim_orphans("me", 100, 500, 3).await.unwrap();
    assert_eq!(
        ids(&first),
        [never, expired, mine_expired],
        "oldest first, at most the limit"
    );
    for r in &first {
        assert_eq!(store.lease(r.id).await.unwrap(), lease("me", 500));
        assert_eq!(
            Some(r),
            store.get_run(r.id).await.unwrap().as_ref(),
            "whole records"
        );
    }
    let second = store.claim_orphans("other", 100, 600, 10).await.unwrap();
    assert_eq!(
        ids(&second),
        [late1, late2],
        "the live lease and the finished run are not orphans"
    );
    assert!(
        store
            .claim_orphans("other", 100, 600, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .claim_orphans("other", 10_000, 20_000, 0)
            .await
            .unwrap()
            .is_empty(),
        "limit 0"
    );
    assert_eq!(store.lease(over.id).await.unwrap(), None);

    // Time passes: "me" stopped renewing, "other" did.
    assert_eq!(store.renew_leases("other", 900).await.unwrap().len(), 2);
    let third = store.claim_orphans("third", 550, 900, 10).await.unwrap();
    assert_eq!(ids(&third), [never, expired, mine_expired]);
    assert!(store.renew_leases("me", 1_000).await.unwrap().is_empty());
    assert_eq!(store.lease(live).await.unwrap(), lease("x", 10_000));
}

/// Orphan runs claimed by two loops at once: every run claimed exactly once.
pub(super) async fn claim_in_parallel(a: Arc<dyn Store>, b: Arc<dyn Store>, runs: usize) {
    let mut all = Vec::new();
    for i in 0..runs {
        let r = run(None, i as u64);
        a.create_run(r.clone()).await.unwrap();
        all.push(r.id);
    }
    let claimer = |store: Arc<dyn Store>, owner: &'static str| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = store.claim_orphans(owner, 1_000, 2_000, 3).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                assert!(batch.len() <= 3);
                got.extend(batch.into_iter().map(|r| r.id));
                tokio::task::yield_now().await;
            }
        })
    };
    let (one, two) = (claimer(a.clone(), "one"), claimer(b, "two"));
    let (one, two) = (one.await.unwrap(), two.await.unwrap());
    let set = |v: &[Uuid]| v.iter().copied().collect::<std::collections::BTreeSet<_>>();
    let (s1, s2) = (set(&one), set(&two));
    assert_eq!(
        (s1.len(), s2.len()),
        (one.len(), two.len()),
        "no claimer got a run twice"
    );
    assert!(
        s1.is_disjoint(&s2),
        "a run claimed by both: {:?}",
        s1.intersection(&s2).collect::<Vec<_>>()
    );
    assert_eq!(
        s1.union(&s2).copied().collect::<Vec<_>>(),
        set(&all).into_iter().collect::<Vec<_>>()
    );
    for id in &one {
        assert_eq!(a.lease(*id).await.unwrap(), lease("one", 2_000));
    }
}

pub(super) async fn concurrent_claimers_never_get_the_same_run(store: Arc<dyn Store>) {
    claim_in_parallel(Arc::clone(&store), store, 50).await;
}

pub(super) async fn stop_requests_reach_the_lease_owner(store: Arc<dyn Store>) {
    let a = running(&*store, 1).await;
    let b = running(&*store, 2).await;
    assert!(store.acquire_lease(a, "owner", 0, 100).await.unwrap());
    assert!(store.acquire_lease(b, "owner", 0, 100).await.unwrap());
    assert!(
        store.stop_requests("owner").await.unwrap().is_empty(),
        "nothing asked yet"
    );

    assert!(
        store.request_stop(b).await.unwrap(),
        "a running run can be asked to stop"
    );
    assert_eq!(store.stop_requests("owner").await.unwrap(), [b]);
    assert!(
        store.stop_requests("other").await.unwrap().is_empty(),
        "only the executor is told"
    );
    assert!(store.request_stop(b).await.unwrap(), "asking twice is fine");
    assert_eq!(store.stop_requests("owner").await.unwrap(), [b]);

    // The request follows the run to whoever executes it.
    assert!(store.acquire_lease(b, "next", 101, 200).await.unwrap());
    assert!(store.stop_requests("owner").await.unwrap().is_empty());
    assert_eq!(store.stop_requests("next").await.unwrap(), [b]);

    store
        .finish_run(b, RunStatus::Cancelled, None, Usage::default())
        .await
        .unwrap();
    assert!(
        store.stop_requests("next").await.unwrap().is_empty(),
        "a finished run is not listed"
    );
    assert!(
        !store.request_stop(b).await.unwrap(),
        "a finished run cannot be stopped"
    );
    assert!(
        !store.request_stop(Uuid::now_v7()).await.unwrap(),
        "nor an unknown one"
    );
    assert!(
        store.stop_requests("owner").await.unwrap().is_empty(),
        "`a` was never asked"
    );
}

/// A run paused at an interrupt: stored `interrupted` by its final batch,
/// never an orphan, listed by status, and claimed back to `running` by
/// exactly one of many concurrent resumes (with the winner's lease).
pub(super) async fn paused_runs_are_claimed_by_exactly_one_resume(store: Arc<dyn Store>) {
    let r = run(Some("c1"), 1);
    store.create_leased_run(r.clone(), "a", 200).await.unwrap();
    store
        .append(&batch(r.id, 0, vec![text(r.id, 1, 0)]))
        .await
        .unwrap();
    let mut pause = batch(
        r.id,
        0,
        vec![event(
            r.id,
            2,
            1,
            EventKind::RunInterrupted {
                interrupts: Vec::new(),
            },
        )],
    );
    pause.status = RunStatus::Interrupted;
    store.append(&pause).await.unwrap();
    let paused = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(paused.status, RunStatus::Interrupted);
    assert_eq!(paused.last_seq, 2);
    assert!(
        store
            .claim_orphans("b", 10_000, 20_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "a paused run is nobody's orphan"
    );
    assert!(
        !store.request_stop(r.id).await.unwrap(),
        "nothing runs to stop"
    );
    let mut q = RunQuery::newest(10);
    q.status = Some(RunStatus::Interrupted);
    let listed = store.list_runs(&q).await.unwrap();
    assert_eq!(listed.iter().map(|x| x.id).collect::<Vec<_>>(), [r.id]);

    let claims = futures::future::join_all((0..8).map(|i| {
        let store = Arc::clone(&store);
        async move {
            let owner = format!("i{i}");
            let won = store.claim_interrupted(r.id, &owner, 5_000).await.unwrap();
            (owner, won)
        }
    }))
    .await;
    let winners: Vec<&String> = claims.iter().filter(|c| c.1).map(|c| &c.0).collect();
    assert_eq!(winners.len(), 1, "exactly one resume claims it: {claims:?}");
    let claimed = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(claimed.status, RunStatus::Running);
    assert_eq!(claimed.finished_at, None);
    assert_eq!(store.lease(r.id).await.unwrap(), lease(winners[0], 5_000));
    assert!(
        !store.claim_interrupted(r.id, "late", 6_000).await.unwrap(),
        "a running run is not claimed again"
    );
    store
        .finish_run(r.id, RunStatus::Finished, None, Usage::default())
        .await
        .unwrap();
    assert!(!store.claim_interrupted(r.id, "late", 6_000).await.unwrap());
    assert!(
        !store
            .claim_interrupted(Uuid::now_v7(), "x", 6_000)
            .await
            .unwrap(),
        "an unknown run"
    );
}
