//! Judge verdicts are stored with the runs they judge (docs/testing.md,
//! "Judged answers in `eval`"): the studio's Eval page (`POST /api/eval`
//! with `criteria` and `judge`) and `stategraph eval --criterion --judge`
//! over chats a real server stored in SQLite; the verdicts come back on
//! `GET /api/runs/{id}` and `GET /api/runs/{id}/verdicts`, and in the
//! store. The judge is a model script that answers only its structured
//! output (`format: judge_verdict`).

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::llm::script::ScriptModel;
use stategraph::internals::store::Verdicts;
use stategraph::internals::store::sqlite::SqliteStore;

use crate::support::process::{sg_in, shown, workdir};
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

/// The judge's rules, ahead of the graph's.
const JUDGE: &str = r#"rules:
  - when: { format: judge_verdict, user: "polite" }
    reply: { json: { verdict: pass, reason: "It greets the user." } }
  - when: { format: judge_verdict, user: "cites a source" }
    reply: { json: { verdict: fail, reason: "No source is named." } }
"#;

async fn get(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let resp = client.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// `(criterion, verdict, reason, source)` of each verdict in `list`.
fn said(list: &Value) -> Vec<(String, String, String, String)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (s("criterion"), s("verdict"), s("reason"), s("source"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_are_stored_with_the_runs_they_judge_and_shown_on_them() {
    let dir = workdir();
    let d = dir.path().to_owned();
    let models = std::fs::read_to_string(d.join("models.yaml")).unwrap();
    std::fs::write(d.join("models.yaml"), models.replacen("rules:\n", JUDGE, 1)).unwrap();
    std::fs::create_dir_all(d.join("data")).unwrap();
    let db = d.join("data/stategraph.db");
    let store = Arc::new(SqliteStore::open(&db).await.unwrap());
    let model = Arc::new(ScriptModel::load(&d.join("models.yaml")).unwrap());
    let (graphs, prompts) = (d.join("graphs"), d.join("prompts"));
    let server = TestServer::start_with_store(model, store, move |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = prompts;
    })
    .await;
    let client = reqwest::Client::new();
    for i in 0..3 {
        let resp = post_json(
            &client,
            &server.url("/api/chat"),
            &chat_body(&format!("chat-{i}"), &format!("hello there, number {i}")),
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert!(resp.text().await.unwrap().contains("\"type\":\"finish\""));
    }
    let (_, runs) = get(&client, &server.url("/api/runs?chat=chat-0")).await;
    let run = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let (status, fresh) = get(&client, &server.url(&format!("/api/runs/{run}"))).await;
    assert_eq!(status, 200);
    assert_eq!(fresh["verdicts"], json!([]), "not judged yet");

    // The Eval page with two criteria and a judge.
    let criteria = ["the answer is polite", "the answer cites a source"];
    let resp = post_json(
        &client,
        &server.url("/api/eval"),
        &json!({"graph": "chat", "criteria": criteria, "judge": "judge"}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let report: Value = resp.json().await.unwrap();
    assert_eq!(report["verdicts_stored"], 6, "{report:#}");
    assert_eq!(
        (
            &report["summary"]["judged_pass"],
            &report["summary"]["judged_fail"]
        ),
        (&json!(3), &json!(3)),
        "{report:#}"
    );
    let judged = &report["runs"][0]["judged"];
    assert_eq!(judged[1]["verdict"], "fail", "{report:#}");
    assert_eq!(judged[1]["judge"], "role judge, model scripted:models");

    let (status, v) = get(&client, &server.url(&format!("/api/runs/{run}/verdicts"))).await;
    assert_eq!(status, 200);
    let want_studio = vec![
        (
            criteria[0].to_owned(),
            "pass".to_owned(),
            "It greets the user.".to_owned(),
            "studio".to_owned(),
        ),
        (
            criteria[1].to_owned(),
            "fail".to_owned(),
            "No source is named.".to_owned(),
            "studio".to_owned(),
        ),
    ];
    assert_eq!(said(&v["verdicts"]), want_studio, "{v:#}");
    let first = &v["verdicts"][0];
    assert_eq!(
        (&first["judge"], &first["model"]),
        (&json!("judge"), &json!("scripted:models"))
    );
    assert_eq!(first["answer"], "Hello! Ask me about development data.");
    let (_, whole) = get(&client, &server.url(&format!("/api/runs/{run}"))).await;
    assert_eq!(said(&whole["verdicts"]), want_studio, "the run shows them");

    // Criteria without a judge model: reported as not judged, nothing
    // stored; bad criteria and unknown runs refused.
    unjudged_and_refused_criteria(&client, &server).await;
    server.shutdown().await;

    // `stategraph eval` judges again; its verdicts join the studio's.
    let dd = d.clone();
    let out = tokio::task::spawn_blocking(move || {
        sg_in(
            &dd,
            &[
                "--model-script",
                "models.yaml",
                "eval",
                "--graph",
                "chat",
                "--verbose",
                "--criterion",
                "the answer is polite",
                "--judge",
                "judge",
            ],
        )
    })
    .await
    .unwrap();
    let text = shown(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("✓ judge pass “the answer is polite”: It greets the user. (judged by role judge, model scripted:models)"),
        "{text}"
    );
    assert!(
        text.contains("3 verdict(s) stored with their runs"),
        "{text}"
    );
    let store = SqliteStore::open(&db).await.unwrap();
    let kept = store.verdicts(run.parse().unwrap()).await.unwrap();
    let sources: Vec<(&str, &str)> = kept
        .iter()
        .map(|v| (v.source.as_str(), v.verdict.as_str()))
        .collect();
    assert_eq!(
        sources,
        [("studio", "pass"), ("studio", "fail"), ("eval", "pass")],
        "oldest first, none replaced"
    );
}

/// Criteria without a judge model are reported as not judged and store
/// nothing; blank or too many criteria are 400 `invalid_criteria`; an
/// unknown run's verdicts are 404.
async fn unjudged_and_refused_criteria(client: &reqwest::Client, server: &TestServer) {
    let resp = post_json(
        client,
        &server.url("/api/eval"),
        &json!({"graph": "chat", "criteria": ["the answer is short"]}),
    )
    .await;
    let report: Value = resp.json().await.unwrap();
    assert_eq!(report["summary"]["not_judged"], 3, "{report:#}");
    assert_eq!(report["verdicts_stored"], 0);
    for (body, code) in [
        (
            json!({"criteria": ["  "], "judge": "judge"}),
            "invalid_criteria",
        ),
        (
            json!({"criteria": vec!["x"; 11], "judge": "judge"}),
            "invalid_criteria",
        ),
    ] {
        let resp = post_json(client, &server.url("/api/eval"), &body).await;
        assert_eq!(resp.status(), 400, "{body}");
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["code"], code, "{err}");
    }
    let other = uuid::Uuid::now_v7();
    let (status, _) = get(client, &server.url(&format!("/api/runs/{other}/verdicts"))).await;
    assert_eq!(status, 404);
}

/// The offline model makes up verdicts that fit the schema: it is refused
/// as a judge, with a clear error, before anything is evaluated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offline_model_is_refused_as_the_eval_pages_judge() {
    let server = TestServer::start(
        Arc::new(stategraph::internals::llm::offline::OfflineModel::default()),
        |_| {},
    )
    .await;
    let client = reqwest::Client::new();
    let resp = post_json(
        &client,
        &server.url("/api/eval"),
        &json!({"criteria": ["the answer is polite"], "judge": "judge"}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "judge_unavailable", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("offline model, which cannot judge"),
        "{err}"
    );
    server.shutdown().await;
}
