//! NUL (U+0000) in every path and query parameter and in every kind of
//! body, on PostgreSQL — which cannot hold it in `TEXT` or `JSONB` (these
//! were 500s: `/api/chat/%00`, `/api/runs?chat=%00`, a fork value with
//! `\u0000`, …). Each is refused with the JSON 400 `invalid_character`
//! before anything reaches the store: nothing of them is stored.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::store::{PostgresStore, RunQuery};

use crate::support::db::PgDb;
use crate::support::model::chat_model;
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

/// `(method, path and query, JSON body)`; `{run}` is a stored run's id.
fn cases() -> Vec<(&'static str, String, Option<Value>)> {
    let mut cases: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", "/api/chat/%00".into(), None),
        ("GET", "/api/chat/a%00b/stream".into(), None),
        ("POST", "/api/chat/%00/stop".into(), None),
        ("DELETE", "/api/chat/x%00".into(), None),
        ("GET", "/api/runs/%00".into(), None),
        ("GET", "/api/runs/{run}%00/events".into(), None),
        ("GET", "/api/runs/{run}/timeline?x=%00".into(), None),
        ("POST", "/api/runs/{run}%00/reexecute".into(), None),
        ("GET", "/api/graphs/chat%00".into(), None),
        ("GET", "/studio/app.js%00".into(), None),
        ("GET", "/%00".into(), None),
        ("GET", "/api/chats?x=%00".into(), None),
    ];
    for param in [
        "chat", "graph", "status", "since", "until", "cursor", "limit",
    ] {
        cases.push(("GET", format!("/api/runs?{param}=a%00"), None));
        cases.push(("GET", format!("/api/runs?{param}=%00&limit=5"), None));
    }
    cases.push(("GET", "/api/runs/{run}/state?step=%00".into(), None));
    cases.push(("GET", "/api/runs/{run}/events?%00=1".into(), None));
    let nul = "a\u{0}b";
    let mut bodies = vec![
        chat_body(nul, "hi"),
        chat_body("fine", nul),
        json!({"id": "fine2", "messages": [{"id": nul, "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
        json!({"id": "fine3", "graph": nul, "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
        json!({"id": "fine4", "forced_intent": nul, "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
        json!({"id": "fine5", "messages": [{"id": "m", "role": "user", "metadata": {nul: 1}, "parts": [{"type": "text", "text": "hi"}]}]}),
        json!({"id": "fine6", "trigger": nul, "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
    ];
    for b in bodies.drain(..) {
        cases.push(("POST", "/api/chat".into(), Some(b)));
    }
    cases.push((
        "POST",
        "/api/runs/{run}/fork".into(),
        Some(json!({"after": "router", "set": {"intent": nul}})),
    ));
    cases.push((
        "POST",
        "/api/runs/{run}/fork".into(),
        Some(json!({"after": nul, "set": {"intent": "EXPLAIN"}})),
    ));
    cases.push((
        "POST",
        "/api/runs/{run}/resume".into(),
        Some(json!({"value": nul})),
    ));
    cases.push((
        "POST",
        "/api/runs/{run}/resume".into(),
        Some(json!({"answers": {nul: true}})),
    ));
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_anywhere_in_a_request_is_a_json_400_and_stores_nothing_on_postgres() {
    PgDb::with(|url| async move {
        let store = PostgresStore::connect(&url, 4).await.unwrap();
        let server =
            TestServer::start_with_store(chat_model(false, None), Arc::new(store), |_| {}).await;
        let client = reqwest::Client::new();
        let ok = post_json(&client, &server.url("/api/chat"), &chat_body("good", "hi")).await;
        assert_eq!(ok.status(), 200);
        let _ = ok.text().await.unwrap();
        let runs_before = server
            .state
            .store
            .list_runs(&RunQuery::newest(100))
            .await
            .unwrap();
        let run = runs_before[0].id.to_string();
        for (method, path, body) in cases() {
            let path = path.replace("{run}", &run);
            let mut rb = client.request(method.parse().unwrap(), server.url(&path));
            if let Some(b) = &body {
                rb = rb
                    .header("content-type", "application/json")
                    .body(b.to_string());
            }
            let resp = rb.send().await.unwrap();
            let status = resp.status().as_u16();
            let ct = resp
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned());
            let text = resp.text().await.unwrap();
            let what = format!("{method} {path} {body:?}: {status} {text}");
            assert_eq!(status, 400, "{what}");
            assert_eq!(ct.as_deref(), Some("application/json"), "{what}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["error"]["code"], "invalid_character", "{what}");
        }
        let chats = server.state.store.list_chats("local", 100).await.unwrap();
        assert_eq!(chats.len(), 1, "{chats:?}");
        let runs = server
            .state
            .store
            .list_runs(&RunQuery::newest(100))
            .await
            .unwrap();
        assert_eq!(runs.len(), runs_before.len(), "{runs:?}");
        // The server still answers (no connection was poisoned by an error).
        let ok = post_json(&client, &server.url("/api/chat"), &chat_body("good2", "hi")).await;
        assert_eq!(ok.status(), 200);
        server.shutdown().await;
    })
    .await;
}
