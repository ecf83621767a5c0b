//! The chat server on a real socket: the AI SDK stream for every path,
//! resume and stop, stored chats, users, bad input, graphs and health.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::JsonBody;
use crate::support::model::chat_model;
use crate::support::server::TestServer;
use crate::support::{aisdk_validate, chat_body, post_json, report_json, validate_args};

async fn validate_post(server: &TestServer, body: &Value) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body.json");
    std::fs::write(&file, body.to_string()).unwrap();
    let url = server.url("/api/chat");
    let file = file.to_string_lossy().into_owned();
    tokio::task::spawn_blocking(move || validate_args(&[&url, "--body", &file, "--json"]))
        .await
        .unwrap()
}

fn text_of(report: &Value) -> String {
    report["message"]["parts"]
        .as_array()
        .map_or_else(String::new, |p| {
            p.iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect()
        })
}

#[tokio::test]
async fn every_intent_streams_a_valid_ui_message() {
    let server = TestServer::start(chat_model(false, None), |_| {}).await;
    for intent in [
        "QUICK_ANSWER",
        "RESEARCH",
        "EXPLAIN",
        "CLARIFY",
        "OUT_OF_SCOPE",
        "DIRECT",
    ] {
        let mut body = chat_body(&format!("intent-{intent}"), "what is six times seven?");
        body["forced_intent"] = json!(intent);
        let (ok, report) = validate_post(&server, &body).await;
        assert!(ok, "{intent}: {report}");
        let report = report_json(&report);
        assert_eq!(
            text_of(&report),
            "The answer is 42 and that is final.",
            "{intent}"
        );
        let parts = report["message"]["parts"].as_array().unwrap();
        assert!(
            parts.iter().any(|p| p["type"] == "data-thinking"
                && p["data"]["node"] == "router"
                && p["data"]["text"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("Intent: {intent} (forced)"))),
            "{intent}"
        );
        let meta = &report["message"]["metadata"];
        assert_eq!(meta["graph"], "chat");
        assert_eq!(meta["offlineModel"], false);
        assert!(meta["usage"]["totalTokens"].as_u64().unwrap() > 0);
    }
    // Every intent's run re-executes from its recording alone.
    assert_eq!(crate::support::assert_all_reexecute(&server.state).await, 6);
    server.shutdown().await;
}

#[tokio::test]
async fn an_answer_node_with_tools_streams_tool_parts() {
    let server = TestServer::start(chat_model(false, None), |_| {}).await;
    let mut body = chat_body("tools-1", "compute 6*7");
    body["graph"] = json!("tools");
    let (ok, report) = validate_post(&server, &body).await;
    assert!(ok, "{report}");
    let report = report_json(&report);
    let counts = &report["chunkCounts"];
    for c in [
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-output-available",
        "start-step",
        "finish-step",
    ] {
        assert!(counts[c].as_u64().unwrap_or(0) >= 1, "{c}: {counts}");
    }
    let tool = report["message"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "dynamic-tool")
        .cloned()
        .unwrap();
    assert_eq!(tool["toolName"], "calculator");
    assert_eq!(tool["state"], "output-available");
    assert_eq!(tool["output"]["result"], 42);
    server.shutdown().await;
}

#[tokio::test]
async fn an_error_mid_run_is_one_error_chunk_with_a_reference_and_no_internals() {
    let server = TestServer::start(chat_model(true, None), |_| {}).await;
    let body = chat_body("err-1", "fail please");
    let (ok, raw) = validate_post(&server, &body).await;
    assert!(ok, "{raw}");
    let report = report_json(&raw);
    assert_eq!(report["errorChunks"].as_array().unwrap().len(), 1);
    let err = report["errorChunks"][0].as_str().unwrap();
    let run_id = report["message"]["metadata"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(err.contains(&run_id), "the reference is the run id: {err}");
    assert!(
        !raw.contains("secret upstream detail"),
        "internals must not reach the client"
    );
    assert_eq!(report["message"]["metadata"]["reference"], run_id);
    // The run is recorded as failed, with the detail, for the operator.
    let run = server
        .state
        .store
        .get_run(run_id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        run.status,
        stategraph::internals::runtime::RunStatus::Failed
    );
    assert!(
        run.error
            .unwrap()
            .message
            .contains("secret upstream detail")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_response_has_the_stream_headers_and_the_correlation_id() {
    let server = TestServer::start(chat_model(false, None), |_| {}).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(server.url("/api/chat"))
        .header("content-type", "application/json")
        .header("x-request-id", "corr-123")
        .body(chat_body("hdr-1", "hi").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers();
    assert_eq!(h["content-type"], "text/event-stream");
    assert_eq!(h["cache-control"], "no-cache");
    assert_eq!(h["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(h["x-accel-buffering"], "no");
    assert_eq!(h["x-request-id"], "corr-123");
    let text = resp.text().await.unwrap();
    assert!(text.contains(r#""requestId":"corr-123""#), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    // A generated id when none is sent.
    let resp = client.get(server.url("/healthz")).send().await.unwrap();
    assert!(resp.headers()["x-request-id"].to_str().unwrap().len() >= 16);
    server.shutdown().await;
}

#[tokio::test]
async fn resume_is_204_when_idle_and_a_full_replay_while_active() {
    let server =
        TestServer::start(chat_model(false, Some(Duration::from_millis(15))), |_| {}).await;
    let client = reqwest::Client::new();
    // Nothing to resume for a chat that does not exist (yet): 204, as
    // `useChat({ resume: true })` expects on mount.
    let idle = client
        .get(server.url("/api/chat/nope/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(idle.status(), 204);
    let first = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("res-1", "research it"),
    )
    .await;
    let live = first.text().await.unwrap();
    // After the linger period the chat has nothing active.
    // While it lingers, a resume replays the whole stream, byte for byte.
    let replay = client
        .get(server.url("/api/chat/res-1/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    let replay = replay.text().await.unwrap();
    let strip = |s: &str| {
        s.split("\n\n")
            .filter(|f| !f.starts_with(':'))
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    assert_eq!(strip(&replay), strip(&live));
    let (ok, report) = aisdk_validate(&replay);
    assert!(ok, "{report}");
    // Once the run is over its hub is gone (a finished run leaves only a
    // note); a resume then rebuilds the stream from the store, the same
    // bytes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let from_store = client
        .get(server.url("/api/chat/res-1/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(from_store.status(), 200);
    assert_eq!(strip(&from_store.text().await.unwrap()), strip(&live));
    server.shutdown().await;

    let server = TestServer::start(chat_model(false, None), |c| {
        c.server.linger.0 = Duration::from_millis(10)
    })
    .await;
    let _ = post_json(&client, &server.url("/api/chat"), &chat_body("res-2", "hi"))
        .await
        .text()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = client
        .get(server.url("/api/chat/res-2/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(idle.status(), 204);
    let (ok, raw) = tokio::task::spawn_blocking({
        let url = server.url("/api/chat");
        move || validate_args(&[&url, "--resume", "--chat-id", "res-2", "--json"])
    })
    .await
    .unwrap();
    assert!(ok && raw.contains("204"), "{raw}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_resumes_with_every_part_exactly_once() {
    let server =
        TestServer::start(chat_model(false, Some(Duration::from_millis(10))), |_| {}).await;
    let client = reqwest::Client::new();
    let resp = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("drop-1", "research it"),
    )
    .await;
    let mut body = resp.bytes_stream();
    let mut got = Vec::new();
    while got.len() < 1500 {
        got.extend_from_slice(&body.next().await.unwrap().unwrap());
    }
    drop(body); // the client goes away; the run goes on
    // Resume: a full replay (what DefaultChatTransport expects) that follows the run live.
    let resumed = client
        .get(server.url("/api/chat/drop-1/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let text = resumed.text().await.unwrap();
    let (ok, raw) = aisdk_validate(&text);
    assert!(ok, "{raw}");
    let report = report_json(&raw);
    assert_eq!(text_of(&report), "The answer is 42 and that is final.");
    // Every chunk id (`SEQ` or `SEQ.N`) appears once, in order.
    let id = |n: &str| stategraph::internals::sse::After::parse(n).unwrap();
    let ids: Vec<_> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(id)
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let mut dedup = ids.clone();
    dedup.dedup();
    let deltas = text.matches(r#""type":"text-delta""#).count();
    assert_eq!(
        deltas,
        "The answer is 42 and that is final."
            .split_inclusive(' ')
            .count()
    );
    // Resuming after the last id the client saw sends only the rest.
    let seen = String::from_utf8_lossy(&got)
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .filter_map(stategraph::internals::sse::After::parse)
        .max()
        .unwrap();
    let rest = client
        .get(server.url("/api/chat/drop-1/stream"))
        .header("last-event-id", seen.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rest_ids: Vec<_> = rest
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(id)
        .collect();
    assert!(rest_ids.iter().all(|&i| i > seen));
    assert!(rest.ends_with("data: [DONE]\n\n"));
    server.shutdown().await;
}

#[tokio::test]
async fn stop_cancels_the_active_run_and_its_stream_ends_cleanly() {
    let server =
        TestServer::start(chat_model(false, Some(Duration::from_millis(40))), |_| {}).await;
    let client = reqwest::Client::new();
    let stream = spawn_chat(&client, &server, "stop-1");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stop = client
        .post(server.url("/api/chat/stop-1/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), 202);
    let text = tokio::time::timeout(Duration::from_secs(5), stream)
        .await
        .expect("the stream ends promptly")
        .unwrap();
    assert!(text.contains(r#""type":"abort""#), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    let (ok, raw) = aisdk_validate(&text);
    assert!(ok, "{raw}");
    let again = client
        .post(server.url("/api/chat/stop-1/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    assert_eq!(again.json_value().await["error"]["code"], "no_active_run");
    server.shutdown().await;
}

#[tokio::test]
async fn idle_streams_get_keep_alive_comments() {
    let server = TestServer::start(chat_model(false, Some(Duration::from_millis(120))), |c| {
        c.server.keep_alive.0 = Duration::from_millis(50)
    })
    .await;
    let client = reqwest::Client::new();
    let text = post_json(&client, &server.url("/api/chat"), &chat_body("ka-1", "hi"))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.contains(": keep-alive\n\n"));
    let (ok, raw) = aisdk_validate(&text);
    assert!(ok, "{raw}");
    server.shutdown().await;
}

#[tokio::test]
async fn chats_and_messages_are_stored_and_regenerate_replaces_the_answer() {
    let server = TestServer::start(chat_model(false, None), |_| {}).await;
    let client = reqwest::Client::new();
    let body = chat_body("store-1", "first question");
    let first = post_json(&client, &server.url("/api/chat"), &body)
        .await
        .text()
        .await
        .unwrap();
    assert!(first.contains("[DONE]"));
    let chat = client
        .get(server.url("/api/chat/store-1"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(chat["title"], "first question");
    let msgs = chat["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[1]["role"], "assistant");
    let answer_id = msgs[1]["id"].as_str().unwrap().to_owned();
    assert!(
        first.contains(&answer_id),
        "the stored answer is the streamed message"
    );
    let parts = msgs[1]["parts"].as_array().unwrap();
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "The answer is 42 and that is final.");
    // Regenerate: the client sends the history without the answer.
    let mut regen = body.clone();
    regen["trigger"] = json!("regenerate-message");
    let _ = post_json(&client, &server.url("/api/chat"), &regen)
        .await
        .text()
        .await
        .unwrap();
    let chat = client
        .get(server.url("/api/chat/store-1"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    let msgs = chat["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "the old answer is replaced, not kept");
    assert_ne!(msgs[1]["id"], answer_id);
    // Listing, then deleting.
    let list = client
        .get(server.url("/api/chats"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(list["chats"][0]["id"], "store-1");
    assert_eq!(
        client
            .delete(server.url("/api/chat/store-1"))
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        client
            .get(server.url("/api/chat/store-1"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    server.shutdown().await;
}

#[tokio::test]
async fn users_never_see_each_others_chats() {
    let server = TestServer::start(chat_model(false, None), |c| {
        c.auth.api_keys.insert("key-alice".into(), "alice".into());
        c.auth.api_keys.insert("key-bob".into(), "bob".into());
    })
    .await;
    let client = reqwest::Client::new();
    let as_user = |key: &str, rb: reqwest::RequestBuilder| {
        rb.header("authorization", format!("Bearer {key}"))
    };
    let resp = as_user(
        "key-alice",
        client
            .post(server.url("/api/chat"))
            .header("content-type", "application/json"),
    )
    .body(chat_body("alice-chat", "private").to_string())
    .send()
    .await
    .unwrap();
    let _ = resp.text().await.unwrap();
    for (method, path) in [
        ("GET", "/api/chat/alice-chat"),
        ("POST", "/api/chat/alice-chat/stop"),
        ("DELETE", "/api/chat/alice-chat"),
    ] {
        let rb = client.request(method.parse().unwrap(), server.url(path));
        let resp = as_user("key-bob", rb).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{method} {path}");
        assert_eq!(resp.json_value().await["error"]["code"], "not_found");
    }
    // Resuming it is "nothing to resume", exactly as for a missing chat.
    let resume = as_user(
        "key-bob",
        client.get(server.url("/api/chat/alice-chat/stream")),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resume.status(), 204);
    // Bob cannot write into it either.
    let resp = as_user(
        "key-bob",
        client
            .post(server.url("/api/chat"))
            .header("content-type", "application/json"),
    )
    .body(chat_body("alice-chat", "hijack").to_string())
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 404);
    let bobs = as_user("key-bob", client.get(server.url("/api/chats")))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(bobs["chats"], json!([]));
    let alices = as_user("key-alice", client.get(server.url("/api/chat/alice-chat")))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(
        alices["messages"][0]["parts"][0]["text"], "private",
        "the hijack attempt stored nothing"
    );
    let wrong = as_user("nope", client.get(server.url("/api/chats")))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    server.shutdown().await;
}

#[tokio::test]
async fn bad_input_gets_a_json_error_and_stores_nothing() {
    let server = TestServer::start(chat_model(false, None), |c| {
        c.server.body_limit.0 = 64 * 1024
    })
    .await;
    let client = reqwest::Client::new();
    let url = server.url("/api/chat");
    let ok = chat_body("bad-1", "hi");
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "invalid_json"),
        (b"[1,2]".to_vec(), 400, "invalid_request"),
        (
            json!({"id": "bad-1"}).to_string().into_bytes(),
            400,
            "invalid_request",
        ),
        (
            json!({"id": "bad-1", "messages": []})
                .to_string()
                .into_bytes(),
            400,
            "empty_messages",
        ),
        (
            ok.to_string()
                .replace("\"user\"", "\"wizard\"")
                .into_bytes(),
            400,
            "invalid_role",
        ),
        (
            ok.to_string()
                .replace("\"type\":\"text\"", "\"type\":\"hologram\"")
                .into_bytes(),
            400,
            "invalid_part",
        ),
        (
            ok.to_string()
                .replace("submit-message", "teleport")
                .into_bytes(),
            400,
            "unknown_trigger",
        ),
        (
            {
                let mut b = ok.clone();
                b["graph"] = json!("nonexistent");
                b.to_string().into_bytes()
            },
            400,
            "unknown_graph",
        ),
        (
            b"{\"id\":\"bad-1\",\"messages\":\"\xff\xfe\"}".to_vec(),
            400,
            "invalid_utf8",
        ),
        (
            {
                let mut b = ok.clone();
                b["messages"][0]["parts"][0]["text"] = json!("x".repeat(100 * 1024));
                b.to_string().into_bytes()
            },
            413,
            "payload_too_large",
        ),
    ];
    for (body, status, code) in cases {
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), status, "{code}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let v = resp.json_value().await;
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().len() > 5);
    }
    assert_eq!(
        server.state.store.get_chat("bad-1").await.unwrap(),
        None,
        "nothing stored half-way"
    );
    let list = client
        .get(server.url("/api/chats"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(list["chats"], json!([]));
    let unknown = client.get(server.url("/api/nothing")).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(unknown.json_value().await["error"]["code"], "not_found");
    let wrong_method = client.put(server.url("/api/chats")).send().await.unwrap();
    assert_eq!(wrong_method.status(), 405);
    server.shutdown().await;
}

#[tokio::test]
async fn graphs_health_and_metrics_endpoints() {
    let server = TestServer::start(chat_model(false, None), |_| {}).await;
    let client = reqwest::Client::new();
    let graphs = client
        .get(server.url("/api/graphs"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    let ids: Vec<&str> = graphs["graphs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["id"].as_str())
        .collect();
    assert_eq!(ids, ["chat", "tools"]);
    let chat = client
        .get(server.url("/api/graphs/chat"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert!(
        chat["mermaid"]
            .as_str()
            .unwrap()
            .starts_with("flowchart TD")
    );
    assert!(
        chat["mermaid"]
            .as_str()
            .unwrap()
            .contains("router -->|RESEARCH| research")
    );
    assert_eq!(
        chat["nodes"].as_array().unwrap().len(),
        11,
        "ten nodes and the card"
    );
    assert_eq!(
        client
            .get(server.url("/api/graphs/nope"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        client
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let ready = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json_value().await["store"]["ok"], true);
    let _ = post_json(&client, &server.url("/api/chat"), &chat_body("m-1", "hi"))
        .await
        .text()
        .await
        .unwrap();
    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for needle in [
        r#"stategraph_http_requests_total{method="POST",route="/api/chat",status="200"} 1"#,
        r#"stategraph_runs_total{graph="chat",outcome="finished"} 1"#,
        "stategraph_active_streams ",
        r#"stategraph_node_duration_seconds_count{graph="chat",node="narrator"} 1"#,
        r#"stategraph_llm_tokens_total{graph="chat",kind="completion"}"#,
        r#"stategraph_tool_calls_total{tool="calculator",outcome="ok"} 1"#,
        r#"stategraph_first_visible_seconds_count{graph="chat"} 1"#,
    ] {
        assert!(metrics.contains(needle), "missing {needle}\n{metrics}");
    }
    server.shutdown().await;
}

/// Copies the shipped graphs and prompts into a temp dir the test can edit.
fn editable_graphs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = crate::support::root();
    std::fs::create_dir_all(dir.path().join("graphs")).unwrap();
    std::fs::create_dir_all(dir.path().join("prompts/chat")).unwrap();
    std::fs::copy(
        root.join("graphs/chat.yaml"),
        dir.path().join("graphs/chat.yaml"),
    )
    .unwrap();
    for e in std::fs::read_dir(root.join("prompts/chat"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(
            e.path(),
            dir.path().join("prompts/chat").join(e.file_name()),
        )
        .unwrap();
    }
    dir
}

#[tokio::test]
async fn graph_files_reload_on_change_and_a_broken_file_keeps_the_previous_version() {
    let dir = editable_graphs();
    let (g, p) = (dir.path().join("graphs"), dir.path().join("prompts"));
    let server = TestServer::start(chat_model(false, None), move |c| {
        c.paths.graphs = g;
        c.paths.prompts = p;
        c.server.reload_interval.0 = Duration::from_millis(100);
    })
    .await;
    let client = reqwest::Client::new();
    let version = |v: &Value| v["graphs"][0]["version"].as_str().unwrap().to_owned();
    let v1 = version(
        &client
            .get(server.url("/api/graphs"))
            .send()
            .await
            .unwrap()
            .json_value()
            .await,
    );
    // A prompt edit is picked up by the watcher and changes the version.
    let prompt = dir.path().join("prompts/chat/direct.md");
    let text = std::fs::read_to_string(&prompt).unwrap();
    std::fs::write(&prompt, format!("{text}\nBe brief.\n")).unwrap();
    let mut v2 = v1.clone();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        v2 = version(
            &client
                .get(server.url("/api/graphs"))
                .send()
                .await
                .unwrap()
                .json_value()
                .await,
        );
        if v2 != v1 {
            break;
        }
    }
    assert_ne!(v1, v2, "the edited prompt was reloaded");
    // A broken file is rejected with its diagnostics; the previous version keeps serving.
    let graph = dir.path().join("graphs/chat.yaml");
    let yaml = std::fs::read_to_string(&graph).unwrap();
    std::fs::write(
        &graph,
        yaml.replace("narrator -> followup", "narrator -> folowup"),
    )
    .unwrap();
    let resp = client
        .post(server.url("/api/graphs/reload"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let report = resp.json_value().await;
    assert_eq!(report["rejected"], json!(["chat"]));
    let d = &report["diagnostics"][0];
    assert_eq!(d["code"], "unknown-node");
    assert!(d["hint"].as_str().unwrap().contains("followup"));
    let listed = client
        .get(server.url("/api/graphs"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(version(&listed), v2, "the last good version serves");
    assert_eq!(listed["graphs"][0]["stale"], true);
    assert_eq!(
        client
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        503,
        "not ready while a graph file is invalid"
    );
    let text = post_json(
        &client,
        &server.url("/api/chat"),
        &chat_body("reload-1", "hi"),
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(text.contains(&format!(r#""graphVersion":"{v2}""#)));
    // Fixing the file brings it back.
    std::fs::write(&graph, yaml).unwrap();
    let resp = client
        .post(server.url("/api/graphs/reload"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        client
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_lets_runs_in_flight_finish() {
    let server =
        TestServer::start(chat_model(false, Some(Duration::from_millis(20))), |_| {}).await;
    let client = reqwest::Client::new();
    let stream = spawn_chat(&client, &server, "sd-1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let state = Arc::clone(&server.state);
    tokio::time::timeout(Duration::from_secs(20), server.shutdown())
        .await
        .expect("shutdown completes");
    let text = stream.await.unwrap();
    assert!(
        text.contains(r#""finishReason":"stop""#),
        "the run finished rather than being cut: {}",
        &text[text.len().saturating_sub(300)..]
    );
    let chat = state.store.messages("sd-1").await.unwrap();
    assert_eq!(
        chat.len(),
        2,
        "the answer was stored before the server stopped"
    );
}

/// The graph a request without `graph` runs is configuration
/// (`[server] default_graph`), not a name the engine knows.
#[tokio::test]
async fn a_request_naming_no_graph_runs_the_configured_default() {
    let offline = Arc::new(stategraph::internals::llm::offline::OfflineModel::default());
    let client = reqwest::Client::new();
    let body = chat_body("default-1", "hello there");
    let server = TestServer::start(offline.clone(), |c| {
        c.server.default_graph = "tools".into();
    })
    .await;
    let url = format!("http://{}/api/chat", server.addr);
    let resp = post_json(&client, &url, &body).await;
    assert_eq!(resp.status().as_u16(), 200);
    let _ = resp.text().await.unwrap();
    let runs = server
        .state
        .store
        .list_runs(&stategraph::internals::store::RunQuery::newest(10))
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].graph, "tools");
    let server = TestServer::start(offline, |c| {
        c.server.default_graph = "nonexistent".into();
    })
    .await;
    let url = format!("http://{}/api/chat", server.addr);
    let resp = post_json(&client, &url, &body).await;
    assert_eq!(resp.status().as_u16(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unknown_graph", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nonexistent"),
        "{e}"
    );
}

/// Posts a long chat turn in a task of its own; its handle yields the
/// whole SSE body once the stream ends.
fn spawn_chat(
    client: &reqwest::Client,
    server: &TestServer,
    chat_id: &str,
) -> tokio::task::JoinHandle<String> {
    let (client, url) = (client.clone(), server.url("/api/chat"));
    let body = chat_body(chat_id, "research a lot");
    tokio::spawn(async move { post_json(&client, &url, &body).await.text().await.unwrap() })
}
