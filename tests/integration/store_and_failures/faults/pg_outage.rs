//! A PostgreSQL cluster of the test's own (initdb and pg_ctl on a free
//! port, under a temporary directory; the shared cluster is never touched)
//! stopped mid-run.
//!
//! Longer than `store_outage_limit`: no event reaches the client that the
//! store had not accepted — every id the client saw is in the log, with the
//! text it showed — the stream ends with an `error`, `/readyz` is 503 while
//! the database is away, and once it is back the run is recorded `failed`
//! (`store_unavailable`, its log ending with `run_failed`) and the chat
//! takes a new turn.
//!
//! Shorter than the limit: the run pauses and finishes; the client gets the
//! whole answer, which is the stored one, and no model call is repeated.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use stategraph::internals::events::EventKind;
use stategraph::internals::runtime::RunStatus;
use stategraph::internals::store::{PostgresStore, RunQuery, Store};

use super::{Gated, eventually, frames, streamed_text};
use crate::support::model::long_model;
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

/// A throwaway PostgreSQL cluster.
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// Run the cluster's commands as `postgres` (initdb refuses root).
    as_postgres: bool,
}

impl Cluster {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn command(&self, tool: &str) -> Command {
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join(tool));
            c
        } else {
            Command::new(self.bin.join(tool))
        }
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self.command(tool).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn new() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's binaries under /usr/lib/postgresql (Debian's postgresql package)")
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .max()
            .expect("initdb");
        let root = Command::new("id").arg("-u").output().unwrap();
        let as_postgres = String::from_utf8_lossy(&root.stdout).trim() == "0";
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        if as_postgres {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(cluster.dir.path())
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let data = cluster.data();
        let data = data.to_str().unwrap();
        cluster.run(
            "initdb",
            &[
                "-D",
                data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        cluster.start().await;
        cluster
    }

    async fn start(&self) {
        let data = self.data();
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &opts,
                "-w",
                "start",
            ],
        );
    }

    fn stop(&self) {
        let data = self.data();
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        if Path::new(&data).join("postmaster.pid").exists() {
            let _ = self
                .command("pg_ctl")
                .args(["-D", data.to_str().unwrap_or(""), "-m", "immediate", "stop"])
                .output();
        }
    }
}

/// Reads an SSE response until `n` text deltas arrived; the bytes so far
/// and the rest of the body.
async fn read_deltas(
    resp: reqwest::Response,
    n: usize,
) -> (
    String,
    impl futures::Stream<Item = reqwest::Result<bytes::Bytes>>,
) {
    let mut body = Box::pin(resp.bytes_stream());
    let mut seen = String::new();
    while seen.matches(r#""type":"text-delta""#).count() < n {
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the answer streams")
            .expect("the stream goes on")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    (seen, body)
}

async fn read_rest(
    mut seen: String,
    mut body: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    limit: Duration,
) -> String {
    let deadline = tokio::time::Instant::now() + limit;
    while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, body.next()).await {
        match chunk {
            Ok(c) => seen.push_str(&String::from_utf8_lossy(&c)),
            Err(_) => break,
        }
    }
    seen
}

async fn readyz(client: &reqwest::Client, server: &TestServer) -> u16 {
    client
        .get(server.url("/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_away_longer_than_the_outage_limit_shows_nothing_unstored() {
    let cluster = Cluster::new().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&cluster.url(), 4).await.unwrap());
    let server = TestServer::start_with_store(
        long_model(Duration::from_millis(40)),
        Arc::clone(&store),
        |c| {
            c.server.store_outage_limit.0 = Duration::from_secs(2);
            c.server.lease.0 = Duration::from_secs(1);
            c.server.recover_interval.0 = Duration::from_millis(300);
        },
    )
    .await;
    let client = reqwest::Client::new();
    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("away", "tides?"),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let (seen, rest) = read_deltas(resp, 8).await;
    cluster.stop();
    let sse = read_rest(seen, Box::pin(rest), Duration::from_secs(30)).await;
    assert!(sse.ends_with("data: [DONE]\n\n"), "the stream ends: {sse}");
    let client_frames = frames(&sse);
    let error = client_frames
        .iter()
        .find(|(_, v)| v["type"] == "error")
        .unwrap_or_else(|| panic!("the stream says why it ended: {sse}"));
    assert!(
        error.1["errorText"].as_str().unwrap().contains("store"),
        "{error:?}"
    );
    assert_eq!(readyz(&client, &server).await, 503, "the database is away");

    cluster.start().await;
    let recorded = eventually(Duration::from_secs(30), || async {
        matches!(store.list_runs(&RunQuery::newest(5).of_chat("away")).await,
            Ok(runs) if runs.first().is_some_and(|r| r.status != RunStatus::Running))
    })
    .await;
    assert!(recorded, "the run is recorded once the database is back");
    let run = store
        .list_runs(&RunQuery::newest(5).of_chat("away"))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert_eq!(
        run.error.as_ref().unwrap().code,
        "store_unavailable",
        "{run:?}"
    );
    let log = store.events(run.id, 0, 100_000).await.unwrap();
    assert!(
        matches!(log.last().unwrap().event, EventKind::RunFailed { .. }),
        "{:?}",
        log.last()
    );
    // Every event the client saw is stored, and showed what is stored.
    let last_seen = client_frames
        .iter()
        .filter_map(|(id, _)| *id)
        .max()
        .unwrap();
    let stored_max = log.iter().map(|e| e.seq).max().unwrap();
    assert!(
        last_seen <= stored_max,
        "the client saw {last_seen}, {stored_max} stored"
    );
    let stored_text: String = log
        .iter()
        .filter(|e| e.seq <= last_seen)
        .filter_map(|e| match &e.event {
            EventKind::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    let shown = streamed_text(&sse);
    assert!(!shown.is_empty());
    assert!(
        stored_text.ends_with(&shown),
        "shown {shown:?}, stored {stored_text:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            readyz(&client, &server).await == 200
        })
        .await,
        "ready again"
    );
    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("away", "again?"),
    )
    .await;
    assert_eq!(resp.status(), 200, "the chat takes a new turn");
    let text = resp.text().await.unwrap();
    assert!(text.contains(r#""type":"finish""#), "{text}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_away_shorter_than_the_outage_limit_costs_no_model_call() {
    let cluster = Cluster::new().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&cluster.url(), 4).await.unwrap());
    let model = Gated::new(long_model(Duration::from_millis(30)));
    let server = TestServer::start_with_store(model.clone(), Arc::clone(&store), |c| {
        c.server.store_outage_limit.0 = Duration::from_secs(60);
        c.server.lease.0 = Duration::from_secs(1);
        c.server.recover_interval.0 = Duration::from_millis(300);
    })
    .await;
    let client = reqwest::Client::new();
    // The calls a turn makes when nothing goes wrong.
    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("calm", "tides?"),
    )
    .await;
    let calm = resp.text().await.unwrap();
    assert!(calm.contains(r#""type":"finish""#), "{calm}");
    let calls = model.calls();

    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("blip", "tides?"),
    )
    .await;
    let (seen, rest) = read_deltas(resp, 8).await;
    cluster.stop();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.start().await;
    let sse = read_rest(seen, Box::pin(rest), Duration::from_secs(60)).await;
    assert!(sse.contains(r#""type":"finish""#), "{sse}");
    assert!(!sse.contains(r#""type":"error""#), "{sse}");
    assert_eq!(model.calls(), 2 * calls, "no model call was made twice");
    assert!(
        eventually(Duration::from_secs(10), || async {
            matches!(store.get_chat("blip").await, Ok(Some(c)) if c.active_run.is_none())
        })
        .await
    );
    let messages = store.messages("blip").await.unwrap();
    let stored: String = messages[1]
        .parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(
        stored,
        streamed_text(&sse),
        "what was shown is what is stored"
    );
    assert_eq!(streamed_text(&sse), streamed_text(&calm));
    let run = store
        .list_runs(&RunQuery::newest(5).of_chat("blip"))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(run.status, RunStatus::Finished);
    server.shutdown().await;
}
