//! SQLite's recent event log (`src/store/sqlite/recent.rs`): a streaming
//! run's token pages go to `run_event_recent` (append order, no per-run
//! index leaf) and are folded into `run_event_pages` when its step ends.
//! These checks read the file's tables through a second connection to see
//! where rows are, and read the log back through the store (and through a
//! second store on the same file) to see that nothing is lost or repeated.

use super::*;
use stategraph::internals::store::{Leases, RunStore};

/// `(rows in run_event_recent, rows in run_event_pages)` for `run`.
fn where_rows(path: &std::path::Path, run: Uuid) -> (i64, i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let count = |table: &str| -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE run_id = ?1"),
            [run.to_string()],
            |r| r.get(0),
        )
        .unwrap()
    };
    (count("run_event_recent"), count("run_event_pages"))
}

async fn sqlite() -> (tempfile::TempDir, std::path::PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stategraph.db");
    let store = SqliteStore::open(&path).await.unwrap();
    (dir, path, store)
}

/// A run with its first step stored and `tokens` streamed after it, one
/// append per token as the server's pump writes them; returns every event.
async fn streamed(store: &SqliteStore, r: &RunRecord, tokens: u64) -> Vec<Arc<Event>> {
    store.create_run(r.clone()).await.unwrap();
    let first = text(r.id, 1, 0);
    store
        .append(&batch(r.id, 0, vec![first.clone()]))
        .await
        .unwrap();
    let mut all = vec![first];
    for seq in 2..=tokens + 1 {
        let e = text(r.id, seq, 1);
        store
            .append_events(r.id, std::slice::from_ref(&e))
            .await
            .unwrap();
        all.push(e);
    }
    all
}

#[tokio::test]
async fn streamed_tokens_go_to_the_recent_log_and_fold_into_one_page_at_the_step_end() {
    let (_dir, path, store) = sqlite().await;
    let r = run(Some("c1"), 1);
    let mut all = streamed(&store, &r, 10).await;
    assert_eq!(
        where_rows(&path, r.id),
        (10, 1),
        "the first step is a page, its tokens are recent rows"
    );
    assert_eq!(all_events(&store, r.id).await, owned(&all));
    assert_eq!(store.events(r.id, 3, 4).await.unwrap(), owned(&all[3..7]));
    assert_eq!(store.events(r.id, 0, 1).await.unwrap(), owned(&all[..1]));
    assert_eq!(store.get_run(r.id).await.unwrap().unwrap().last_seq, 11);

    // The step ends: its tokens become one page beside the step's own.
    let end = text(r.id, 12, 1);
    store
        .append(&batch(r.id, 1, vec![end.clone()]))
        .await
        .unwrap();
    all.push(end);
    assert_eq!(where_rows(&path, r.id), (0, 3));
    assert_eq!(all_events(&store, r.id).await, owned(&all));

    // More tokens, then the run's end folds them too.
    for seq in 13..=15 {
        let e = text(r.id, seq, 2);
        store
            .append_events(r.id, std::slice::from_ref(&e))
            .await
            .unwrap();
        all.push(e);
    }
    assert_eq!(where_rows(&path, r.id), (3, 3));
    let mut last = batch(r.id, 2, Vec::new());
    last.status = RunStatus::Finished;
    store.append(&last).await.unwrap();
    assert_eq!(where_rows(&path, r.id), (0, 4));
    assert_eq!(all_events(&store, r.id).await, owned(&all));
    let done = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!((done.status, done.last_seq), (RunStatus::Finished, 15));
}

#[tokio::test]
async fn a_long_step_folds_its_tokens_every_64_and_a_finish_folds_the_rest() {
    let (_dir, path, store) = sqlite().await;
    let r = run(Some("c1"), 1);
    let all = streamed(&store, &r, 200).await;
    let (recent, pages) = where_rows(&path, r.id);
    assert!(recent <= 64, "{recent} recent rows");
    assert!(
        (4..=8).contains(&pages),
        "{pages} pages for 200 tokens: folds, not a page per token"
    );
    assert_eq!(recent + pages, 201 - 3 * 64 + 3, "every token once");
    assert_eq!(all_events(&store, r.id).await, owned(&all));
    store
        .finish_run(r.id, RunStatus::Cancelled, None, Usage::default())
        .await
        .unwrap();
    assert_eq!(where_rows(&path, r.id).0, 0, "finish_run folds");
    let done = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!((done.status, done.last_seq), (RunStatus::Cancelled, 201));
    assert_eq!(all_events(&store, r.id).await, owned(&all));
}

#[tokio::test]
async fn a_repeated_token_conflicts_with_a_recent_row_or_a_page() {
    let (_dir, path, store) = sqlite().await;
    let r = run(Some("c1"), 1);
    let all = streamed(&store, &r, 5).await;
    for seq in [1, 4] {
        let e = store
            .append_events(r.id, &[text(r.id, seq, 1)])
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Conflict(_)), "seq {seq}: {e}");
    }
    assert_eq!(where_rows(&path, r.id), (5, 1), "nothing of them stored");
    assert_eq!(all_events(&store, r.id).await, owned(&all));
}

/// A process killed while streaming leaves recent rows: the next store on
/// the file folds them when it opens, and the run resumes after them.
#[tokio::test]
async fn recent_rows_a_stopped_process_left_are_folded_when_the_store_opens() {
    let (_dir, path, store) = sqlite().await;
    let r = run(Some("c1"), 1);
    let mut all = streamed(&store, &r, 7).await;
    drop(store);
    assert_eq!(where_rows(&path, r.id), (7, 1));
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(where_rows(&path, r.id), (0, 2));
    assert_eq!(all_events(&store, r.id).await, owned(&all));
    assert_eq!(store.get_run(r.id).await.unwrap().unwrap().last_seq, 8);
    let next = text(r.id, 9, 1);
    store
        .append(&batch(r.id, 1, vec![next.clone()]))
        .await
        .unwrap();
    all.push(next);
    assert_eq!(all_events(&store, r.id).await, owned(&all));
}

/// Another process on the same file (a second store: its own threads and
/// connections) does not know this one's rows: it reads them by scanning
/// while the run runs, and a claim after the streamer died folds them.
#[tokio::test]
async fn another_store_on_the_file_reads_and_claims_what_this_one_streams() {
    let (_dir, path, store) = sqlite().await;
    let other = SqliteStore::open(&path).await.unwrap();
    let r = run(Some("c1"), 1);
    let all = streamed(&store, &r, 6).await;
    assert_eq!(all_events(&other, r.id).await, owned(&all));
    assert_eq!(other.events(r.id, 5, 10).await.unwrap(), owned(&all[5..]));

    // The streamer stops holding the run (its lease long gone): the other
    // store claims it and reads an exact record and log.
    drop(store);
    assert_eq!(where_rows(&path, r.id), (6, 1));
    let claimed = other
        .claim_orphans("other", u64::MAX / 4, u64::MAX / 2, 10)
        .await
        .unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|c| (c.id, c.last_seq))
            .collect::<Vec<_>>(),
        [(r.id, 7)]
    );
    assert_eq!(where_rows(&path, r.id), (0, 2));
    assert_eq!(all_events(&other, r.id).await, owned(&all));
}

/// Many runs streaming at once share the recent log's pages. Before it,
/// each token page went to its run's own leaf of the pages' key once a run
/// had streamed a leaf's worth (~70 tokens), so a round of one token per
/// run wrote at least one 4 KB WAL frame per run, however the commits
/// grouped them. Counted from the WAL file's length after a round that
/// starts with an empty log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_tokens_of_many_long_runs_writes_fewer_wal_frames_than_runs() {
    const RUNS: usize = 300;
    const STREAMED: u64 = 80;
    let (_dir, path, store) = sqlite().await;
    let store = Arc::new(store);
    let runs: Vec<RunRecord> = (0..RUNS as u64).map(|i| run(Some("c1"), i)).collect();
    let setup = runs.iter().map(|r| {
        let (store, r) = (Arc::clone(&store), r.clone());
        tokio::spawn(async move { streamed(&store, &r, STREAMED).await })
    });
    for t in futures::future::join_all(setup).await {
        t.unwrap();
    }
    // Empty the WAL (the setup's frames were checkpointed and the log
    // restarted over them): its length after the round is the round's.
    // The store's own checkpoint thread may be checkpointing just then
    // (`busy`): it runs once, ~100 ms after the last write, so try again.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let truncate = || {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok::<_, rusqlite::Error>((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .unwrap()
        .0
    };
    let mut busy = truncate();
    for _ in 0..100 {
        if busy == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        busy = truncate();
    }
    assert_eq!(busy, 0, "the checkpoint found the store idle");
    let wal = path.with_extension("db-wal");
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
    let seq = STREAMED + 2;
    let round = runs.iter().map(|r| {
        let (store, id) = (Arc::clone(&store), r.id);
        tokio::spawn(async move { store.append_events(id, &[text(id, seq, 1)]).await })
    });
    for t in futures::future::join_all(round).await {
        t.unwrap().unwrap();
    }
    // The log's 32-byte header, then frames of a 24-byte header and a page.
    let frames = (std::fs::metadata(&wal).unwrap().len() - 32) / (4096 + 24);
    eprintln!("{frames} WAL frames for a token of each of {RUNS} runs");
    assert!(
        frames < RUNS as u64 / 2,
        "{frames} WAL frames for a token of each of {RUNS} runs"
    );
    for r in &runs {
        assert_eq!(all_events(&*store, r.id).await.len(), STREAMED as usize + 2);
    }
}
