//! Per-user limits (#15 item 10) through the real server: past the request
//! rate a user gets 429 `rate_limited` with a `retry-after`, while other
//! users and the health and metrics endpoints are unaffected; once a user's
//! runs have used the daily token quota, starting another run is 429
//! `token_quota_exceeded` — on a second server sharing the database too
//! (SQLite file, PostgreSQL) — while reading chats and other users' turns
//! go on. Without `[limits]` nothing is limited.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::events::Usage;
use stategraph::internals::llm::LlmChunk;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::store::{PostgresStore, Store};

use crate::support::JsonBody;
use crate::support::chat_body;
use crate::support::db::{PgDb, SqliteDb};
use crate::support::server::TestServer;

/// What every model call reports.
const CALL: Usage = Usage {
    prompt_tokens: 600,
    completion_tokens: 100,
    cached_tokens: 0,
    reasoning_tokens: 0,
    cache_write_tokens: 0,
    cost_nano_usd: 0,
};

/// A model that answers every call with a short text and [`CALL`] usage.
fn model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_fn(|_| {
        Turn::Chunks(
            vec![
                LlmChunk::Text("Hello there.".into()),
                LlmChunk::Finish("stop".into()),
                LlmChunk::Usage(CALL),
            ],
            None,
        )
    }))
}

/// Two users with keys, and `limits` applied.
fn config(c: &mut stategraph::internals::config::Config, rpm: u32, daily: u64) {
    c.auth.api_keys.insert("key-alice".into(), "alice".into());
    c.auth.api_keys.insert("key-bob".into(), "bob".into());
    c.limits.requests_per_minute = rpm;
    c.limits.daily_tokens = daily;
}

async fn get(server: &TestServer, path: &str, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(server.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

/// A DIRECT turn (one model call) of `key`'s user in chat `chat`.
async fn turn(server: &TestServer, key: &str, chat: &str) -> reqwest::Response {
    let mut body = chat_body(chat, "hello");
    body["forced_intent"] = json!("DIRECT");
    reqwest::Client::new()
        .post(server.url("/api/chat"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// The `retry-after` seconds of a 429, and its JSON error code.
async fn refusal(resp: reqwest::Response) -> (u64, Value) {
    assert_eq!(resp.status(), 429);
    let wait = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .expect("a retry-after in whole seconds");
    (wait, resp.json_value().await["error"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_rate_a_user_waits_and_nobody_else_does() {
    let server = TestServer::start(model(), |c| config(c, 3, 0)).await;
    for _ in 0..3 {
        assert_eq!(get(&server, "/api/chats", "key-alice").await.status(), 200);
    }
    let (wait, error) = refusal(get(&server, "/api/chats", "key-alice").await).await;
    assert_eq!(error["code"], "rate_limited", "{error}");
    assert!(error["message"].as_str().unwrap().contains("3 a minute"));
    // 3 a minute: a request every 20 s.
    assert!((1..=20).contains(&wait), "retry-after {wait}");
    // Every API route counts, starting a chat too.
    let (_, error) = refusal(turn(&server, "key-alice", "c-rate").await).await;
    assert_eq!(error["code"], "rate_limited");
    // Another user is not held up; health and metrics never are.
    assert_eq!(get(&server, "/api/chats", "key-bob").await.status(), 200);
    for path in ["/healthz", "/readyz", "/metrics"] {
        for _ in 0..5 {
            assert_eq!(
                get(&server, path, "key-alice").await.status(),
                200,
                "{path}"
            );
        }
    }
    // A caller without a valid key is refused as before, not counted.
    assert_eq!(get(&server, "/api/chats", "nope").await.status(), 401);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_limits_nothing_is_limited() {
    let server = TestServer::start(model(), |c| config(c, 0, 0)).await;
    for _ in 0..50 {
        assert_eq!(get(&server, "/api/chats", "key-alice").await.status(), 200);
    }
    for i in 0..3 {
        let resp = turn(&server, "key-alice", &format!("free-{i}")).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.text().await.unwrap().contains("[DONE]"));
    }
    server.shutdown().await;
}

/// Alice's two turns use 1,400 tokens of her 1,000: the third is refused
/// here and on `other`, a server over the same database that never saw
/// her runs. Bob and reading go on.
async fn the_daily_quota_counts_stored_usage(store: Arc<dyn Store>, other: Arc<dyn Store>) {
    let server = TestServer::start_with_store(model(), store, |c| config(c, 0, 1_000)).await;
    for chat in ["q1", "q2"] {
        let resp = turn(&server, "key-alice", chat).await;
        assert_eq!(resp.status(), 200, "{chat}: under the quota when it starts");
        assert!(resp.text().await.unwrap().contains("[DONE]"));
    }
    let used = server.state.store.usage_since("alice", 0).await.unwrap();
    assert_eq!(used.total(), 2 * CALL.total());
    let (wait, error) = refusal(turn(&server, "key-alice", "q3").await).await;
    assert_eq!(error["code"], "token_quota_exceeded", "{error}");
    assert!((1..=86_400).contains(&wait), "until midnight UTC: {wait}");
    assert!(
        server.state.store.get_chat("q3").await.unwrap().is_none(),
        "nothing stored"
    );
    assert_eq!(get(&server, "/api/chats", "key-alice").await.status(), 200);
    assert_eq!(turn(&server, "key-bob", "b1").await.status(), 200);

    let second = TestServer::start_with_store(model(), other, |c| config(c, 0, 1_000)).await;
    let (_, error) = refusal(turn(&second, "key-alice", "q4").await).await;
    assert_eq!(error["code"], "token_quota_exceeded");
    let resp = turn(&second, "key-bob", "b2").await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("[DONE]"));
    second.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_quota_holds_across_servers_on_sqlite() {
    let db = SqliteDb::new();
    the_daily_quota_counts_stored_usage(db.open().await, db.open().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_quota_holds_across_servers_on_postgres() {
    PgDb::with(|url| async move {
        let a = PostgresStore::connect(&url, 4).await.unwrap();
        let b = PostgresStore::connect(&url, 4).await.unwrap();
        the_daily_quota_counts_stored_usage(Arc::new(a), Arc::new(b)).await;
    })
    .await;
}
