//! The server under attack: what a hostile user or an unlucky operator does,
//! each refused with the documented JSON error and nothing lost or shared.
//! Parallel turns on one chat (SQLite and PostgreSQL), a NUL in a message on
//! PostgreSQL refused, resuming a chat that does not exist, slow and oversized
//! request heads, proxied requests and API keys, one user's runs crowding
//! out another's, and the corpus of bad requests in
//! `tests/fixtures/bad_requests/`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stategraph::internals::store::{RunQuery, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::JsonBody;
use crate::support::db::{PgDb, SqliteDb};
use crate::support::model::chat_model;
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

/// 20 parallel POSTs with different messages to one chat: one turn is
/// stored — its user message and its answer — and nothing of the refused
/// ones, not even a cancelled run.
async fn parallel_posts_store_exactly_one_turn(store: Arc<dyn Store>) {
    // Slow enough that every request arrives while the first still answers.
    let server = TestServer::start_with_store(
        chat_model(false, Some(Duration::from_millis(40))),
        store,
        |_| {},
    )
    .await;
    let client = reqwest::Client::new();
    let url = server.url("/api/chat");
    let posts = (0..20).map(|i| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let body = json!({
                "id": "contended",
                "messages": [{"id": format!("u{i}"), "role": "user",
                              "parts": [{"type": "text", "text": format!("question {i}")}]}],
            });
            let resp = post_json(&client, &url, &body).await;
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            (i, status, text)
        }
    });
    let results = futures::future::join_all(posts).await;
    let winners: Vec<usize> = results
        .iter()
        .filter(|(_, s, _)| *s == 200)
        .map(|(i, _, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for (_, status, text) in results.iter().filter(|(_, s, _)| *s != 200) {
        assert_eq!(*status, 409, "{text}");
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["error"]["code"], "run_in_progress");
    }
    let w = winners[0];
    let messages = server.state.store.messages("contended").await.unwrap();
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(
        ids.len(),
        2,
        "the winner's question and its answer: {ids:?}"
    );
    assert_eq!(ids[0], format!("u{w}"));
    assert_eq!(messages[1].role, "assistant");
    let runs = server
        .state
        .store
        .list_runs(&RunQuery::newest(100).of_chat("contended"))
        .await
        .unwrap();
    assert_eq!(runs.len(), 1, "refused requests leave no run: {runs:?}");
    assert_eq!(
        runs[0].status,
        stategraph::internals::runtime::RunStatus::Finished
    );
    // The one turn is a whole run: it re-executes from its recording.
    assert_eq!(crate::support::assert_all_reexecute(&server.state).await, 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_posts_to_one_chat_store_one_turn_on_sqlite() {
    let db = SqliteDb::new();
    parallel_posts_store_exactly_one_turn(db.open().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_posts_to_one_chat_store_one_turn_on_postgres() {
    PgDb::with_store(8, parallel_posts_store_exactly_one_turn).await;
}

/// A NUL in a message's text is refused before anything is stored (issue
/// 38: a NUL cannot be stored everywhere a message's text goes — a fork's
/// `set`, PostgreSQL `TEXT` and `JSONB` — so it is refused everywhere, see
/// `server/refuse.rs` and `faults::nul`); it was accepted and stored as a
/// JSON escape before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_the_first_message_is_refused_on_postgres() {
    PgDb::with(|url| async move {
        let store = stategraph::internals::store::PostgresStore::connect(&url, 4)
            .await
            .unwrap();
        let server =
            TestServer::start_with_store(chat_model(false, None), Arc::new(store), |_| {}).await;
        let client = reqwest::Client::new();
        let resp = post_json(
            &client,
            &server.url("/api/chat"),
            &chat_body("nul", "hello\u{0}world"),
        )
        .await;
        assert_eq!(resp.status(), 400);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_character", "{v}");
        assert!(server.state.store.get_chat("nul").await.unwrap().is_none());
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn resuming_a_chat_that_does_not_exist_is_204() {
    let server = TestServer::start(chat_model(false, None), |c| {
        c.auth.api_keys.insert("key-bob".into(), "bob".into());
        c.auth.local_with_keys = true;
    })
    .await;
    let client = reqwest::Client::new();
    let resp = client
        .get(server.url("/api/chat/brand-new/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        204,
        "useChat({{resume: true}}) on a new chat"
    );
    let _ = post_json(&client, &server.url("/api/chat"), &chat_body("mine", "hi"))
        .await
        .text()
        .await;
    let bob = client
        .get(server.url("/api/chat/mine/stream"))
        .header("authorization", "Bearer key-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(bob.status(), 204, "another user's chat looks the same");
    server.shutdown().await;
}

/// Reads what the server sends until it closes the connection (or `limit`
/// passes: then `None`).
async fn read_until_closed(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(limit, read).await.ok()?;
    Some(String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off() {
    let server = TestServer::start(chat_model(false, None), |c| {
        c.server.header_timeout.0 = Duration::from_millis(500);
    })
    .await;
    let mut slow = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Half: ab")
        .await
        .unwrap();
    let closed = read_until_closed(&mut slow, Duration::from_secs(10)).await;
    assert!(
        closed.is_some(),
        "the connection is closed after the header timeout"
    );
    // A prompt client on the same server is served.
    let ok = reqwest::get(server.url("/healthz")).await.unwrap();
    assert_eq!(ok.status(), 200);
    server.shutdown().await;
}

#[tokio::test]
async fn oversized_heads_are_431() {
    let server = TestServer::start(chat_model(false, None), |_| {}).await;
    let client = reqwest::Client::new();
    // Over the limit: the documented JSON.
    let resp = client
        .get(server.url("/api/chats"))
        .header("x-pad", "a".repeat(20 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 431);
    assert_eq!(
        resp.json_value().await["error"]["code"],
        "headers_too_large"
    );
    // Far over it: cut off by the connection's buffer, before it is read whole.
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "GET /api/chats HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(200 * 1024)
    );
    let _ = s.write_all(head.as_bytes()).await;
    let answer = read_until_closed(&mut s, Duration::from_secs(10))
        .await
        .unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.80}");
    server.shutdown().await;
}

#[tokio::test]
async fn the_local_user_is_never_a_proxied_request_nor_on_with_api_keys() {
    let open = TestServer::start(chat_model(false, None), |_| {}).await;
    let client = reqwest::Client::new();
    let direct = client.get(open.url("/api/chats")).send().await.unwrap();
    assert_eq!(direct.status(), 200, "direct loopback is the local user");
    for header in ["x-forwarded-for", "forwarded", "x-real-ip", "via"] {
        let proxied = client
            .get(open.url("/api/chats"))
            .header(header, "203.0.113.9")
            .send()
            .await
            .unwrap();
        assert_eq!(proxied.status(), 401, "{header}");
        assert_eq!(proxied.json_value().await["error"]["code"], "unauthorized");
    }
    open.shutdown().await;

    let keyed = TestServer::start(chat_model(false, None), |c| {
        c.auth.api_keys.insert("k".into(), "alice".into());
    })
    .await;
    let anonymous = client.get(keyed.url("/api/chats")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "keys configured: no local user");
    let with_key = client
        .get(keyed.url("/api/chats"))
        .header("authorization", "Bearer k")
        .send()
        .await
        .unwrap();
    assert_eq!(with_key.status(), 200);
    keyed.shutdown().await;

    let both = TestServer::start(chat_model(false, None), |c| {
        c.auth.api_keys.insert("k".into(), "alice".into());
        c.auth.local_with_keys = true;
    })
    .await;
    let local = client.get(both.url("/api/chats")).send().await.unwrap();
    assert_eq!(local.status(), 200, "enabled explicitly");
    both.shutdown().await;
}

#[tokio::test]
async fn one_users_runs_never_hide_anothers() {
    let server = TestServer::start(chat_model(false, None), |c| {
        c.auth.api_keys.insert("key-alice".into(), "alice".into());
        c.auth.api_keys.insert("key-bob".into(), "bob".into());
    })
    .await;
    let client = reqwest::Client::new();
    let bob_chat = client
        .post(server.url("/api/chat"))
        .header("authorization", "Bearer key-bob")
        .header("content-type", "application/json")
        .body(chat_body("bob-chat", "hi").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(bob_chat.status(), 200);
    let _ = bob_chat.text().await;
    // Alice's 210 runs, all newer than Bob's.
    let template = server
        .state
        .store
        .list_runs(&RunQuery::newest(1))
        .await
        .unwrap()
        .remove(0);
    for i in 0..210u64 {
        let mut r = template.clone();
        r.id = uuid::Uuid::now_v7();
        r.user_id = "alice".into();
        r.chat_id = None;
        r.created_at = template.created_at + 1 + i;
        server.state.store.create_run(r).await.unwrap();
    }
    let list = |key: &'static str, query: String| {
        let client = client.clone();
        let url = server.url(&format!("/api/runs{query}"));
        async move {
            client
                .get(url)
                .header("authorization", format!("Bearer {key}"))
                .send()
                .await
                .unwrap()
                .json_value()
                .await
        }
    };
    let bobs = list("key-bob", String::new()).await;
    assert_eq!(bobs["runs"].as_array().unwrap().len(), 1, "{bobs}");
    assert_eq!(bobs["runs"][0]["chatId"], "bob-chat");
    assert_eq!(bobs["next"], Value::Null);
    // Alice pages through hers by cursor: 100 + 100 + 10, none twice.
    let mut seen = std::collections::HashSet::new();
    let mut query = "?limit=100".to_owned();
    loop {
        let page = list("key-alice", query.clone()).await;
        for r in page["runs"].as_array().unwrap() {
            assert!(seen.insert(r["id"].as_str().unwrap().to_owned()));
        }
        match page["next"].as_str() {
            Some(next) => query = format!("?limit=100&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 210);
    let finished = list("key-bob", "?status=finished&graph=chat".into()).await;
    assert_eq!(finished["runs"].as_array().unwrap().len(), 1);
    let none = list("key-bob", "?graph=research".into()).await;
    assert_eq!(none["runs"], json!([]));
    server.shutdown().await;
}

/// Fills `{run}`, `{chat}` and `{pad:N}` in a corpus string.
fn fill(s: &str, run: &str, chat: &str) -> String {
    let mut s = s.replace("{run}", run).replace("{chat}", chat);
    while let Some(start) = s.find("{pad:") {
        let end = start + s[start..].find('}').unwrap();
        let n: usize = s[start + 5..end].parse().unwrap();
        s.replace_range(start..=end, &"p".repeat(n));
    }
    s
}

#[tokio::test]
async fn every_request_of_the_bad_request_corpus_gets_its_json_error() {
    let corpus: Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::support::root().join("tests/fixtures/bad_requests/corpus.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let server = TestServer::start(chat_model(false, None), |c| {
        c.server.body_limit.0 = 64 * 1024
    })
    .await;
    let client = reqwest::Client::new();
    let ok = post_json(&client, &server.url("/api/chat"), &chat_body("good", "hi")).await;
    assert_eq!(ok.status(), 200);
    let _ = ok.text().await;
    let run = server
        .state
        .store
        .list_runs(&RunQuery::newest(1).of_chat("good"))
        .await
        .unwrap()[0]
        .id
        .to_string();
    let cases = corpus["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let path = fill(case["path"].as_str().unwrap(), &run, "good");
        let method: reqwest::Method = case["method"].as_str().unwrap().parse().unwrap();
        let mut rb = client.request(method, server.url(&path));
        if let Some(headers) = case["headers"].as_object() {
            for (k, v) in headers {
                rb = rb.header(k, fill(v.as_str().unwrap(), &run, "good"));
            }
        }
        let body = if let Some(j) = case.get("json") {
            Some(fill(&j.to_string(), &run, "good"))
        } else if let Some(r) = case["raw"].as_str() {
            Some(r.to_owned())
        } else {
            case["repeat"].as_array().map(|r| {
                r[0].as_str()
                    .unwrap()
                    .repeat(r[1].as_u64().unwrap() as usize)
            })
        };
        if let Some(body) = body {
            let ct = case["content_type"].as_str().unwrap_or("application/json");
            rb = rb.header("content-type", ct).body(body);
        }
        let resp = rb.send().await.unwrap();
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let text = resp.text().await.unwrap();
        assert_eq!(
            status,
            case["status"].as_u64().unwrap() as u16,
            "{name}: {text}"
        );
        assert_eq!(ct, "application/json", "{name}: {text}");
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"));
        let code = v["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {v}"));
        if let Some(want) = case["code"].as_str() {
            assert_eq!(code, want, "{name}: {v}");
        }
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    // Nothing of the refused chat requests was stored.
    let chats = server.state.store.list_chats("local", 100).await.unwrap();
    assert_eq!(chats.len(), 1, "{chats:?}");
    server.shutdown().await;
}

/// Median time of `n` sequential chats through `client`.
async fn median_chat(client: &reqwest::Client, server: &TestServer, tag: &str) -> Duration {
    let mut times = Vec::new();
    for i in 0..15 {
        let started = std::time::Instant::now();
        let resp = post_json(
            client,
            &server.url("/api/chat"),
            &chat_body(&format!("{tag}-{i}"), "hi"),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let _ = resp.text().await.unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

/// Sequential chats on one keep-alive connection cost no more than on
/// fresh connections: without TCP_NODELAY the last small write of every
/// response waited for the client's delayed ACK (~40 ms a chat instead of
/// a few).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_chats_on_a_kept_alive_connection_do_not_stall() {
    let server = TestServer::start(chat_model(false, None), |_| {}).await;
    let kept = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let _ = median_chat(&kept, &server, "warm").await;
    let on_one = median_chat(&kept, &server, "kept").await;
    let on_new = median_chat(&fresh, &server, "fresh").await;
    assert!(
        on_one <= on_new * 2 + Duration::from_millis(10),
        "one connection: {on_one:?} per chat; fresh connections: {on_new:?}"
    );
    server.shutdown().await;
}
