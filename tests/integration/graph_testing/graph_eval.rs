//! `stategraph eval` and the studio's "save as test" over chats a real
//! server stored (docs/testing.md): 50 chats through `POST /api/chat` with a
//! model script; `GET /api/runs/{id}/test-case` gives a case that passes
//! with `stategraph test`; after a router-prompt edit, `eval` reports
//! exactly the chats whose route changed.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::llm::script::ScriptModel;
use stategraph::internals::store::ChatStore;
use stategraph::internals::store::sqlite::SqliteStore;

use crate::support::process::{sg_in, shown, workdir};
use crate::support::server::TestServer;
use crate::support::{chat_body, post_json};

const CHATS: usize = 50;

/// Chat `i` asks about the weather every fifth time, else says hello.
fn message(i: usize) -> String {
    if i.is_multiple_of(5) {
        format!("hi! how is the weather today? ({i})")
    } else {
        format!("hello there, number {i}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_reports_exactly_the_chats_whose_route_changed_and_runs_save_as_tests() {
    let dir = workdir();
    let d = dir.path().to_owned();
    let server = fifty_chats(&d).await;
    let client = reqwest::Client::new();
    // "Save as test": the run of chat-00 as a test file.
    let yaml = saved_as_test(&client, &server).await;
    // The studio's eval page: nothing edited yet, so nothing changed and
    // every model call came from the recordings.
    studio_eval_finds_nothing_changed(&client, &server).await;
    server.shutdown().await;
    // The saved file passes as it is, against the same graphs.
    std::fs::create_dir_all(d.join("graphs/tests")).unwrap();
    std::fs::write(d.join("graphs/tests/saved.yaml"), &yaml).unwrap();
    let dd = d.clone();
    let pass =
        tokio::task::spawn_blocking(move || sg_in(&dd, &["test", "graphs/tests/saved.yaml"]))
            .await
            .unwrap();
    assert!(pass.status.success(), "{}\n{yaml}", shown(&pass));

    // Nothing edited: eval finds nothing changed, every call recorded.
    let same = eval(&d, &[]).await;
    assert!(same.status.success(), "{}", shown(&same));
    let report: Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(report["summary"]["runs"], CHATS, "{report:#}");
    assert_eq!(report["summary"]["changed"], 0, "{report:#}");
    assert_eq!(report["summary"]["live_calls"], 0, "{report:#}");

    // Selected by tag: the chats whose metadata's `tags` has one of them
    // (as the LangGraph API's thread metadata sets it).
    tags_select_chats(&d).await;
    // The router's prompt now asks to ask back about the weather.
    let want = a_router_edit_reroutes_the_weather_chats(&d).await;
    // The terminal report says the same.
    terminal_report_says_the_same(&d, &want).await;
}

/// A server on the work directory's graphs, prompts and SQLite store,
/// after `CHATS` chats through `POST /api/chat` with the model script.
async fn fifty_chats(d: &Path) -> TestServer {
    std::fs::create_dir_all(d.join("data")).unwrap();
    let store = Arc::new(
        SqliteStore::open(d.join("data/stategraph.db"))
            .await
            .unwrap(),
    );
    let model = Arc::new(ScriptModel::load(&d.join("models.yaml")).unwrap());
    let (graphs, prompts) = (d.join("graphs"), d.join("prompts"));
    let server = TestServer::start_with_store(model, store, move |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = prompts;
    })
    .await;
    let client = reqwest::Client::new();
    for i in 0..CHATS {
        let resp = post_json(
            &client,
            &server.url("/api/chat"),
            &chat_body(&format!("chat-{i:02}"), &message(i)),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let body = resp.text().await.unwrap();
        assert!(body.contains("\"type\":\"finish\""), "{body}");
    }

    server
}

/// `GET /api/runs/{id}/test-case` of chat-00's run: the YAML, and the
/// refusals of a bad name and an unknown run.
async fn saved_as_test(client: &reqwest::Client, server: &TestServer) -> String {
    let runs: Value = client
        .get(server.url("/api/runs?chat=chat-00"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let resp = client
        .get(server.url(&format!("/api/runs/{run}/test-case?name=weather%20chat")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/yaml; charset=utf-8"
    );
    assert_eq!(resp.headers()["x-stategraph-case"], "weather chat");
    let yaml = resp.text().await.unwrap();
    assert!(
        yaml.contains("graph: chat\ncases:\n  - name: \"weather chat\""),
        "{yaml}"
    );
    let bad = client
        .get(server.url(&format!("/api/runs/{run}/test-case?name=a%0Ab")))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let err: Value = bad.json().await.unwrap();
    assert_eq!(err["error"]["code"], "invalid_name", "{err}");
    let missing = client
        .get(server.url(&format!("/api/runs/{}/test-case", uuid::Uuid::now_v7())))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    yaml
}

/// `POST /api/eval` before any edit, and a limit it refuses.
async fn studio_eval_finds_nothing_changed(client: &reqwest::Client, server: &TestServer) {
    let resp = post_json(
        client,
        &server.url("/api/eval"),
        &serde_json::json!({"graph": "chat", "limit": 100}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let report: Value = resp.json().await.unwrap();
    assert_eq!(report["summary"]["runs"], CHATS, "{report:#}");
    assert_eq!(report["summary"]["changed"], 0, "{report:#}");
    assert_eq!(report["summary"]["live_calls"], 0, "{report:#}");
    let resp = post_json(
        client,
        &server.url("/api/eval"),
        &serde_json::json!({"limit": 1000}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "invalid_limit", "{err}");
}

/// `stategraph eval --graph chat --json -` with `extra` arguments, in `d`.
async fn eval(d: &Path, extra: &'static [&'static str]) -> Output {
    let dd = d.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut args = vec![
            "--model-script",
            "models.yaml",
            "eval",
            "--graph",
            "chat",
            "--json",
            "-",
        ];
        args.extend_from_slice(extra);
        sg_in(&dd, &args)
    })
    .await
    .unwrap()
}

/// `eval --tag`: only the chats tagged so; none is an error.
async fn tags_select_chats(d: &Path) {
    for (chat, tags) in [
        ("chat-03", json!(["vip"])),
        ("chat-07", json!(["vip", "beta"])),
        ("chat-08", json!(["beta"])),
    ] {
        let store = SqliteStore::open(d.join("data/stategraph.db"))
            .await
            .unwrap();
        let set = store.set_chat_metadata(chat, json!({ "tags": tags }));
        assert!(set.await.unwrap());
    }
    let vip = eval(d, &["--tag", "vip"]).await;
    assert!(vip.status.success(), "{}", shown(&vip));
    let report: Value = serde_json::from_slice(&vip.stdout).unwrap();
    let chats: BTreeSet<&str> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["chat"].as_str())
        .collect();
    assert_eq!(chats, BTreeSet::from(["chat-03", "chat-07"]), "{report:#}");
    let none = eval(d, &["--tag", "nobody"]).await;
    assert!(
        !none.status.success(),
        "no run is tagged so: {}",
        shown(&none)
    );
}

/// After the router edit, `eval --fail-on-change` reports exactly the
/// weather chats as rerouted (exit 1); returns them.
async fn a_router_edit_reroutes_the_weather_chats(d: &Path) -> BTreeSet<String> {
    let prompt = d.join("prompts/chat/router.md");
    let mut text = std::fs::read_to_string(&prompt).unwrap();
    text.push_str("\nASK BACK FIRST: when in doubt, ask the user what they mean.\n");
    std::fs::write(&prompt, text).unwrap();

    let after = eval(d, &["--fail-on-change"]).await;
    assert_eq!(after.status.code(), Some(1), "{}", shown(&after));
    let report: Value = serde_json::from_slice(&after.stdout).unwrap();
    let s = &report["summary"];
    let want: BTreeSet<String> = (0..CHATS)
        .filter(|i| i.is_multiple_of(5))
        .map(|i| format!("chat-{i:02}"))
        .collect();
    let runs = report["runs"].as_array().unwrap();
    let rerouted: BTreeSet<String> = runs
        .iter()
        .filter(|r| r["changes"]["route"] == true)
        .map(|r| r["chat"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rerouted, want, "{report:#}");
    assert_eq!(s["route"], want.len());
    assert_eq!(s["changed"], want.len(), "only the rerouted chats changed");
    assert_eq!(s["now_fail"], 0);
    assert_eq!(
        report["headline"],
        format!(
            "{} of {CHATS} chat turns took another route; 0 now fail; {} changed in all",
            want.len(),
            want.len()
        )
    );
    let one = runs.iter().find(|r| r["chat"] == "chat-00").unwrap();
    assert_eq!(
        one["before"]["path"],
        serde_json::json!(["summarizer", "router", "direct"])
    );
    assert_eq!(
        one["after"]["path"],
        serde_json::json!(["summarizer", "router", "clarifier"])
    );
    assert_eq!(one["before"]["routes"][0], "router=DIRECT");
    assert_eq!(one["after"]["routes"][0], "router=CLARIFY");
    // The unchanged chats' answers came from the recording: only their
    // router call (whose prompt changed) went to the model.
    let calm = runs.iter().find(|r| r["chat"] == "chat-01").unwrap();
    assert_eq!(
        (calm["recorded_calls"].as_u64(), calm["live_calls"].as_u64()),
        (Some(1), Some(1))
    );

    want
}

/// The terminal report of the same eval.
async fn terminal_report_says_the_same(d: &Path, want: &BTreeSet<String>) {
    let dd = d.to_owned();
    let terminal = tokio::task::spawn_blocking(move || {
        sg_in(
            &dd,
            &["--model-script", "models.yaml", "eval", "--graph", "chat"],
        )
    })
    .await
    .unwrap();
    let out = shown(&terminal);
    assert!(
        out.contains(&format!(
            "{} of {CHATS} chat turns took another route; 0 now fail",
            want.len()
        )),
        "{out}"
    );
    assert!(out.contains("CHANGED (route, nodes"), "{out}");
    assert!(
        out.contains("route:  router=DIRECT  →  router=CLARIFY"),
        "{out}"
    );
}

/// `eval --inputs FILE`: inputs from a file run with the configured model;
/// `--baseline` compares them with an earlier report, so a pull request's
/// CI can say which inputs a prompt edit sends elsewhere.
#[test]
fn eval_of_a_file_of_inputs_compares_with_a_baseline_report() {
    let dir = workdir();
    let d = dir.path();
    std::fs::write(
        d.join("inputs.yaml"),
        "graph: chat\ninputs:\n  - { name: weather, message: \"how is the weather?\" }\n  - { name: greeting, message: \"hello there\" }\n  - { name: figure, message: \"population of Kenya\", state: { forced_intent: DIRECT } }\n",
    )
    .unwrap();
    let eval = |args: &[&str]| {
        let mut all = vec![
            "--model-script",
            "models.yaml",
            "eval",
            "--inputs",
            "inputs.yaml",
        ];
        all.extend_from_slice(args);
        sg_in(d, &all)
    };
    let base = eval(&["--json", "base.json"]);
    assert!(base.status.success(), "{}", shown(&base));
    let text = eval(&[]);
    assert!(
        shown(&text).contains(
            "RAN weather (graph chat): summarizer → router → direct [router=DIRECT] completed"
        ),
        "{}",
        shown(&text)
    );
    assert!(
        shown(&text).contains("RAN figure (graph chat): summarizer → router → direct"),
        "a forced intent is an input's state: {}",
        shown(&text)
    );

    let prompt = d.join("prompts/chat/router.md");
    let mut p = std::fs::read_to_string(&prompt).unwrap();
    p.push_str("\nASK BACK FIRST: when in doubt, ask the user what they mean.\n");
    std::fs::write(&prompt, p).unwrap();
    let after = eval(&["--baseline", "base.json", "--json", "-"]);
    assert!(after.status.success(), "{}", shown(&after));
    let report: Value = serde_json::from_slice(&after.stdout).unwrap();
    let rerouted: Vec<&str> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["changes"]["route"] == true)
        .map(|r| r["chat"].as_str().unwrap())
        .collect();
    assert_eq!(rerouted, ["weather"], "{report:#}");
    assert_eq!(report["summary"]["runs"], 3);

    let bad = sg_in(d, &["eval", "--inputs", "nope.yaml"]);
    assert!(!bad.status.success());
    assert!(shown(&bad).contains("nope.yaml"), "{}", shown(&bad));
}

/// `eval --criterion TEXT --judge ROLE`: each run's answer now is judged
/// by a (scripted) judge model, its verdicts and reasons in the report
/// with the run; without `--judge` they are reported as not judged, and
/// `--fail-on-change` fails on a failed verdict.
#[test]
fn eval_judges_the_answers_only_with_a_judge_model() {
    let dir = workdir();
    let d = dir.path();
    std::fs::write(
        d.join("inputs.yaml"),
        "graph: chat\ninputs:\n  - { name: greeting, message: \"hello there\" }\n",
    )
    .unwrap();
    // The judge's rules first: they match only its structured output.
    let models = std::fs::read_to_string(d.join("models.yaml")).unwrap();
    let judge = r#"rules:
  - when: { format: judge_verdict, user: "polite" }
    reply: { json: { verdict: pass, reason: "It greets the user." } }
  - when: { format: judge_verdict, user: "cites a source" }
    reply: { json: { verdict: fail, reason: "No source is named." } }
"#;
    std::fs::write(d.join("models.yaml"), models.replacen("rules:\n", judge, 1)).unwrap();
    let eval = |extra: &[&str]| {
        let mut all = vec![
            "--model-script",
            "models.yaml",
            "eval",
            "--inputs",
            "inputs.yaml",
            "--criterion",
            "the answer is polite",
            "--criterion",
            "the answer cites a source",
        ];
        all.extend_from_slice(extra);
        sg_in(d, &all)
    };
    let verdicts = |report: &Value| -> Vec<(String, String)> {
        report["runs"][0]["judged"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                (
                    j["verdict"].as_str().unwrap().to_owned(),
                    j["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };

    let off = eval(&["--json", "-"]);
    assert!(off.status.success(), "{}", shown(&off));
    let report: Value = serde_json::from_slice(&off.stdout).unwrap();
    assert_eq!(report["summary"]["not_judged"], 2, "{report:#}");
    assert!(verdicts(&report).iter().all(|(v, _)| v == "skipped"));

    let on = eval(&["--judge", "judge", "--json", "-"]);
    assert!(on.status.success(), "{}", shown(&on));
    let report: Value = serde_json::from_slice(&on.stdout).unwrap();
    assert_eq!(
        verdicts(&report),
        [
            ("pass".to_owned(), "It greets the user.".to_owned()),
            ("fail".to_owned(), "No source is named.".to_owned()),
        ]
    );
    assert_eq!(
        (
            report["summary"]["judged_pass"].as_u64(),
            report["summary"]["judged_fail"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let text = eval(&["--judge", "judge", "--fail-on-change"]);
    assert_eq!(text.status.code(), Some(1), "{}", shown(&text));
    let out = shown(&text);
    assert!(
        out.contains("✗ judge fail “the answer cites a source”: No source is named."),
        "{out}"
    );
    assert!(out.contains("1 pass, 1 fail, 0 not judged"), "{out}");
}
