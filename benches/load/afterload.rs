//! `afterload`: memory after a load, and while idle after it (issue 38).
//!
//! 200 connections (`--clients`) chat in a loop for 60 s (`--seconds`),
//! each chat's answer paced (the offline model, 50 tokens at 20 ms), so
//! the load holds 200 open streams; at the end the load generator drops
//! its requests in flight, closing their sockets mid-stream, as a client
//! that goes away does. Then, with no traffic at all, the server's RSS is
//! sampled every second for 120 s. Targets: within 1.5× of the idle RSS
//! (taken before the load) 30 s after the load, and staying there to
//! 120 s; and no run left `running` (a client that vanished mid-request
//! used to wedge its chat).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Server, client, load_average, start_server, verdict};

/// How long the RSS is watched after the load.
const WATCH: Duration = Duration::from_secs(120);
/// When the RSS must be back within 1.5× idle.
const BACK_BY: Duration = Duration::from_secs(30);

/// Runs the load and watches the RSS after it (see the module docs).
pub async fn afterload(clients: u64, seconds: u64) {
    let load = load_average();
    let server = start_server(
        "[server]\nmax_concurrent_runs = 100000\n[llm.offline]\ntoken_delay = \"20ms\"\nanswer_tokens = 50\n[store]\nbackend = \"sqlite\"\n",
    )
    .await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients as usize)
        .build()
        .expect("client");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_mb = server.rss_mb("VmRSS:");
    let done = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (client, base) = (client.clone(), server.base.clone());
            let (done, next) = (Arc::clone(&done), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if client::chat(&client, &base, i).await.ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    // The load generator goes away with its requests in flight.
    for w in &workers {
        w.abort();
    }
    for w in workers {
        let _ = w.await;
    }
    drop(client);
    let ended = Instant::now();
    let peak_mb = server.rss_mb("VmHWM:");
    let (mut at_30s_mb, mut max_after_mb) = (0.0, 0.0f64);
    let mut samples = Vec::new();
    while ended.elapsed() < WATCH {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = server.rss_mb("VmRSS:");
        let t = ended.elapsed();
        if t >= BACK_BY {
            if at_30s_mb == 0.0 {
                at_30s_mb = rss;
            }
            max_after_mb = max_after_mb.max(rss);
        }
        if t.as_secs().is_multiple_of(10) {
            // Heap or mapped files (SQLite's -shm, the binary's pages):
            // which one grows says where to look.
            let (anon, file) = (server.rss_mb("RssAnon:"), server.rss_mb("RssFile:"));
            samples.push(format!(
                "{}s {rss:.0} (anon {anon:.0}, file {file:.0})",
                t.as_secs()
            ));
        }
    }
    let at_end_mb = server.rss_mb("VmRSS:");
    let left_running = still_running(&server).await;
    let n = done.load(Ordering::Relaxed);
    println!(
        "\nafterload: {clients} connections chatting for {seconds} s (offline model, 50 tokens at 20 ms), SQLite, then dropped mid-stream; {WATCH:?} idle after (load average {load})"
    );
    println!("  chats completed        {n}");
    println!("  server RSS             idle {idle_mb:.1} MB, peak {peak_mb:.1} MB (VmHWM)");
    println!("  RSS after the load     {}", samples.join(", "));
    println!(
        "  RSS 30 s after         {at_30s_mb:.1} MB ({:.2}× idle)   target ≤ 1.5× {}",
        at_30s_mb / idle_mb.max(1.0),
        verdict(at_30s_mb <= 1.5 * idle_mb)
    );
    println!(
        "  highest 30–{} s after  {max_after_mb:.1} MB ({:.2}× idle), {at_end_mb:.1} MB at the end   target ≤ 1.5× {}",
        WATCH.as_secs(),
        max_after_mb / idle_mb.max(1.0),
        verdict(max_after_mb <= 1.5 * idle_mb)
    );
    println!(
        "  runs left running      {left_running}   target 0 {}",
        verdict(left_running == 0)
    );
    server.stop().await;
}

/// Runs the store says are `running` (the API's first page).
async fn still_running(server: &Server) -> usize {
    let url = format!("{}/api/runs?status=running&limit=500", server.base);
    match reqwest::get(url).await {
        Ok(r) => r
            .json::<serde_json::Value>()
            .await
            .ok()
            .and_then(|v| v["runs"].as_array().map(Vec::len))
            .unwrap_or(usize::MAX),
        Err(_) => usize::MAX,
    }
}
