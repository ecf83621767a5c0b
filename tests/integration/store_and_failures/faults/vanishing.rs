//! Clients that vanish, and runs nobody executes.
//!
//! 100 clients POST to `/api/chat` and reset the connection at once
//! (`SO_LINGER` 0: an RST, not a FIN). Whatever the server had read of
//! them, 20 s later no run is `running` and every chat takes a new turn.
//! Before, a turn stored just as its client vanished could be left
//! `running` with this instance's lease, executed nowhere: every POST to
//! its chat was 409, its stream hung and a stop changed nothing.
//!
//! The safety net under that is checked directly: a turn stored with this
//! instance's lease and never launched (a *stranded* run, as a vanished
//! client or a lost task leaves it) is taken over by the lease upkeep
//! within seconds; a stop of such a run stops it here; a resume of its
//! stream gets the run executed and its whole stream.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use stategraph::internals::events::now_micros;
use stategraph::internals::runtime::RunStatus;
use stategraph::internals::store::{
    ChatRecord, MessageRecord, RunQuery, RunRecord, Store, TurnOutcome, TurnStart,
};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use super::eventually;
use crate::support::db::{PgDb, SqliteDb};
use crate::support::model::chat_model;
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

const CLIENTS: usize = 100;

async fn running(store: &dyn Store) -> Vec<RunRecord> {
    let mut q = RunQuery::newest(1000);
    q.status = Some(RunStatus::Running);
    store.list_runs(&q).await.unwrap()
}

/// Sends a whole chat request on a raw socket and resets the connection.
async fn post_and_reset(addr: std::net::SocketAddr, chat: &str) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = chat_body(chat, "hello there").to_string();
    let req = format!(
        "POST /api/chat HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    s.set_zero_linger().unwrap();
    drop(s);
}

async fn resetting_clients_wedge_nothing(store: Arc<dyn Store>) {
    let server = TestServer::start_with_store(
        chat_model(false, Some(Duration::from_millis(5))),
        Arc::clone(&store),
        |c| {
            c.server.lease.0 = Duration::from_secs(3);
            c.server.recover_interval.0 = Duration::from_millis(500);
        },
    )
    .await;
    let addr = server.addr;
    let chats: Vec<String> = (0..CLIENTS).map(|i| format!("reset-{i}")).collect();
    futures::future::join_all(chats.iter().map(|c| post_and_reset(addr, c))).await;
    let settled = eventually(Duration::from_secs(20), || async {
        running(&*store).await.is_empty()
    })
    .await;
    assert!(settled, "runs left running: {:?}", running(&*store).await);
    let stored = store.list_chats("local", 1000).await.unwrap();
    let client = reqwest::Client::new();
    let url = server.url("/api/chat");
    // "No run running" can be seen before the server has even read some
    // of the reset requests (they wait in the accept queue of a busy
    // machine); a turn one of them starts after that is a real turn, and
    // its chat answers 409 until it ends, as it should. So a 409 is
    // retried, as a client would, for longer than any turn here lasts: a
    // wedged chat answers 409 for ever and still fails.
    let again = chats.iter().map(|chat| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut body = chat_body(chat, "again");
            body["messages"][0]["id"] = json!(format!("again-{chat}"));
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            loop {
                let resp = post_json(&client, &url, &body).await;
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap();
                if status != 409 || std::time::Instant::now() > deadline {
                    return (status, text);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    for (status, text) in futures::future::join_all(again).await {
        assert_eq!(status, 200, "{text}");
        assert!(text.contains(r#""type":"finish""#), "{text}");
    }
    assert!(running(&*store).await.is_empty());
    eprintln!(
        "{} of {CLIENTS} reset requests had started a turn",
        stored.len()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_reset_at_once_leave_no_run_running_on_sqlite() {
    let db = SqliteDb::new();
    resetting_clients_wedge_nothing(db.open().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_reset_at_once_leave_no_run_running_on_postgres() {
    PgDb::with_store(8, resetting_clients_wedge_nothing).await;
}

/// Stores a chat turn leased to `owner` as `begin_turn` does, without
/// executing it: what a start cut off between the two left behind.
async fn strand(server: &TestServer, chat: &str, text: &str) -> Uuid {
    let graph = server.state.graphs.get("chat").unwrap();
    let now = now_micros();
    let run = RunRecord {
        id: Uuid::now_v7(),
        chat_id: Some(chat.to_owned()),
        user_id: "local".into(),
        graph: "chat".into(),
        graph_version: graph.version.clone(),
        status: RunStatus::Running,
        input: json!({
            "messages": [{"id": format!("u-{chat}"), "role": "user", "content": text}],
            "query": text,
        }),
        created_at: now,
        finished_at: None,
        error: None,
        usage: Default::default(),
        parent: None,
        request_id: None,
        message_id: Some(format!("msg-{chat}")),
        last_seq: 0,
        last_step: 0,
    };
    let id = run.id;
    let turn = TurnStart {
        chat: ChatRecord {
            id: chat.to_owned(),
            user_id: "local".into(),
            title: text.to_owned(),
            created_at: now,
            updated_at: now,
            active_run: None,
        },
        messages: vec![MessageRecord {
            chat_id: chat.to_owned(),
            id: format!("u-{chat}"),
            role: "user".into(),
            parts: json!([{"type": "text", "text": text}]),
            metadata: serde_json::Value::Null,
            position: 0,
            created_at: now,
        }],
        run,
        owner: server.state.runs.instance().to_owned(),
        lease_until: now + 60_000_000,
    };
    let outcome = server.state.store.begin_turn(turn).await.unwrap();
    assert!(matches!(outcome, TurnOutcome::Started(_)), "{outcome:?}");
    id
}

async fn status_of(server: &TestServer, run: Uuid) -> RunStatus {
    server
        .state
        .store
        .get_run(run)
        .await
        .unwrap()
        .unwrap()
        .status
}

async fn stranded_runs_are_taken_over_stopped_and_resumed(store: Arc<dyn Store>) {
    // No orphan claims (recover_interval 0): only the lease upkeep's
    // comparison with what this process holds finds these runs.
    let server = TestServer::start_with_store(
        chat_model(false, Some(Duration::from_millis(30))),
        store,
        |c| {
            c.server.lease.0 = Duration::from_millis(900);
            c.server.recover_interval.0 = Duration::ZERO;
        },
    )
    .await;
    let client = reqwest::Client::new();

    // A stop finds it before the upkeep does (or just after): either way
    // it is stopped here, not asked of another instance.
    let stopped = strand(&server, "stranded-stop", "stop me").await;
    let resp = client
        .post(server.url("/api/chat/stranded-stop/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["stopped"], true);
    assert!(v.get("elsewhere").is_none(), "{v}");
    assert!(
        eventually(Duration::from_secs(10), || async {
            status_of(&server, stopped).await == RunStatus::Cancelled
        })
        .await,
        "{:?}",
        status_of(&server, stopped).await
    );

    // A resume of its stream gets it executed, and the whole stream.
    strand(&server, "stranded-resume", "resume me").await;
    let resp = client
        .get(server.url("/api/chat/stranded-resume/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    assert!(sse.contains(r#""type":"start""#), "{sse}");
    assert!(sse.contains(r#""type":"finish""#), "{sse}");
    let (ok, report) = crate::support::aisdk_validate(&sse);
    assert!(ok, "{report}");

    // Left alone, the lease upkeep takes it over within seconds.
    let alone = strand(&server, "stranded-alone", "nobody asks").await;
    // (The status lands with the last step; the turn's end — the message,
    // the chat set free — just after.)
    assert!(
        eventually(Duration::from_secs(10), || async {
            status_of(&server, alone).await == RunStatus::Finished
                && server
                    .state
                    .store
                    .get_chat("stranded-alone")
                    .await
                    .unwrap()
                    .is_some_and(|c| c.active_run.is_none())
        })
        .await,
        "{:?}",
        status_of(&server, alone).await
    );
    let messages = server.state.store.messages("stranded-alone").await.unwrap();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1].role, "assistant");
    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("stranded-alone", "next"),
    )
    .await;
    assert_eq!(resp.status(), 200, "the chat takes a new turn");
    assert!(resp.text().await.unwrap().contains(r#""type":"finish""#));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stranded_runs_are_taken_over_stopped_and_resumed_on_sqlite() {
    let db = SqliteDb::new();
    stranded_runs_are_taken_over_stopped_and_resumed(db.open().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stranded_runs_are_taken_over_stopped_and_resumed_on_postgres() {
    PgDb::with_store(8, stranded_runs_are_taken_over_stopped_and_resumed).await;
}
