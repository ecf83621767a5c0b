//! SQLite on a disk that fills up mid-run: a real `ENOSPC`.
//!
//! `stategraph serve` runs in a mount namespace of its own (`unshare -rm`,
//! an unprivileged user namespace) with its data directory on a 64 MiB
//! tmpfs; mid-answer the test fills that tmpfs (through
//! `/proc/PID/root`). The run's writes then fail with `SQLITE_FULL`, are
//! retried through the outage policy and, past `store_outage_limit`, the
//! run fails cleanly: the stream ends with an `error` (nothing shown that
//! was not stored), `/readyz` answers 503 while writes fail. Once the
//! space is freed `/readyz` is 200 again, the run is recorded `failed`
//! (`store_unavailable`) with the answer as far as it was stored, and the
//! chat takes a new turn.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::{eventually, frames, streamed_text};
use crate::support::{chat_body, root};

struct Server {
    child: tokio::process::Child,
    base: String,
}

/// `stategraph serve` with `data` on a fresh 64 MiB tmpfs.
async fn start_on_tmpfs(dir: &Path, data: &Path) -> Server {
    let graphs = dir.join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::copy(root().join("graphs/chat.yaml"), graphs.join("chat.yaml")).unwrap();
    let config = dir.join("stategraph.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nstore_outage_limit = \"2s\"\nlease = \"2s\"\nrecover_interval = \"300ms\"\nkeep_alive = \"1s\"\n\
             [llm.offline]\ntoken_delay = \"25ms\"\nanswer_tokens = 400\n\
             [store]\nbackend = \"sqlite\"\ndata_dir = \"{}\"\n",
            data.display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    // unshare (util-linux) mounts a small tmpfs for the data directory.
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args([
        "-rm",
        "sh",
        "-c",
        "mount -t tmpfs -o size=64m tmpfs \"$0\" && exec \"$@\"",
    ])
    .arg(data)
    .arg(env!("CARGO_BIN_EXE_stategraph"))
    .args(["serve", "--bind", "127.0.0.1:0", "--config"])
    .arg(&config)
    .arg("--graphs")
    .arg(&graphs)
    .arg("--prompts")
    .arg(root().join("prompts"))
    .env("RUST_LOG", "info")
    .stderr(log);
    let (child, base, _) = crate::support::serving(cmd, false).await;
    let base = base.unwrap_or_else(|| {
        panic!(
            "the server did not start on a tmpfs of its own (needs unprivileged user namespaces): {}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        )
    });
    Server { child, base }
}

/// Writes zeros to `file` until the disk is full.
fn fill(file: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(file).unwrap();
    let block = vec![0u8; 1 << 20];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(28), "ENOSPC: {e}");
                break;
            }
        }
    }
}

async fn get_json(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let resp = client.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_disk_that_fills_mid_run_fails_the_run_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut server = start_on_tmpfs(dir.path(), &data).await;
    let pid = server.child.id().unwrap();
    let filler = Path::new(&format!("/proc/{pid}/root"))
        .join(data.strip_prefix("/").unwrap())
        .join("filler");
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/api/chat", server.base))
        .header("content-type", "application/json")
        .body(chat_body("full", "please research the tides").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = Box::pin(resp.bytes_stream());
    let mut sse = String::new();
    while sse.matches(r#""type":"text-delta""#).count() < 10 {
        let chunk = tokio::time::timeout(Duration::from_secs(60), body.next())
            .await
            .expect("the answer streams")
            .expect("it goes on")
            .unwrap();
        sse.push_str(&String::from_utf8_lossy(&chunk));
    }
    let f = filler.clone();
    tokio::task::spawn_blocking(move || fill(&f)).await.unwrap();
    let readyz = format!("{}/readyz", server.base);
    let mut saw_503 = false;
    let rest = async {
        while let Some(Ok(chunk)) = body.next().await {
            sse.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    let watch = async {
        while !saw_503 {
            let (status, _) = get_json(&client, &readyz).await;
            saw_503 = status == 503;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (_, watched) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(60), rest),
        tokio::time::timeout(Duration::from_secs(30), watch)
    );
    let log = || std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
    assert!(
        watched.is_ok() && saw_503,
        "/readyz says 503 while writes fail; the stream: {sse}\n{}",
        log()
    );
    assert!(
        sse.ends_with("data: [DONE]\n\n"),
        "the stream ends: {sse}\n{}",
        log()
    );
    let client_frames = frames(&sse);
    assert!(
        client_frames.iter().any(|(_, v)| v["type"] == "error"),
        "the stream says why it ended early: {sse}"
    );
    assert!(
        !client_frames.iter().any(|(_, v)| v["type"] == "abort"),
        "{sse}"
    );

    std::fs::remove_file(&filler).unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            get_json(&client, &readyz).await.0 == 200
        })
        .await,
        "ready again once space is freed: {}",
        log()
    );
    let runs_url = format!("{}/api/runs?chat=full", server.base);
    let recorded = eventually(Duration::from_secs(20), || async {
        let (_, v) = get_json(&client, &runs_url).await;
        v["runs"][0]["status"] != "running"
    })
    .await;
    let (_, runs) = get_json(&client, &runs_url).await;
    assert!(recorded, "{runs}\n{}", log());
    let run = &runs["runs"][0];
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "store_unavailable", "{run}");
    // Nothing was shown that is not stored.
    let id = run["id"].as_str().unwrap();
    let (_, events) = get_json(
        &client,
        &format!("{}/api/runs/{id}/events?limit=10000", server.base),
    )
    .await;
    let events = events["events"].as_array().unwrap().clone();
    let last_seen = client_frames
        .iter()
        .filter_map(|(id, _)| *id)
        .max()
        .unwrap();
    let stored: String = events
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() <= last_seen)
        .filter(|e| e["event"]["type"] == "text_delta")
        .filter_map(|e| e["event"]["delta"].as_str())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["seq"].as_u64().unwrap() >= last_seen),
        "the client saw {last_seen}; stored: {}",
        events.len()
    );
    let shown = streamed_text(&sse);
    assert!(
        stored.ends_with(&shown) && !shown.is_empty(),
        "shown {shown:?} stored {stored:?}"
    );
    assert_eq!(events.last().unwrap()["event"]["type"], "run_failed");
    let resp = client
        .post(format!("{}/api/chat", server.base))
        .header("content-type", "application/json")
        .body(chat_body("full", "and now?").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "the chat takes a new turn");
    let text = resp.text().await.unwrap();
    assert!(text.contains(r#""type":"finish""#), "{text}");
    server.child.start_kill().unwrap();
    let _ = server.child.wait().await;
}

/// A database whose `-shm` (SQLite's mapped WAL index) cannot be written is
/// refused at open with the file's name, not opened to fail later — once
/// mapped, a broken `-shm` can only crash the process (SIGBUS; see
/// `store::sqlite::writable`). A directory in its place cannot be opened for
/// writing even by root, which the tests run as.
#[tokio::test]
async fn an_unwritable_shm_file_is_refused_at_open_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stategraph.db");
    drop(
        stategraph::internals::store::SqliteStore::open(&db)
            .await
            .expect("first open"),
    );
    let shm = dir.path().join("stategraph.db-shm");
    let _ = std::fs::remove_file(&shm);
    std::fs::create_dir(&shm).unwrap();
    let err = stategraph::internals::store::SqliteStore::open(&db)
        .await
        .expect_err("an unwritable -shm is refused");
    let text = err.to_string();
    assert!(text.contains("stategraph.db-shm"), "{text}");
    assert!(text.contains("cannot write"), "{text}");
}
