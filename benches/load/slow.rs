//! `slow` (issue #37 item 2): many chats held open while a slow model
//! writes. An OpenAI-compatible model on 127.0.0.1 answers at 20 tokens/s
//! for 30 s (600 tokens; routing and tool calls 10 chunks at 20/s), and
//! `--chats` (default 10,000) chats start over `--ramp` ms (default 10,000)
//! on keep-alive connections, SQLite store, visible durability. Targets:
//! 0 errors; server p99 token → SSE ≤ 20 ms; server RSS ≤ 400 MB at the
//! peak and ≤ 1.5× idle within 60 s after; server CPU ≤ 40 % of one core
//! while every stream is open (a 15 s window starting 3 s after the last
//! chat started).
//!
//! The model runs on its own runtime (threads `bench-model`), so this
//! process's CPU splits into the model's and the client's; all three share
//! the machine's cores with the server. The server calls the model over h2c
//! (`http2 = true`): a connection carries up to 1,000 calls' streams, so a
//! chat holds one socket in the server (its client's) and one here, plus
//! one per 1,000 calls for the model. A process may open at most its hard
//! `RLIMIT_NOFILE` (20,000 in the development container, which may not
//! raise it); with HTTP/1.1 to the model each chat held two sockets in each
//! process and about 9,900 chats was the most either could hold. The model
//! stays in this process: with a few connections it costs a few descriptors, and
//! its CPU is still told apart by its threads' names.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::support::pg::{cpu_time, threads_cpu};
use super::{
    Server, arg, bucket_quantile, buckets, load_average, ms, open_files, rss_sampler, start_server,
    verdict,
};

/// How long after the load the RSS must be back within 1.5× idle.
const SETTLE: Duration = Duration::from_secs(60);

/// Starts the paced model on its own runtime (kept for the process's life),
/// from a thread of its own: a runtime cannot be built inside another.
fn start_model() -> String {
    std::thread::spawn(model_runtime)
        .join()
        .expect("the model starts")
}

fn model_runtime() -> String {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-model")
        .enable_all()
        .build()
        .expect("model runtime");
    let short = super::model::Pace {
        tokens: 10,
        every: Duration::from_millis(50),
    };
    let answer = super::model::Pace {
        tokens: 600,
        every: Duration::from_millis(50),
    };
    let url = rt.block_on(super::model::start_paced(short, answer));
    std::mem::forget(rt);
    url
}

/// CPU of this process: (client, model).
fn own_cpu() -> (Duration, Duration) {
    let model = threads_cpu("self", "bench-model").unwrap_or_default();
    let all = cpu_time("self").unwrap_or_default();
    (all.saturating_sub(model), model)
}

/// Server CPU over a window while every stream is open, as % of one core.
async fn steady_cpu(server_pid: u32, start: tokio::time::Instant) -> (f64, (f64, f64)) {
    let window = Duration::from_secs(15);
    tokio::time::sleep_until(start).await;
    let (s0, o0) = (
        cpu_time(&server_pid.to_string()).unwrap_or_default(),
        own_cpu(),
    );
    tokio::time::sleep(window).await;
    let (s1, o1) = (
        cpu_time(&server_pid.to_string()).unwrap_or_default(),
        own_cpu(),
    );
    let pct = |d: Duration| d.as_secs_f64() * 100.0 / window.as_secs_f64();
    (pct(s1 - s0), (pct(o1.0 - o0.0), pct(o1.1 - o0.1)))
}

pub async fn slow(chats: u64) {
    let ramp = Duration::from_millis(arg("--ramp").unwrap_or(10_000));
    let load = load_average();
    let (soft, hard) = open_files();
    let llm = format!(
        "[llm]\nmodel = \"bench\"\n[llm.endpoints.default]\nbase_url = \"{}\"\napi_key = \"bench\"\nhttp2 = true\n",
        start_model()
    );
    let server = start_server(&format!(
        "[server]\nmax_concurrent_runs = 100000\nkeep_alive = \"15s\"\n{}\n{llm}\n[store]\nbackend = \"sqlite\"\n",
        arg::<String>("--server-config").unwrap_or_default(),
    ))
    .await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(chats as usize)
        .build()
        .expect("client");
    let idle = server.rss_mb("VmRSS:");
    let (peak, sampler) = rss_sampler(server.pid);
    let failed = Arc::new(AtomicU64::new(0));
    let t0 = tokio::time::Instant::now();
    let steady = tokio::spawn(steady_cpu(server.pid, t0 + ramp + Duration::from_secs(3)));
    let open_rss = tokio::spawn(rss_at(server.pid, t0 + ramp + Duration::from_secs(3)));
    let tasks: Vec<_> = (0..chats)
        .map(|i| {
            let (client, base) = (client.clone(), server.base.clone());
            let failed = Arc::clone(&failed);
            let at = t0 + ramp * i as u32 / chats.max(1) as u32;
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let c = super::client::chat(&client, &base, i).await;
                failed.fetch_add(u64::from(!c.ok), Ordering::Relaxed);
                c.delays_us
            })
        })
        .collect();
    let mut delays = Vec::new();
    for t in tasks {
        delays.extend(t.await.unwrap_or_default());
    }
    let elapsed = t0.elapsed();
    sampler.abort();
    let (server_pct, (client_pct, model_pct)) = steady.await.unwrap_or_default();
    let rss_open = open_rss.await.unwrap_or_default();
    let metrics = server.metrics(&client).await;
    drop(client);
    let f = Figures {
        chats,
        failed: failed.load(Ordering::Relaxed),
        elapsed,
        hist: buckets(&metrics, "stategraph_sse_token_delay_seconds"),
        delays,
        idle,
        rss_open,
        peak: (peak.load(Ordering::Relaxed) as f64 / 1024.0).max(server.rss_mb("VmHWM:")),
        cpu: [server_pct, client_pct, model_pct],
    };
    println!(
        "\nslow: {chats} chats started over {} ms, each answer 600 tokens at 20 tokens/s from a model over HTTP on 127.0.0.1, SQLite, visible durability (load average {load}; open files {soft}/{hard})",
        ramp.as_millis()
    );
    f.print();
    let settled = settle(&server, idle).await;
    println!(
        "  RSS after the load     {settled:.1} MB within {} s ({:.2}× idle)   target ≤ 1.5× idle {}",
        SETTLE.as_secs(),
        settled / idle.max(1.0),
        verdict(settled <= 1.5 * idle)
    );
    println!("  load average at end    {}", load_average());
    server.stop().await;
}

/// The server's RSS in MB at `when`.
async fn rss_at(pid: u32, when: tokio::time::Instant) -> f64 {
    tokio::time::sleep_until(when).await;
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Waits up to [`SETTLE`] for the RSS to fall within 1.5× of `idle`.
async fn settle(server: &Server, idle: f64) -> f64 {
    let until = tokio::time::Instant::now() + SETTLE;
    loop {
        let rss = server.rss_mb("VmRSS:");
        if rss <= 1.5 * idle || tokio::time::Instant::now() >= until {
            return rss;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

struct Figures {
    chats: u64,
    failed: u64,
    elapsed: Duration,
    hist: Vec<(String, u64)>,
    delays: Vec<u64>,
    idle: f64,
    rss_open: f64,
    peak: f64,
    /// Steady-state CPU, % of one core: server, client, model.
    cpu: [f64; 3],
}

impl Figures {
    fn print(mut self) {
        println!(
            "  chats                  {} ok, {} failed in {:.1} s   target 0 errors {}",
            self.chats - self.failed,
            self.failed,
            self.elapsed.as_secs_f64(),
            verdict(self.failed == 0)
        );
        let p99 = bucket_quantile(&self.hist, 0.99);
        println!(
            "  server token delay     p50 ≤ {}, p99 ≤ {}, p99.9 ≤ {} ({} tokens)   target p99 ≤ 20 ms {}",
            ms(&bucket_quantile(&self.hist, 0.5)),
            ms(&p99),
            ms(&bucket_quantile(&self.hist, 0.999)),
            self.hist.last().map_or(0, |b| b.1),
            verdict(p99.parse::<f64>().is_ok_and(|s| s <= 0.020))
        );
        if !self.delays.is_empty() {
            self.delays.sort_unstable();
            let q = |q: f64| {
                let n = self.delays.len();
                self.delays[((n as f64 * q).ceil() as usize).clamp(1, n) - 1] as f64 / 1e3
            };
            println!(
                "  end to end (client)    p50 {:.2} ms, p99 {:.2} ms (model socket → this client's read; includes this process's own queueing)",
                q(0.5),
                q(0.99)
            );
        }
        println!(
            "  server RSS             idle {:.1} MB, all streams open {:.1} MB, peak {:.1} MB   target peak ≤ 400 MB {}",
            self.idle,
            self.rss_open,
            self.peak,
            verdict(self.peak <= 400.0)
        );
        println!(
            "  per open stream        {:.1} KB ((RSS with all open − idle) / chats)",
            (self.rss_open - self.idle) * 1024.0 / self.chats.max(1) as f64
        );
        let [server, client, model] = self.cpu;
        println!(
            "  steady-state CPU       server {server:.1}% of a core, client {client:.1}%, model {model:.1}%   target server ≤ 40% {}",
            verdict(server <= 40.0)
        );
    }
}
