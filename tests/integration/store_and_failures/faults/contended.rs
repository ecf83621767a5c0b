//! Issue 31: parallel POSTs to one chat leave exactly one run record.
//!
//! 20 POSTs with different messages race for one chat. The first turn's
//! model waits at a gate until every other request has been answered, so
//! all 20 are concurrent with it: one is 200, nineteen are 409
//! `run_in_progress`, and the store holds one run — finished — and the
//! winner's two messages. Then the same race without a gate, where late
//! requests may start turns of their own once a turn ended: every run
//! stored is a turn some request was answered 200 for, and finished (a
//! request admitted by the store just after the previous run's end was
//! recorded, while its stream was still closing, used to leave a
//! `cancelled` record). 50 rounds of each, on SQLite and on PostgreSQL.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::runtime::RunStatus;
use stategraph::internals::store::{RunQuery, Store};

use super::Gated;
use crate::support::db::{PgDb, SqliteDb};
use crate::support::model::chat_model;
use crate::support::post_json;
use crate::support::server::TestServer;

const ROUNDS: usize = 50;
const POSTS: usize = 20;

async fn race(
    client: &reqwest::Client,
    url: &str,
    chat: &str,
) -> Vec<(usize, u16, reqwest::Response)> {
    let posts = (0..POSTS).map(|i| {
        let (client, url) = (client.clone(), url.to_owned());
        let chat = chat.to_owned();
        async move {
            let body = json!({
                "id": chat,
                "messages": [{"id": format!("u{i}"), "role": "user",
                              "parts": [{"type": "text", "text": format!("question {i}")}]}],
            });
            let resp = post_json(&client, &url, &body).await;
            (i, resp.status().as_u16(), resp)
        }
    });
    futures::future::join_all(posts).await
}

async fn exactly_one_run_per_turn(store: Arc<dyn Store>) {
    let gated = Gated::new(chat_model(false, None));
    let server = TestServer::start_with_store(gated.clone(), Arc::clone(&store), |_| {}).await;
    let client = reqwest::Client::new();
    let url = server.url("/api/chat");
    for round in 0..ROUNDS {
        let chat = format!("gated-{round}");
        let open = gated.close();
        let results = race(&client, &url, &chat).await;
        let mut winners = Vec::new();
        for (i, status, resp) in results {
            if status == 200 {
                winners.push((i, resp));
                continue;
            }
            let text = resp.text().await.unwrap();
            assert_eq!(status, 409, "round {round}: {text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["error"]["code"], "run_in_progress");
        }
        assert_eq!(winners.len(), 1, "round {round}: one turn starts");
        let _ = open.send(true);
        let (w, resp) = winners.pop().unwrap();
        let sse = resp.text().await.unwrap();
        assert!(sse.contains(r#""type":"finish""#), "round {round}: {sse}");
        let runs = store
            .list_runs(&RunQuery::newest(100).of_chat(&chat))
            .await
            .unwrap();
        assert_eq!(runs.len(), 1, "round {round}: one run record: {runs:?}");
        assert_eq!(runs[0].status, RunStatus::Finished);
        let messages = store.messages(&chat).await.unwrap();
        let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids.len(), 2, "round {round}: {ids:?}");
        assert_eq!(ids[0], format!("u{w}"));
    }
    for round in 0..ROUNDS {
        let chat = format!("free-{round}");
        let results = race(&client, &url, &chat).await;
        let mut started = 0;
        for (_, status, resp) in results {
            let text = resp.text().await.unwrap();
            match status {
                200 => {
                    started += 1;
                    assert!(text.contains(r#""type":"finish""#), "round {round}: {text}");
                }
                409 => assert!(text.contains("run_in_progress"), "{text}"),
                other => panic!("round {round}: {other}: {text}"),
            }
        }
        let runs = store
            .list_runs(&RunQuery::newest(100).of_chat(&chat))
            .await
            .unwrap();
        assert!(started >= 1);
        assert_eq!(
            runs.len(),
            started,
            "round {round}: a run record per turn answered 200, none beside: {runs:?}"
        );
        assert!(
            runs.iter().all(|r| r.status == RunStatus::Finished),
            "round {round}: {runs:?}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_posts_to_one_chat_leave_one_run_record_on_sqlite() {
    let db = SqliteDb::new();
    exactly_one_run_per_turn(db.open().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_posts_to_one_chat_leave_one_run_record_on_postgres() {
    PgDb::with_store(8, exactly_one_run_per_turn).await;
}
