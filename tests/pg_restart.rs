//! PostgreSQL restarted mid-run: no event lost, none stored twice.
//!
//! A real graph run checkpoints through `LogCheckpointer` into PostgreSQL;
//! when it saves step 2 the test restarts the server
//! (`pg_ctlcluster … main restart`) and lets the save start only once the
//! server is down, so it has to ride out the restart. Afterwards the stored
//! log must be exactly the streamed one, the pool must have replaced its
//! dead connections, and the listening connection must hear appends again.
//!
//! Restarting the server cuts every other test's connections, so this is
//! its own test binary with one test, run alone after the main suite
//! (`cargo test --test pg_restart`); the main suite simulates outages with a
//! proxy instead.
#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

#[path = "integration/support/data_tool.rs"]
mod data_tool;

/// The integration tests' database fixture (this binary uses only `PgDb`).
#[path = "integration/support/db.rs"]
#[allow(dead_code)]
mod db;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::json;
use stategraph::internals::events::{Event, EventKind, Usage};
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, Models};
use stategraph::internals::nodes::Registries;
use stategraph::internals::runs::LogCheckpointer;
use stategraph::internals::runtime::{
    self, CheckpointError, Checkpointer, RunOptions, RunStatus, Services, StepBatch,
};
use stategraph::internals::store::{PostgresStore, RunRecord, Store};
use uuid::Uuid;

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const RESTART_AT_STEP: u32 = 2;

async fn admin() -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(ADMIN_URL, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Whether the server answers a query on a new connection.
async fn server_up() -> bool {
    match admin().await {
        Ok(c) => c.simple_query("SELECT 1").await.is_ok(),
        Err(_) => false,
    }
}

async fn postmaster_started() -> String {
    let row = admin()
        .await
        .unwrap()
        .query_one("SELECT pg_postmaster_start_time()::text", &[])
        .await
        .unwrap();
    row.get(0)
}

/// Starts `pg_ctlcluster … main restart` and waits until the server is down.
async fn begin_restart() -> tokio::task::JoinHandle<std::process::Output> {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("a Debian-style PostgreSQL install (/etc/postgresql)")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .min()
        .expect("a cluster under /etc/postgresql");
    let restart = tokio::task::spawn_blocking(move || {
        std::process::Command::new("pg_ctlcluster")
            .args(["--skip-systemctl-redirect", &version, "main", "restart"])
            .output()
            .expect("pg_ctlcluster runs")
    });
    let started = Instant::now();
    while server_up().await {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server did not go down"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    restart
}

/// Saves through `LogCheckpointer`, restarting the server before the save
/// of `RESTART_AT_STEP`.
struct RestartMidRun {
    inner: LogCheckpointer,
    restart: tokio::sync::Mutex<Option<tokio::task::JoinHandle<std::process::Output>>>,
    saved_during_outage: AtomicBool,
}

impl Checkpointer for RestartMidRun {
    fn save(&self, batch: StepBatch) -> BoxFuture<'_, Result<(), CheckpointError>> {
        Box::pin(async move {
            let mut restart = self.restart.lock().await;
            if batch.step == RESTART_AT_STEP && restart.is_none() {
                *restart = Some(begin_restart().await);
                let result = self.inner.save(batch).await;
                self.saved_during_outage
                    .store(result.is_ok(), Ordering::SeqCst);
                return result;
            }
            drop(restart);
            self.inner.save(batch).await
        })
    }
}

fn model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let system = match req.messages.first() {
            Some(ChatMessage::System { content }) => content.as_str(),
            _ => "",
        };
        let used_tool = req
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::Tool { .. }));
        if system.contains("You classify the user's latest message") {
            Turn::json(
                json!({"intent": "RESEARCH", "reasoning": "facts", "missing_slots": [], "detected_language": "en"}),
            )
        } else if system.contains("You suggest follow-up questions") {
            Turn::json(json!({"questions": ["Why 42?", "Und 43?", "Is 41 close?"]}))
        } else if system.contains("research the user's question")
            && !req.tools.is_empty()
            && !used_tool
        {
            Turn::tool("indicator_value", json!({"country": "KEN"}))
        } else {
            Turn::text("The answer is 42 — «quarante-deux» ✓ 四十二.")
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_run_loses_no_event() {
    assert!(server_up().await, "PostgreSQL must run on 127.0.0.1:5432");
    let db = db::PgDb::create().await;
    let url = db.url();
    let result = AssertUnwindSafe(restart_mid_run(url)).catch_unwind().await;
    // Whatever happened, the server must be back for the next tests.
    let started = Instant::now();
    while !server_up().await && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    db.drop_db().await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

async fn restart_mid_run(url: String) {
    let before = postmaster_started().await;

    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url, 4).await.unwrap());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let registries = Registries::default();
    // The chat's data nodes need a data tool, or they answer NO_DATA unasked.
    registries
        .tools
        .register(Arc::new(data_tool::IndicatorValue::new()))
        .unwrap();
    let catalog = registries.load_files(&[root.join("graphs/chat.yaml")], &root.join("prompts"));
    assert!(!catalog.has_errors(), "{:#?}", catalog.diagnostics);
    let graph = Arc::clone(catalog.get("chat").unwrap());
    let services = Arc::new(Services::new(
        Models::single(Arc::new(model())),
        Arc::clone(&registries.tools),
    ));

    let checkpointer = Arc::new(RestartMidRun {
        inner: LogCheckpointer::new(Arc::clone(&store)).with_outage_limit(Duration::from_secs(60)),
        restart: tokio::sync::Mutex::new(None),
        saved_during_outage: AtomicBool::new(false),
    });
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let opts = RunOptions {
        checkpointer: Some(checkpointer.clone()),
        events: Some(tx),
        ..Default::default()
    };
    let run_id = opts.run_id;
    store
        .create_run(RunRecord {
            id: run_id,
            chat_id: None,
            user_id: "alice".into(),
            graph: "chat".into(),
            graph_version: graph.version.clone(),
            status: RunStatus::Running,
            input: json!({}),
            created_at: 1,
            finished_at: None,
            error: None,
            usage: Usage::default(),
            parent: None,
            request_id: None,
            message_id: None,
            last_seq: 0,
            last_step: 0,
        })
        .await
        .unwrap();
    let collector = tokio::spawn(async move {
        let mut all: Vec<Arc<Event>> = Vec::new();
        while let Some(e) = rx.recv().await {
            all.push(e);
        }
        all
    });
    let input = json!({"messages": [{"id": "u1", "role": "user", "content": "What is 6×7?"}], "query": "What is 6×7?"});
    let out = runtime::run(graph, services, input, opts)
        .await
        .expect("the run survives the restart");
    let live = collector.await.unwrap();

    let restart = checkpointer
        .restart
        .lock()
        .await
        .take()
        .expect("the server was restarted mid-run");
    let output = restart.await.unwrap();
    assert!(
        output.status.success(),
        "pg_ctlcluster restart failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        checkpointer.saved_during_outage.load(Ordering::SeqCst),
        "the save begun while the server was down succeeded"
    );
    assert!(
        out.steps > RESTART_AT_STEP,
        "the restart happened mid-run ({} steps)",
        out.steps
    );
    assert_ne!(
        postmaster_started().await,
        before,
        "the server really restarted"
    );

    let stored = store.events(run_id, 0, usize::MAX).await.unwrap();
    let sent: Vec<Event> = live.iter().map(|e| (**e).clone()).collect();
    assert_eq!(
        stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=sent.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(stored, sent, "every event stored exactly once");
    let record = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.last_seq, record.last_step),
        (RunStatus::Finished, sent.len() as u64, out.steps)
    );
    assert!(
        live.iter()
            .any(|e| matches!(e.event, EventKind::ToolResult(_)))
    );

    // The listening connection reconnected: appends are heard again.
    let mut notes = store.subscribe();
    let heard = async {
        loop {
            let probe = Uuid::now_v7();
            let b = StepBatch {
                run_id: probe,
                step: 0,
                writes: Vec::new(),
                events: Vec::new(),
                next: Vec::new(),
                joins: Vec::new(),
                snapshot: None,
                status: RunStatus::Running,
            };
            store.append(&b).await.unwrap();
            let wait = tokio::time::timeout(Duration::from_millis(300), async {
                while let Ok((id, _)) = notes.recv().await {
                    if id == probe {
                        return;
                    }
                }
            });
            if wait.await.is_ok() {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), heard)
        .await
        .expect("notifications resume after the restart");
}
