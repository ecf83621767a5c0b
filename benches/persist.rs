//! The chat RESEARCH path (~300 events) with every event and checkpoint in
//! PostgreSQL, as the server runs it: a run row (`create_run`), then the
//! executor with a [`LogCheckpointer`] appending each superstep, the stream
//! settings recorded and every event consumed by a pump. The scripted model
//! answers at once, so the figures are the runtime's and the store's.
//!
//! Figures, next to the targets (LangGraph's `PostgresSaver` in
//! brackets: 35.7 ms client + 4.9 ms server CPU, 25 rows, 14.3 KB, 16.6 runs/s):
//! - **sustained runs/s**: `--concurrency` (64) runs at a time for
//!   `--seconds` (10), on a 2-worker tokio runtime;
//! - **client CPU per run**: this process's user + system CPU over that
//!   window (`/proc/self/stat`, all threads), divided by the runs; the same
//!   without a checkpointer shows what persistence adds;
//! - **server CPU per run**: the CPU of the PostgreSQL backends serving the
//!   bench database (`pg_stat_activity` pids, `/proc/<pid>/stat`), and of
//!   all `postgres` processes (WAL writer etc., and anyone else's load);
//! - **round trips per run**: counted on the wire by a proxy parsing the
//!   client's protocol (each `Sync` or simple `Query` waits for the server)
//!   and attributing each to its statement: those on the run's path
//!   (`create_run`, one append per checkpoint) and the notification
//!   statements the store sends after appends on another connection; runs
//!   one at a time and many at a time (notifications then share
//!   statements), in a separate phase so the proxy's CPU stays out of the
//!   figures above;
//! - **rows and bytes per run**: row counts and `pg_column_size` sums per
//!   table, the growth of `pg_total_relation_size` (tables, indexes, TOAST,
//!   dead tuples) and of the WAL position.
//!
//! A SQLite row (same harness, the embedded default store) is printed for
//! comparison. Run: `cargo bench --bench persist [-- --seconds S
//! --concurrency C --events N]`. PostgreSQL is expected on 127.0.0.1:5432
//! (user `postgres`); the bench creates and drops its own database.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use stategraph::internals::events::now_micros;
use stategraph::internals::nodes::Graph as CompiledGraph;
use stategraph::internals::runs::LogCheckpointer;
use stategraph::internals::runtime::{
    CheckpointError, Checkpointer, RunOptions, RunStatus, Services, StepBatch,
};
use stategraph::internals::sse::BridgeConfig;
use stategraph::internals::store::{PostgresStore, RunRecord, SqliteStore, Store};
use support::pg::{self, TempDb, WireCount};
use support::*;
use uuid::Uuid;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

/// A [`LogCheckpointer`] that counts the batches it stores.
struct Counting {
    inner: LogCheckpointer,
    saves: AtomicU64,
}

impl Checkpointer for Counting {
    fn save(&self, batch: StepBatch) -> BoxFuture<'_, Result<(), CheckpointError>> {
        self.saves.fetch_add(1, Ordering::Relaxed);
        self.inner.save(batch)
    }

    fn save_steps(&self, batches: Vec<StepBatch>) -> BoxFuture<'_, Result<(), CheckpointError>> {
        self.saves.fetch_add(1, Ordering::Relaxed);
        self.inner.save_steps(batches)
    }
}

/// One workload: the graph, its model and input, and where runs go.
#[derive(Clone)]
struct Work {
    graph: Arc<CompiledGraph>,
    services: Arc<Services>,
    input: Arc<Value>,
    stream: Value,
    /// `None`: runs without persistence (the baseline).
    store: Option<(Arc<dyn Store>, Arc<Counting>)>,
}

impl Work {
    fn with_store(&self, store: Arc<dyn Store>) -> Self {
        let cp = Arc::new(Counting {
            inner: LogCheckpointer::new(Arc::clone(&store)),
            saves: AtomicU64::new(0),
        });
        Self {
            store: Some((store, cp)),
            ..self.clone()
        }
    }

    /// One run as the server does it; returns (events, supersteps).
    async fn run(&self) -> Ran {
        let run_id = Uuid::now_v7();
        let mut opts = RunOptions {
            run_id,
            stream: Some(self.stream.clone()),
            ..Default::default()
        };
        if let Some((store, cp)) = &self.store {
            store.create_run(record(run_id, &self.input)).await.unwrap();
            opts.checkpointer = Some(Arc::clone(cp) as Arc<dyn Checkpointer>);
        }
        run_with(
            Arc::clone(&self.graph),
            Arc::clone(&self.services),
            Arc::clone(&self.input),
            opts,
        )
        .await
    }
}

fn record(id: Uuid, input: &Value) -> RunRecord {
    RunRecord {
        id,
        chat_id: Some(format!("chat-{id}")),
        user_id: "bench".into(),
        graph: "chat".into(),
        graph_version: "bench".into(),
        status: RunStatus::Running,
        input: input.clone(),
        created_at: now_micros(),
        finished_at: None,
        error: None,
        usage: Default::default(),
        parent: None,
        request_id: Some(Uuid::now_v7().to_string()),
        message_id: Some(format!("msg_{}", Uuid::now_v7().simple())),
        last_seq: 0,
        last_step: 0,
    }
}

/// What a timed phase did.
struct Phase {
    runs: usize,
    events: usize,
    steps: u64,
    wall: Duration,
    cpu: Duration,
}

impl Phase {
    fn per_run(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e3 / self.runs as f64
    }
    fn runs_per_s(&self) -> f64 {
        self.runs as f64 / self.wall.as_secs_f64()
    }
}

/// `concurrency` loops each starting runs until `for_` has passed.
async fn sustain(work: &Work, concurrency: usize, for_: Duration) -> Phase {
    let deadline = Instant::now() + for_;
    let (runs, events, steps) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let cpu0 = pg::cpu_time("self").unwrap_or_default();
    let t0 = Instant::now();
    let loops: Vec<_> = (0..concurrency)
        .map(|_| {
            let (work, runs, events, steps) = (
                work.clone(),
                Arc::clone(&runs),
                Arc::clone(&events),
                Arc::clone(&steps),
            );
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let ran = work.run().await;
                    runs.fetch_add(1, Ordering::Relaxed);
                    events.fetch_add(ran.events, Ordering::Relaxed);
                    steps.fetch_add(u64::from(ran.steps), Ordering::Relaxed);
                }
            })
        })
        .collect();
    for l in loops {
        l.await.unwrap();
    }
    Phase {
        wall: t0.elapsed(),
        cpu: pg::cpu_time("self").unwrap_or_default() - cpu0,
        runs: runs.load(Ordering::Relaxed),
        events: events.load(Ordering::Relaxed),
        steps: steps.load(Ordering::Relaxed),
    }
}

fn row(name: &str, value: String, target: &str) {
    println!("  {name:<52} {value:>16}   {target}");
}

/// Round trips per run counted on the wire, by statement.
struct Trips {
    create: f64,
    appends: f64,
    notify: f64,
    other: f64,
    steps: f64,
}

/// Runs one at a time, then `concurrency` at a time, through the counting
/// proxy (its own store and pool on the same database).
async fn round_trips(work: &Work, db: &TempDb, concurrency: usize) -> [Trips; 2] {
    let count = Arc::new(WireCount::default());
    let port = pg::counting_proxy(Arc::clone(&count)).await;
    let url = format!("postgres://postgres@127.0.0.1:{port}/{}", db.name);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url, 16).await.unwrap());
    let work = work.with_store(store);
    // Warm up: every pooled connection prepares its statements once.
    sustain(&work, concurrency, Duration::from_millis(500)).await;
    let mut out = Vec::new();
    for one in [true, false] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = count.snapshot();
        let total0 = count.round_trips();
        let p = if one {
            sustain(&work, 1, Duration::from_millis(500)).await
        } else {
            sustain(&work, concurrency, Duration::from_secs(2)).await
        };
        // The last notifications go out after their appends.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let runs = p.runs as f64;
        let create = count.since(&before, "INSERT INTO runs") as f64;
        let appends = count.since(&before, "INSERT INTO run_event_pages") as f64;
        let notify = count.since(&before, "pg_notify") as f64;
        let total = (count.round_trips() - total0) as f64;
        out.push(Trips {
            create: create / runs,
            appends: appends / runs,
            notify: notify / runs,
            other: (total - create - appends - notify) / runs,
            steps: p.steps as f64 / runs,
        });
    }
    let many = out.pop().unwrap();
    [out.pop().unwrap(), many]
}

/// Rows, row bytes and on-disk bytes per run of the store's tables.
async fn storage(client: &tokio_postgres::Client, runs: usize, disk_before: &[i64]) {
    for (i, t) in TABLES.iter().enumerate() {
        let r = client
            .query_one(
                &format!(
                    "SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0)::bigint FROM {t} t"
                ),
                &[],
            )
            .await
            .unwrap();
        let (rows, bytes): (i64, i64) = (r.get(0), r.get(1));
        let disk = relation_size(client, t).await - disk_before[i];
        row(
            &format!("{t}: rows / row data / on disk, per run"),
            format!(
                "{:.1} / {:.1} / {:.1} KB",
                rows as f64 / runs as f64,
                bytes as f64 / runs as f64 / 1024.0,
                disk as f64 / runs as f64 / 1024.0
            ),
            "",
        );
    }
}

const TABLES: [&str; 3] = ["runs", "run_event_pages", "checkpoints"];

async fn relation_size(client: &tokio_postgres::Client, table: &str) -> i64 {
    client
        .query_one(
            "SELECT pg_total_relation_size($1::text::regclass)",
            &[&table],
        )
        .await
        .unwrap()
        .get(0)
}

async fn postgres(work: &Work, db: &TempDb, concurrency: usize, seconds: u64) {
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&db.url, 16).await.unwrap());
    let stats = db.connect().await;
    let trips = round_trips(work, db, concurrency).await;

    let work = work.with_store(store);
    sustain(&work, concurrency, Duration::from_secs(2)).await;
    stats
        .batch_execute("TRUNCATE runs, run_event_pages, checkpoints")
        .await
        .unwrap();
    let mut disk = Vec::new();
    for t in TABLES {
        disk.push(relation_size(&stats, t).await);
    }
    let backends = pg::backends(&stats, &db.name).await;
    let everyone = pg::postgres_processes();
    let (b0, a0, wal0) = (
        pg::cpu_of(&backends),
        pg::cpu_of(&everyone),
        pg::wal_lsn(&stats).await,
    );
    let p = sustain(&work, concurrency, Duration::from_secs(seconds)).await;
    let (b1, a1, wal1) = (
        pg::cpu_of(&backends),
        pg::cpu_of(&everyone),
        pg::wal_lsn(&stats).await,
    );

    println!(
        "PostgreSQL: {} runs in {:.1} s, {concurrency} at a time; {:.0} events and {:.1} supersteps per run; {} backends",
        p.runs,
        p.wall.as_secs_f64(),
        p.events as f64 / p.runs as f64,
        p.steps as f64 / p.runs as f64,
        backends.len()
    );
    row(
        "sustained runs/s",
        format!("{:.0}", p.runs_per_s()),
        &format!(
            "target ≥ 500 {}   [LangGraph 16.6]",
            verdict(p.runs_per_s() >= 500.0)
        ),
    );
    let cpu = p.per_run(p.cpu);
    row(
        "client CPU per run (process user+sys)",
        format!("{cpu:.3} ms"),
        &format!(
            "target ≤ 1 ms {}   [LangGraph 35.7 ms]",
            verdict(cpu <= 1.0)
        ),
    );
    row(
        "server CPU per run (this database's backends)",
        format!("{:.3} ms", p.per_run(b1 - b0)),
        "(report)   [LangGraph 4.9 ms]",
    );
    row(
        "server CPU per run (all postgres processes)",
        format!("{:.3} ms", p.per_run(a1 - a0)),
        "(report; includes WAL writer and other users)",
    );
    let many = format!("{concurrency} at a time");
    for (label, t) in [("1 at a time", &trips[0]), (many.as_str(), &trips[1])] {
        let path = t.create + t.appends;
        row(
            &format!("round trips per run on its path, {label}"),
            format!("{path:.2}"),
            &format!(
                "{:.2} create_run + {:.2} appends, {:.1} supersteps",
                t.create, t.appends, t.steps
            ),
        );
        row(
            &format!("  per superstep, {label}"),
            format!("{:.2}", path / t.steps),
            &format!("target ≤ 1 {}", verdict(path / t.steps <= 1.0)),
        );
        row(
            &format!("  notification statements per run, {label}"),
            format!("{:.2}", t.notify),
            &format!("(off the path, own connection); other: {:.2}", t.other),
        );
    }
    storage(&stats, p.runs, &disk).await;
    let rows: i64 = stats
        .query_one(
            "SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM run_event_pages) + (SELECT count(*) FROM checkpoints)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let mut on_disk = 0;
    for (i, t) in TABLES.iter().enumerate() {
        on_disk += relation_size(&stats, t).await - disk[i];
    }
    row(
        "rows per run (all tables)",
        format!("{:.1}", rows as f64 / p.runs as f64),
        "[LangGraph 25]",
    );
    row(
        "bytes on disk per run (all tables)",
        format!("{:.1} KB", on_disk as f64 / p.runs as f64 / 1024.0),
        "[LangGraph 14.3 KB]",
    );
    row(
        "WAL written per run",
        format!("{:.1} KB", (wal1 - wal0) as f64 / p.runs as f64 / 1024.0),
        "(report; server-wide position)",
    );
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds: u64 = arg("--seconds", 10);
    let concurrency: usize = arg("--concurrency", 64);
    let target_events: usize = arg("--events", 300);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tokens = tokens_for_events(target_events).await;
        let graph = chat_graph();
        let stream =
            BridgeConfig::for_graph(&graph, "msg_bench".into(), json!({"graph": "chat"})).to_json();
        let work = Work {
            graph,
            services: services(research_model(tokens)),
            input: research_input(),
            stream,
            store: None,
        };
        println!(
            "persistence of the chat RESEARCH path ({tokens} tokens per model call, scripted zero-latency model)\n"
        );
        sustain(&work, concurrency, Duration::from_secs(1)).await;
        let base = sustain(&work, concurrency, Duration::from_secs(3)).await;
        println!(
            "no store (baseline): {:.0} runs/s, client CPU {:.3} ms per run\n",
            base.runs_per_s(),
            base.per_run(base.cpu)
        );
        match TempDb::create("persist").await {
            Some(db) => postgres(&work, &db, concurrency, seconds).await,
            None => println!("PostgreSQL is not running on 127.0.0.1:5432: skipping it"),
        }
        let dir = tempfile::tempdir().unwrap();
        let sqlite: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("s.db")).await.unwrap());
        let sqlite = work.with_store(sqlite);
        sustain(&sqlite, concurrency, Duration::from_secs(1)).await;
        let s = sustain(&sqlite, concurrency, Duration::from_secs(seconds / 2)).await;
        println!(
            "\nSQLite (for comparison): {:.0} runs/s, client CPU {:.3} ms per run (SQLite works in this process)",
            s.runs_per_s(),
            s.per_run(s.cpu)
        );
    });
}
