//! Cost through the real server: the OpenAI emulator answers chat turns
//! and reports usage, `[llm.prices]` prices it, and then
//! - every run record keeps its cost (`GET /api/runs`, `GET /api/runs/{id}`),
//!   exactly the configured price of the tokens it recorded;
//! - once a user's runs of the UTC day cost `[limits] daily_cost_usd`, the
//!   next turn is 429 `cost_limit` with a `retry-after` up to midnight UTC,
//!   while runs of the day before count nothing and other users go on.
//!
//! On SQLite and PostgreSQL, whose rows and sums are what the cap reads.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::config::Config;
use stategraph::internals::events::{Usage, now_micros};
use stategraph::internals::runtime::RunStatus;
use stategraph::internals::store::{RunRecord, Store};
use uuid::Uuid;

use super::emulator::Emulator;
use crate::support::JsonBody;
use crate::support::chat_body;
use crate::support::db::{PgDb, SqliteDb};
use crate::support::server::TestServer;

/// US dollars per million input and output tokens: a token costs 2,000 and
/// 8,000 nano-dollars.
const INPUT: f64 = 2.0;
const OUTPUT: f64 = 8.0;

/// The cap: a few turns' worth (the emulator counts a quarter of the
/// request body's bytes as prompt tokens: a chat turn's request is a few
/// hundred tokens, so ~US$0.001 a call).
const CAP_USD: f64 = 0.004;

const DAY_MICROS: u64 = 86_400 * 1_000_000;

/// The server's configuration: the emulator's OpenAI endpoint, its prices,
/// two users with keys and the cap.
fn config(emu: &Emulator) -> Config {
    let text = format!(
        r#"
[auth.api_keys]
key-alice = "alice"
key-bob = "bob"

[limits]
daily_cost_usd = {CAP_USD}

[llm.endpoints.default]
base_url = "{}"
api_key = "sk-test"
[llm.retry]
attempts = 1
[llm.roles.default]
model = "gpt-4o-mini"
[llm.prices."gpt-4o-mini"]
input = {INPUT}
output = {OUTPUT}
"#,
        emu.url("openai")
    );
    Config::from_toml(&text).unwrap()
}

async fn start(emu: &Emulator, store: Arc<dyn Store>) -> TestServer {
    let parsed = config(emu);
    let models = parsed.llm.build_models_with(|_| None).unwrap();
    TestServer::start_with_models(models, store, |c| {
        c.auth = parsed.auth.clone();
        c.limits = parsed.limits.clone();
        c.llm = parsed.llm.clone();
    })
    .await
}

/// A DIRECT turn of `key`'s user in chat `chat`.
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

async fn get(server: &TestServer, path: &str) -> Value {
    let resp = reqwest::Client::new()
        .get(server.url(path))
        .bearer_auth("key-alice")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    resp.json_value().await
}

/// A run of alice's that ended just before today's midnight UTC, costing
/// far more than the cap: yesterday's spending.
fn yesterday(today: u64) -> RunRecord {
    RunRecord {
        id: Uuid::now_v7(),
        chat_id: None,
        user_id: "alice".into(),
        graph: "chat".into(),
        graph_version: "v1".into(),
        status: RunStatus::Finished,
        input: json!({}),
        created_at: today - 1,
        finished_at: Some(today - 1),
        error: None,
        usage: Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 1_000,
            cost_nano_usd: 2_008_000_000,
            ..Usage::default()
        },
        parent: None,
        request_id: None,
        message_id: None,
        last_seq: 0,
        last_step: 0,
    }
}

async fn the_cost_is_recorded_and_capped_per_day(store: Arc<dyn Store>) {
    let emu = Emulator::start().await;
    let today = now_micros() - now_micros() % DAY_MICROS;
    store.create_run(yesterday(today)).await.unwrap();
    let server = start(&emu, Arc::clone(&store)).await;
    let cap = (CAP_USD * 1e9) as u64;

    let mut allowed = 0;
    let refusal = loop {
        assert!(allowed < 40, "the cap was never reached");
        let spent = store.usage_since("alice", today).await.unwrap();
        let resp = turn(&server, "key-alice", &format!("c{allowed}")).await;
        if spent.cost_nano_usd >= cap {
            break resp;
        }
        assert_eq!(
            resp.status(),
            200,
            "under the cap when it starts ({} of {cap} nano-dollars spent)",
            spent.cost_nano_usd
        );
        assert!(resp.text().await.unwrap().contains("[DONE]"));
        allowed += 1;
    };
    assert!(allowed >= 2, "yesterday's run counts nothing: {allowed}");
    assert_eq!(refusal.status(), 429);
    let wait: u64 = refusal.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let to_midnight = (today + DAY_MICROS - now_micros()).div_ceil(1_000_000);
    assert!(
        wait >= to_midnight && wait <= to_midnight + 5,
        "retry-after {wait} s, midnight UTC in {to_midnight} s"
    );
    let error = refusal.json_value().await["error"].clone();
    assert_eq!(error["code"], "cost_limit", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("the daily cost limit (US$0.004) is spent (US$0.00"),
        "{error}"
    );
    assert!(
        store
            .get_chat(&format!("c{allowed}"))
            .await
            .unwrap()
            .is_none(),
        "a refused turn stores nothing"
    );
    assert_eq!(
        turn(&server, "key-bob", "b1").await.status(),
        200,
        "other users go on"
    );

    // Every run of today records the configured price of its tokens.
    let runs = get(&server, "/api/runs?limit=50").await["runs"]
        .as_array()
        .unwrap()
        .clone();
    let todays: Vec<&Value> = runs
        .iter()
        .filter(|r| r["createdAt"].as_u64().unwrap() * 1000 >= today)
        .collect();
    assert_eq!(todays.len(), allowed, "{runs:#?}");
    let mut total = 0;
    for run in todays {
        let u = &run["usage"];
        let (prompt, completion) = (
            u["promptTokens"].as_u64().unwrap(),
            u["completionTokens"].as_u64().unwrap(),
        );
        assert!(prompt > 0 && completion > 0, "{run}");
        let cost = prompt * 2_000 + completion * 8_000;
        assert_eq!(u["costNanoUsd"], cost, "{run}");
        assert!((u["costUsd"].as_f64().unwrap() - cost as f64 / 1e9).abs() < 1e-12);
        let one = get(
            &server,
            &format!("/api/runs/{}", run["id"].as_str().unwrap()),
        )
        .await;
        assert_eq!(one["usage"], *u, "the run's page says the same");
        total += cost;
    }
    assert_eq!(
        store
            .usage_since("alice", today)
            .await
            .unwrap()
            .cost_nano_usd,
        total
    );
    assert!(total >= cap);
    eprintln!("{allowed} turns allowed; they cost {total} of the {cap} nano-dollar cap");
    assert!(emu.rejected().is_empty(), "{:?}", emu.rejected());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_cost_cap_holds_on_sqlite() {
    let db = SqliteDb::new();
    the_cost_is_recorded_and_capped_per_day(db.open().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_cost_cap_holds_on_postgres() {
    PgDb::with_store(4, the_cost_is_recorded_and_capped_per_day).await;
}
