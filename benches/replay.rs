//! Replaying a 10,000-event run to SSE (target ≤ 20 ms): the exact bytes
//! the client received, rebuilt from the event log as `stategraph replay
//! RUN --sse` and the runs API do it — [`replay::load`] (the run row, then
//! the events in pages) and [`replay::sse`] (the bridge over every event).
//!
//! The run is the chat RESEARCH path with enough tokens per model call for
//! ~10,000 events, executed once with its stream settings; its batches are
//! then appended to a SQLite and a PostgreSQL store. Each figure is wall
//! time per replay (median and p90 of repeated replays, one at a time, on a
//! 2-worker runtime): from each store (load + render, and load alone) and
//! the pure render of events already in memory.
//!
//! Run: `cargo bench --bench replay [-- --events N --reps R]`. PostgreSQL is
//! expected on 127.0.0.1:5432 (user `postgres`); the bench creates and drops
//! its own database, and skips PostgreSQL if the server is not there.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use stategraph::internals::events::now_micros;
use stategraph::internals::replay;
use stategraph::internals::runtime::{
    Checkpointer, MemoryCheckpointer, RunOptions, RunStatus, StepBatch,
};
use stategraph::internals::sse::BridgeConfig;
use stategraph::internals::store::{PostgresStore, RunRecord, SqliteStore, Store};
use support::pg::TempDb;
use support::*;
use uuid::Uuid;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

/// Median and p90 wall time of `reps` calls (after two warm-up calls).
async fn time<F: Future<Output = usize>>(
    reps: usize,
    mut f: impl FnMut() -> F,
) -> (Duration, Duration, usize) {
    let mut out = 0;
    for _ in 0..2 {
        out = f().await;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        out = std::hint::black_box(f().await);
        times.push(t.elapsed());
    }
    times.sort();
    (times[reps / 2], times[(reps * 9).div_ceil(10) - 1], out)
}

fn row(name: &str, (median, p90, _): (Duration, Duration, usize), target: bool) {
    let ms = median.as_secs_f64() * 1e3;
    let verdict = match (target, ms <= 20.0) {
        (false, _) => "(report)",
        (true, true) => "target ≤ 20 ms met",
        (true, false) => "target ≤ 20 ms MISSED",
    };
    println!(
        "  {name:<44} median {ms:>7.2} ms   p90 {:>7.2} ms   {verdict}",
        p90.as_secs_f64() * 1e3
    );
}

/// The recorded run: its batches, as the executor handed them over.
async fn record_run(events: usize) -> (Uuid, Vec<StepBatch>) {
    let tokens = tokens_for_events(events).await;
    let graph = chat_graph();
    let stream =
        BridgeConfig::for_graph(&graph, "msg_replay".into(), json!({"graph": "chat"})).to_json();
    let mem = Arc::new(MemoryCheckpointer::new());
    let run_id = Uuid::now_v7();
    run_with(
        graph,
        services(research_model(tokens)),
        research_input(),
        RunOptions {
            run_id,
            checkpointer: Some(Arc::clone(&mem) as Arc<dyn Checkpointer>),
            stream: Some(stream),
            ..Default::default()
        },
    )
    .await;
    (run_id, mem.batches(run_id))
}

async fn store_run(store: &dyn Store, run_id: Uuid, batches: &[StepBatch]) {
    store
        .create_run(RunRecord {
            id: run_id,
            chat_id: Some("replay-chat".into()),
            user_id: "bench".into(),
            graph: "chat".into(),
            graph_version: "bench".into(),
            status: RunStatus::Running,
            input: json!({}),
            created_at: now_micros(),
            finished_at: None,
            error: None,
            usage: Default::default(),
            parent: None,
            request_id: None,
            message_id: Some("msg_replay".into()),
            last_seq: 0,
            last_step: 0,
        })
        .await
        .unwrap();
    for b in batches {
        store.append(b).await.unwrap();
    }
}

async fn from_store(name: &str, store: Arc<dyn Store>, run_id: Uuid, reps: usize, expected: &str) {
    let (_, events) = replay::load(&*store, run_id).await.unwrap();
    assert_eq!(
        replay::sse(&events).unwrap(),
        expected,
        "{name}: SSE differs"
    );
    let s = Arc::clone(&store);
    row(
        &format!("{name}: load + render SSE"),
        time(reps, || {
            let s = Arc::clone(&s);
            async move {
                let (_, events) = replay::load(&*s, run_id).await.unwrap();
                replay::sse(&events).unwrap().len()
            }
        })
        .await,
        true,
    );
    row(
        &format!("{name}: load only (run + events, decoded)"),
        time(reps, || {
            let s = Arc::clone(&store);
            async move { replay::load(&*s, run_id).await.unwrap().1.len() }
        })
        .await,
        false,
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let events: usize = arg("--events", 10_000);
    let reps: usize = arg("--reps", 30).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (run_id, batches) = record_run(events).await;
        let all: Vec<_> = batches
            .iter()
            .flat_map(|b| b.events.iter().map(|e| (**e).clone()))
            .collect();
        let sse = replay::sse(&all).unwrap();
        println!(
            "replay of a {}-event run to SSE ({:.0} KB of SSE, {} frames), {reps} replays each\n",
            all.len(),
            sse.len() as f64 / 1024.0,
            sse.matches("\n\n").count()
        );
        row(
            "render only (events in memory)",
            time(reps, || {
                let all = &all;
                async move { replay::sse(all).unwrap().len() }
            })
            .await,
            false,
        );
        let dir = tempfile::tempdir().unwrap();
        let sqlite: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("s.db")).await.unwrap());
        store_run(&*sqlite, run_id, &batches).await;
        from_store("SQLite", sqlite, run_id, reps, &sse).await;
        match TempDb::create("replay").await {
            Some(db) => {
                let pg: Arc<dyn Store> =
                    Arc::new(PostgresStore::connect(&db.url, 4).await.unwrap());
                store_run(&*pg, run_id, &batches).await;
                from_store("PostgreSQL", pg, run_id, reps, &sse).await;
            }
            None => println!("  PostgreSQL is not running on 127.0.0.1:5432: skipped"),
        }
    });
}
