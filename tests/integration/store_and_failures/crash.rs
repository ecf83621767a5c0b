//! Crashes: a server process killed (SIGKILL) at points of a run — before,
//! during and after model streaming, during a tool call — and started
//! again; and two servers on one PostgreSQL database, the first killed.
//! The run completes and a resumed client stream carries every part
//! exactly once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::db::PgDb;
use crate::support::process::{Server, config, start};
use crate::support::{aisdk_validate, chat_body, report_json, root, text_of_parts};

/// The shipped graphs plus `fetcher`: an answer node that fetches a URL.
fn graphs(dir: &Path) -> PathBuf {
    let g = dir.join("graphs");
    std::fs::create_dir_all(&g).unwrap();
    std::fs::copy(root().join("graphs/chat.yaml"), g.join("chat.yaml")).unwrap();
    std::fs::write(
        g.join("fetcher.yaml"),
        "state: {fields: {messages: {type: messages}, query: {type: string}, answer: {type: string}, language: {type: string}, summary: {type: string}}}\nentry: fetch\nnodes:\n  - id: fetch\n    kind: agent\n    prompt: chat/direct.md\n    surface: answer\n    \
         tools: [http_fetch]\n    input: query\n    max_iterations: 3\n    output: answer\nedges: [fetch -> END]\n",
    )
    .unwrap();
    g
}

/// Where to kill the server.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// Right after `start`: before any model output.
    Start,
    /// After some of the narrator's text.
    MidText,
    /// After the narrator's text ended (follow-ups still to come).
    AfterText,
    /// While a tool call is waiting on a slow page.
    InTool,
}

/// Reads the SSE stream until the kill point.
async fn read_until(resp: reqwest::Response, at: KillAt, tool_waiting: &SlowPage) -> String {
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    loop {
        if let KillAt::InTool = at {
            // Polled, not notified: a notification sent while this loop
            // handles a chunk would be missed.
            if tool_waiting.waiting() {
                return seen;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                chunk = body.next() => match chunk {
                    Some(Ok(b)) => seen.push_str(&String::from_utf8_lossy(&b)),
                    _ => return seen,
                },
            }
            continue;
        }
        match body.next().await {
            Some(Ok(b)) => seen.push_str(&String::from_utf8_lossy(&b)),
            _ => return seen,
        }
        let done = match at {
            KillAt::Start => seen.contains(r#""type":"start""#),
            KillAt::MidText => seen.matches(r#""type":"text-delta""#).count() >= 10,
            KillAt::AfterText => seen.contains(r#""type":"text-end""#),
            KillAt::InTool => false,
        };
        if done {
            return seen;
        }
    }
}

/// Requests in flight on the slow page.
#[derive(Clone, Default)]
struct SlowPage(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl SlowPage {
    /// Whether a request is waiting for the page now.
    fn waiting(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    /// A page that never waits (for kill points outside tool calls).
    fn none() -> Self {
        Self::default()
    }
}

/// Decrements the in-flight count when a request ends or is dropped.
struct InFlight(SlowPage);

impl Drop for InFlight {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A page that answers only after `delay`; counts the requests waiting.
async fn slow_page(delay: Duration) -> (String, SlowPage) {
    let page = SlowPage::default();
    let n = page.clone();
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(move || {
            let n = n.clone();
            async move {
                n.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _in_flight = InFlight(n);
                tokio::time::sleep(delay).await;
                "<html><title>Slow</title><body>tide tables for today</body></html>"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/slow", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, page)
}

/// The chat's stream on `base` (after `last_event_id`), waiting until
/// the restarted server has it: the stream and the last status seen.
async fn resume_stream(
    base: &str,
    chat: &str,
    last_event_id: Option<stategraph::internals::sse::After>,
) -> (String, u16) {
    let client = reqwest::Client::new();
    let url = format!("{base}/api/chat/{chat}/stream");
    let mut last = 0;
    for _ in 0..300 {
        let mut rb = client.get(&url);
        if let Some(id) = last_event_id {
            rb = rb.header("last-event-id", id.to_string());
        }
        let resp = rb.send().await.unwrap();
        last = resp.status().as_u16();
        if last == 200 {
            let text = tokio::time::timeout(Duration::from_secs(60), resp.text())
                .await
                .expect("the resumed stream ends")
                .unwrap();
            return (text, last);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (String::new(), last)
}

/// Resumes the chat's stream on `server` until it ends; checks it.
async fn resume_and_check(server: &Server, chat: &str, expect_text: &str) -> Value {
    let client = reqwest::Client::new();
    let (text, last) = resume_stream(&server.base, chat, None).await;
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "resumed stream (last status {last}):\n{text}\n{}",
        server.log_tail(40)
    );
    let (ok, raw) = aisdk_validate(&text);
    assert!(ok, "{raw}\n{text}");
    let report = report_json(&raw);
    let parts = report["message"]["parts"].as_array().unwrap().clone();
    let texts: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(texts, [expect_text], "one answer, exactly once");
    assert!(
        text.contains(r#""type":"finish","finishReason":"stop""#),
        "the run finished normally"
    );
    // Every event id once, in order: no duplicate part from a lost attempt.
    let ids: Vec<stategraph::internals::sse::After> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|n| stategraph::internals::sse::After::parse(n).unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] <= w[1]), "ids in order");
    {
        let kind = "data-followups";
        let n = parts.iter().filter(|p| p["type"] == kind).count();
        assert!(n <= 1, "{kind} {n} times");
    }
    // The stored answer is the same message.
    let chat_json: Value = serde_json::from_str(
        &client
            .get(format!("{}/api/chat/{chat}", server.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let stored = chat_json["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(stored["role"], "assistant");
    let stored_text: String = stored["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(stored_text, expect_text, "{}", server.log_tail(40));
    report
}

/// The offline narrator's answer to `query` (deterministic).
async fn reference_answer(dir: &Path, graphs: &Path, graph: &str, query: &str) -> String {
    let server = start(dir, &config("[store]\nbackend = \"memory\"\n"), graphs).await;
    let mut body = chat_body("reference", query);
    body["graph"] = json!(graph);
    let text = reqwest::Client::new()
        .post(format!("{}/api/chat", server.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (_, raw) = aisdk_validate(&text);
    let report = report_json(&raw);
    report["message"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect()
}

async fn crash_and_restart(at: KillAt) {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs(dir.path());
    let (page, tool_waiting) = slow_page(Duration::from_secs(3)).await;
    let (graph, query) = match at {
        KillAt::InTool => ("fetcher", format!("what does {page} say?")),
        _ => ("chat", "please research the tides".to_owned()),
    };
    let expect = reference_answer(dir.path(), &g, graph, &query).await;
    assert!(!expect.is_empty());
    let store = format!(
        "[store]\nbackend = \"sqlite\"\ndata_dir = \"{}\"\n",
        dir.path().join("data").display()
    );
    let mut a = start(dir.path(), &config(&store), &g).await;
    let mut body = chat_body("crash-chat", &query);
    body["graph"] = json!(graph);
    let resp = reqwest::Client::new()
        .post(format!("{}/api/chat", a.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let _seen = tokio::time::timeout(Duration::from_secs(60), read_until(resp, at, &tool_waiting))
        .await
        .expect("kill point reached");
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let b = start(dir.path(), &config(&store), &g).await;
    let check = tokio::spawn({
        let (b_base, b_log) = (b.base.clone(), b.log.clone());
        let expect = expect.clone();
        async move {
            resume_and_check(
                &Server {
                    child: tokio::process::Command::new("true").spawn().unwrap(),
                    base: b_base,
                    log: b_log,
                },
                "crash-chat",
                &expect,
            )
            .await
        }
    });
    if let Err(e) = check.await {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            if f.file_name().to_string_lossy().ends_with(".log") {
                eprintln!(
                    "==> {}\n{}",
                    f.path().display(),
                    std::fs::read_to_string(f.path()).unwrap_or_default()
                );
            }
        }
        std::panic::resume_unwind(e.into_panic());
    }
    drop(b);
}

#[tokio::test]
async fn killed_before_model_output_the_run_completes_after_restart() {
    crash_and_restart(KillAt::Start).await;
}

#[tokio::test]
async fn killed_during_model_streaming_the_run_completes_after_restart() {
    crash_and_restart(KillAt::MidText).await;
}

#[tokio::test]
async fn killed_after_model_streaming_the_run_completes_after_restart() {
    crash_and_restart(KillAt::AfterText).await;
}

#[tokio::test]
async fn killed_during_a_tool_call_the_run_completes_after_restart() {
    crash_and_restart(KillAt::InTool).await;
}

#[tokio::test]
async fn two_servers_on_one_database_a_killed_b_resumes_the_run_and_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs(dir.path());
    let query = "please research the tides";
    let expect = reference_answer(dir.path(), &g, "chat", query).await;
    let db = PgDb::create().await;
    let url = db.url();
    let store = format!("[store]\nbackend = \"postgres\"\ndatabase_url = \"{url}\"\n");
    let mut a = start(dir.path(), &config(&store), &g).await;
    let b = start(dir.path(), &config(&store), &g).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/api/chat", a.base))
        .header("content-type", "application/json")
        .body(chat_body("ab-chat", query).to_string())
        .send()
        .await
        .unwrap();
    let seen = tokio::time::timeout(
        Duration::from_secs(60),
        read_until(resp, KillAt::MidText, &SlowPage::none()),
    )
    .await
    .expect("kill point");
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    resume_and_check(&b, "ab-chat", &expect).await;
    // A client that saw part of the stream on A continues on B from its
    // Last-Event-ID: no part twice, and it ends with the same answer.
    let before = whole_frames(&seen);
    let last = last_id(&before).expect("ids before the kill");
    // (B still holds the finished run's stream: `linger` is 30 s.)
    let resp = reqwest::Client::new()
        .get(format!("{}/api/chat/ab-chat/stream", b.base))
        .header("last-event-id", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let rest = resp.text().await.unwrap();
    let first = last_id(&rest[..rest.find("\n\n").map_or(0, |i| i + 2)]);
    assert!(first.is_none_or(|f| f > last), "from {last} on:\n{rest}");
    let whole = format!("{before}{rest}");
    let (ok, raw) = aisdk_validate(&whole);
    assert!(ok, "{raw}\n{whole}");
    let text = text_of_parts(&report_json(&raw)["message"]["parts"]);
    assert_eq!(text, expect, "the client's text is the answer, once");
    drop(b);
    db.drop_db().await;
}

#[tokio::test]
async fn two_servers_on_one_database_a_stop_asked_of_b_stops_the_run_on_a() {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs(dir.path());
    let db = PgDb::create().await;
    let url = db.url();
    let store = format!("[store]\nbackend = \"postgres\"\ndatabase_url = \"{url}\"\n");
    // An answer of 6 s, so the stop (polled by A every 250 ms) lands
    // mid-answer even on a loaded machine.
    let config = config(&store).replace("answer_tokens = 40", "answer_tokens = 400");
    let a = start(dir.path(), &config, &g).await;
    let b = start(dir.path(), &config, &g).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/api/chat", a.base))
        .header("content-type", "application/json")
        .body(chat_body("stop-chat", "please research the tides").to_string())
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while seen.matches(r#""type":"text-delta""#).count() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(60), body.next())
            .await
            .expect("text streams")
            .expect("stream open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let stop = client
        .post(format!("{}/api/chat/stop-chat/stop", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), 202);
    let stopped: Value = stop.json().await.unwrap();
    assert_eq!(stopped["elsewhere"], true, "{stopped}");
    // A's stream (the client's original one) ends with an abort, soon.
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut rest = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
        rest
    })
    .await
    .expect("the stream on A ends within seconds of the stop on B");
    let all = format!("{seen}{rest}");
    assert!(all.contains(r#""type":"abort""#), "{all}");
    assert!(all.ends_with("data: [DONE]\n\n"), "{all}");
    let (ok, raw) = aisdk_validate(&all);
    assert!(ok, "{raw}");
    assert!(
        !all.contains(r#""finishReason":"stop""#),
        "the answer did not run to its end"
    );
    let mut runs = Value::Null;
    for _ in 0..50 {
        runs = client
            .get(format!("{}/api/runs?chat=stop-chat", b.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if runs["runs"][0]["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(runs["runs"][0]["status"], "cancelled", "{runs}");
    let again = client
        .post(format!("{}/api/chat/stop-chat/stop", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409, "nothing left to stop");
    drop((a, b));
    db.drop_db().await;
}

/// The last `id:` of an SSE capture.
fn last_id(sse: &str) -> Option<stategraph::internals::sse::After> {
    sse.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("id: "))
        .find_map(stategraph::internals::sse::After::parse)
}

/// Only whole SSE frames (a kill can cut the last one off).
fn whole_frames(sse: &str) -> String {
    match sse.rfind("\n\n") {
        Some(end) => sse[..end + 2].to_owned(),
        None => String::new(),
    }
}

/// A client killed away from at `deltas` text deltas of the answer resumes
/// on a restarted server with its `Last-Event-ID`: what it assembled
/// before and after is one valid stream, no event twice, and its text is
/// the stored answer byte for byte.
async fn resume_after_crash_at(dir: &Path, g: &Path, deltas: usize, expect: &str) {
    let store = format!(
        "[store]\nbackend = \"sqlite\"\ndata_dir = \"{}\"\n",
        dir.join(format!("data-{deltas}")).display()
    );
    let chat = format!("lei-{deltas}");
    let mut a = start(dir, &config(&store), g).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/api/chat", a.base))
        .header("content-type", "application/json")
        .body(chat_body(&chat, "please research the tides").to_string())
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while seen.matches(r#""type":"text-delta""#).count() < deltas {
        match tokio::time::timeout(Duration::from_secs(60), body.next()).await {
            Ok(Some(Ok(b))) => seen.push_str(&String::from_utf8_lossy(&b)),
            _ => panic!("the stream ended before {deltas} deltas:\n{seen}"),
        }
    }
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    drop(body);
    let before = whole_frames(&seen);
    let last = last_id(&before).expect("an event id before the crash");
    let b = start(dir, &config(&store), g).await;
    let client = reqwest::Client::new();
    let (after, _) = resume_stream(&b.base, &chat, Some(last)).await;
    assert!(
        after.ends_with("data: [DONE]\n\n"),
        "{after}\n{}",
        b.log_tail(40)
    );
    let whole = format!("{before}{after}");
    let ids: Vec<stategraph::internals::sse::After> = whole
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|n| stategraph::internals::sse::After::parse(n).unwrap())
        .collect();
    // Every frame has its own id (`SEQ.N` past an event's first); the
    // resumed part starts after what the client had.
    assert!(ids.windows(2).all(|w| w[0] <= w[1]), "in order: {ids:?}");
    let first_after = last_id(&after[..after.find("\n\n").map_or(0, |i| i + 2)]);
    assert!(
        first_after.is_none_or(|f| f > last),
        "nothing the client had is sent again: {ids:?}"
    );
    let (ok, raw) = aisdk_validate(&whole);
    assert!(ok, "{raw}\n{whole}");
    let report = report_json(&raw);
    let client_text = text_of_parts(&report["message"]["parts"]);
    let stored: Value = client
        .get(format!("{}/api/chat/{chat}", b.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stored_text =
        text_of_parts(&stored["messages"].as_array().unwrap().last().unwrap()["parts"]);
    assert_eq!(
        client_text,
        stored_text,
        "killed at {deltas} deltas\n{}",
        b.log_tail(40)
    );
    assert_eq!(client_text, expect, "and it is the whole answer, once");
}

#[tokio::test]
async fn a_client_resuming_with_its_last_event_id_after_a_crash_ends_with_the_stored_answer() {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs(dir.path());
    let expect = reference_answer(dir.path(), &g, "chat", "please research the tides").await;
    for deltas in [1, 7, 19, 33] {
        resume_after_crash_at(dir.path(), &g, deltas, &expect).await;
    }
}
