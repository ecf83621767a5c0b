//! Store benchmarks: how fast each backend takes the event log.
//!
//! Two realistic shapes of [`StepBatch`]:
//! - **llm call**: one batch of 50 events, like a node streaming one model
//!   answer (node start, model start, 45 text deltas, model end, node end,
//!   checkpoint saved) with its patch;
//! - **chat run**: a 300-event chat run (summarizer, router, a research agent
//!   with a tool call, narrator, follow-ups) in its 5 appends, as the
//!   executor hands them over: the input (step 0) together with step 1,
//!   steps 2–4, and step 5 as the final batch with `run_finished`.
//!
//! Criterion measures serial appends per backend (throughput in events).
//! Then tables print serial and concurrent (32 writers) events/s; streamed
//! tokens (an append of one event per token, many runs at once, as the
//! server stores them while they stream) with the SQLite writer thread's
//! CPU per append; and for PostgreSQL the rows and bytes one chat run
//! costs and the round trips per append, counted on the wire by a small
//! proxy that parses the client's protocol messages (every `Sync` or
//! simple `Query` waits for the server).
//!
//! `pg-nosync` is PostgreSQL with `synchronous_commit = off` set through the
//! URL: the difference is the WAL flush each commit waits for.
//!
//! Run: `cargo bench --bench store`. PostgreSQL is expected on
//! 127.0.0.1:5432 (user `postgres`); the bench creates and drops its own
//! database, and skips PostgreSQL if the server is not there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use stategraph::internals::events::{LlmFinish, LlmStart, ToolReady, ToolReturn};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use serde_json::json;
use stategraph::internals::events::{
    Event, EventKind, LlmOutput, ToolCallRecord, Usage, now_micros,
};
use stategraph::internals::runtime::{PendingTask, RunStatus, StepBatch, TaskWrite};
use stategraph::internals::store::memory::MemoryStore;
use stategraph::internals::store::{
    EventLog, PostgresStore, RunRecord, RunStore, SqliteStore, Store,
};
use stategraph::state::Patch;
use support::pg::{self, PG, WireCount, threads_cpu};
use tokio::runtime::Runtime;
use uuid::Uuid;

// ------------------------------------------------------------ workloads

const WORDS: &[&str] = &[
    "The ",
    "answer ",
    "is ",
    "forty",
    "-two",
    ", ",
    "as ",
    "computed ",
    "by ",
    "Deep ",
    "Thought ",
    "— ",
    "ünïcode ",
    "✓ ",
    "\n",
];

fn tokens(n: usize) -> Vec<String> {
    (0..n).map(|i| WORDS[i % WORDS.len()].to_owned()).collect()
}

/// Builds one run's events with gapless seqs.
struct Emitter {
    run: Uuid,
    seq: u64,
}

impl Emitter {
    fn emit(&mut self, step: u32, node: Option<&str>, event: EventKind) -> Arc<Event> {
        self.seq += 1;
        Arc::new(Event {
            run_id: self.run,
            seq: self.seq,
            at: now_micros(),
            step,
            node: node.map(Arc::from),
            task: 0,
            event,
        })
    }

    /// A node streaming one model answer of `deltas` tokens (deltas + 5
    /// events), with its patch.
    fn llm_node(
        &mut self,
        step: u32,
        node: &str,
        deltas: usize,
        call: u32,
        out: &mut Vec<Arc<Event>>,
    ) -> Patch {
        let n = Some(node);
        if call == 0 {
            out.push(self.emit(
                step,
                n,
                EventKind::NodeStarted {
                    attempt: 1,
                    item: None,
                },
            ));
        }
        out.push(self.emit(
            step,
            n,
            EventKind::LlmStarted(Box::new(LlmStart {
                call,
                role: "chat".into(),
                model: "gpt-4o-mini".into(),
                request: "9f2c4e1a77b0d3e5".into(),
            })),
        ));
        let toks = tokens(deltas);
        for t in &toks {
            out.push(self.emit(
                step,
                n,
                EventKind::TextDelta {
                    call,
                    delta: t.clone(),
                },
            ));
        }
        let text = toks.concat();
        let usage = Usage {
            prompt_tokens: 800,
            completion_tokens: deltas as u64,
            ..Default::default()
        };
        let output = LlmOutput {
            text: text.clone(),
            finish_reason: "stop".into(),
            ..Default::default()
        };
        out.push(self.emit(
            step,
            n,
            EventKind::LlmFinished(Box::new(LlmFinish {
                call,
                output,
                usage,
                duration_us: 850_000,
            })),
        ));
        let patch = Patch::new().set("answer", text);
        out.push(self.emit(
            step,
            n,
            EventKind::NodeFinished {
                patch: patch.clone(),
                duration_us: 900_000,
            },
        ));
        patch
    }
}

fn step_batch(
    run: Uuid,
    step: u32,
    node: &str,
    patch: Patch,
    events: Vec<Arc<Event>>,
) -> StepBatch {
    StepBatch {
        run_id: run,
        step,
        writes: vec![TaskWrite {
            node: node.into(),
            task: 0,
            patch,
        }],
        events,
        next: vec![PendingTask {
            node: "narrator".into(),
            item: None,
        }],
        joins: Vec::new(),
        snapshot: None,
        status: RunStatus::Running,
    }
}

/// One 50-event batch: a node streaming a 45-token answer.
fn llm_call(run: Uuid, step: u32, first_seq: u64) -> StepBatch {
    let mut em = Emitter {
        run,
        seq: first_seq,
    };
    let mut events = Vec::with_capacity(50);
    let patch = em.llm_node(step, "narrator", 45, 0, &mut events);
    events.push(em.emit(step, None, EventKind::CheckpointSaved { checkpoint: step }));
    step_batch(run, step, "narrator", patch, events)
}

/// One append: consecutive batches stored together.
type Append = Vec<StepBatch>;

/// A 300-event chat run in its 5 appends (6 checkpoints).
fn chat_run(run: Uuid) -> Vec<Append> {
    let mut em = Emitter { run, seq: 0 };
    let messages: Vec<_> = (0..8).map(|i| json!({"id": format!("m{i}"), "role": if i % 2 == 0 { "user" } else { "assistant" }, "content": "An earlier message of the conversation, about as long as a real one tends to be."})).collect();
    let input =
        json!({"messages": messages, "query": "What is six times seven, and why does it matter?"});
    let started = EventKind::RunStarted(Box::new(stategraph::internals::events::RunStart {
        graph: "chat".into(),
        graph_version: "4f9a1c2e".into(),
        input: Arc::new(input.clone()),
        format: 1,
        forked_from: None,
        frontier: None,
        stream: None,
        user: None,
    }));
    let mut batches = vec![StepBatch {
        snapshot: Some(input),
        writes: Vec::new(),
        ..step_batch(run, 0, "", Patch::new(), vec![em.emit(0, None, started)])
    }];
    for (step, (node, deltas)) in [
        ("summarizer", 25),
        ("router", 12),
        ("research", 80),
        ("narrator", 110),
        ("followup", 36),
    ]
    .into_iter()
    .enumerate()
    {
        let step = step as u32 + 1;
        let mut events = Vec::new();
        if node == "research" {
            let n = Some(node);
            events.push(em.emit(
                step,
                n,
                EventKind::NodeStarted {
                    attempt: 1,
                    item: None,
                },
            ));
            events.push(em.emit(
                step,
                n,
                EventKind::LlmStarted(Box::new(LlmStart {
                    call: 0,
                    role: "chat".into(),
                    model: "gpt-4o-mini".into(),
                    request: "77aa".into(),
                })),
            ));
            events.push(em.emit(
                step,
                n,
                EventKind::ToolCallStarted {
                    call_id: "call_1".into(),
                    tool: "calculator".into(),
                },
            ));
            for d in ["{\"exp", "ression", "\": \"", "6*", "7", "\"}"] {
                events.push(em.emit(
                    step,
                    n,
                    EventKind::ToolCallDelta {
                        call_id: "call_1".into(),
                        delta: d.into(),
                    },
                ));
            }
            let output = LlmOutput {
                tool_calls: vec![ToolCallRecord {
                    id: "call_1".into(),
                    name: "calculator".into(),
                    arguments: "{\"expression\": \"6*7\"}".into(),
                }],
                finish_reason: "tool_calls".into(),
                ..Default::default()
            };
            let usage = Usage {
                prompt_tokens: 900,
                completion_tokens: 12,
                ..Default::default()
            };
            events.push(em.emit(
                step,
                n,
                EventKind::LlmFinished(Box::new(LlmFinish {
                    call: 0,
                    output,
                    usage,
                    duration_us: 400_000,
                })),
            ));
            events.push(em.emit(
                step,
                n,
                EventKind::ToolCallReady(Box::new(ToolReady {
                    call_id: "call_1".into(),
                    tool: "calculator".into(),
                    args: json!({"expression": "6*7"}),
                })),
            ));
            events.push(em.emit(
                step,
                n,
                EventKind::ToolResult(Box::new(ToolReturn {
                    display: false,
                    call_id: "call_1".into(),
                    tool: "calculator".into(),
                    output: json!({"result": 42}),
                    cached: false,
                    duration_us: 120,
                })),
            ));
        }
        let call = u32::from(node == "research");
        let patch = em.llm_node(step, node, deltas, call, &mut events);
        events.push(em.emit(step, None, EventKind::CheckpointSaved { checkpoint: step }));
        batches.push(step_batch(run, step, node, patch, events));
    }
    let finished = em.emit(
        5,
        None,
        EventKind::RunFinished {
            steps: 5,
            usage: Usage {
                prompt_tokens: 4000,
                completion_tokens: 262,
                ..Default::default()
            },
        },
    );
    // Step 5 led to END: it is the final batch, with `run_finished` instead
    // of `checkpoint_saved`.
    let mut last = batches.pop().expect("five steps");
    last.events.pop();
    last.events.push(finished);
    last.next.clear();
    last.snapshot = Some(
        json!({"answer": tokens(110).concat(), "followups": ["Why 42?", "And 43?", "Is 41 close?"], "intent": "RESEARCH"}),
    );
    last.status = RunStatus::Finished;
    let mut steps = batches.into_iter();
    let first: Append = steps.by_ref().take(2).collect();
    let mut appends = vec![first];
    appends.extend(steps.map(|b| vec![b]));
    appends.push(vec![last]);
    appends
}

fn run_record(id: Uuid) -> RunRecord {
    RunRecord {
        id,
        chat_id: Some("bench-chat".into()),
        user_id: "bench".into(),
        graph: "chat".into(),
        graph_version: "4f9a1c2e".into(),
        status: RunStatus::Running,
        input: json!({"query": "What is six times seven?"}),
        created_at: now_micros(),
        finished_at: None,
        error: None,
        usage: Usage::default(),
        parent: None,
        request_id: None,
        message_id: Some("a1".into()),
        last_seq: 0,
        last_step: 0,
    }
}

// ------------------------------------------------------------- backends

struct Backend {
    name: &'static str,
    store: Arc<dyn Store>,
}

impl Backend {
    /// The memory store keeps everything; give each sample a fresh one.
    fn store(&self) -> Arc<dyn Store> {
        if self.name == "memory" {
            Arc::new(MemoryStore::new())
        } else {
            Arc::clone(&self.store)
        }
    }
}

/// Appends whole runs of `plan`'s batches (run rows created first, untimed).
async fn append_runs(
    store: &dyn Store,
    runs: usize,
    plan: fn(Uuid) -> Vec<Append>,
) -> (Duration, u64) {
    let planned: Vec<Vec<Append>> = (0..runs).map(|_| plan(Uuid::now_v7())).collect();
    for p in &planned {
        store.create_run(run_record(p[0][0].run_id)).await.unwrap();
    }
    let events = planned
        .iter()
        .flatten()
        .flatten()
        .map(|b| b.events.len() as u64)
        .sum();
    let start = Instant::now();
    for p in &planned {
        for a in p {
            store.append_steps(a).await.unwrap();
        }
    }
    (start.elapsed(), events)
}

fn llm_plan(run: Uuid) -> Vec<Append> {
    vec![vec![llm_call(run, 1, 0)]]
}

fn criterion_benches(c: &mut Criterion, rt: &Runtime, backends: &[Backend]) {
    for (scenario, plan, events) in [
        (
            "llm_call_50_events",
            llm_plan as fn(Uuid) -> Vec<Append>,
            50,
        ),
        ("chat_run_300_events_5_appends", chat_run, 300),
    ] {
        let mut g = c.benchmark_group(format!("append/{scenario}"));
        g.throughput(Throughput::Elements(events));
        for b in backends.iter().filter(|b| b.name != "pg-nosync") {
            g.bench_function(b.name, |bench| {
                bench.to_async(rt).iter_custom(|iters| {
                    let store = b.store();
                    async move { append_runs(&*store, iters as usize, plan).await.0 }
                });
            });
        }
        g.finish();
    }
}

// -------------------------------------------------------------- figures

async fn concurrent(store: Arc<dyn Store>, writers: usize, runs_each: usize) -> f64 {
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { append_runs(&*store, runs_each, chat_run).await })
        })
        .collect();
    let mut events = 0;
    for t in tasks {
        events += t.await.unwrap().1;
    }
    // Includes creating the run rows: a lower bound on append throughput.
    events as f64 / start.elapsed().as_secs_f64()
}

/// Tokens as the server's pump stores them while they stream
/// (`stream_durability = "visible"`): `runs` runs stream `rounds` tokens
/// in lockstep, each token an append of one event and no checkpoint; all
/// runs' appends of a round are sent at once, so SQLite commits each
/// round in one group or a few (how many pages share a commit is what
/// moves its per-page cost most, hence the lockstep). Returns pages per
/// second and, on SQLite, the writer thread's CPU per page in µs.
async fn streamed(b: &Backend, runs: usize, rounds: usize) -> (f64, Option<f64>) {
    let store = b.store();
    let mut emitters: Vec<Emitter> = (0..runs)
        .map(|_| Emitter {
            run: Uuid::now_v7(),
            seq: 0,
        })
        .collect();
    for e in &emitters {
        store.create_run(run_record(e.run)).await.unwrap();
    }
    // The SQLite store's threads live as long as the bench: measure them
    // only when it is the one appending.
    let writer = || (b.name == "sqlite").then(|| threads_cpu("self", "sqlite-writer"))?;
    let writer0 = writer();
    let start = Instant::now();
    for delta in tokens(rounds) {
        let round = emitters.iter_mut().map(|e| {
            let token = e.emit(
                3,
                Some("narrator"),
                EventKind::TextDelta {
                    call: 0,
                    delta: delta.clone(),
                },
            );
            let store = &store;
            async move { store.append_events(token.run_id, &[token]).await.unwrap() }
        });
        futures::future::join_all(round).await;
    }
    let pages = (runs * rounds) as f64;
    let rate = pages / start.elapsed().as_secs_f64();
    let writer = writer0
        .zip(writer())
        .map(|(before, after)| (after - before).as_secs_f64() * 1e6 / pages);
    (rate, writer)
}

async fn figures(backends: &[Backend]) {
    println!("\nstore append figures (events per second; chat run = 300 events in 5 appends)\n");
    println!(
        "{:<10} {:>16} {:>14} {:>16} {:>14} {:>24}",
        "backend",
        "llm call ev/s",
        "µs/append",
        "chat run ev/s",
        "µs/append",
        "chat, 32 writers ev/s"
    );
    for b in backends {
        let (t1, e1) = append_runs(&*b.store(), 1000, llm_plan).await;
        let (t2, e2) = append_runs(&*b.store(), 150, chat_run).await;
        let conc = concurrent(b.store(), 32, 8).await;
        println!(
            "{:<10} {:>16.0} {:>14.1} {:>16.0} {:>14.1} {:>24.0}",
            b.name,
            e1 as f64 / t1.as_secs_f64(),
            t1.as_secs_f64() * 1e6 / 1000.0,
            e2 as f64 / t2.as_secs_f64(),
            t2.as_secs_f64() * 1e6 / (150.0 * 5.0),
            conc
        );
    }
    println!(
        "\nstreamed tokens (appends of one event, no checkpoint; runs streaming in lockstep)\n"
    );
    println!(
        "{:<10} {:>18} {:>16} {:>18} {:>16}",
        "backend", "64 runs: pages/s", "writer µs/page", "1 run: pages/s", "writer µs/page"
    );
    let show = |w: Option<f64>| w.map_or_else(|| "-".to_owned(), |w| format!("{w:.1}"));
    for b in backends {
        let (rate64, writer64) = streamed(b, 64, 100).await;
        let (rate1, writer1) = streamed(b, 1, 1000).await;
        println!(
            "{:<10} {:>18.0} {:>16} {:>18.0} {:>16}",
            b.name,
            rate64,
            show(writer64),
            rate1,
            show(writer1)
        );
    }
}

async fn sqlite_bytes_per_run(path: &std::path::Path, store: &dyn Store) {
    let size = || {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        let page: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        pages * page
    };
    let before = size();
    append_runs(store, 200, chat_run).await;
    let after = size();
    println!(
        "\nSQLite: {:.1} KB of database file per chat run (tables and indexes, after a WAL checkpoint)",
        (after - before) as f64 / 200.0 / 1024.0
    );
}

async fn pg_storage_per_run(url: &str, store: &dyn Store) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("TRUNCATE runs, run_event_pages, checkpoints")
        .await
        .unwrap();
    let tables = ["runs", "run_event_pages", "checkpoints"];
    let total = async |client: &tokio_postgres::Client| -> i64 {
        let mut sum = 0;
        for t in tables {
            sum += client
                .query_one("SELECT pg_total_relation_size($1::text::regclass)", &[&t])
                .await
                .unwrap()
                .get::<_, i64>(0);
        }
        sum
    };
    let before = total(&client).await;
    const RUNS: usize = 200;
    append_runs(store, RUNS, chat_run).await;
    let after = total(&client).await;
    println!("\nPostgreSQL, per 300-event chat run ({RUNS} runs):");
    for t in tables {
        let row = client
            .query_one(
                &format!(
                    "SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0)::bigint FROM {t} t"
                ),
                &[],
            )
            .await
            .unwrap();
        let (rows, bytes): (i64, i64) = (row.get(0), row.get(1));
        println!(
            "  {t:<12} {:>6.1} rows {:>9.1} KB of row data",
            rows as f64 / RUNS as f64,
            bytes as f64 / RUNS as f64 / 1024.0
        );
    }
    println!(
        "  on disk (tables + indexes + TOAST): {:.1} KB",
        (after - before) as f64 / RUNS as f64 / 1024.0
    );
}

async fn pg_round_trips(db: &str) {
    let count = Arc::new(WireCount::default());
    let port = pg::counting_proxy(Arc::clone(&count)).await;
    let store = PostgresStore::connect(&format!("postgres://postgres@127.0.0.1:{port}/{db}"), 1)
        .await
        .unwrap();
    // Warm up: the append statement is prepared once per connection.
    append_runs(&store, 2, chat_run).await;
    let planned: Vec<Vec<Append>> = (0..30).map(|_| chat_run(Uuid::now_v7())).collect();
    for p in &planned {
        store.create_run(run_record(p[0][0].run_id)).await.unwrap();
    }
    let before = count.snapshot();
    let mut appends = 0u64;
    let (mut fewest, mut most) = (usize::MAX, 0);
    for a in planned.iter().flatten() {
        store.append_steps(a).await.unwrap();
        appends += 1;
        let n = a.iter().map(|b| b.events.len()).sum::<usize>();
        (fewest, most) = (fewest.min(n), most.max(n));
    }
    // Let the notifications of the last appends go out.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (on_path, notify) = (
        count.since(&before, "INSERT INTO run_event_pages"),
        count.since(&before, "pg_notify"),
    );
    println!(
        "\nPostgreSQL round trips per append: {:.2} ({appends} appends of {fewest}–{most} events, counted on the wire), \
         plus {:.2} notification statements per append sent after them on another connection",
        on_path as f64 / appends as f64,
        notify as f64 / appends as f64
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let run = chat_run(Uuid::nil());
    let events: usize = run.iter().flatten().map(|b| b.events.len()).sum();
    assert_eq!(
        (
            events,
            run.len(),
            run.iter().flatten().count(),
            llm_call(Uuid::nil(), 1, 0).events.len()
        ),
        (300, 5, 6, 50)
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite_path = dir.path().join("stategraph.db");
    let db = format!("stategraph_bench_{}", Uuid::new_v4().simple());
    let (backends, pg_url) = rt.block_on(async {
        let mut backends = vec![
            Backend {
                name: "memory",
                store: Arc::new(MemoryStore::new()),
            },
            Backend {
                name: "sqlite",
                store: Arc::new(SqliteStore::open(&sqlite_path).await.unwrap()),
            },
        ];
        let mut pg_url = None;
        match pg::admin().await {
            Some(admin) => {
                admin
                    .batch_execute(&format!("CREATE DATABASE {db}"))
                    .await
                    .unwrap();
                let url = format!("{PG}/{db}");
                backends.push(Backend {
                    name: "postgres",
                    store: Arc::new(PostgresStore::connect(&url, 16).await.unwrap()),
                });
                // The same without waiting for the WAL flush at commit, to
                // show what the fsync costs (an operator's choice, per URL).
                let relaxed = format!("{url}?options=-c%20synchronous_commit%3Doff");
                backends.push(Backend {
                    name: "pg-nosync",
                    store: Arc::new(PostgresStore::connect(&relaxed, 16).await.unwrap()),
                });
                pg_url = Some(url);
            }
            None => println!("PostgreSQL is not running on 127.0.0.1:5432: skipping it"),
        }
        (backends, pg_url)
    });
    // Whatever happens, the bench database is dropped afterwards.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(10)
            .configure_from_args();
        criterion_benches(&mut c, &rt, &backends);
        c.final_summary();
        rt.block_on(async {
            figures(&backends).await;
            sqlite_bytes_per_run(&sqlite_path, &*backends[1].store).await;
            if let (Some(url), Some(pg)) = (&pg_url, backends.get(2)) {
                pg_storage_per_run(url, &*pg.store).await;
                pg_round_trips(&db).await;
            }
        });
    }));
    drop(backends);
    if pg_url.is_some() {
        rt.block_on(async {
            if let Some(admin) = pg::admin().await {
                let _ = admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
                    .await;
            }
        });
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
