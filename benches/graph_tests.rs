//! The loop a developer waits for after editing a graph or a prompt
//! (docs/testing.md), timed end to end through the `stategraph` binary:
//!
//! - `stategraph test` on 1,000 scripted cases of the chat graph (target
//!   ≤ 5 s): four kinds of case (a quick answer with tools and a card, a
//!   research answer, a clarification, small talk), 250 of each, in one
//!   test file; every case must pass.
//! - `stategraph eval` of 1,000 recorded chats with recorded model outputs
//!   (target ≤ 10 s): 1,000 chat runs recorded in-process with a model
//!   script and stored in a SQLite store as the server stores them, then
//!   evaluated against the same graphs (every model call served from the
//!   recording; nothing may change).
//!
//! Each figure is the wall time of the whole command (process start,
//! loading graphs and the store, running, the report), median of `--reps`
//! runs (default 3). Run: `cargo bench --bench graph_tests [-- --cases N
//! --chats N --reps R]`.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod support;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stategraph::internals::events::now_micros;
use stategraph::internals::llm::Models;
use stategraph::internals::llm::script::ScriptModel;
use stategraph::internals::runtime::{
    Checkpointer, MemoryCheckpointer, RunOptions, RunStatus, Services,
};
use stategraph::internals::sse::BridgeConfig;
use stategraph::internals::store::{RunRecord, SqliteStore, Store};
use support::*;
use uuid::Uuid;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One case of each kind, `i` making names and messages distinct.
fn case(i: usize) -> String {
    match i % 4 {
        0 => format!(
            r#"  - name: "quick answer {i}"
    input: {{ message: "What was Kenya's population in 2020? ({i})" }}
    models:
      router: [{{ json: {{ intent: QUICK_ANSWER, reasoning: "one figure", missing_slots: [], detected_language: en }} }}]
      quick_answer:
        - tool_calls: [{{ name: data360_get_data, args: {{ indicator_id: WB_WDI_SP_POP_TOTL, country_code: KEN }} }}]
        - "Kenya: 51,985,780 (2020)."
      narrator: ["Kenya had about 52 million people in 2020."]
      followup: [{{ json: {{ questions: ["And in 2023?"] }} }}]
    tools:
      - name: data360_get_data
        partition: data
        result: {{ metadata: {{ name: "Population, total" }}, data: [{{ REF_AREA: KEN, REF_AREA_NAME: Kenya, TIME_PERIOD: "2020", OBS_VALUE: 51985780 }}] }}
    expect:
      path: [summarizer, router, quick_answer, narrator, followup, card]
      routes: {{ router: QUICK_ANSWER }}
      tool_calls: [{{ name: data360_get_data, args: {{ country_code: KEN }} }}]
      state: {{ quick_answer_card: {{ kind: fact, value: 51985780 }} }}
      answer: {{ contains: "52 million" }}
      aisdk_valid: true
"#
        ),
        1 => format!(
            r#"  - name: "research {i}"
    input: {{ message: "How has life expectancy in Kenya changed? ({i})" }}
    models:
      router: [{{ json: {{ intent: RESEARCH, reasoning: "a trend", missing_slots: [], detected_language: en }} }}]
      research:
        - tool_calls: [{{ name: data360_get_data, args: {{ indicator_id: WB_WDI_SP_DYN_LE00_IN, country_code: KEN }} }}]
        - "From 52 to 62 years."
      narrator: ["Life expectancy in Kenya rose from 52 to 62 years."]
      followup: [{{ json: {{ questions: ["And Uganda?"] }} }}]
    tools:
      - name: data360_get_data
        partition: data
        result: {{ metadata: {{ name: "Life expectancy" }}, data: [{{ REF_AREA: KEN, TIME_PERIOD: "2022", OBS_VALUE: 62 }}] }}
    expect:
      path: [summarizer, router, research, narrator, followup]
      answer: {{ contains: "62 years" }}
      aisdk_valid: true
"#
        ),
        2 => format!(
            r#"  - name: "clarify {i}"
    input: {{ message: "What is the GDP? ({i})" }}
    models:
      router: [{{ json: {{ intent: CLARIFY, reasoning: "no country", missing_slots: [country], detected_language: en }} }}]
      clarifier: ["For which country?"]
    expect:
      path: [summarizer, router, clarifier]
      answer: "For which country?"
      aisdk_valid: true
"#
        ),
        _ => format!(
            r#"  - name: "direct {i}"
    input: {{ message: "hi there ({i})" }}
    models:
      router: [{{ json: {{ intent: DIRECT, reasoning: "a greeting", missing_slots: [], detected_language: en }} }}]
      direct: ["Hello!"]
    expect:
      path: [summarizer, router, direct]
      tool_calls: []
      answer: "Hello!"
      aisdk_valid: true
"#
        ),
    }
}

/// `stategraph ARGS` in `dir` against the shipped graphs; its wall time.
fn stategraph(dir: &Path, args: &[&str]) -> (Duration, std::process::Output) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_stategraph"))
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("STATEGRAPH_CONFIG")
        .arg("--graphs")
        .arg(root().join("graphs"))
        .arg("--prompts")
        .arg(root().join("prompts"))
        .args(args)
        .output()
        .unwrap();
    (t.elapsed(), out)
}

fn shown(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn median(mut t: Vec<Duration>) -> Duration {
    t.sort();
    t[t.len() / 2]
}

fn row(name: &str, d: Duration, target_s: f64) {
    let s = d.as_secs_f64();
    let verdict = if s <= target_s { "met" } else { "MISSED" };
    println!("  {name:<52} {s:>7.2} s   target ≤ {target_s} s {verdict}");
}

const MODELS: &str = r#"rules:
  - when: { system: "You route questions", user: "weather" }
    reply: { json: { intent: CLARIFY, reasoning: "which place?", missing_slots: [country], detected_language: en } }
  - when: { system: "You route questions" }
    reply: { json: { intent: DIRECT, reasoning: "small talk", missing_slots: [], detected_language: en } }
  - reply: "Hello! Ask me about development data."
"#;

/// Records `n` chat turns of the chat graph with the model script and
/// stores them as the server does (run row, batches, end).
async fn record_chats(store: &dyn Store, n: usize) {
    let graph = chat_graph();
    let model = Arc::new(ScriptModel::parse("bench", MODELS).unwrap());
    let services = Arc::new(Services::new(
        Models::single(model),
        Arc::clone(&registries().tools),
    ));
    for i in 0..n {
        let text = if i.is_multiple_of(5) {
            format!("how is the weather? ({i})")
        } else {
            format!("hello there ({i})")
        };
        let input = json!({
            "messages": [{"id": format!("u{i}"), "role": "user", "content": text}],
            "query": text,
        });
        let run_id = Uuid::now_v7();
        let mem = Arc::new(MemoryCheckpointer::new());
        let stream = BridgeConfig::for_graph(&graph, format!("msg_{i}"), json!({"graph": "chat"}));
        run_with(
            Arc::clone(&graph),
            Arc::clone(&services),
            input.clone(),
            RunOptions {
                run_id,
                checkpointer: Some(Arc::clone(&mem) as Arc<dyn Checkpointer>),
                stream: Some(stream.to_json()),
                ..Default::default()
            },
        )
        .await;
        store
            .create_run(RunRecord {
                id: run_id,
                chat_id: Some(format!("chat-{i:04}")),
                user_id: "bench".into(),
                graph: "chat".into(),
                graph_version: "bench".into(),
                status: RunStatus::Running,
                input,
                created_at: now_micros(),
                finished_at: None,
                error: None,
                usage: Default::default(),
                parent: None,
                request_id: None,
                message_id: Some(format!("msg_{i}")),
                last_seq: 0,
                last_step: 0,
            })
            .await
            .unwrap();
        for b in mem.batches(run_id) {
            store.append(&b).await.unwrap();
        }
        store
            .finish_run(run_id, RunStatus::Finished, None, Default::default())
            .await
            .unwrap();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let cases: usize = arg("--cases", 1000);
    let chats: usize = arg("--chats", 1000);
    let reps: usize = arg("--reps", 3).max(1);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // 1. stategraph test on `cases` scripted cases.
    let mut file = String::from("graph: chat\ncases:\n");
    for i in 0..cases {
        let _ = write!(file, "{}", case(i));
    }
    std::fs::create_dir_all(d.join("tests")).unwrap();
    let path = d.join("tests/bench.yaml");
    std::fs::write(&path, file).unwrap();
    let report = d.join("report.json");
    let mut times = Vec::new();
    for _ in 0..reps {
        let (t, out) = stategraph(
            d,
            &[
                "test",
                path.to_str().unwrap(),
                "--json",
                report.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", shown(&out));
        let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(r["passed"], cases, "{}", shown(&out));
        times.push(t);
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "graph tests and eval, end to end through the binary ({cpus} CPUs, median of {reps})\n"
    );
    row(
        &format!("stategraph test: {cases} scripted chat cases"),
        median(times),
        5.0,
    );

    // 2. stategraph eval over `chats` recorded chats.
    std::fs::create_dir_all(d.join("data")).unwrap();
    std::fs::write(d.join("models.yaml"), MODELS).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = Instant::now();
    rt.block_on(async {
        let store = SqliteStore::open(d.join("data/stategraph.db"))
            .await
            .unwrap();
        record_chats(&store, chats).await;
    });
    println!(
        "  (recorded and stored {chats} chats in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let limit = chats.to_string();
    let mut times = Vec::new();
    for _ in 0..reps {
        let (t, out) = stategraph(
            d,
            &[
                "--model-script",
                "models.yaml",
                "eval",
                "--graph",
                "chat",
                "--limit",
                &limit,
                "--json",
                "eval.json",
            ],
        );
        assert!(out.status.success(), "{}", shown(&out));
        let r: Value =
            serde_json::from_slice(&std::fs::read(d.join("eval.json")).unwrap()).unwrap();
        assert_eq!(r["summary"]["runs"], chats, "{}", shown(&out));
        assert_eq!(r["summary"]["changed"], 0, "{}", shown(&out));
        assert_eq!(r["summary"]["live_calls"], 0, "{}", shown(&out));
        times.push(t);
    }
    row(
        &format!("stategraph eval: {chats} recorded chats"),
        median(times),
        10.0,
    );
}
