//! Backend-specific checks: migrations, refusing a newer schema, event
//! kinds from newer builds, configuration and connection errors.

use super::*;
use stategraph::internals::store::RunStore;

#[tokio::test]
async fn sqlite_migrates_once_runs_in_wal_mode_and_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("dir").join("stategraph.db");
    let first = store::sqlite::migrate(&path).await.unwrap();
    assert_eq!(
        (first.from, first.applied.as_slice()),
        (0, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14][..])
    );
    let second = store::sqlite::migrate(&path).await.unwrap();
    assert_eq!(
        (second.from, second.to, second.applied.len()),
        (14, 14, 0),
        "a second migrate is a no-op"
    );
    let s = SqliteStore::open(&path).await.unwrap();
    s.ping().await.unwrap();
    drop(s);

    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let versions: i64 = conn
        .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(versions, 14);
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)",
        [],
    )
    .unwrap();
    drop(conn);
    let e = SqliteStore::open(&path).await.unwrap_err().to_string();
    assert!(e.contains("schema version 99 is newer"), "{e}");
    assert!(store::sqlite::migrate(&path).await.is_err());
}

#[tokio::test]
async fn postgres_migrates_once_and_refuses_a_newer_schema() {
    PgDb::with(|url| async move {
        let first = store::postgres::migrate(&url).await.unwrap();
        assert_eq!((first.from, first.applied.as_slice()), (0, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13][..]));
        let second = store::postgres::migrate(&url).await.unwrap();
        assert_eq!((second.from, second.to, second.applied.len()), (13, 13, 0), "a second migrate is a no-op");
        let s = PostgresStore::connect(&url, 2).await.unwrap();
        s.ping().await.unwrap();
        drop(s);
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)").await.unwrap();
        let e = PostgresStore::connect(&url, 2).await.unwrap_err().to_string();
        assert!(e.contains("schema version 99 is newer"), "{e}");
        assert!(store::postgres::migrate(&url).await.is_err());
    })
    .await;
}

const FUTURE_EVENT: &str = r#"{"type":"hologram","beam":1,"colors":["red"]}"#;

#[tokio::test]
async fn sqlite_reads_event_kinds_from_newer_builds_as_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stategraph.db");
    let s = SqliteStore::open(&path).await.unwrap();
    let id = Uuid::now_v7();
    s.append(&batch(id, 1, vec![text(id, 1, 1)])).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let page = format!(r#"[{{"seq":2,"at":5,"step":1,"node":"n","event":{FUTURE_EVENT}}}]"#);
    conn.execute(
        "INSERT INTO run_event_pages (run_id, first_seq, last_seq, events) VALUES (?1, 2, 2, ?2)",
        rusqlite::params![id.to_string(), page],
    )
    .unwrap();
    let stored: String = conn
        .query_row(
            "SELECT events FROM run_event_pages WHERE first_seq = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        stored.contains(r#""type":"text_delta""#),
        "the page holds the type tag: {stored}"
    );
    let back = s.events(id, 0, 10).await.unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!(
        (back[1].seq, &back[1].event, back[1].node.as_deref()),
        (2, &EventKind::Unknown, Some("n"))
    );
}

/// Streamed events (a page per token on the single writer thread) leave the
/// run row alone; reads derive `last_seq` from the pages (the conformance
/// check `streamed_events_advance_the_runs_last_seq_everywhere`), and the
/// row itself catches up at the next checkpoint and when the run ends, by
/// its final batch or by `finish_run`.
#[tokio::test]
async fn sqlite_streamed_events_leave_the_run_row_until_it_advances() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stategraph.db");
    let s = SqliteStore::open(&path).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let row = |id: Uuid| -> i64 {
        conn.query_row(
            "SELECT last_seq FROM runs WHERE id = ?1",
            [id.to_string()],
            |r| r.get(0),
        )
        .unwrap()
    };
    let (a, b) = (run(Some("c1"), 1), run(Some("c1"), 2));
    for r in [&a, &b] {
        s.create_run(r.clone()).await.unwrap();
        s.append(&batch(r.id, 0, vec![text(r.id, 1, 0)]))
            .await
            .unwrap();
        let streamed: Vec<_> = (2..=5).map(|seq| text(r.id, seq, 1)).collect();
        s.append_events(r.id, &streamed[..2]).await.unwrap();
        s.append_events(r.id, &streamed[2..]).await.unwrap();
        assert_eq!(row(r.id), 1, "streamed pages do not rewrite the row");
        assert_eq!(s.get_run(r.id).await.unwrap().unwrap().last_seq, 5);
    }
    s.append(&batch(a.id, 1, Vec::new())).await.unwrap();
    assert_eq!(row(a.id), 5, "a checkpoint brings the row up to date");
    s.append_events(a.id, &[text(a.id, 6, 2)]).await.unwrap();
    let mut last = batch(a.id, 2, Vec::new());
    last.status = RunStatus::Finished;
    s.append(&last).await.unwrap();
    assert_eq!(row(a.id), 6, "so does the final batch");
    s.finish_run(b.id, RunStatus::Failed, None, Usage::default())
        .await
        .unwrap();
    assert_eq!(row(b.id), 5, "and finish_run");
}

/// How many threads of this process have the name `name` (nextest runs
/// each test in a process of its own).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == name)
        .count()
}

/// The thread that checkpoints ahead of the writer (`store::sqlite`'s `wal`
/// module) runs while the store is open, copies committed pages into the
/// database file long before the writer's own checkpoint (at 10,000 log
/// pages) would, and ends with the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_checkpoint_thread_copies_ahead_and_lives_as_long_as_the_store() {
    let before = threads_named("sqlite-ckpt");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stategraph.db");
    let s = SqliteStore::open(&path).await.unwrap();
    // Until a checkpoint, what is committed lives in the log only.
    let opened = std::fs::read(&path).unwrap();
    let r = run(Some("c1"), 1);
    s.create_run(r.clone()).await.unwrap();
    for seq in 1..=20 {
        s.append_events(r.id, &[text(r.id, seq, 0)]).await.unwrap();
    }
    assert_eq!(threads_named("sqlite-ckpt"), before + 1);
    assert_eq!(s.get_run(r.id).await.unwrap().unwrap().last_seq, 20);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::read(&path).unwrap() == opened && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_ne!(
        std::fs::read(&path).unwrap(),
        opened,
        "nothing reached the database file: no checkpoint ran ahead of the writer"
    );
    drop(s);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while threads_named("sqlite-ckpt") > before && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        threads_named("sqlite-ckpt"),
        before,
        "the checkpoint thread outlived its store"
    );
}

/// A file written by a build with the row-per-event log (schema 3):
/// migration 4 turns its events into pages, and they read back unchanged.
#[tokio::test]
async fn sqlite_migration_4_turns_stored_events_into_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stategraph.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for sql in [
        include_str!("../../../../src/store/migrations/sqlite/0001_init.sql"),
        include_str!("../../../../src/store/migrations/sqlite/0002_leases.sql"),
        include_str!("../../../../src/store/migrations/sqlite/0003_stop_requests.sql"),
    ] {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);
         INSERT INTO schema_migrations VALUES (1, 'init', 0), (2, 'leases', 0), (3, 'stop_requests', 0);",
    )
    .unwrap();
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    // Steps 0 and 1: without and with a node; tasks 1, 2 and 0; stored out of order.
    let events = [text(a, 1, 0), text(a, 2, 1), text(b, 3, 1)];
    for e in [&events[1], &events[0], &events[2]] {
        conn.execute(
            "INSERT INTO run_events (run_id, seq, at, step, node, task, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'text_delta', ?7)",
            rusqlite::params![
                e.run_id.to_string(),
                e.seq as i64,
                e.at as i64,
                e.step,
                e.node.as_deref(),
                e.task,
                serde_json::to_string(&e.event).unwrap()
            ],
        )
        .unwrap();
    }
    drop(conn);
    let s = SqliteStore::open(&path).await.unwrap();
    assert_eq!(s.events(a, 0, 10).await.unwrap(), owned(&events[..2]));
    assert_eq!(s.events(a, 1, 10).await.unwrap(), owned(&events[1..2]));
    assert_eq!(s.events(b, 0, 10).await.unwrap(), owned(&events[2..]));
    let err = s
        .append(&batch(a, 2, vec![text(a, 2, 2)]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(_)),
        "a migrated seq is still taken: {err}"
    );
    s.append(&batch(a, 2, vec![text(a, 3, 2)])).await.unwrap();
    assert_eq!(s.events(a, 0, 10).await.unwrap().len(), 3);
}

#[tokio::test]
async fn postgres_reads_event_kinds_from_newer_builds_as_unknown() {
    PgDb::with(|url| async move {
        let s = PostgresStore::connect(&url, 2).await.unwrap();
        let id = Uuid::now_v7();
        s.append(&batch(id, 1, vec![text(id, 1, 1)])).await.unwrap();
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let page = format!(r#"[{{"seq":2,"at":5,"step":1,"node":"n","event":{FUTURE_EVENT}}}]"#);
        client
            .execute(
                "INSERT INTO run_event_pages (run_id, first_seq, last_seq, events) VALUES ($1, 2, 2, $2)",
                &[&id, &page],
            )
            .await
            .unwrap();
        let stored: String = client
            .query_one("SELECT events FROM run_event_pages WHERE first_seq = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert!(stored.contains(r#""type":"text_delta""#), "the page holds the type tag: {stored}");
        let back = s.events(id, 0, 10).await.unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!((back[1].seq, &back[1].event, back[1].node.as_deref()), (2, &EventKind::Unknown, Some("n")));
    })
    .await;
}

/// A database written by a build with the row-per-event log (schema 3):
/// migration 4 turns its events into pages, and they read back unchanged.
#[tokio::test]
async fn postgres_migration_4_turns_stored_events_into_pages() {
    PgDb::with(|url| async move {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let schema = [
            include_str!("../../../../src/store/migrations/postgres/0001_init.sql"),
            include_str!("../../../../src/store/migrations/postgres/0002_leases.sql"),
            include_str!("../../../../src/store/migrations/postgres/0003_stop_requests.sql"),
        ];
        for sql in schema {
            client.batch_execute(sql).await.unwrap();
        }
        client
            .batch_execute(
                "CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL);
                 INSERT INTO schema_migrations VALUES (1, 'init', 0), (2, 'leases', 0), (3, 'stop_requests', 0);",
            )
            .await
            .unwrap();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        // Steps 0 and 1: without and with a node; tasks 1, 2 and 0.
        let events = [text(a, 1, 0), text(a, 2, 1), text(b, 3, 1)];
        for e in &events {
            let payload = serde_json::to_string(&e.event).unwrap();
            client
                .execute(
                    "INSERT INTO run_events (run_id, seq, at, step, task, node, kind, payload) VALUES ($1, $2, $3, $4, $5, $6, 'text_delta', $7::text::json)",
                    &[&e.run_id, &(e.seq as i64), &(e.at as i64), &(e.step as i32), &(e.task as i32), &e.node.as_deref(), &payload],
                )
                .await
                .unwrap();
        }
        let s = PostgresStore::connect(&url, 2).await.unwrap();
        assert_eq!(s.events(a, 0, 10).await.unwrap(), owned(&events[..2]));
        assert_eq!(s.events(a, 1, 10).await.unwrap(), owned(&events[1..2]));
        assert_eq!(s.events(b, 0, 10).await.unwrap(), owned(&events[2..]));
        let err = s.append(&batch(a, 2, vec![text(a, 2, 2)])).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "a migrated seq is still taken: {err}");
        s.append(&batch(a, 2, vec![text(a, 3, 2)])).await.unwrap();
        assert_eq!(s.events(a, 0, 10).await.unwrap().len(), 3);
    })
    .await;
}

#[tokio::test]
async fn config_opens_sqlite_under_data_dir_and_postgres_from_database_url() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config: StoreConfig =
        toml::from_str(&format!("data_dir = {:?}", data.display().to_string())).unwrap();
    let s = store::open(&config.with_env_from(|_| None)).await.unwrap();
    assert_eq!(s.backend(), "sqlite");
    assert!(data.join("stategraph.db").is_file());

    PgDb::with(|url| async move {
        let env = move |k: &str| (k == "DATABASE_URL").then(|| url.clone());
        let config = StoreConfig::default().with_env_from(&env);
        let s = store::open(&config).await.unwrap();
        assert_eq!(s.backend(), "postgres");
        s.ping().await.unwrap();
        assert_eq!(
            store::config::migrate(&config).await.unwrap().applied.len(),
            0,
            "open already migrated"
        );
    })
    .await;
}

#[tokio::test]
async fn an_unreachable_postgres_is_a_transient_error() {
    let e = PostgresStore::connect("postgres://postgres@127.0.0.1:1/none", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(e, StoreError::Unavailable(_)) && e.is_transient(),
        "{e:?}"
    );
    let e = PostgresStore::connect("not a url", 1).await.unwrap_err();
    assert!(!e.is_transient(), "{e:?}");
}

/// The memory backend as a server uses it is bounded: the oldest finished
/// runs (with their events) and idle chats are forgotten beyond its limits;
/// running runs and answering chats never are.
#[tokio::test]
async fn the_memory_backend_forgets_the_oldest_beyond_its_bounds() {
    let store: Arc<dyn Store> = Arc::new(
        stategraph::internals::store::memory::MemoryStore::bounded(3, 2),
    );
    let mut runs = Vec::new();
    for i in 0..5u64 {
        let r = run(None, 10 + i);
        store.create_run(r.clone()).await.unwrap();
        store
            .append(&batch(r.id, 0, vec![text(r.id, 1, 0)]))
            .await
            .unwrap();
        runs.push(r.id);
    }
    let running = run(None, 99);
    store.create_run(running.clone()).await.unwrap();
    for id in &runs {
        store
            .finish_run(*id, RunStatus::Finished, None, Usage::default())
            .await
            .unwrap();
    }
    for (i, id) in runs.iter().enumerate() {
        let kept = store.get_run(*id).await.unwrap().is_some();
        assert_eq!(kept, i >= 2, "run {i}");
        assert_eq!(!store.events(*id, 0, 10).await.unwrap().is_empty(), kept);
    }
    assert!(store.get_run(running.id).await.unwrap().is_some());
    for c in ["c1", "c2", "c3"] {
        store.ensure_chat(chat(c, "alice", 1)).await.unwrap();
    }
    assert!(
        store.get_chat("c1").await.unwrap().is_none(),
        "the oldest chat is forgotten"
    );
    assert!(store.get_chat("c3").await.unwrap().is_some());
}
