//! graphs/research.yaml end to end through `POST /api/chat` (`"graph":
//! "research"`) on a real server on a real socket. Local servers stand in
//! for the web: a SearXNG-compatible search engine whose results depend on
//! the query and a page server (a page that 404s, slow pages); a scripted
//! model decides only from what each request carries (research/model.rs).
//! Every stream is checked with the AI SDK's own parser. Nothing leaves
//! 127.0.0.1.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use stategraph::internals::config::Config;
use stategraph::internals::engine::Graphs;
use stategraph::internals::events::{Event, EventKind};
use stategraph::internals::llm::Models;
use stategraph::internals::llm::scripted::ScriptedModel;
use stategraph::internals::runtime::Services;
use stategraph::internals::server::AppState;
use stategraph::internals::store::memory::MemoryStore;

use crate::support::server::TestServer;
use crate::support::{aisdk_validate, chat_body, post_json, report_json, root};

mod fixtures;
mod flow;
mod model;

use fixtures::{Engine, Page, Web};
use model::{Behaviour, Call, Calls, Rated, gap_query, numbered};

const QUESTION: &str =
    "How efficient are heat pumps, what does installing one cost, and how loud are they?";
const EFFICIENCY: &str = "heat pump efficiency";
const COST: &str = "heat pump installation cost";
const NOISE: &str = "heat pump noise levels";

const PLANNING: &str = "Planning the research…";
const WRITING: &str = "Writing the answer…";
const ANALYSING: &str = "Analysing what the pages say…";

/// The document's quality weights, as `data-sources` shows them.
fn weights() -> Value {
    json!({"authority": 0.3, "freshness": 0.2, "relevance": 0.3, "quality": 0.2})
}

// ------------------------------------------------------------ the server

/// A server with the shipped graphs, `model` for every role, and — when
/// `engine` is given — `[tools.search]` pointed at it and `[tools.http]`
/// allowing 127.0.0.1 with `fetch_timeout`.
async fn server(
    model: Arc<ScriptedModel>,
    engine: Option<&Engine>,
    fetch_timeout: &str,
) -> TestServer {
    let mut toml = String::from("[server]\nkeep_alive = \"5s\"\n");
    if let Some(e) = engine {
        toml.push_str(&format!(
            "[tools.search]\nurl = \"{}\"\nmax_results = 5\ntimeout = \"3s\"\n\
             [tools.http]\nallow = [\"127.0.0.1\"]\ntimeout = \"{fetch_timeout}\"\n",
            e.url()
        ));
    }
    let config = Config::from_toml(&toml).unwrap();
    let reg = crate::support::registries();
    config.tools.apply(&reg.tools).unwrap();
    let graphs = Graphs::load(&root().join("graphs"), &root().join("prompts"), reg.clone());
    assert!(
        graphs.get("research").is_some(),
        "graphs/research.yaml compiles: {:#?}",
        graphs.catalog().diagnostics
    );
    let services = Services::new(Models::single(model), Arc::clone(&reg.tools));
    let engine = stategraph::internals::engine::Engine::from_parts(reg, graphs, services);
    TestServer::serve(AppState::new(config, Arc::new(MemoryStore::new()), &engine)).await
}

/// What one research request produced.
struct Outcome {
    /// The SSE chunks, in order.
    chunks: Vec<Value>,
    /// The message the AI SDK assembled from them.
    parts: Vec<Value>,
    /// The run's final state (`GET /api/runs/{id}/state`).
    state: Value,
    /// The run's events, from the store.
    events: Vec<Event>,
    /// `GET /api/chat/{id}`.
    stored: Value,
    /// Wall time of the request.
    took: Duration,
}

/// Asks `question` of the research graph in chat `chat`.
async fn research(server: &TestServer, chat: &str, question: &str) -> Outcome {
    let client = reqwest::Client::new();
    let mut body = chat_body(chat, question);
    body["graph"] = json!("research");
    let started = Instant::now();
    let resp = post_json(&client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let sse = tokio::time::timeout(Duration::from_secs(20), resp.text())
        .await
        .expect("the stream ends")
        .unwrap();
    let took = started.elapsed();
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "the AI SDK rejects the stream: {report}\n{sse}");
    let chunks: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let parts = report_json(&report)["message"]["parts"]
        .as_array()
        .expect("assembled message")
        .clone();
    let run_id = chunks
        .iter()
        .find(|c| c["type"] == "start")
        .and_then(|c| c["messageMetadata"]["runId"].as_str())
        .expect("runId in the start chunk")
        .to_owned();
    // The run is recorded as finished (the store may lag the stream a little).
    let mut run = Value::Null;
    for _ in 0..100 {
        run = get(&client, &server.url(&format!("/api/runs/{run_id}"))).await;
        if run["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(run["status"], "finished", "{run}");
    let state =
        get(&client, &server.url(&format!("/api/runs/{run_id}/state"))).await["state"].clone();
    let events = server
        .state
        .store
        .events(run_id.parse().unwrap(), 0, 100_000)
        .await
        .unwrap();
    let stored = get(&client, &server.url(&format!("/api/chat/{chat}"))).await;
    Outcome {
        chunks,
        parts,
        state,
        events,
        stored,
        took,
    }
}

async fn get(client: &reqwest::Client, url: &str) -> Value {
    let resp = client.get(url).send().await.unwrap();
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    resp.json().await.unwrap()
}

impl Outcome {
    /// Chunks of a type.
    fn of_type<'a>(&'a self, ty: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.chunks.iter().filter(move |c| c["type"] == ty)
    }

    /// Index of the first chunk of a type.
    fn first(&self, ty: &str) -> Option<usize> {
        self.chunks.iter().position(|c| c["type"] == ty)
    }

    /// Index of the `data-stage` chunk showing `status`.
    fn stage_at(&self, status: &str) -> usize {
        self.chunks
            .iter()
            .position(|c| c["type"] == "data-stage" && c["data"]["status"] == status)
            .unwrap_or_else(|| panic!("no stage {status}: {:?}", self.stages()))
    }

    /// The `data-sources` chunks: `(chunk index, urls, scores)`.
    fn sources_parts(&self) -> Vec<(usize, Vec<String>, Vec<Option<f64>>)> {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c["type"] == "data-sources")
            .map(|(i, c)| {
                assert_eq!(c["id"], "sources", "one part, updated in place: {c}");
                assert_eq!(c["data"]["weights"], weights(), "{c}");
                let list = c["data"]["sources"].as_array().unwrap();
                (
                    i,
                    list.iter()
                        .map(|s| s["url"].as_str().unwrap().to_owned())
                        .collect(),
                    list.iter().map(|s| s["score"].as_f64()).collect(),
                )
            })
            .collect()
    }

    /// The progress texts, in order.
    fn stages(&self) -> Vec<String> {
        self.of_type("data-stage")
            .map(|c| c["data"]["status"].as_str().unwrap().to_owned())
            .collect()
    }

    /// `(sourceId, url)` of the `source-url` chunks, in order.
    fn cited(&self) -> Vec<(String, String)> {
        self.of_type("source-url")
            .map(|c| {
                (
                    c["sourceId"].as_str().unwrap().to_owned(),
                    c["url"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The answer text of the assembled message.
    fn text(&self) -> String {
        self.parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect()
    }

    /// The steps in which `node` started a task (first attempts), with the
    /// task's map item.
    fn started(&self, node: &str) -> Vec<(u32, Option<Value>)> {
        self.events
            .iter()
            .filter(|e| e.node.as_deref() == Some(node))
            .filter_map(|e| match &e.event {
                EventKind::NodeStarted { attempt: 1, item } => Some((e.step, item.clone())),
                _ => None,
            })
            .collect()
    }

    /// The distinct steps `node` ran in.
    fn rounds(&self, node: &str) -> Vec<u32> {
        let steps: BTreeSet<u32> = self.started(node).into_iter().map(|(s, _)| s).collect();
        steps.into_iter().collect()
    }

    /// The thinking notes of `node`.
    fn notes(&self, node: &str) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e.node.as_deref() == Some(node))
            .filter_map(|e| match &e.event {
                EventKind::Thinking { text } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    /// The record in `field` (`results`, `pages`) whose `args.key` is `value`.
    fn record(&self, field: &str, key: &str, value: &str) -> Value {
        self.state[field]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["args"][key] == value)
            .unwrap_or_else(|| panic!("no {field} record for {value}: {}", self.state[field]))
            .clone()
    }

    /// URLs of a list field of objects, in order.
    fn urls(&self, field: &str) -> Vec<String> {
        self.state[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["url"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The facts stored for a page.
    fn facts_of(&self, url: &str) -> Vec<String> {
        self.state["facts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["url"] == url)
            .map(|f| f["text"].as_str().unwrap().to_owned())
            .collect()
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// The model's calls to a node.
fn calls_to(calls: &Calls, node: &str) -> Vec<Call> {
    calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.node == node)
        .cloned()
        .collect()
}

/// The reply of a call, as JSON.
fn reply(c: &Call) -> Value {
    serde_json::from_str(&c.reply).unwrap_or(Value::Null)
}

/// The reading call for a page (by URL; the first if retried).
fn read_call(calls: &Calls, url: &str) -> Call {
    calls_to(calls, "read")
        .into_iter()
        .find(|c| c.prompt.contains(&format!(" — {url}\n")))
        .unwrap_or_else(|| panic!("no reading call for {url}"))
}

/// The document's weights: 0.3·authority + 0.2·freshness + 0.3·relevance
/// + 0.2·quality, rounded to 3 decimals as the scores are.
fn weighted(s: &Value) -> f64 {
    let g = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k} in {s}"));
    let score =
        0.3 * g("authority") + 0.2 * g("freshness") + 0.3 * g("relevance") + 0.2 * g("quality");
    (score * 1000.0).round() / 1000.0
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// The sentences of a page (as the model splits them).
fn sentences(page: &Page) -> BTreeSet<String> {
    page.paragraphs
        .iter()
        .flat_map(|p| p.split_inclusive(". "))
        .map(|s| s.trim().to_owned())
        .collect()
}

// ---------------------------------------------------------------- pages

fn efficiency_page() -> Page {
    Page::ok(
        "efficiency",
        "Heat pump efficiency explained",
        &[
            "Heat pump efficiency is measured as the coefficient of performance (COP).",
            "A modern air-source heat pump reaches a seasonal COP of 3 to 4.",
        ],
    )
}

fn costs_page() -> Page {
    Page::ok(
        "costs",
        "What a heat pump costs",
        &[
            "The installation cost of an air-source heat pump is 8,000 to 15,000 euros.",
            "Grants can cover part of the cost.",
        ],
    )
}

fn noise_page() -> Page {
    Page::ok(
        "noise",
        "How loud is a heat pump?",
        &["Heat pump outdoor units produce noise levels of 40 to 60 decibels at one metre."],
    )
}

fn forum_page() -> Page {
    Page::ok(
        "forum",
        "Garden forum",
        &["Which tomato varieties grow well on a balcony?"],
    )
}

fn overview_page() -> Page {
    Page::ok(
        "overview",
        "Heat pumps: an overview",
        &[
            "Heat pumps move warmth from the outside air or the ground into a building.",
            "Installing one takes two to three days.",
        ],
    )
}

// ---------------------------------------------------------------- tests

/// A page that 404s and pages that fail (time out, refuse the connection)
/// are skipped and recorded as failures; a slow page within the time
/// limit is read; the run goes on and answers from the rest.
#[tokio::test]
async fn pages_that_404_or_fail_are_skipped_and_the_run_goes_on() {
    let refused = closed_port().await;
    let web = Web::start(vec![
        Page::ok(
            "good",
            "Heat pump basics",
            &[
                "Heat pump efficiency reaches a seasonal COP of 3 to 4.",
                "Heat pump outdoor units keep noise levels under 55 decibels.",
            ],
        ),
        Page::ok(
            "slowok",
            "Heat pump prices",
            &["Heat pump installation costs about 9,000 euros."],
        )
        .slow(Duration::from_millis(300)),
        Page::ok(
            "missing",
            "Page not found",
            &["Sorry, this heat pump page does not exist (error 404)."],
        )
        .status(StatusCode::NOT_FOUND),
        Page::ok("stalled", "Never arrives", &["Heat pumps cost 1 euro."])
            .slow(Duration::from_secs(4)),
    ])
    .await;
    let u = |n: &str| web.url(n);
    let refused_url = format!("http://127.0.0.1:{refused}/p/gone");
    let lists: BTreeMap<String, Vec<String>> = [
        (
            EFFICIENCY.to_owned(),
            vec![u("good"), u("missing"), refused_url.clone()],
        ),
        (COST.to_owned(), vec![u("slowok"), u("stalled")]),
        (NOISE.to_owned(), vec![u("good")]),
    ]
    .into();
    let engine = Engine::start(Duration::from_millis(50), move |q| {
        lists.get(q).cloned().unwrap_or_default()
    })
    .await;
    let (m, calls) = model::model(Behaviour::default());
    let server = server(m, Some(&engine), "1s").await;
    let out = research(&server, "research-2", QUESTION).await;
    let state = &out.state;

    assert_eq!(
        strings(&state["fetched"]),
        [
            u("good"),
            u("slowok"),
            u("missing"),
            u("stalled"),
            refused_url.clone()
        ]
    );
    // The page that times out and the refused one: failure records.
    let stalled = out.record("pages", "url", &u("stalled"));
    assert_eq!(stalled["error"]["type"], "timeout", "{stalled}");
    assert!(stalled.get("output").is_none());
    let gone = out.record("pages", "url", &refused_url);
    assert_eq!(gone["error"]["type"], "execution_error", "{gone}");
    assert_eq!(web.hits("stalled"), 1, "a failed fetch is not retried");
    assert!(
        out.took < Duration::from_secs(4),
        "the stalled page is not waited for: {:?}",
        out.took
    );
    // The slow page within the limit was read like the others.
    let slow = out.record("pages", "url", &u("slowok"));
    assert_eq!(slow["output"]["status"], 200);
    assert_eq!(
        out.facts_of(&u("slowok")),
        ["Heat pump installation costs about 9,000 euros."]
    );
    // The run went on: the readable pages were read, ranked and cited.
    let read: BTreeSet<String> = calls_to(&calls, "read")
        .iter()
        .filter_map(|c| {
            c.prompt
                .lines()
                .find_map(|l| l.strip_prefix("Page: "))
                .map(str::to_owned)
        })
        .collect();
    assert!(
        !read
            .iter()
            .any(|p| p.contains("stalled") || p.contains("/p/gone")),
        "{read:?}"
    );
    assert_eq!(state["coverage"], json!(1.0));
    let answer = state["answer"].as_str().unwrap();
    assert!(
        answer.contains("COP of 3 to 4") && answer.contains("9,000 euros"),
        "{answer}"
    );
    assert_eq!(out.text(), answer);
    let cited: BTreeSet<String> = out.cited().into_iter().map(|(_, url)| url).collect();
    assert!(
        cited.contains(&u("good")) && cited.contains(&u("slowok")),
        "{cited:?}"
    );
    assert!(
        !cited.contains(&u("stalled")) && !cited.contains(&refused_url),
        "{cited:?}"
    );
    assert!(!out.urls("ranked").contains(&u("stalled")));
    assert!(!out.urls("ranked").contains(&refused_url));
    assert!(out.stages().contains(&WRITING.to_owned()));

    // The 404 page is fetched once and its status kept (`http_fetch`
    // reports the status as data); the graph reads only pages below 400, so
    // it is never read, never a source.
    let missing = out.record("pages", "url", &u("missing"));
    assert_eq!(web.hits("missing"), 1);
    assert_eq!(missing["output"]["status"], 404, "{missing}");
    assert!(
        !read.iter().any(|p| p.contains("/p/missing")),
        "the 404 page is not read: {read:?}"
    );
    assert!(
        !out.urls("ranked").contains(&u("missing")),
        "the 404 page is no source"
    );
    assert_eq!(
        cited,
        [u("good"), u("slowok")].into(),
        "only readable pages are cited"
    );
    assert!(crate::support::assert_all_reexecute(&server.state).await >= 1);
    server.shutdown().await;
}

/// When every page chosen in a round fails, the run still answers (it
/// does not stop without an answer).
#[tokio::test]
async fn when_every_page_of_a_round_fails_the_run_still_answers() {
    let (a, b) = (closed_port().await, closed_port().await);
    let (ua, ub) = (
        format!("http://127.0.0.1:{a}/p/a"),
        format!("http://127.0.0.1:{b}/p/b"),
    );
    let lists: BTreeMap<String, Vec<String>> = [
        (EFFICIENCY.to_owned(), vec![ua.clone()]),
        (COST.to_owned(), vec![ub.clone()]),
    ]
    .into();
    let engine = Engine::start(Duration::from_millis(20), move |q| {
        lists.get(q).cloned().unwrap_or_default()
    })
    .await;
    let (m, calls) = model::model(Behaviour::default());
    let server = server(m, Some(&engine), "1s").await;
    let out = research(&server, "research-2b", QUESTION).await;
    let state = &out.state;
    assert_eq!(strings(&state["fetched"]), [ua.clone(), ub.clone()]);
    for url in [&ua, &ub] {
        assert_eq!(
            out.record("pages", "url", url)["error"]["type"],
            "execution_error"
        );
    }
    assert!(calls_to(&calls, "read").is_empty());
    // The run must not end at the empty fan-out: it reflects and answers.
    assert!(
        !calls_to(&calls, "synthesize").is_empty(),
        "the answer is written although no page could be read; nodes started: {:?}",
        out.events
            .iter()
            .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
            .filter_map(|e| e.node.as_deref())
            .collect::<Vec<_>>()
    );
    assert!(!out.text().is_empty(), "an answer reaches the user");
    assert!(crate::support::assert_all_reexecute(&server.state).await >= 1);
    server.shutdown().await;
}

/// The model's page-reading answer is garbage (not JSON; the wrong shape)
/// for two pages, and the call fails outright (the model endpoint answers
/// 503) for a third: after the retries, or at once on the error, the
/// fallback stands in — the page text cut into passages as its facts
/// (basic chunking), neutral ratings.
#[tokio::test]
async fn a_failed_extraction_falls_back_to_chunks_of_the_page_with_neutral_ratings() {
    // Five paragraphs of ~200 characters: more than four 400-character passages.
    let long: Vec<String> = (1..=12)
        .map(|i| {
            format!(
                "Paragraph {i} of the field notes says that heat pump number {i} was measured on a cold \
                 morning, that its outdoor unit was inspected by the technician, and that the readings were \
                 written down in the logbook."
            )
        })
        .collect();
    let long_refs: Vec<&str> = long.iter().map(String::as_str).collect();
    let web = Web::start(vec![
        Page::ok(
            "good",
            "Heat pump basics",
            &[
                "Heat pump efficiency reaches a seasonal COP of 3 to 4.",
                "Heat pump installation costs about 9,000 euros.",
                "Heat pump outdoor units keep noise levels under 55 decibels.",
            ],
        ),
        Page::ok("garbled", "Garbled field notes", &long_refs),
        Page::ok(
            "misshapen",
            "Misshapen data sheet",
            &["Heat pump data sheet: 7 kW at 35 degrees."],
        ),
        Page::ok(
            "refused",
            "Refused review",
            &[
                "The reviewed heat pump ran at 48 decibels in night mode.",
                "Its outdoor unit weighs 60 kg.",
            ],
        ),
    ])
    .await;
    let u = |n: &str| web.url(n);
    let lists: BTreeMap<String, Vec<String>> = [
        (EFFICIENCY.to_owned(), vec![u("good"), u("garbled")]),
        (COST.to_owned(), vec![u("misshapen")]),
        (NOISE.to_owned(), vec![u("good"), u("refused")]),
    ]
    .into();
    let engine = Engine::start(Duration::from_millis(20), move |q| {
        lists.get(q).cloned().unwrap_or_default()
    })
    .await;
    let (m, calls) = model::model(Behaviour {
        garbage: vec![
            ("Garbled", "Sorry, I could not make sense of this page."),
            (
                "Misshapen",
                r#"{"facts": "one long fact", "authority": "high"}"#,
            ),
        ],
        failing: vec!["Refused"],
        ..Behaviour::default()
    });
    let server = server(m, Some(&engine), "2s").await;
    let out = research(&server, "research-3", QUESTION).await;
    let state = &out.state;

    for name in ["garbled", "misshapen"] {
        retried_then_rated_neutrally(&out, &calls, &u(name), name);
    }
    // The facts are the page text cut into passages of at most 400
    // characters, the first four, in order.
    let garbled = out.facts_of(&u("garbled"));
    assert_eq!(garbled.len(), 4, "{garbled:?}");
    assert!(
        garbled
            .iter()
            .all(|f| f.chars().count() <= 400 && f.chars().count() > 200),
        "{garbled:?}"
    );
    let flat = long.join(" ");
    assert!(flat.starts_with(&garbled.join(" ")), "{garbled:?}");
    assert_eq!(
        out.facts_of(&u("misshapen")),
        ["Heat pump data sheet: 7 kW at 35 degrees."]
    );
    let garbled_source = state["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["url"] == u("garbled"))
        .unwrap();
    assert_eq!(garbled_source["facts"], 4);
    assert_eq!(garbled_source["title"], "Garbled field notes");
    // The page whose reading call failed: asked once (a model error is
    // not an answer to correct), then its text as passages, neutral
    // ratings.
    let refused = u("refused");
    let asked = calls_to(&calls, "read")
        .into_iter()
        .filter(|c| c.prompt.contains(&format!(" — {refused}\n")))
        .count();
    assert_eq!(asked, 1);
    assert_eq!(
        out.facts_of(&refused),
        ["The reviewed heat pump ran at 48 decibels in night mode. Its outdoor unit weighs 60 kg."]
    );
    let refused_ranked = state["ranked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["url"] == refused)
        .unwrap();
    for k in ["authority", "freshness", "relevance", "quality", "score"] {
        assert_eq!(refused_ranked[k], json!(0.5), "{k}");
    }
    assert_eq!(
        out.notes("read")
            .iter()
            .filter(|n| n.contains("fallback"))
            .count(),
        3,
        "{:?}",
        out.notes("read")
    );
    // The good page was read normally, and the fallback facts reached
    // the synthesis under their source.
    assert_eq!(out.facts_of(&u("good")).len(), 3);
    let synth = calls_to(&calls, "synthesize");
    let numbers = numbered(&synth[0].prompt);
    let g = numbers.iter().find(|n| n.url == u("garbled")).unwrap();
    assert_eq!(g.facts, garbled);
    let answer = state["answer"].as_str().unwrap();
    assert!(
        answer.contains("7 kW at 35 degrees") && answer.contains("48 decibels"),
        "the fallback facts are usable: {answer}"
    );
    assert_eq!(out.text(), answer);
    assert!(crate::support::assert_all_reexecute(&server.state).await >= 1);
    server.shutdown().await;
}

/// A page whose reading answer was invalid: asked three times, then rated
/// neutrally by the fallback.
fn retried_then_rated_neutrally(out: &Outcome, calls: &Calls, url: &str, name: &str) {
    // Asked three times (2 retries), each retry carrying the invalid
    // answer and what was wrong with it.
    let asked: Vec<Call> = calls_to(calls, "read")
        .into_iter()
        .filter(|c| c.prompt.contains(&format!(" — {url}\n")))
        .collect();
    assert_eq!(
        asked.iter().map(|c| c.messages).collect::<Vec<_>>(),
        [1, 3, 5],
        "{name}"
    );
    // Neutral ratings, score 0.5.
    let source = out.state["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["url"] == url)
        .unwrap_or_else(|| panic!("{name} is a source: {}", out.state["sources"]))
        .clone();
    for k in ["authority", "freshness", "relevance", "quality"] {
        assert_eq!(source[k], json!(0.5), "{name} {k}");
    }
    let ranked = out.state["ranked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["url"] == url)
        .unwrap();
    assert_eq!(ranked["score"], json!(0.5));
}

/// A model that always judges coverage low: the run stops after three
/// rounds and answers.
#[tokio::test]
async fn the_round_cap_stops_the_loop_after_three_rounds_and_answers() {
    let web = Web::start(vec![
        efficiency_page(),
        costs_page(),
        forum_page(),
        noise_page(),
        overview_page(),
    ])
    .await;
    let u = |n: &str| web.url(n);
    let more = format!("more on {NOISE}");
    let more2 = format!("more on {more}");
    let more3 = format!("more on {more2}");
    let lists: BTreeMap<String, Vec<String>> = [
        (EFFICIENCY.to_owned(), vec![u("efficiency")]),
        (COST.to_owned(), vec![u("costs")]),
        (NOISE.to_owned(), vec![u("forum")]),
        (more.clone(), vec![u("noise")]),
        (more2.clone(), vec![u("overview")]),
    ]
    .into();
    let engine = Engine::start(Duration::from_millis(20), move |q| {
        lists.get(q).cloned().unwrap_or_default()
    })
    .await;
    let (m, calls) = model::model(Behaviour {
        always_low: true,
        ..Behaviour::default()
    });
    let server = server(m, Some(&engine), "2s").await;
    let out = research(&server, "research-4", QUESTION).await;
    let state = &out.state;

    let reflects = calls_to(&calls, "reflect");
    assert_eq!(reflects.len(), 3, "three rounds");
    assert!(reflects.iter().all(|r| reply(r)["coverage"] == json!(0.3)));
    assert_eq!(out.rounds("search").len(), 3);
    assert_eq!(out.rounds("read").len(), 3);
    let queries = engine.queries();
    assert_eq!(queries.len(), 5, "{queries:?}");
    assert_eq!(queries[3..], [more.clone(), more2.clone()]);
    assert!(
        !queries.contains(&more3),
        "the third round's gap is not searched"
    );
    assert_eq!(state["iteration"], 3);
    assert_eq!(state["coverage"], json!(0.3));
    assert_eq!(strings(&state["gaps"]), [more3.as_str()]);
    for page in ["efficiency", "costs", "forum", "noise", "overview"] {
        assert_eq!(web.hits(page), 1, "{page}");
    }
    let synth = calls_to(&calls, "synthesize");
    assert_eq!(synth.len(), 1);
    assert!(
        synth[0]
            .prompt
            .contains(&format!("Not covered by the research: {more3}"))
    );
    let answer = state["answer"].as_str().unwrap();
    assert!(answer.contains("40 to 60 decibels"), "{answer}");
    assert_eq!(out.text(), answer);
    assert_eq!(out.stages().last().map(String::as_str), Some(WRITING));
    assert_eq!(out.stages().iter().filter(|s| *s == ANALYSING).count(), 3);
    assert!(!out.cited().is_empty());
    assert!(crate::support::assert_all_reexecute(&server.state).await >= 1);
    server.shutdown().await;
}

/// Without [tools.search] and [tools.http] the graph still runs: the
/// searches fail as data and the answer says nothing was found.
#[tokio::test]
async fn without_web_tools_research_ends_gracefully_saying_nothing_was_found() {
    let (m, calls) = model::model(Behaviour::default());
    let server = server(m, None, "1s").await;
    let out = research(&server, "research-5", QUESTION).await;
    let state = &out.state;

    let results = state["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        assert_eq!(r["error"]["type"], "not_found", "{r}");
    }
    assert_eq!(state["pages"], json!([]));
    assert_eq!(state["ranked"], json!([]));
    assert!(calls_to(&calls, "read").is_empty());
    let synth = calls_to(&calls, "synthesize");
    assert_eq!(synth.len(), 1);
    assert!(
        synth[0].prompt.contains("(no sources could be read"),
        "{}",
        synth[0].prompt
    );
    let answer = state["answer"].as_str().unwrap();
    assert!(answer.contains("found nothing"), "{answer}");
    assert_eq!(out.text(), answer);
    assert!(out.cited().is_empty());
    assert!(
        out.sources_parts()
            .iter()
            .all(|(_, urls, _)| urls.is_empty())
    );
    assert!(out.of_type("error").next().is_none());
    assert_eq!(out.of_type("finish").count(), 1);
    assert!(crate::support::assert_all_reexecute(&server.state).await >= 1);
    server.shutdown().await;
}

/// With ratings the model gives, `ranked` and `data-sources` are ordered
/// by 0.3·authority + 0.2·freshness + 0.3·relevance + 0.2·quality — not by
/// search position, one rating or the plain mean.
#[tokio::test]
async fn sources_are_ranked_by_the_documents_weights() {
    const Q: &str = "Which heat pump brands do reviewers recommend?";
    let table: BTreeMap<&str, [f64; 4]> = [
        // authority, freshness, relevance, quality → weighted (mean)
        ("Source A", [1.0, 0.0, 0.2, 0.0]), // 0.36 (0.3)
        ("Source B", [0.0, 1.0, 0.0, 1.0]), // 0.40 (0.5)
        ("Source C", [0.7, 0.0, 0.7, 0.0]), // 0.42 (0.35)
        ("Source D", [0.2, 0.9, 0.9, 0.1]), // 0.53 (0.525)
        ("Source E", [0.5, 0.5, 0.5, 0.5]), // 0.50 (0.5)
    ]
    .into();
    let pages: Vec<Page> = ["a", "b", "c", "d", "e"]
        .into_iter()
        .map(|n| {
            let title = format!("Source {}", n.to_uppercase());
            let fact = format!(
                "Reviewers recommend brand {} heat pumps for their 5 year warranty.",
                n.to_uppercase()
            );
            Page::ok(n, &title, &[fact.as_str()])
        })
        .collect();
    let web = Web::start(pages).await;
    let u = |n: &str| web.url(n);
    let list = vec![u("a"), u("b"), u("c"), u("d"), u("e")];
    let engine = Engine::start(Duration::from_millis(20), move |q| {
        if q == Q { list.clone() } else { Vec::new() }
    })
    .await;
    let rated = table.clone();
    let (m, calls) = model::model(Behaviour {
        ratings: Box::new(move |title| {
            rated.get(title).map(|[a, f, r, q]| Rated {
                authority: *a,
                freshness: *f,
                relevance: Some(*r),
                quality: *q,
            })
        }),
        ..Behaviour::default()
    });
    let server = server(m, Some(&engine), "2s").await;
    let out = research(&server, "research-6", Q).await;
    let state = &out.state;

    assert_eq!(strings(&state["sub_queries"]), [Q]);
    assert_eq!(state["iteration"], 1);
    let expected: Vec<(String, f64)> = vec![
        (u("d"), 0.53),
        (u("e"), 0.5),
        (u("c"), 0.42),
        (u("b"), 0.4),
        (u("a"), 0.36),
    ];
    let ranked: Vec<(String, f64)> = state["ranked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let title = s["title"].as_str().unwrap();
            let [a, f, r, q] = table[title];
            assert_eq!(
                (
                    s["authority"].as_f64(),
                    s["freshness"].as_f64(),
                    s["relevance"].as_f64(),
                    s["quality"].as_f64()
                ),
                (Some(a), Some(f), Some(r), Some(q)),
                "the model's ratings for {title}"
            );
            assert!(close(s["score"].as_f64().unwrap(), weighted(s)), "{s}");
            (
                s["url"].as_str().unwrap().to_owned(),
                s["score"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ranked.len(), 5);
    for ((url, score), (want_url, want)) in ranked.iter().zip(&expected) {
        assert_eq!(url, want_url, "{ranked:?}");
        assert!(close(*score, *want), "{url}: {score} ≠ {want}");
    }
    // The synthesis numbers the sources in that order, and [N] cites the
    // N-th best.
    let synth = calls_to(&calls, "synthesize");
    let numbers = numbered(&synth[0].prompt);
    assert_eq!(
        numbers.iter().map(|n| n.url.clone()).collect::<Vec<_>>(),
        expected.iter().map(|(u, _)| u.clone()).collect::<Vec<_>>()
    );
    let cited = out.cited();
    assert_eq!(cited.len(), 5);
    for (id, url) in &cited {
        let n: usize = id.parse().unwrap();
        assert_eq!(*url, expected[n - 1].0);
    }
    // data-sources, before the answer: the same order and scores.
    let first_text = out.first("text-delta").unwrap();
    let shown = out.chunks[..first_text]
        .iter()
        .rfind(|c| c["type"] == "data-sources")
        .expect("data-sources before the answer");
    assert_eq!(shown["data"]["weights"], weights());
    let shown: Vec<(String, f64)> = shown["data"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["url"].as_str().unwrap().to_owned(),
                s["score"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown, expected,
        "data-sources lists the ranked sources with their scores"
    );
    assert!(crate::support::assert_all_reexecute(&server.state).await >= 1);
    server.shutdown().await;
}

/// Coverage is the model's judgement and 70 % the line. At 0.69 the run
/// searches exactly the gaps the model named; at 0.7, with gaps still
/// named, it stops and writes (saying what is not covered). Asked again
/// within the hour, the same research is served from the caches (search
/// results 1 h, pages 24 h by default): nothing is searched or fetched
/// again.
#[tokio::test]
async fn below_seventy_percent_coverage_the_models_gaps_are_searched_at_seventy_it_stops() {
    let web = Web::start(vec![
        efficiency_page(),
        costs_page(),
        forum_page(),
        noise_page(),
    ])
    .await;
    let u = |n: &str| web.url(n);
    let gap = gap_query(NOISE);
    let lists: BTreeMap<String, Vec<String>> = [
        (EFFICIENCY.to_owned(), vec![u("efficiency")]),
        (COST.to_owned(), vec![u("costs")]),
        (NOISE.to_owned(), vec![u("forum")]),
        (gap.clone(), vec![u("noise")]),
    ]
    .into();
    let engine = Engine::start(Duration::from_millis(20), move |q| {
        lists.get(q).cloned().unwrap_or_default()
    })
    .await;

    // 0.69: below the line — round 2 searches the model's gaps.
    let (m, calls) = model::model(Behaviour {
        coverage: Some(0.69),
        ..Behaviour::default()
    });
    let below = server(m, Some(&engine), "2s").await;
    let out = research(&below, "coverage-69", QUESTION).await;
    let reflects = calls_to(&calls, "reflect");
    assert_eq!(reflects.len(), 2, "a second round");
    let r1 = reply(&reflects[0]);
    assert_eq!(r1["coverage"], json!(0.69));
    assert_eq!(strings(&r1["gaps"]), [gap.as_str()], "the model's gaps");
    let searches = out.rounds("search");
    assert_eq!(searches.len(), 2);
    let second: Vec<Value> = out
        .started("search")
        .into_iter()
        .filter(|(s, _)| *s == searches[1])
        .filter_map(|(_, item)| item)
        .collect();
    assert_eq!(second, [json!(gap)], "round 2 searches the model's gaps");
    assert_eq!(engine.queries().last(), Some(&gap));
    // Round 2 found the noise facts: no gaps left, so no third round
    // although the model still says 0.69.
    assert_eq!(reply(&reflects[1])["gaps"], json!([]));
    assert_eq!(out.state["iteration"], 2);
    assert_eq!(web.hits("noise"), 1);
    assert!(crate::support::assert_all_reexecute(&below.state).await >= 1);
    below.shutdown().await;

    // 0.7: at the line — one round although a gap is named.
    let (m, calls) = model::model(Behaviour {
        coverage: Some(0.7),
        ..Behaviour::default()
    });
    let at = server(m, Some(&engine), "2s").await;
    let searched = engine.queries().len();
    let out = research(&at, "coverage-70", QUESTION).await;
    let reflects = calls_to(&calls, "reflect");
    assert_eq!(reflects.len(), 1, "no second round at 0.7");
    assert_eq!(reply(&reflects[0])["coverage"], json!(0.7));
    assert_eq!(strings(&reply(&reflects[0])["gaps"]), [gap.as_str()]);
    assert_eq!(out.rounds("search").len(), 1);
    assert_eq!(
        engine.queries().len(),
        searched + 3,
        "the three sub-queries only"
    );
    assert_eq!(out.state["iteration"], 1);
    assert_eq!(out.state["coverage"], json!(0.7));
    let synth = calls_to(&calls, "synthesize");
    assert!(
        synth[0]
            .prompt
            .contains(&format!("Not covered by the research: {gap}"))
    );
    assert_eq!(
        out.stages(),
        [
            PLANNING,
            "Searching the web (3 queries)…",
            "Reading 3 pages…",
            ANALYSING,
            WRITING
        ],
        "one stage per phase"
    );

    // The same research again, in another chat: the searches and the
    // pages come from the caches.
    let hits: Vec<usize> = ["efficiency", "costs", "forum"]
        .iter()
        .map(|p| web.hits(p))
        .collect();
    let searched = engine.queries().len();
    let again = research(&at, "coverage-70-again", QUESTION).await;
    assert_eq!(engine.queries().len(), searched, "no search sent again");
    for (p, before) in ["efficiency", "costs", "forum"].iter().zip(hits) {
        assert_eq!(web.hits(p), before, "{p} not fetched again");
    }
    assert_eq!(again.state["ranked"], out.state["ranked"]);
    assert_eq!(again.text(), out.text());
    assert_eq!(crate::support::assert_all_reexecute(&at.state).await, 2);
    at.shutdown().await;
}

/// The configuration docs/research.md shows is accepted as written.
#[test]
fn the_configuration_docs_research_md_shows_is_valid() {
    let doc = std::fs::read_to_string(root().join("docs/research.md")).unwrap();
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .map(|b| &b[..b.find("```").expect("the block ends")])
        .collect();
    assert_eq!(blocks.len(), 2, "the tools and the cache policies");
    for b in blocks {
        let c = Config::from_toml(b).unwrap_or_else(|e| panic!("{e}\n{b}"));
        let reg = crate::support::registries();
        c.tools
            .apply(&reg.tools)
            .unwrap_or_else(|e| panic!("{e}\n{b}"));
    }
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}
