//! Load generator for the chat server (`cargo bench --bench load`). It
//! starts `stategraph serve` as a child process (SQLite store in a temp
//! dir unless told otherwise) and drives it over HTTP + SSE on loopback,
//! reading every response as a browser would.
//!
//! 1. `paced`: 1,000 concurrent chats (RESEARCH path), every model call
//!    streaming 50 tokens at 20 tokens/s. Targets (issue #20): p99 of the
//!    time from a token leaving the model to its SSE bytes being written
//!    ≤ 5 ms with the offline model, ≤ 10 ms with the HTTP one; server RSS
//!    ≤ 150 MB. Run twice:
//!    - against a paced OpenAI-compatible model served by this process on
//!      127.0.0.1 (`model.rs`), the production path: the server's HTTP
//!      client parses the model's stream. Answer tokens carry the time they
//!      were made, so this client measures model socket → client read end
//!      to end (an upper bound: two loopback hops and this process's own
//!      scheduling are included);
//!    - against the built-in offline model paced the same way.
//!
//!    Both report the server's own figure, its
//!    `stategraph_sse_token_delay_seconds` histogram: the token's event
//!    timestamp (taken when the node receives the model's chunk) to the
//!    moment its SSE bytes are handed to the connection, for the tokens
//!    whose bytes are sent then (answer tokens, and thinking updates, which
//!    are throttled to a few per second by design; hidden nodes send none).
//!    Quantiles of a histogram are bucket bounds.
//! 2. `throughput`: the offline model with no delay, RESEARCH path, many
//!    clients in a loop for a fixed time. Target: sustained ≥ 1,000 chats/s.
//!
//! 3. `afterload` (`afterload.rs`): 200 connections for 60 s, dropped
//!    mid-stream, then the RSS while idle for 120 s: back within 1.5× of
//!    idle 30 s after the load and staying there; no run left running.
//!
//! 4. `report`: every figure of the performance issue in one run, for
//!    comparing commits — paced chats with both models (token delay
//!    p50/p99/p99.9, peak RSS, RSS 30 s after the load against the idle
//!    baseline), throughput on SQLite (chats/s, server CPU per chat) and
//!    the runtime's CPU per RESEARCH run (`benches/figures.rs` measures it
//!    the same way), each with the machine's load average, since on a
//!    shared 2-core machine every figure moves with it. With
//!    `STATEGRAPH_LOAD_AB=<a previous build's stategraph binary>` every
//!    server measurement runs that build first, then this one, and a
//!    summary is printed for each: an A/B in one run, on one machine.
//!
//! 5. `slow` (`slow.rs`): 10,000 chats held open for 30 s answers from a
//!    slow HTTP model (issue #37 item 2).
//!
//! 6. `floor` (`floor.rs`): the CPU that writing `slow`'s 200,000 tokens a
//!    second to thousands of loopback streams costs with no runtime, store
//!    or model at all — the least any design with one write per token pays.
//!
//! Arguments: `paced`, `throughput` (default both), `afterload`, `report`, `slow`, `floor`; `--chats N`,
//! `--seconds S`, `--clients C`, `--store memory|sqlite|postgres` (`paced` too),
//! `--count-trips` (PostgreSQL round trips per chat, counted by a proxy),
//! `--model http|offline`, `--ramp MS` (chats start spread evenly over this
//! time; default 1000, 0 starts them all at once); for `paced`, `--settle`
//! (also measure the RSS after the load) and `--server-config 'KEY = VALUE'`
//! (lines added to the server's `[server]` table, e.g. `linger = "5s"`).
//! CPU figures come from `/proc/<pid>/stat` (10 ms ticks); the SQLite
//! writer thread's, which every append and so every streamed token goes
//! through, from its `schedstat` (ns). The bench raises its open-files limit
//! (through `sh -c ulimit`) when it is too low for the connections it
//! opens. `STATEGRAPH_LOAD_SERVER_WRAPPER="perf record -g -o FILE"` runs
//! the server under a profiler.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod afterload;
mod client;
mod floor;
mod model;
mod slow;
#[path = "../support/mod.rs"]
mod support;

use std::io::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::pg::{self as pgsup, TempDb, WireCount, cpu_time, threads_cpu, threads_waited};

/// The server runtime's worker threads (tokio names them so).
const WORKERS: &str = "tokio-rt-worker";
use tokio::io::{AsyncBufReadExt, BufReader};

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
}

/// The soft and hard open-files limits.
fn open_files() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| {
            let mut v = l.split_whitespace().skip(3).map(|x| x.parse().ok());
            Some((v.next()??, v.next()??))
        })
        .unwrap_or((1024, 1024))
}

/// Re-executes this bench under `sh -c 'ulimit -n …'` when the soft limit
/// is below `needed` (the server child inherits the limit).
fn ensure_open_files(needed: u64) {
    let (soft, hard) = open_files();
    if soft >= needed || std::env::var_os("STATEGRAPH_LOAD_ULIMIT").is_some() {
        if soft < needed {
            println!(
                "warning: only {soft} open files allowed (hard limit {hard}); expect failed connections"
            );
        }
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {} && exec \"$0\" \"$@\"",
            needed.min(hard)
        ))
        .arg(exe)
        .args(std::env::args().skip(1))
        .env("STATEGRAPH_LOAD_ULIMIT", "1")
        .status()
        .expect("re-exec under sh");
    std::process::exit(status.code().unwrap_or(1));
}

struct Server {
    child: tokio::process::Child,
    base: String,
    pid: u32,
    _dir: tempfile::TempDir,
}

impl Server {
    fn cpu(&self) -> Duration {
        cpu_time(&self.pid.to_string()).unwrap_or_default()
    }

    /// CPU time of the SQLite writer thread (zero with another store).
    fn writer_cpu(&self) -> Duration {
        threads_cpu(&self.pid.to_string(), "sqlite-writer").unwrap_or_default()
    }

    /// Time the runtime's workers and the SQLite writer spent runnable
    /// but waiting for a core.
    fn waited(&self) -> [Duration; 2] {
        let pid = self.pid.to_string();
        [WORKERS, "sqlite-writer"].map(|n| threads_waited(&pid, n).unwrap_or_default())
    }

    fn rss_mb(&self, key: &str) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            })
            .unwrap_or(0.0)
            / 1024.0
    }

    /// Stops the server with SIGTERM (a profiler wrapping it then writes
    /// its data), killing it if it is not gone within 10 s.
    async fn stop(mut self) {
        let _ = tokio::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    async fn metrics(&self, client: &reqwest::Client) -> String {
        let resp = client.get(format!("{}/metrics", self.base)).send().await;
        match resp {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }
}

/// The server binary `start_server` runs: this build's, or for an A/B
/// in `report` the previous build named by `STATEGRAPH_LOAD_AB`.
static SERVER_BINARY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn server_binary() -> String {
    SERVER_BINARY
        .lock()
        .unwrap()
        .clone()
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_stategraph").to_owned())
}

/// Runs `f` with `binary` (or this build's when `None`) as the server.
async fn with_binary<T>(binary: Option<&str>, f: impl std::future::Future<Output = T>) -> T {
    *SERVER_BINARY.lock().unwrap() = binary.map(str::to_owned);
    let r = f.await;
    *SERVER_BINARY.lock().unwrap() = None;
    r
}

async fn start_server(config: &str) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stategraph.toml");
    let mut f = std::fs::File::create(&path).expect("config");
    writeln!(
        f,
        "{config}\n[paths]\ndata = \"{}\"",
        dir.path().join("data").display()
    )
    .expect("write");
    // A profiler to run the server under, e.g. `perf record -g -o FILE`
    // (the RSS and CPU figures are then the wrapper's).
    let wrapper = std::env::var("STATEGRAPH_LOAD_SERVER_WRAPPER").unwrap_or_default();
    let binary = server_binary();
    let mut command = wrapper.split_whitespace().chain([binary.as_str()]);
    let mut child = tokio::process::Command::new(command.next().unwrap_or_default())
        .args(command)
        .args([
            "serve",
            "--config",
            path.to_str().unwrap_or_default(),
            "--bind",
            "127.0.0.1:0",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("server starts");
    let pid = child.id().unwrap_or(0);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut base = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(url) = line.strip_prefix("stategraph is serving on ") {
            base = url.trim().to_owned();
            break;
        }
    }
    assert!(
        !base.is_empty(),
        "the server did not start (see its log above)"
    );
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Server {
        child,
        base,
        pid,
        _dir: dir,
    }
}

/// A histogram's cumulative buckets `(le, count)` from the metrics text.
fn buckets(metrics: &str, name: &str) -> Vec<(String, u64)> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?.to_owned();
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The upper bound of the bucket holding quantile `q`.
fn bucket_quantile(b: &[(String, u64)], q: f64) -> String {
    let total = b.last().map_or(0, |x| x.1);
    let want = (total as f64 * q).ceil() as u64;
    b.iter()
        .find(|(_, n)| *n >= want)
        .map_or_else(|| "?".into(), |(le, _)| le.clone())
}

fn ms(seconds: &str) -> String {
    seconds.parse::<f64>().map_or_else(
        |_| seconds.to_owned(),
        |s| format!("{} ms", (s * 1e6).round() / 1e3),
    )
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` has them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// Samples the server's RSS every 100 ms; the peak in MB.
fn rss_sampler(pid: u32) -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let peak = Arc::new(AtomicU64::new(0));
    let p = Arc::clone(&peak);
    let task = tokio::spawn(async move {
        loop {
            let kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
                })
                .unwrap_or(0);
            p.fetch_max(kb, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (peak, task)
}

#[derive(Clone, Copy, PartialEq)]
enum Model {
    Http,
    Offline,
}

/// What a paced run measured (for `report`).
#[derive(Default)]
struct PacedFigures {
    completed: u64,
    /// Server token delay quantiles (bucket bounds, seconds as text).
    server: [String; 3],
    /// Client end-to-end delay quantiles in ms (HTTP model only).
    end_to_end: Option<[f64; 3]>,
    idle_mb: f64,
    peak_mb: f64,
    /// RSS `SETTLE` after the last chat ended.
    settled_mb: f64,
    cpu_ms_per_chat: f64,
    /// The SQLite writer thread's share of `cpu_ms_per_chat`.
    writer_ms_per_chat: f64,
    load: String,
}

/// Prints the SQLite writer thread's CPU (every append goes through it).
fn print_writer(writer: Duration, server: Duration, chats: u64) {
    if writer.is_zero() {
        return;
    }
    println!(
        "  SQLite writer thread   {:.2} ms per chat ({:.0}% of the server's CPU)",
        writer.as_secs_f64() * 1e3 / chats.max(1) as f64,
        writer.as_secs_f64() * 100.0 / server.as_secs_f64().max(1e-9)
    );
}

/// How long after a load the server's RSS must be back near its baseline.
const SETTLE: Duration = Duration::from_secs(30);

/// Waits up to [`SETTLE`] for the RSS to fall within 1.5× of `idle_mb`;
/// returns the RSS then.
async fn settle(server: &Server, idle_mb: f64) -> f64 {
    let until = Instant::now() + SETTLE;
    loop {
        let rss = server.rss_mb("VmRSS:");
        if rss <= 1.5 * idle_mb || Instant::now() >= until {
            return rss;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn paced(chats: u64, model: Model, ramp: Duration, settle_rss: bool) -> PacedFigures {
    let load = load_average();
    let pace = model::Pace {
        tokens: 50,
        every: Duration::from_millis(50),
    };
    let llm = match model {
        Model::Http => format!(
            "[llm]\nmodel = \"bench\"\n[llm.endpoints.default]\nbase_url = \"{}\"\napi_key = \"bench\"\n",
            model::start(pace).await
        ),
        Model::Offline => "[llm.offline]\ntoken_delay = \"50ms\"\nanswer_tokens = 50\n".to_owned(),
    };
    let store = arg::<String>("--store").unwrap_or_else(|| "sqlite".into());
    let (db, store_config, _) = store_config(&store).await;
    let server = start_server(&format!(
        "[server]\nmax_concurrent_runs = 100000\nkeep_alive = \"15s\"\n{}\n{llm}\n[store]\n{}\n",
        arg::<String>("--server-config").unwrap_or_default(),
        store_config.unwrap_or_default()
    ))
    .await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(chats as usize)
        .build()
        .expect("client");
    let idle_rss = server.rss_mb("VmRSS:");
    let (peak, sampler) = rss_sampler(server.pid);
    let (server_cpu0, own_cpu0) = (server.cpu(), cpu_time("self").unwrap_or_default());
    let writer_cpu0 = server.writer_cpu();
    let waited0 = server.waited();
    let started = Instant::now();
    let t0 = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..chats)
        .map(|i| {
            let (client, base) = (client.clone(), server.base.clone());
            let at = t0 + ramp * i as u32 / chats.max(1) as u32;
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                client::chat(&client, &base, i).await
            })
        })
        .collect();
    let (mut ok, mut delays, mut bytes): (u64, Vec<u64>, usize) = (0, Vec::new(), 0);
    for t in tasks {
        let c = t.await.unwrap_or_default();
        ok += u64::from(c.ok);
        bytes += c.bytes;
        delays.extend(c.delays_us);
    }
    let elapsed = started.elapsed();
    let (server_cpu, own_cpu) = (
        server.cpu() - server_cpu0,
        cpu_time("self").unwrap_or_default() - own_cpu0,
    );
    let writer_cpu = server.writer_cpu() - writer_cpu0;
    let waited = server.waited();
    sampler.abort();
    let metrics = server.metrics(&client).await;
    let hist = buckets(&metrics, "stategraph_sse_token_delay_seconds");
    let counted = hist.last().map_or(0, |b| b.1);
    let p99 = bucket_quantile(&hist, 0.99);
    let which = match model {
        Model::Http => "an OpenAI-compatible model over HTTP on 127.0.0.1",
        Model::Offline => "the built-in offline model",
    };
    println!(
        "\npaced: {chats} concurrent chats (started over {} ms), {which}, every call 50 tokens at 20 tokens/s, {} store (load average {load})",
        ramp.as_millis(),
        arg::<String>("--store").unwrap_or_else(|| "sqlite".into())
    );
    println!(
        "  chats completed        {ok}/{chats} in {:.1} s ({:.0} KB of SSE each)",
        elapsed.as_secs_f64(),
        bytes as f64 / chats.max(1) as f64 / 1024.0
    );
    let target = match model {
        Model::Http => 0.010,
        Model::Offline => 0.005,
    };
    let p999 = bucket_quantile(&hist, 0.999);
    println!(
        "  server token delay     p50 ≤ {}, p99 ≤ {}, p99.9 ≤ {} (bucket bounds; {counted} tokens)   target p99 ≤ {} ms {}",
        ms(&bucket_quantile(&hist, 0.5)),
        ms(&p99),
        ms(&p999),
        target * 1e3,
        verdict(p99.parse::<f64>().is_ok_and(|s| s <= target))
    );
    let mut figures = PacedFigures {
        completed: ok,
        server: [bucket_quantile(&hist, 0.5), p99.clone(), p999],
        load,
        ..PacedFigures::default()
    };
    let share: Vec<String> = hist
        .iter()
        .map(|(le, n)| {
            format!(
                "≤{}: {:.1}%",
                ms(le).replace(" ms", ""),
                *n as f64 * 100.0 / counted.max(1) as f64
            )
        })
        .collect();
    println!("    cumulative (ms)      {}", share.join("  "));
    if !delays.is_empty() {
        delays.sort_unstable();
        let q = |q: f64| {
            delays[((delays.len() as f64 * q).ceil() as usize).clamp(1, delays.len()) - 1] as f64
                / 1e3
        };
        figures.end_to_end = Some([q(0.5), q(0.99), q(0.999)]);
        println!(
            "  end to end (answer)    p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms ({} tokens; model socket → this client's read, upper bound)",
            q(0.5),
            q(0.99),
            q(0.999),
            q(1.0),
            delays.len()
        );
    }
    let (sampled, hwm) = (
        peak.load(Ordering::Relaxed) as f64 / 1024.0,
        server.rss_mb("VmHWM:"),
    );
    println!(
        "  server RSS peak        {sampled:.1} MB sampled, {hwm:.1} MB VmHWM (idle before: {idle_rss:.1} MB)   target ≤ 150 MB {}",
        verdict(hwm <= 150.0)
    );
    println!(
        "  CPU                    server {:.1} s ({:.2} ms per chat); this process (client{}) {:.1} s",
        server_cpu.as_secs_f64(),
        server_cpu.as_secs_f64() * 1e3 / chats.max(1) as f64,
        if model == Model::Http { " + model" } else { "" },
        own_cpu.as_secs_f64()
    );
    figures.writer_ms_per_chat = writer_cpu.as_secs_f64() * 1e3 / chats.max(1) as f64;
    print_writer(writer_cpu, server_cpu, chats);
    let per_s = |i: usize| (waited[i] - waited0[i]).as_secs_f64() * 1e3 / elapsed.as_secs_f64();
    println!(
        "  waiting for a core     runtime workers {:.0} ms/s, SQLite writer {:.0} ms/s (runnable, not running: the machine's cores are busy)",
        per_s(0),
        per_s(1)
    );
    figures.idle_mb = idle_rss;
    figures.peak_mb = hwm;
    figures.cpu_ms_per_chat = server_cpu.as_secs_f64() * 1e3 / chats.max(1) as f64;
    if settle_rss {
        figures.settled_mb = settle(&server, idle_rss).await;
        println!(
            "  server RSS after load  {:.1} MB within {} s ({:.2}× idle)   target ≤ 1.5× {}",
            figures.settled_mb,
            SETTLE.as_secs(),
            figures.settled_mb / idle_rss.max(1.0),
            verdict(figures.settled_mb <= 1.5 * idle_rss)
        );
        // Past the finished runs' `linger` (30 s by default, during which
        // they stay resumable) and some of the releases after it.
        tokio::time::sleep(Duration::from_secs(45).saturating_sub(SETTLE)).await;
        println!("  server RSS 45 s after  {:.1} MB", server.rss_mb("VmRSS:"));
    }
    server.stop().await;
    drop(db);
    figures
}

/// The `[store]` table for `store`: a throwaway database for `postgres`
/// (`None` when no server runs), reached through a proxy counting round
/// trips with `--count-trips` (it runs in this process: CPU figures of
/// such a run include its parsing on this machine).
async fn store_config(store: &str) -> (Option<TempDb>, Option<String>, Option<Arc<WireCount>>) {
    if store != "postgres" {
        return (None, Some(format!("backend = \"{store}\"")), None);
    }
    let Some(db) = TempDb::create("load").await else {
        return (None, None, None);
    };
    let (url, trips) = if std::env::args().any(|a| a == "--count-trips") {
        let count = Arc::new(WireCount::default());
        let port = pgsup::counting_proxy(Arc::clone(&count)).await;
        let url = format!("postgres://postgres@127.0.0.1:{port}/{}", db.name);
        (url, Some(count))
    } else {
        (db.url.clone(), None)
    };
    let config = format!("backend = \"postgres\"\ndatabase_url = \"{url}\"");
    (Some(db), Some(config), trips)
}

/// Round trips per chat since `before`, by statement (the most frequent).
fn print_trips(count: &WireCount, before: &std::collections::HashMap<String, u64>, chats: u64) {
    let mut by: Vec<(String, u64)> = count
        .snapshot()
        .into_iter()
        .map(|(sql, n)| (sql.clone(), n - before.get(&sql).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    by.sort_by_key(|b| std::cmp::Reverse(b.1));
    let total: u64 = by.iter().map(|(_, n)| n).sum();
    println!(
        "  round trips per chat   {:.2} (counted on the wire)",
        total as f64 / chats.max(1) as f64
    );
    for (sql, n) in by.iter().take(12) {
        let text: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let short: String = text.chars().take(90).collect();
        println!("    {:>6.2}  {short}", *n as f64 / chats.max(1) as f64);
    }
}

/// What a throughput run measured (for `report`).
#[derive(Default)]
struct ThroughputFigures {
    rate: f64,
    cpu_ms_per_chat: f64,
    /// The SQLite writer thread's share of `cpu_ms_per_chat`.
    writer_ms_per_chat: f64,
    load: String,
}

async fn throughput(seconds: u64, clients: u64, store: &str) -> ThroughputFigures {
    let load = load_average();
    let (db, store_config, trips) = store_config(store).await;
    let Some(store_config) = store_config else {
        println!("\nthroughput: PostgreSQL is not running on 127.0.0.1:5432: skipped");
        return ThroughputFigures::default();
    };
    let server = start_server(&format!(
        "[server]\nmax_concurrent_runs = 100000\n[store]\n{store_config}\n"
    ))
    .await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients as usize)
        .build()
        .expect("client");
    // Warm up: connections, statement caches, the allocator.
    for i in 0..clients {
        client::chat(&client, &server.base, u64::MAX - i).await;
    }
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let (server_cpu0, own_cpu0) = (server.cpu(), cpu_time("self").unwrap_or_default());
    let writer_cpu0 = server.writer_cpu();
    let trips0 = trips.as_ref().map(|t| t.snapshot());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (client, base) = (client.clone(), server.base.clone());
            let (done, failed, next) = (Arc::clone(&done), Arc::clone(&failed), Arc::clone(&next));
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if client::chat(&client, &base, i).await.ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (server_cpu, own_cpu) = (
        server.cpu() - server_cpu0,
        cpu_time("self").unwrap_or_default() - own_cpu0,
    );
    let writer_cpu = server.writer_cpu() - writer_cpu0;
    let n = done.load(Ordering::Relaxed);
    let rate = n as f64 / elapsed;
    println!(
        "\nthroughput: zero-latency offline model, RESEARCH path over HTTP+SSE, {clients} clients in a loop, {store} store (load average {load})"
    );
    println!(
        "  chats completed        {n} in {elapsed:.1} s ({} failed)",
        failed.load(Ordering::Relaxed)
    );
    println!(
        "  sustained              {rate:.0} chats/s   target ≥ 1000 {}",
        verdict(rate >= 1000.0)
    );
    let cpu_ms_per_chat = server_cpu.as_secs_f64() * 1e3 / n.max(1) as f64;
    println!(
        "  CPU per chat           server {cpu_ms_per_chat:.2} ms, client {:.2} ms (both on this 2-core machine)   target server ≤ 1 ms {}",
        own_cpu.as_secs_f64() * 1e3 / n.max(1) as f64,
        verdict(cpu_ms_per_chat <= 1.0)
    );
    print_writer(writer_cpu, server_cpu, n);
    if let (Some(t), Some(before)) = (&trips, &trips0) {
        print_trips(t, before, n);
    }
    println!(
        "  server RSS peak        {:.1} MB (VmHWM)",
        server.rss_mb("VmHWM:")
    );
    server.stop().await;
    drop(db);
    ThroughputFigures {
        rate,
        cpu_ms_per_chat,
        writer_ms_per_chat: writer_cpu.as_secs_f64() * 1e3 / n.max(1) as f64,
        load,
    }
}

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// The runtime's CPU per chat RESEARCH run with `tokens` per model call, in
/// µs: as `benches/figures.rs` measures it (one thread, scripted model,
/// every event consumed), best of three rounds of 1,000 runs.
fn runtime_cpu_us(tokens: usize) -> f64 {
    std::thread::spawn(move || {
        let rt = support::current_thread();
        let (graph, input) = (support::chat_graph(), support::research_input());
        let svc = support::services(support::research_model(tokens));
        let run = || {
            rt.block_on(support::run_consumed(
                graph.clone(),
                svc.clone(),
                input.clone(),
            ));
        };
        for _ in 0..200 {
            run();
        }
        (0..3)
            .map(|_| {
                let cpu0 = thread_cpu_ns();
                for _ in 0..1000 {
                    run();
                }
                (thread_cpu_ns() - cpu0) as f64 / 1000.0 / 1e3
            })
            .fold(f64::MAX, f64::min)
    })
    .join()
    .expect("runtime measurement")
}

/// `report`: every figure, then one summary table.
async fn report(chats: u64, clients: u64, seconds: u64, ramp: Duration) {
    println!("report: load average at start {}", load_average());
    // An A/B in one run: each measurement runs the previous build's server
    // first, then this build's, so both see the same machine.
    let previous = std::env::var("STATEGRAPH_LOAD_AB").ok();
    let mut builds: Vec<(String, Option<String>)> = Vec::new();
    if let Some(p) = &previous {
        builds.push((format!("previous build ({p})"), Some(p.clone())));
    }
    builds.push(("this build".to_owned(), None));
    let (mut offline, mut http, mut thr) = (Vec::new(), Vec::new(), Vec::new());
    for (_, bin) in &builds {
        offline.push(with_binary(bin.as_deref(), paced(chats, Model::Offline, ramp, true)).await);
    }
    for (_, bin) in &builds {
        http.push(with_binary(bin.as_deref(), paced(chats, Model::Http, ramp, true)).await);
    }
    for (_, bin) in &builds {
        thr.push(with_binary(bin.as_deref(), throughput(seconds, clients, "sqlite")).await);
    }
    let rt_load = load_average();
    let runtime = tokio::task::spawn_blocking(|| (runtime_cpu_us(50), runtime_cpu_us(0)))
        .await
        .expect("runtime measurement");
    for (i, (label, _)) in builds.iter().enumerate() {
        // The runtime is this build's library, measured in this process
        // (`benches/figures.rs` has its own A/B, `FIGURES_AB`).
        let rt = (i + 1 == builds.len()).then_some(runtime);
        summary(label, chats, (&offline[i], &http[i], &thr[i]), rt, &rt_load);
    }
    println!("report: load average at end {}", load_average());
}

/// The summary table of one build's figures.
fn summary(
    label: &str,
    chats: u64,
    (offline, http, thr): (&PacedFigures, &PacedFigures, &ThroughputFigures),
    runtime: Option<(f64, f64)>,
    rt_load: &str,
) {
    println!(
        "\nsummary, {label} (load average when each began; targets from issue #20, throughput and runtime from #37)"
    );
    let q = |f: &PacedFigures| {
        format!(
            "p50 ≤ {} / p99 ≤ {} / p99.9 ≤ {}",
            ms(&f.server[0]),
            ms(&f.server[1]),
            ms(&f.server[2])
        )
    };
    let p99_ok = |f: &PacedFigures, t: f64| f.server[1].parse::<f64>().is_ok_and(|s| s <= t);
    let rows = [
        (
            format!("1. peak RSS, {chats} paced chats (offline / HTTP)"),
            format!("{:.0} / {:.0} MB", offline.peak_mb, http.peak_mb),
            "≤ 150 MB",
            offline.peak_mb <= 150.0 && http.peak_mb <= 150.0,
            &offline.load,
        ),
        (
            format!(
                "1. RSS {} s after load (idle {:.0} MB)",
                SETTLE.as_secs(),
                offline.idle_mb
            ),
            format!("{:.0} / {:.0} MB", offline.settled_mb, http.settled_mb),
            "≤ 1.5× idle",
            offline.settled_mb <= 1.5 * offline.idle_mb && http.settled_mb <= 1.5 * http.idle_mb,
            &http.load,
        ),
        (
            "2. throughput, SQLite, HTTP+SSE".to_owned(),
            format!("{:.0} chats/s", thr.rate),
            "≥ 2500",
            thr.rate >= 2500.0,
            &thr.load,
        ),
        (
            "2. server CPU per chat (throughput)".to_owned(),
            format!("{:.2} ms", thr.cpu_ms_per_chat),
            "≤ 0.6 ms",
            thr.cpu_ms_per_chat <= 0.6,
            &thr.load,
        ),
        (
            "3. token → SSE, offline model (server)".to_owned(),
            q(offline),
            "p99 ≤ 5 ms",
            p99_ok(offline, 0.005),
            &offline.load,
        ),
        (
            "3. token → SSE, HTTP model (server)".to_owned(),
            q(http),
            "p99 ≤ 10 ms",
            p99_ok(http, 0.010),
            &http.load,
        ),
    ];
    for (name, value, target, ok, load) in rows {
        println!(
            "  {name:<46} {value:<34} {target:<12} {:<7} load {load}",
            verdict(ok)
        );
    }
    if let Some((with_tokens, without)) = runtime {
        for (name, us, target) in [
            (
                "4. runtime CPU, RESEARCH, 50 tokens/call",
                with_tokens,
                30.0,
            ),
            ("4. runtime CPU, RESEARCH, no tokens", without, 12.0),
        ] {
            println!(
                "  {name:<46} {:<34} {:<12} {:<7} load {rt_load}",
                format!("{us:.0} µs"),
                format!("≤ {target:.0} µs"),
                verdict(us <= target)
            );
        }
    }
    if let Some([p50, p99, p999]) = http.end_to_end {
        println!(
            "  3. HTTP model end to end (client, upper bound) p50 {p50:.2} / p99 {p99:.2} / p99.9 {p999:.2} ms"
        );
    }
    println!(
        "  chats completed: offline {}/{chats}, HTTP {}/{chats}; server CPU per paced chat {:.2} / {:.2} ms",
        offline.completed, http.completed, offline.cpu_ms_per_chat, http.cpu_ms_per_chat
    );
    println!(
        "  SQLite writer thread per chat: paced {:.2} / {:.2} ms, throughput {:.2} ms",
        offline.writer_ms_per_chat, http.writer_ms_per_chat, thr.writer_ms_per_chat
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let default_chats = if args.iter().any(|a| a == "slow") {
        10_000
    } else {
        1000
    };
    let chats: u64 = arg("--chats").unwrap_or(default_chats);
    let clients: u64 = arg("--clients").unwrap_or(32);
    // Each chat: this client's socket and the server's; with the HTTP
    // model, its socket to the model and the model's.
    ensure_open_files(4 * chats.max(clients) + 1024);
    let which: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| {
            matches!(
                *a,
                "paced" | "throughput" | "report" | "afterload" | "slow" | "floor"
            )
        })
        .collect();
    let all = which.is_empty();
    let ramp = Duration::from_millis(arg("--ramp").unwrap_or(1000));
    let seconds = arg("--seconds").unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if which.contains(&"report") {
            report(chats, clients, seconds, ramp).await;
            return;
        }
        if which.contains(&"floor") {
            floor::floor().await;
            return;
        }
        if which.contains(&"slow") {
            slow::slow(arg("--chats").unwrap_or(10_000)).await;
            return;
        }
        if which.contains(&"afterload") {
            afterload::afterload(
                arg("--clients").unwrap_or(200),
                arg("--seconds").unwrap_or(60),
            )
            .await;
            return;
        }
        if all || which.contains(&"paced") {
            let models = match arg::<String>("--model").as_deref() {
                Some("offline") => vec![Model::Offline],
                Some(_) => vec![Model::Http],
                None => vec![Model::Http, Model::Offline],
            };
            let settle = args.iter().any(|a| a == "--settle");
            for m in models {
                paced(chats, m, ramp, settle).await;
            }
        }
        if all || which.contains(&"throughput") {
            let stores = arg::<String>("--store").map_or_else(
                || vec!["memory".to_owned(), "sqlite".to_owned()],
                |s| vec![s],
            );
            for store in stores {
                throughput(seconds, clients, &store).await;
            }
        }
    });
}
