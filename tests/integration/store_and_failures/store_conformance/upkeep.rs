//! Conformance checks for maintenance: pruning, and notifications of
//! committed appends.

use std::time::Duration;

use super::*;
use stategraph::internals::events::now_micros;
use stategraph::internals::store::{Appended, PruneReport};
use tokio::sync::broadcast;

/// A run with `n` events over two steps (so two checkpoints), ended with
/// `status` by its final batch unless it is still running.
async fn run_with_events(
    store: &dyn Store,
    chat: Option<&str>,
    created_at: u64,
    n: u64,
    status: RunStatus,
) -> Uuid {
    let r = run(chat, created_at);
    store.create_run(r.clone()).await.unwrap();
    store
        .append(&batch(r.id, 0, (1..n).map(|s| text(r.id, s, 0)).collect()))
        .await
        .unwrap();
    let mut last = batch(r.id, 1, vec![text(r.id, n, 1)]);
    last.status = status;
    store.append(&last).await.unwrap();
    r.id
}

async fn chat_with_messages(store: &dyn Store, id: &str, n: i64) {
    store.ensure_chat(chat(id, "alice", 10)).await.unwrap();
    let messages = (0..n)
        .map(|i| message(id, &format!("m{i}"), i, "hi"))
        .collect();
    store.replace_messages_from(id, 0, messages).await.unwrap();
}

async fn gone(store: &dyn Store, run: Uuid) -> bool {
    store.get_run(run).await.unwrap().is_none()
        && all_events(store, run).await.is_empty()
        && store.checkpoints(run, u32::MAX).await.unwrap().is_empty()
}

pub(super) async fn prune_deletes_old_finished_runs_and_idle_chats(store: Arc<dyn Store>) {
    chat_with_messages(&*store, "old", 2).await;
    chat_with_messages(&*store, "busy", 1).await;
    let finished = run_with_events(&*store, Some("old"), 1, 5, RunStatus::Finished).await;
    let failed = run_with_events(&*store, None, 2, 3, RunStatus::Failed).await;
    let active = run_with_events(&*store, Some("busy"), 3, 4, RunStatus::Running).await;
    // Writing messages set `updated_at` to the clock: the cut is after them.
    let cut = now_micros() + 1;
    let recent = run_with_events(&*store, None, cut + 1_000_000, 2, RunStatus::Cancelled).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    chat_with_messages(&*store, "new", 3).await;

    let report = store.prune(cut, false).await.unwrap();
    assert_eq!(
        report,
        PruneReport {
            runs: 2,
            events: 5 + 3,
            checkpoints: 4,
            chats: 0,
            messages: 0
        }
    );
    assert!(gone(&*store, finished).await && gone(&*store, failed).await);
    assert_eq!(
        all_events(&*store, active).await.len(),
        4,
        "running runs are kept"
    );
    assert_eq!(
        all_events(&*store, recent).await.len(),
        2,
        "recent runs are kept"
    );
    assert_eq!(store.checkpoints(recent, u32::MAX).await.unwrap().len(), 2);
    for c in ["old", "busy", "new"] {
        assert!(
            store.get_chat(c).await.unwrap().is_some(),
            "chats only with chats = true"
        );
    }

    let report = store.prune(cut, true).await.unwrap();
    assert_eq!(
        report,
        PruneReport {
            chats: 1,
            messages: 2,
            ..PruneReport::default()
        }
    );
    assert_eq!(store.get_chat("old").await.unwrap(), None);
    assert!(store.messages("old").await.unwrap().is_empty());
    assert_eq!(
        store.messages("busy").await.unwrap().len(),
        1,
        "a chat with a running run is kept"
    );
    assert_eq!(
        store.messages("new").await.unwrap().len(),
        3,
        "a recently updated chat is kept"
    );

    store
        .finish_run(active, RunStatus::Finished, None, Usage::default())
        .await
        .unwrap();
    let report = store.prune(cut, true).await.unwrap();
    assert_eq!(
        report,
        PruneReport {
            runs: 1,
            events: 4,
            checkpoints: 2,
            chats: 1,
            messages: 1
        },
        "once its run is over, the idle chat goes too"
    );
    assert!(gone(&*store, active).await);
    assert_eq!(
        store.prune(cut, true).await.unwrap(),
        PruneReport::default(),
        "nothing left to prune"
    );
    assert!(store.get_run(recent).await.unwrap().is_some());
    assert_eq!(store.messages("new").await.unwrap().len(), 3);
    assert_eq!(
        serde_json::to_value(report).unwrap(),
        json!({"runs": 1, "events": 4, "checkpoints": 2, "chats": 1, "messages": 1})
    );
}

pub(super) async fn prune_works_through_more_runs_than_one_batch(store: Arc<dyn Store>) {
    // More than two of the backends' batches (500 runs each).
    const RUNS: u64 = 1_050;
    let mut with_events = 0;
    for i in 0..RUNS {
        let r = RunRecord {
            status: RunStatus::Finished,
            ..run(None, i + 1)
        };
        store.create_run(r.clone()).await.unwrap();
        if i % 100 == 0 {
            store
                .append(&batch(r.id, 0, vec![text(r.id, 1, 0)]))
                .await
                .unwrap();
            with_events += 1;
        }
    }
    let keep = run(None, RUNS + 10);
    store.create_run(keep.clone()).await.unwrap();
    let report = store.prune(RUNS + 1, false).await.unwrap();
    assert_eq!(
        (report.runs, report.events, report.checkpoints),
        (RUNS, with_events, with_events)
    );
    let left = store.list_runs(&RunQuery::newest(10)).await.unwrap();
    assert_eq!(left.iter().map(|r| r.id).collect::<Vec<_>>(), [keep.id]);
}

/// The next notification, or a failure after a few seconds.
pub(super) async fn next(rx: &mut broadcast::Receiver<Appended>) -> Appended {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a notification within 10 s")
        .unwrap()
}

pub(super) async fn subscribers_hear_every_committed_append(store: Arc<dyn Store>) {
    let (mut rx, mut rx2) = (store.subscribe(), store.subscribe());
    let r = run(None, 1);
    store.create_run(r.clone()).await.unwrap();
    store
        .append(&batch(r.id, 0, (1..=3).map(|s| text(r.id, s, 0)).collect()))
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, (r.id, 3));
    store
        .append(&batch(r.id, 1, vec![text(r.id, 4, 1), text(r.id, 5, 1)]))
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, (r.id, 5));
    store.append(&batch(r.id, 2, Vec::new())).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        (r.id, 5),
        "a batch without events still notifies the run's last seq"
    );
    let clash = store.append(&batch(r.id, 3, vec![text(r.id, 5, 3)])).await;
    assert!(matches!(clash, Err(StoreError::Conflict(_))));
    // A batch for a run with no row yet (events may come first).
    let early = Uuid::now_v7();
    store
        .append(&batch(early, 0, vec![text(early, 1, 0), text(early, 2, 0)]))
        .await
        .unwrap();
    assert_eq!(
        next(&mut rx).await,
        (early, 2),
        "the failed append sent nothing"
    );
    let seen: Vec<Appended> = vec![
        next(&mut rx2).await,
        next(&mut rx2).await,
        next(&mut rx2).await,
        next(&mut rx2).await,
    ];
    assert_eq!(
        seen,
        [(r.id, 3), (r.id, 5), (r.id, 5), (early, 2)],
        "every subscriber hears everything"
    );
    assert!(rx.try_recv().is_err(), "nothing else was sent");
}

/// Releasing memory (SQLite: every connection's page cache, on each of its
/// threads in turn) while reads and appends keep coming neither hangs nor
/// changes what is stored, and the store works on afterwards.
pub(super) async fn releasing_memory_while_busy_loses_nothing(store: Arc<dyn Store>) {
    let runs: Vec<Uuid> = futures::future::join_all(
        (0..8u64).map(|i| run_with_events(&*store, None, i + 1, 20, RunStatus::Finished)),
    )
    .await;
    let reads = runs.iter().map(|&r| all_events(&*store, r));
    let releases = (0..4).map(|_| store.release_memory());
    let both = async {
        futures::join!(
            futures::future::join_all(reads),
            futures::future::join_all(releases)
        )
    };
    let (read, _) = tokio::time::timeout(Duration::from_secs(20), both)
        .await
        .expect("releasing memory while busy must not hang");
    assert!(read.iter().all(|events| events.len() == 20));
    store.release_memory().await;
    let later = run_with_events(&*store, None, 100, 5, RunStatus::Finished).await;
    assert_eq!(all_events(&*store, later).await.len(), 5);
    for r in runs {
        assert_eq!(all_events(&*store, r).await.len(), 20, "run {r} intact");
    }
}
