//! PostgreSQL: appends of different runs made at the same time share a
//! statement (cross-run group commit, `store::postgres::group`), and a
//! failing one fails alone.

use super::*;
use stategraph::internals::store::{Leases, RunStore};

const RUNS: usize = 20;

/// `RUNS` runs with seq 1 stored, on a store with one pooled connection
/// (so at most one statement in flight: the appends made meanwhile wait
/// together).
async fn runs_with_one_event(store: &PostgresStore) -> Vec<RunRecord> {
    let runs: Vec<_> = (0..RUNS as u64).map(|i| run(None, i)).collect();
    for r in &runs {
        store.create_run(r.clone()).await.unwrap();
        store
            .append_events(r.id, &[text(r.id, 1, 0)])
            .await
            .unwrap();
    }
    runs
}

/// Appends seq 2 to every run at once (seq 1 again to the runs `repeat`
/// picks); the answers in run order.
async fn append_all(
    store: &PostgresStore,
    runs: &[RunRecord],
    repeat: impl Fn(usize) -> bool,
) -> Vec<Result<(), StoreError>> {
    let appends = runs.iter().enumerate().map(|(i, r)| {
        let events = vec![text(r.id, if repeat(i) { 1 } else { 2 }, 1)];
        async move { store.append_events(r.id, &events).await }
    });
    futures::future::join_all(appends).await
}

/// How many transactions wrote the pages of `runs` holding seq 2 (rows a
/// transaction inserts carry its id as `xmin`).
async fn writers_of_second_pages(url: &str, runs: &[RunRecord]) -> i64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
    client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM run_event_pages WHERE run_id = ANY($1) AND first_seq = 2",
            &[&ids],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_appends_of_many_runs_share_a_transaction() {
    PgDb::with(|url| async move {
        let store = PostgresStore::connect(&url, 1).await.unwrap();
        let runs = runs_with_one_event(&store).await;
        let results = append_all(&store, &runs, |_| false).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        for r in &runs {
            let seqs: Vec<u64> = all_events(&store, r.id)
                .await
                .iter()
                .map(|e| e.seq)
                .collect();
            assert_eq!(seqs, [1, 2]);
            assert_eq!(store.get_run(r.id).await.unwrap().unwrap().last_seq, 2);
        }
        let writers = writers_of_second_pages(&url, &runs).await;
        // One statement in flight: the first append goes alone, the ones
        // made while it runs share the next statement(s).
        assert!(
            writers < RUNS as i64 / 2,
            "{RUNS} appends made at once were {writers} transactions"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_failing_append_in_a_group_fails_alone() {
    PgDb::with(|url| async move {
        let store = PostgresStore::connect(&url, 1).await.unwrap();
        let runs = runs_with_one_event(&store).await;
        // Two runs repeat their stored seq 1: their appends conflict.
        let results = append_all(&store, &runs, |i| i == 3 || i == 11).await;
        for (i, (r, res)) in runs.iter().zip(&results).enumerate() {
            let seqs: Vec<u64> = all_events(&store, r.id)
                .await
                .iter()
                .map(|e| e.seq)
                .collect();
            if i == 3 || i == 11 {
                assert!(matches!(res, Err(StoreError::Conflict(_))), "{i}: {res:?}");
                assert_eq!(seqs, [1], "{i}: its append stored nothing");
                assert_eq!(store.get_run(r.id).await.unwrap().unwrap().last_seq, 1);
            } else {
                assert!(res.is_ok(), "{i}: {res:?}");
                assert_eq!(seqs, [1, 2], "{i}");
                assert_eq!(store.get_run(r.id).await.unwrap().unwrap().last_seq, 2);
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_grouped_final_batches_end_their_runs_and_clear_leases() {
    PgDb::with(|url| async move {
        let store = PostgresStore::connect(&url, 1).await.unwrap();
        let runs: Vec<_> = (0..RUNS as u64).map(|i| run(None, i)).collect();
        for r in &runs {
            store
                .create_leased_run(r.clone(), "me", u64::MAX / 2)
                .await
                .unwrap();
        }
        let appends = runs.iter().enumerate().map(|(i, r)| {
            let mut b = batch(r.id, 1, vec![text(r.id, 1, 1), text(r.id, 2, 1)]);
            // Every other run ends with this step.
            if i % 2 == 0 {
                b.status = RunStatus::Finished;
            }
            let store = &store;
            async move { store.append(&b).await }
        });
        let results = futures::future::join_all(appends).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        for (i, r) in runs.iter().enumerate() {
            let stored = store.get_run(r.id).await.unwrap().unwrap();
            assert_eq!((stored.last_seq, stored.last_step), (2, 1), "{i}");
            assert_eq!(store.checkpoints(r.id, u32::MAX).await.unwrap().len(), 1);
            let ended = i % 2 == 0;
            let want = if ended {
                RunStatus::Finished
            } else {
                RunStatus::Running
            };
            assert_eq!(stored.status, want, "{i}");
            assert_eq!(stored.finished_at.is_some(), ended, "{i}");
            let lease = store.lease(r.id).await.unwrap();
            assert_eq!(lease.is_some(), !ended, "{i}: lease {lease:?}");
        }
    })
    .await;
}

/// The deadlocks PostgreSQL counted in the database at `url`, read once
/// its other connections are ended (a backend reports its counts as it
/// exits; before, only about once a second).
async fn deadlocks(url: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let others = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
    client
        .execute(
            &format!("SELECT pg_terminate_backend(pid) FROM ({others}) o"),
            &[],
        )
        .await
        .unwrap();
    for _ in 0..50 {
        if client.query(others, &[]).await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    client
        .query_one(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Grouped appends lock their runs' rows, and the lease renewal locks every
/// row its instance holds: both in one order (by run id), so neither waits
/// for the other in a cycle. Many runs append in parallel groups while
/// the renewal runs over and over for ~2.5 s; with `deadlock_timeout` at
/// 20 ms PostgreSQL would find (and count) any cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_grouped_appends_and_lease_renewals_never_deadlock() {
    const MANY: usize = 64;
    PgDb::with(|url| async move {
        let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        admin
            .batch_execute(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET deadlock_timeout = ''20ms''', current_database()); END $$",
            )
            .await
            .unwrap();
        drop(admin);
        let store = Arc::new(PostgresStore::connect(&url, 16).await.unwrap());
        let runs: Vec<_> = (0..MANY as u64).map(|i| run(None, i)).collect();
        for r in &runs {
            store
                .create_leased_run(r.clone(), "me", u64::MAX / 2)
                .await
                .unwrap();
        }
        let until = std::time::Instant::now() + std::time::Duration::from_millis(2500);
        let renewals = (0..2)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut n = 0u32;
                while std::time::Instant::now() < until {
                    let held = store.renew_leases("me", u64::MAX / 2).await.unwrap();
                    assert_eq!(held.len(), MANY);
                    n += 1;
                }
                n
            })
        })
        .collect::<Vec<_>>();
        let appends = runs.iter().map(|r| {
            let (store, id) = (Arc::clone(&store), r.id);
            tokio::spawn(async move {
                let mut step = 1u32;
                while std::time::Instant::now() < until {
                    let seq = u64::from(step);
                    store
                        .append(&batch(id, step, vec![text(id, seq, step)]))
                        .await
                        .unwrap();
                    step += 1;
                }
                step - 1
            })
        })
        .collect::<Vec<_>>();
        let renewed: Vec<u32> = futures::future::try_join_all(renewals).await.unwrap();
        let appended: Vec<u32> = futures::future::try_join_all(appends).await.unwrap();
        assert!(renewed.iter().all(|&n| n > 0), "renewals: {renewed:?}");
        assert!(appended.iter().all(|&n| n > 0), "appends: {appended:?}");
        assert_eq!(deadlocks(&url).await, 0, "PostgreSQL detected deadlocks");
    })
    .await;
}
