//! Checkpoint bytes for a long run: 200 supersteps, each appending one
//! 1 KB message to the state (`messages`, merged by id), with the default
//! snapshot cadence and weight rule (`runtime::checkpoint` docs). LangGraph
//! writes 24.6 MB of checkpoints for this (a full state per step); the
//! issue's target is ≤ 0.5 MB.
//!
//! "Written" is what the executor hands to the checkpointer, encoded as the
//! SQL stores encode it (JSON text of the checkpoint columns: writes,
//! next, joins, snapshot), summed over every batch. "Stored" is what the
//! checkpoints table holds afterwards (the final batch is the last step's
//! row): SQLite text lengths, PostgreSQL raw and on-disk
//! (`pg_column_size`, after TOAST compression) sizes. The event log is
//! reported separately: its `node_finished` events carry the patches too.
//!
//! Other snapshot cadences are printed for comparison (not the target).
//! Run: `cargo bench --bench checkpoints`.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod support;

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::json;
use stategraph::internals::runs::LogCheckpointer;
use stategraph::internals::runtime::{Checkpointer, MemoryCheckpointer, RunOptions, StepBatch};
use stategraph::internals::store::{PostgresStore, SqliteStore, Store};
use support::pg::TempDb;
use support::*;
use uuid::Uuid;

const STEPS: usize = 200;
const CONTENT: usize = 1000;

/// 1,000 characters of words, different for each message.
fn content(i: usize) -> String {
    const WORDS: &[&str] = &[
        "sales", "grew", "in", "Norway", "while", "Sweden", "lagged", "behind", "the", "EV",
        "market", "share", "of", "new", "cars", "reached", "percent", "by", "year", "end",
    ];
    let mut x = i as u64 * 2_654_435_761 + 1;
    let mut s = String::with_capacity(CONTENT + 16);
    while s.len() < CONTENT {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        s.push_str(WORDS[(x >> 33) as usize % WORDS.len()]);
        s.push(' ');
    }
    s.truncate(CONTENT);
    s
}

/// A chain of `STEPS` no-op nodes, each appending one 1 KB message.
fn yaml() -> String {
    let mut y = format!(
        "state: chat\nentry: n0\nrecursion_limit: {}\nnodes:\n",
        STEPS + 1
    );
    for i in 0..STEPS {
        let msg = json!({"id": format!("m{i}"), "role": "user", "content": content(i)});
        let _ = writeln!(y, "  - {{id: n{i}, kind: set, set: {{messages: [{msg}]}}}}");
    }
    y.push_str("edges:\n");
    for i in 0..STEPS {
        let next = if i + 1 == STEPS {
            "END".to_owned()
        } else {
            format!("n{}", i + 1)
        };
        let _ = writeln!(y, "  - n{i} -> {next}");
    }
    y
}

/// Length of a value's JSON text.
fn len<T: serde::Serialize + ?Sized>(v: &T) -> usize {
    serde_json::to_vec(v).map_or(0, |v| v.len())
}

/// Bytes of the checkpoint columns of `batches`, as (writes, snapshots,
/// next + joins), and the bytes of their events' payloads.
fn written(batches: &[StepBatch]) -> ([usize; 3], usize) {
    let mut b = [0usize; 3];
    let mut events = 0;
    for batch in batches {
        b[0] += len(&batch.writes);
        b[1] += batch.snapshot.as_ref().map_or(0, len);
        b[2] += len(&batch.next) + len(&batch.joins);
        events += batch.events.iter().map(|e| len(&e.event)).sum::<usize>();
    }
    (b, events)
}

fn mb(bytes: usize) -> String {
    format!("{:.3} MB", bytes as f64 / 1e6)
}

async fn run(
    graph: &Arc<stategraph::internals::nodes::Graph>,
    cp: Arc<dyn Checkpointer>,
    every: u32,
) -> Uuid {
    let run_id = Uuid::now_v7();
    let ran = run_with(
        Arc::clone(graph),
        services(research_model(0)),
        json!({"messages": [], "query": "q"}),
        RunOptions {
            run_id,
            checkpointer: Some(cp),
            snapshot_every: every,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ran.steps as usize, STEPS);
    run_id
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let graph = compile(&yaml());
    let default_every = RunOptions::default().snapshot_every;
    let message = json!({"id": "m0", "role": "user", "content": content(0)}).to_string();
    println!(
        "checkpoints of a {STEPS}-step run, each step appending one message of {} bytes of JSON\n",
        message.len()
    );
    rt.block_on(async {
        for every in [default_every, 50, u32::MAX] {
            let mem = Arc::new(MemoryCheckpointer::new());
            let id = run(&graph, Arc::clone(&mem) as Arc<dyn Checkpointer>, every).await;
            let batches = mem.batches(id);
            let ([writes, snaps, rest], events) = written(&batches);
            let total = writes + snaps + rest;
            let label = if every == u32::MAX {
                "no cadence (input, and the final batch by weight)".to_owned()
            } else {
                format!("snapshot cadence {every} steps + weight rule")
            };
            let snapshots = batches.iter().filter(|b| b.snapshot.is_some()).count();
            if every == default_every {
                println!(
                    "{:<62} {:>10}   target ≤ 0.5 MB {}   [LangGraph 24.6 MB]",
                    format!("checkpoint bytes written, {label} (default)"),
                    mb(total),
                    if total as f64 <= 0.5e6 { "met" } else { "MISSED" }
                );
                println!(
                    "  patches {}, {snapshots} snapshots {}, frontier {}; {} batches; event log payloads {} more",
                    mb(writes),
                    mb(snaps),
                    mb(rest),
                    batches.len(),
                    mb(events)
                );
                stored(&graph, every).await;
            } else {
                println!(
                    "{:<62} {:>10}   (comparison: {snapshots} snapshots {})",
                    format!("checkpoint bytes written, {label}"),
                    mb(total),
                    mb(snaps)
                );
            }
        }
    });
}

/// The same run through the SQLite and PostgreSQL stores: what their
/// checkpoints tables hold afterwards.
async fn stored(graph: &Arc<stategraph::internals::nodes::Graph>, every: u32) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let id = run(graph, Arc::new(LogCheckpointer::new(sqlite)), every).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (rows, bytes): (i64, i64) = conn
        .query_row(
            "SELECT count(*), sum(length(writes) + length(next) + length(joins) + coalesce(length(snapshot), 0)) FROM checkpoints WHERE run_id = ?1",
            [id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    println!(
        "  stored in SQLite: {rows} checkpoint rows, {}",
        mb(bytes as usize)
    );
    let Some(db) = TempDb::create("checkpoints").await else {
        println!("  PostgreSQL is not running on 127.0.0.1:5432: skipping it");
        return;
    };
    let pg: Arc<dyn Store> = Arc::new(PostgresStore::connect(&db.url, 2).await.unwrap());
    let id = run(graph, Arc::new(LogCheckpointer::new(pg)), every).await;
    let client = db.connect().await;
    let r = client
        .query_one(
            "SELECT count(*),
                    sum(octet_length(writes::text) + octet_length(next::text) + octet_length(joins::text) + coalesce(octet_length(snapshot::text), 0))::bigint,
                    sum(pg_column_size(writes) + pg_column_size(next) + pg_column_size(joins) + coalesce(pg_column_size(snapshot), 0))::bigint
             FROM checkpoints WHERE run_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let (rows, raw, disk): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
    println!(
        "  stored in PostgreSQL: {rows} checkpoint rows, {} of JSON, {} after TOAST compression",
        mb(raw as usize),
        mb(disk as usize)
    );
}
