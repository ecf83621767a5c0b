//! The studio (`/studio`) and the API it reads: its files served from the
//! binary without a key while the API still wants one; the graph detail it
//! draws from (edges, node settings, prompt text, field types); the runs
//! timeline, `until` filter and re-execution with its first divergence;
//! and the browser test (tests/studio/studio.test.mjs) driving Chromium
//! against the real binary.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::browser::{artifacts, browser};
use crate::support::model::chat_model as model;
use crate::support::process::{copy_shipped_graphs, serve_binary};
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json, root};

/// A graph that answers from a template: re-executing a run of it after the
/// template changed diverges at the node that renders it.
const ECHO: &str = r#"
description: Echoes the question.
entry: echo
state:
  fields:
    messages: { type: messages }
    question: { type: string }
    reply:    { type: string }
chat:
  text: question
  answer: reply
nodes:
  - id: echo
    kind: set
    surface: answer
    set:
      reply: "You asked: {{ question }}"
edges: [echo -> END]
"#;

/// An invalid graph file: an edge to a node that does not exist (line 14).
const BROKEN: &str = "# An edge names a node that does not exist.
description: Broken on purpose.
entry: start
state:
  fields:
    query: { type: string }
nodes:
  - id: start
    kind: noop
  - id: review
    kind: noop
edges:
  - start -> review
  - review -> revew
";

async fn text_of(resp: reqwest::Response) -> (u16, String, reqwest::header::HeaderMap) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, resp.text().await.unwrap(), headers)
}

#[tokio::test]
async fn studio_files_are_served_without_a_key_and_the_api_still_wants_one() {
    let server = TestServer::start(model(false, None), |c| {
        c.auth.api_keys.insert("k1".into(), "alice".into());
    })
    .await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    let (status, _, h) = text_of(client.get(server.url("/")).send().await.unwrap()).await;
    assert_eq!(status, 307);
    assert_eq!(h["location"], "/studio");

    for path in ["/studio", "/studio/"] {
        let (status, body, h) = text_of(client.get(server.url(path)).send().await.unwrap()).await;
        assert_eq!(status, 200, "{path}");
        assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
        assert!(body.contains(r#"src="/studio/app.js""#), "{path}: {body}");
    }
    let (status, body, h) = text_of(
        client
            .get(server.url("/studio/app.js"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript"),
        "ES modules need a JavaScript type: {:?}",
        h["content-type"]
    );
    assert_eq!(h["cache-control"], "no-cache");
    assert!(body.contains("import"));
    let (_, _, h) = text_of(
        client
            .get(server.url("/studio/studio.css"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(h["content-type"].to_str().unwrap().starts_with("text/css"));

    // Revalidation: the same ETag gets a 304 without a body.
    let etag = client
        .get(server.url("/studio/graph.js"))
        .send()
        .await
        .unwrap()
        .headers()["etag"]
        .clone();
    let again = client
        .get(server.url("/studio/graph.js"))
        .header("if-none-match", etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"], etag);
    assert!(again.bytes().await.unwrap().is_empty());

    // Unknown files and paths outside the studio are JSON 404s.
    for path in [
        "/studio/nope.js",
        "/studio/README.md",
        "/studio/..%2FCargo.toml",
    ] {
        let (status, body, _) = text_of(client.get(server.url(path)).send().await.unwrap()).await;
        assert_eq!(status, 404, "{path}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "not_found", "{path}");
    }

    // The data behind it is not public.
    let (status, body, _) =
        text_of(client.get(server.url("/api/graphs")).send().await.unwrap()).await;
    assert_eq!(status, 401, "{body}");
    let resp = client
        .get(server.url("/api/graphs"))
        .bearer_auth("k1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    server.shutdown().await;
}

#[tokio::test]
async fn studio_files_are_gzipped_for_clients_that_accept_it() {
    let server = TestServer::start(model(false, None), |_| {}).await;
    let client = reqwest::Client::new();
    for file in ["/studio/graph.js", "/studio/studio.css", "/studio"] {
        let plain = client.get(server.url(file)).send().await.unwrap();
        assert!(plain.headers().get("content-encoding").is_none(), "{file}");
        assert_eq!(plain.headers()["vary"], "accept-encoding");
        let plain_tag = plain.headers()["etag"].clone();
        let plain = plain.bytes().await.unwrap();

        // Chromium's own header.
        let resp = client
            .get(server.url(file))
            .header("accept-encoding", "gzip, deflate, br, zstd")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-encoding"], "gzip", "{file}");
        assert_eq!(resp.headers()["vary"], "accept-encoding");
        let tag = resp.headers()["etag"].clone();
        assert_ne!(tag, plain_tag, "another representation, another ETag");
        let gz = resp.bytes().await.unwrap();
        assert!(
            gz.len() * 2 < plain.len(),
            "{file}: {} gzipped bytes for {}",
            gz.len(),
            plain.len()
        );
        let mut unzipped = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut unzipped)
            .unwrap();
        assert_eq!(unzipped, plain, "{file}");
        let again = client
            .get(server.url(file))
            .header("accept-encoding", "gzip")
            .header("if-none-match", tag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304);

        let refused = client
            .get(server.url(file))
            .header("accept-encoding", "gzip;q=0, br")
            .send()
            .await
            .unwrap();
        assert!(refused.headers().get("content-encoding").is_none());
    }
    server.shutdown().await;
}

#[tokio::test]
async fn graph_detail_has_what_the_studio_draws() {
    let server = TestServer::start(model(false, None), |_| {}).await;
    let client = reqwest::Client::new();
    let g: Value = client
        .get(server.url("/api/graphs/chat"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let edges = g["edges"].as_array().expect("edges");
    let has = |from: &str, kind: &str, label: Option<&str>| {
        edges.iter().any(|e| {
            e["from"] == from && e["kind"] == kind && label.is_none_or(|l| e["label"] == l)
        })
    };
    for case in ["QUICK_ANSWER", "RESEARCH", "EXPLAIN"] {
        assert!(
            has("router", "case", Some(case)),
            "router case {case}: {edges:?}"
        );
    }
    assert!(has("followup", "default", Some("default")), "{edges:?}");
    assert!(
        edges.iter().any(|e| e["to"] == "__end__"),
        "edges into END are named __end__: {edges:?}"
    );
    let router = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "router")
        .expect("router");
    assert_eq!(router["kind"], "router");
    assert!(
        router["settings"]["intents"]
            .as_array()
            .is_some_and(|i| i.iter().any(|x| x == "EXPLAIN")),
        "{router}"
    );
    assert_eq!(router["prompt"]["name"], "chat/router.md");
    assert!(
        router["prompt"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("intent")),
        "the prompt's text: {router}"
    );
    assert!(router["tools"].is_array());
    let intent = g["state"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "intent")
        .expect("intent field");
    assert_eq!(intent["type"]["type"], "string", "{intent}");
    server.shutdown().await;
}

/// Serves `graphs` (name → YAML) from a temporary directory, with the
/// shipped prompts.
async fn serve_files(graphs: &[(&str, &str)]) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("graphs")).unwrap();
    for (name, yaml) in graphs {
        std::fs::write(dir.path().join(format!("graphs/{name}.yaml")), yaml).unwrap();
    }
    let graphs_dir = dir.path().join("graphs");
    let server = TestServer::start(model(false, None), |c| {
        c.paths.graphs = graphs_dir;
        c.paths.prompts = root().join("prompts");
    })
    .await;
    (server, dir)
}

async fn chat(server: &TestServer, chat: &str, graph: &str, text: &str) -> String {
    let client = reqwest::Client::new();
    let mut body = chat_body(chat, text);
    body["graph"] = json!(graph);
    let sse = post_json(&client, &server.url("/api/chat"), &body)
        .await
        .text()
        .await
        .unwrap();
    assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    let runs: Value = client
        .get(server.url(&format!("/api/runs?chat={chat}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    runs["runs"][0]["id"].as_str().expect("a run").to_owned()
}

#[tokio::test]
async fn timeline_lists_steps_tasks_and_model_calls() {
    let server = TestServer::start(model(false, None), |_| {}).await;
    let run = chat(&server, "tl-1", "chat", "what is the GDP of France?").await;
    let client = reqwest::Client::new();
    let tl: Value = client
        .get(server.url(&format!("/api/runs/{run}/timeline")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let steps = tl["steps"].as_array().expect("steps");
    assert!(steps.len() >= 3, "{tl}");
    assert_eq!(tl["firstSeq"], 1);
    assert!(tl["lastSeq"].as_u64().unwrap() > 10);
    let tasks: Vec<&Value> = steps
        .iter()
        .flat_map(|s| s["tasks"].as_array().unwrap())
        .collect();
    let router = tasks
        .iter()
        .find(|t| t["node"] == "router")
        .expect("router task");
    assert_eq!(router["status"], "finished");
    assert_eq!(router["attempts"], 1);
    assert!(router["durationUs"].is_u64());
    let call = &router["llm"][0];
    assert!(
        call["completionTokens"].as_u64().unwrap() > 0,
        "the router's model call carries its tokens: {router}"
    );
    assert!(
        tasks.iter().any(|t| t["tools"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["tool"] == "calculator"))),
        "the research agent's tool call is listed: {tl}"
    );

    // A run that does not exist is a 404.
    for path in [
        "/api/runs/nope/timeline".to_owned(),
        format!("/api/runs/{}/timeline", uuid::Uuid::nil()),
    ] {
        let resp = client.get(server.url(&path)).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn runs_until_filters_by_creation_time() {
    let server = TestServer::start(model(false, None), |_| {}).await;
    let first = chat(&server, "until-1", "chat", "hello").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = chat(&server, "until-2", "chat", "hello again").await;
    let client = reqwest::Client::new();
    let list = |q: String| {
        let client = client.clone();
        let url = server.url(&format!("/api/runs?{q}"));
        async move {
            let v: Value = client.get(url).send().await.unwrap().json().await.unwrap();
            v["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let all = list(String::new()).await;
    assert_eq!(all, vec![second.clone(), first.clone()]);
    let run: Value = client
        .get(server.url(&format!("/api/runs/{first}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let at = run["createdAt"].as_u64().unwrap();
    assert_eq!(list(format!("until={}", at + 1)).await, vec![first.clone()]);
    assert!(
        list(format!("until={at}")).await.is_empty(),
        "until is exclusive"
    );
    assert_eq!(
        list(format!("since={at}&until={}", at + 1_000_000)).await,
        vec![second.clone(), first.clone()]
    );
    // With a cursor, the earlier of the two bounds wins.
    let page: Value = client
        .get(server.url("/api/runs?limit=1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let next = page["next"].as_str().unwrap();
    assert_eq!(
        list(format!("cursor={next}&until={}", at + 1_000_000)).await,
        vec![first.clone()]
    );
    let bad = client
        .get(server.url("/api/runs?until=yesterday"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let v: Value = bad.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_request");
    server.shutdown().await;
}

#[tokio::test]
async fn reexecute_reports_no_divergence_then_the_first_after_an_edit() {
    let (server, dir) = serve_files(&[("echo", ECHO)]).await;
    let run = chat(&server, "rx-1", "echo", "why?").await;
    let client = reqwest::Client::new();
    let url = server.url(&format!("/api/runs/{run}/reexecute"));
    let same: Value = client
        .post(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(same["diverged"], false, "{same}");
    assert!(same["events"].as_u64().unwrap() > 3);
    assert_eq!(same["sameVersion"], true);

    // The template changes: the re-execution's echo writes something else.
    let edited = ECHO.replace("You asked:", "Your question was:");
    std::fs::write(dir.path().join("graphs/echo.yaml"), edited).unwrap();
    let reload = client
        .post(server.url("/api/graphs/reload"))
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), 200);
    let diff: Value = client
        .post(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(diff["diverged"], true, "{diff}");
    assert_eq!(diff["sameVersion"], false);
    let d = &diff["divergence"];
    assert!(d["seq"].as_u64().is_some(), "{d}");
    assert!(
        d["message"].as_str().unwrap().contains("echo"),
        "the message names the node: {d}"
    );
    assert!(d["expected"].to_string().contains("You asked: why?"), "{d}");
    assert!(
        d["got"].to_string().contains("Your question was: why?"),
        "{d}"
    );

    let missing = client
        .post(server.url("/api/runs/nope/reexecute"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn studio_in_a_real_browser() {
    let b = browser();
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    copy_shipped_graphs(&graphs);
    std::fs::write(graphs.join("broken.yaml"), BROKEN).unwrap();
    let (mut server, base) = serve_binary(dir.path(), &graphs).await;

    let art = artifacts();
    let _ = std::fs::remove_dir_all(&art);
    let started = Instant::now();
    let (ok, report) = b
        .run(
            "studio.test.mjs",
            &[
                ("STUDIO_URL", base.as_ref()),
                ("STUDIO_ARTIFACTS", art.as_os_str()),
                ("STUDIO_GRAPHS_DIR", graphs.as_os_str()),
            ],
            Duration::from_secs(600),
        )
        .await;
    let _ = server.kill().await;
    println!("browser test took {:?}", started.elapsed());
    assert!(ok, "the studio browser test failed:\n{report}");
    for screen in [
        "graphs",
        "graph-broken",
        "playground",
        "run-timeline",
        "run-state",
        "run-fork",
        "runs",
    ] {
        assert!(
            art.join(format!("{screen}.png")).is_file(),
            "no screenshot of {screen} in {}",
            art.display()
        );
    }
}
