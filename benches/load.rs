//! Load generator for the chat server, in its own process on loopback
//! (`cargo bench --bench load`). It starts `stategraph serve` (offline
//! model, SQLite store in a temp dir) and drives it over HTTP + SSE:
//!
//! 1. `paced`: 1,000 concurrent chats, every model call streaming 50 tokens
//!    at 20 tokens/s. Reports the server's token delay (model token → SSE
//!    bytes, from its `stategraph_sse_token_delay_seconds` histogram; target
//!    p99 ≤ 1 ms) and its peak RSS (target ≤ 100 MB).
//! 2. `throughput`: zero-latency model, research path, many clients in a
//!    loop for a fixed time. Reports sustained chats/s (target ≥ 1,000).
//!
//! Arguments: `paced`, `throughput` (default both); `--chats N`,
//! `--seconds S`, `--clients C`, `--store memory|sqlite`.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::io::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

struct Server {
    child: tokio::process::Child,
    base: String,
    pid: u32,
    _dir: tempfile::TempDir,
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
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
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stategraph"))
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
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Server {
        child,
        base,
        pid,
        _dir: dir,
    }
}

fn rss_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn body(i: u64) -> String {
    json!({
        "id": format!("load-{i}"),
        "messages": [{"id": format!("u{i}"), "role": "user", "parts": [{"type": "text", "text": "please research the latest EV sales numbers"}]}],
        "trigger": "submit-message"
    })
    .to_string()
}

/// One chat: POST and read the stream to its end. Returns whether it finished.
async fn chat(client: &reqwest::Client, base: &str, i: u64) -> bool {
    let resp = client
        .post(format!("{base}/api/chat"))
        .header("content-type", "application/json")
        .body(body(i))
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => r.text().await.is_ok_and(|t| {
            t.ends_with("data: [DONE]\n\n") && t.contains("\"finishReason\":\"stop\"")
        }),
        _ => false,
    }
}

/// (upper bound of the bucket holding quantile q, count) from the metrics text.
fn quantile(metrics: &str, name: &str, q: f64) -> (String, u64) {
    let buckets: Vec<(String, u64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?.to_owned();
            let n = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, n))
        })
        .collect();
    let total = buckets.last().map_or(0, |b| b.1);
    let want = (total as f64 * q).ceil() as u64;
    let le = buckets
        .iter()
        .find(|(_, n)| *n >= want)
        .map_or_else(|| "?".into(), |(le, _)| le.clone());
    (le, total)
}

async fn paced(chats: u64) {
    let server = start_server(
        "[server]\nmax_concurrent_runs = 100000\nkeep_alive = \"15s\"\n[llm.offline]\ntoken_delay = \"50ms\"\nanswer_tokens = 50\n",
    )
    .await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(chats as usize)
        .build()
        .expect("client");
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (peak, pid) = (Arc::clone(&peak), server.pid);
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kb(pid, "VmRSS:"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let started = Instant::now();
    let tasks: Vec<_> = (0..chats)
        .map(|i| {
            let (client, base) = (client.clone(), server.base.clone());
            tokio::spawn(async move { chat(&client, &base, i).await })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += u64::from(t.await.unwrap_or(false));
    }
    let elapsed = started.elapsed();
    sampler.abort();
    let metrics = client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    let (p50, n) = quantile(&metrics, "stategraph_sse_token_delay_seconds", 0.50);
    let (p99, _) = quantile(&metrics, "stategraph_sse_token_delay_seconds", 0.99);
    let hwm = rss_kb(server.pid, "VmHWM:");
    println!("paced: {chats} concurrent chats, 50 tokens/call at 20 tokens/s, SQLite store");
    println!(
        "  completed          {ok}/{chats} in {:.1} s",
        elapsed.as_secs_f64()
    );
    println!("  tokens streamed    {n}");
    println!("  token delay p50    ≤ {} s (bucket bound)", p50);
    println!(
        "  token delay p99    ≤ {} s (bucket bound)   target ≤ 0.001 s",
        p99
    );
    println!(
        "  server RSS peak    {:.1} MB (sampled), {:.1} MB (VmHWM)   target ≤ 100 MB",
        peak.load(Ordering::Relaxed) as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    drop(server.child);
}

async fn throughput(seconds: u64, clients: u64, store: &str) {
    let server = start_server(&format!(
        "[server]\nmax_concurrent_runs = 100000\n[store]\nbackend = \"{store}\"\n"
    ))
    .await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients as usize)
        .build()
        .expect("client");
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (client, base) = (client.clone(), server.base.clone());
            let (done, failed, next) = (Arc::clone(&done), Arc::clone(&failed), Arc::clone(&next));
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if chat(&client, &base, i).await {
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
    let n = done.load(Ordering::Relaxed);
    println!(
        "throughput: zero-latency offline model, RESEARCH path over HTTP+SSE, {clients} clients, {store} store"
    );
    println!(
        "  chats completed    {n} in {elapsed:.1} s ({} failed)",
        failed.load(Ordering::Relaxed)
    );
    println!(
        "  sustained          {:.0} chats/s   target ≥ 1000",
        n as f64 / elapsed
    );
    println!(
        "  server RSS peak    {:.1} MB (VmHWM)",
        rss_kb(server.pid, "VmHWM:") as f64 / 1024.0
    );
    drop(server.child);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let which: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| matches!(*a, "paced" | "throughput"))
        .collect();
    let all = which.is_empty();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if all || which.contains(&"paced") {
            paced(arg("--chats").and_then(|v| v.parse().ok()).unwrap_or(1000)).await;
        }
        if all || which.contains(&"throughput") {
            let seconds = arg("--seconds").and_then(|v| v.parse().ok()).unwrap_or(10);
            let clients = arg("--clients").and_then(|v| v.parse().ok()).unwrap_or(32);
            let stores = arg("--store").map_or_else(
                || vec!["memory".to_owned(), "sqlite".to_owned()],
                |s| vec![s],
            );
            for store in stores {
                throughput(seconds, clients, &store).await;
            }
        }
    });
}
