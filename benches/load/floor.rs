//! `floor` (issue #37 item 2): what sending one token to each of thousands
//! of open streams costs before any runtime, store or model is involved —
//! the least a server could spend per streamed token with one write per
//! token, measured on this machine.
//!
//! A server on its own one-thread runtime (threads `floor-server`) holds
//! `--chats` (default 5,000) loopback connections and writes each a token's
//! SSE frame (a 101-byte `text-delta` event in an HTTP/1.1 chunk, as hyper
//! writes it) on a timer, so that all streams together carry 200,000 frames
//! a second — the `slow` mode's 10,000 streams at 20 tokens/s. (5,000
//! streams at 40/s rather than 10,000 at 20/s: both ends of every
//! connection live in this process, whose open files are capped at 20,000.)
//! Two servers, one after the other:
//! - `raw`: a task per connection, woken by its timer, one `write` per
//!   frame — the transport's floor: a task wakeup and a syscall;
//! - `hyper`: an HTTP/1.1 server (hyper, as `serve` uses) whose response
//!   body is a stream fed one frame per tick through a channel by another
//!   task — adding the hand-off between the task that makes a token and
//!   the connection's task, and hyper's chunked encoding.
//!
//! It prints the server threads' CPU as % of one core and per frame, the
//! frames written, and what share of the `slow` target (≤ 40 % of a core
//! for all 200,000 tokens a second, i.e. ≤ 2 µs per token) the floor
//! already takes.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::support::pg::threads_cpu;
use super::{arg, load_average, verdict};

/// Frames a second over all streams: the `slow` mode's load.
const FRAMES_PER_SECOND: u64 = 200_000;
/// A token's SSE event as the bridge writes it, inside a chunk.
const EVENT: &str =
    "data: {\"type\":\"text-delta\",\"id\":\"0b5c1e9a-text-1\",\"delta\":\" token\"}\n\n";

#[derive(Clone, Copy, Debug)]
enum Kind {
    Raw,
    Hyper,
}

pub async fn floor() {
    let chats: u64 = arg("--chats").unwrap_or(5_000);
    let seconds: u64 = arg("--seconds").unwrap_or(10);
    let every = Duration::from_nanos(1_000_000_000 * chats / FRAMES_PER_SECOND);
    println!(
        "\nfloor: {chats} loopback streams, one frame each every {} µs ({FRAMES_PER_SECOND} frames/s in all), {seconds} s window (load average {})",
        every.as_micros(),
        load_average()
    );
    for kind in [Kind::Raw, Kind::Hyper] {
        let (pct, frames) = run(kind, chats, every, Duration::from_secs(seconds)).await;
        let per = pct / 100.0 * seconds as f64 * 1e6 / frames.max(1) as f64;
        println!(
            "  {:<6} server CPU {pct:.1}% of a core, {:.2} µs per frame ({frames} frames, {:.0}/s); \
             {:.0}% of the slow mode's 2 µs-per-token budget   floor under target {}",
            format!("{kind:?}").to_lowercase(),
            per,
            frames as f64 / seconds as f64,
            per / 2.0 * 100.0,
            verdict(pct <= 40.0)
        );
    }
    println!("  load average at end    {}", load_average());
}

/// Runs one server with `chats` streams; returns its threads' CPU over the
/// window (% of one core) and the frames it wrote in it.
async fn run(kind: Kind, chats: u64, every: Duration, window: Duration) -> (f64, u64) {
    let frames = Arc::new(AtomicU64::new(0));
    let (addr, rt) = start(kind, every, Arc::clone(&frames));
    let readers: Vec<_> = (0..chats)
        .map(|i| {
            tokio::spawn(async move {
                // Spread the connects over a second.
                tokio::time::sleep(Duration::from_micros(1_000_000 * i / chats.max(1))).await;
                read_all(addr).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let name = "floor-server";
    let (c0, f0) = (threads_cpu("self", name), frames.load(Ordering::Relaxed));
    tokio::time::sleep(window).await;
    let (c1, f1) = (threads_cpu("self", name), frames.load(Ordering::Relaxed));
    rt.shutdown_background();
    for r in readers {
        r.abort();
    }
    let cpu = c1
        .unwrap_or_default()
        .saturating_sub(c0.unwrap_or_default());
    (cpu.as_secs_f64() * 100.0 / window.as_secs_f64(), f1 - f0)
}

/// A client: asks once and reads until the server goes.
async fn read_all(addr: std::net::SocketAddr) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return;
    };
    let _ = s.set_nodelay(true);
    if s.write_all(b"GET /stream HTTP/1.1\r\nhost: floor\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let mut buf = vec![0u8; 4096];
    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// Starts the server on a runtime of its own (one worker, as little as a
/// server can have); returns its address and the runtime. The runtime is
/// built on a thread of its own: one cannot be built inside another.
fn start(
    kind: Kind,
    every: Duration,
    frames: Arc<AtomicU64>,
) -> (std::net::SocketAddr, tokio::runtime::Runtime) {
    std::thread::spawn(move || serve(kind, every, frames))
        .join()
        .expect("the floor server starts")
}

fn serve(
    kind: Kind,
    every: Duration,
    frames: Arc<AtomicU64>,
) -> (std::net::SocketAddr, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("floor-server")
        .enable_all()
        .build()
        .expect("floor runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("address");
    rt.spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            let frames = Arc::clone(&frames);
            match kind {
                Kind::Raw => tokio::spawn(raw(s, every, frames)),
                Kind::Hyper => tokio::spawn(served(s, every, frames)),
            };
        }
    });
    (addr, rt)
}

fn ticker(every: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(every);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

/// One write per frame, from the connection's own task.
async fn raw(mut s: TcpStream, every: Duration, frames: Arc<AtomicU64>) {
    let mut req = [0u8; 1024];
    if s.read(&mut req).await.is_err() {
        return;
    }
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    if s.write_all(head).await.is_err() {
        return;
    }
    let chunk = format!("{:x}\r\n{EVENT}\r\n", EVENT.len());
    let mut t = ticker(every);
    loop {
        t.tick().await;
        if s.write_all(chunk.as_bytes()).await.is_err() {
            return;
        }
        frames.fetch_add(1, Ordering::Relaxed);
    }
}

/// hyper's HTTP/1.1 server; the body's frames come through a channel from
/// a producer task, as a run's tokens reach a connection.
async fn served(s: TcpStream, every: Duration, frames: Arc<AtomicU64>) {
    let service = hyper::service::service_fn(move |_req| {
        let frames = Arc::clone(&frames);
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            let mut t = ticker(every);
            loop {
                t.tick().await;
                if tx.send(Bytes::from_static(EVENT.as_bytes())).await.is_err() {
                    return;
                }
                frames.fetch_add(1, Ordering::Relaxed);
            }
        });
        let body =
            axum::body::Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
            }));
        async move {
            Ok::<_, Infallible>(
                hyper::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(body)
                    .expect("response"),
            )
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(s), service)
        .await;
}
