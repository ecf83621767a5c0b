//! graphs/research.yaml end to end: local servers stand in for the search
//! engine (a SearXNG-compatible `/search` JSON endpoint) and the web pages
//! (one server per site), a scripted model plays the planner, the gap
//! writer, the synthesizer and the related-questions node. Nothing leaves
//! 127.0.0.1.
//!
//! The scenario: the plan has three sub-queries; one search fails twice
//! before it answers (retries); two searches return the same page (fetched
//! once); one page answers HTTP 500 (skipped); the noise aspect is not
//! covered in round 1, so reflect writes a gap query and the cycle searches
//! again — until coverage is reached, or until the round cap stops it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use stategraph::events::{Event, EventKind};
use stategraph::graph::CompiledGraph;
use stategraph::graph::catalog::Registries;
use stategraph::llm::offline::OfflineModel;
use stategraph::llm::scripted::{ScriptedModel, Turn};
use stategraph::llm::{ChatMessage, ChatModel, ChatRequest, LlmError, Models};
use stategraph::runtime::{self, RunOptions, RunOutcome, Services};
use stategraph::sse::{self, BridgeConfig};
use stategraph::tools::ToolRegistry;
use tokio::sync::mpsc;

use crate::support::{aisdk_validate, report_json, shipped_catalog};

mod fixtures;
mod kinds;

use fixtures::{Engine, Web, web_tools};

const QUESTION: &str =
    "How efficient are heat pumps, what does installing one cost, and how loud are they?";
const EFFICIENCY: &str = "heat pump efficiency";
const COST: &str = "heat pump installation cost";
const NOISE: &str = "heat pump noise levels";
/// The gap query that finds the noise page.
const GAP_FOUND: &str = "heat pump noise decibels";
/// A gap query that finds nothing.
const GAP_EMPTY: &str = "heat pump sound";

// ------------------------------------------------------------- the model

/// What the scripted model was asked, by step.
#[derive(Default)]
struct Asked {
    plans: usize,
    gaps: Vec<String>,
    syntheses: Vec<String>,
    related: usize,
}

/// The synthesizer's source numbers, read from its prompt (`[N] title — url`).
fn numbers(evidence: &str) -> BTreeMap<String, u32> {
    evidence
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('[')?;
            let (n, rest) = rest.split_once("] ")?;
            let (_, url) = rest.rsplit_once(" — ")?;
            Some((url.to_owned(), n.parse().ok()?))
        })
        .collect()
}

/// Plans the three aspects, writes `gap` for the gaps, and answers citing
/// the efficiency, cost and noise pages (not the overview) plus a number
/// that is no source.
fn responder(web: &Web, gap: &'static str, asked: Arc<Mutex<Asked>>) -> ScriptedModel {
    let (efficiency, costs, noise) = (web.url("efficiency"), web.url("costs"), web.url("noise"));
    ScriptedModel::from_fn(move |req: &ChatRequest| {
        let user = match req.messages.last() {
            Some(ChatMessage::User { content }) => content.clone(),
            _ => String::new(),
        };
        let mut asked = asked.lock().unwrap();
        match req.response_format.as_ref().map(|f| f.name.as_str()) {
            Some("research_plan") => {
                asked.plans += 1;
                Turn::json(json!({"queries": [EFFICIENCY, COST, NOISE]}))
            }
            Some("research_gaps") => {
                asked.gaps.push(user);
                Turn::json(json!({"queries": [gap, EFFICIENCY]}))
            }
            Some("followups") => {
                asked.related += 1;
                Turn::json(json!({"questions": [
                    "Which heat pump is quietest?",
                    "Are there subsidies for heat pumps?",
                    "How long does a heat pump last?"
                ]}))
            }
            Some(other) => Turn::Fail(LlmError::Scripted(format!("unexpected format {other}"))),
            None => {
                asked.syntheses.push(user.clone());
                let n = numbers(&user);
                let cite = |url: &str| n.get(url).map_or("[?]".to_owned(), |n| format!("[{n}]"));
                let mut text = format!(
                    "A modern heat pump reaches a COP of 3 to 4 {}. Installing one costs 8,000 to 15,000 euros {}.",
                    cite(&efficiency),
                    cite(&costs)
                );
                if n.contains_key(&noise) {
                    text.push_str(&format!(
                        " Outdoor units run at 40 to 60 decibels {}.",
                        cite(&noise)
                    ));
                }
                text.push_str(" Subsidies vary [9].");
                Turn::text(text)
            }
        }
    })
}

// ------------------------------------------------------------------- runs

struct Run {
    graph: Arc<CompiledGraph>,
    events: Vec<Event>,
    outcome: RunOutcome,
}

impl Run {
    async fn go(models: Models, tools: Arc<ToolRegistry>) -> Self {
        let cat = shipped_catalog();
        let graph = Arc::clone(cat.get("research").expect("graphs/research.yaml"));
        let (tx, mut rx) = mpsc::channel::<Arc<Event>>(256);
        let collect = tokio::spawn(async move {
            let mut v = Vec::new();
            while let Some(e) = rx.recv().await {
                v.push((*e).clone());
            }
            v
        });
        let input = json!({"messages": [{"id": "u1", "role": "user", "content": QUESTION}], "query": QUESTION});
        let outcome = tokio::time::timeout(
            Duration::from_secs(30),
            runtime::run(
                Arc::clone(&graph),
                Arc::new(Services::new(models, tools)),
                input,
                RunOptions {
                    events: Some(tx),
                    ..Default::default()
                },
            ),
        )
        .await
        .expect("the run finishes")
        .expect("the run succeeds");
        Self {
            graph,
            events: collect.await.unwrap(),
            outcome,
        }
    }

    fn state(&self) -> Value {
        self.outcome.state.to_json()
    }

    /// The events of node `node`.
    fn of<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
        self.events
            .iter()
            .filter(move |e| e.node.as_deref() == Some(node))
    }

    /// The thinking notes of `node`, joined.
    fn notes(&self, node: &str) -> String {
        self.of(node)
            .filter_map(|e| match &e.event {
                EventKind::Thinking { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The UI message stream of the run, checked by the AI SDK's parser;
    /// returns its chunks and the assembled message parts.
    fn stream(&self) -> (Vec<Value>, Vec<Value>) {
        let cfg = BridgeConfig::for_graph(&self.graph, "msg-1".into(), json!({"runId": "run-1"}));
        let text = sse::render(cfg, &self.events, 0);
        let (ok, report) = aisdk_validate(&text);
        assert!(ok, "{report}\n{text}");
        let chunks = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        let parts = report_json(&report)["message"]["parts"]
            .as_array()
            .expect("assembled message")
            .clone();
        (chunks, parts)
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

// ------------------------------------------------------------------- tests

#[tokio::test]
async fn research_searches_in_parallel_loops_on_low_coverage_and_cites_what_it_used() {
    let web = Web::start().await;
    let engine = Engine::start(&web).await;
    let asked = Arc::new(Mutex::new(Asked::default()));
    let model: Arc<dyn ChatModel> = Arc::new(responder(&web, GAP_FOUND, Arc::clone(&asked)));
    // The synthesis role's model is down; its fallback role answers.
    let down = ScriptedModel::new([Turn::Fail(LlmError::Http {
        status: 503,
        message: "overloaded".into(),
    })])
    .shared();
    let models = Models::single(Arc::clone(&model)).with_role("synthesis", down.clone());
    let run = Run::go(models, web_tools(&engine)).await;
    let state = run.state();

    // Plan → one search branch per sub-query, all in one superstep, at once.
    assert_eq!(strings(&state["sub_queries"]), [EFFICIENCY, COST, NOISE]);
    let first_round: BTreeSet<(u32, u32)> = run
        .of("search")
        .filter(|e| matches!(e.event, EventKind::NodeStarted { attempt: 1, .. }))
        .map(|e| (e.step, e.task))
        .collect();
    assert!(
        first_round.is_superset(&[(2, 0), (2, 1), (2, 2)].into()),
        "{first_round:?}"
    );
    for q in [EFFICIENCY, NOISE] {
        assert_eq!(engine.searches(q), 1, "{q}");
    }
    assert!(
        engine.max_in_flight.load(Ordering::SeqCst) >= 2,
        "the searches ran concurrently"
    );

    // The cost search failed twice with 503 and succeeded on the third attempt.
    assert_eq!(engine.searches(COST), 3);
    let retries = run
        .of("search")
        .filter(|e| matches!(e.event, EventKind::NodeRetrying { .. }))
        .count();
    assert_eq!(retries, 2);
    let cost_record = state["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["args"]["query"] == COST)
        .unwrap();
    assert_eq!(cost_record["output"]["results"][0]["url"], web.url("costs"));

    // Dedupe: the overview came from two searches and the efficiency page
    // again in round 2; each was fetched once. The 500 page was skipped.
    for page in [
        "efficiency",
        "overview",
        "costs",
        "broken",
        "forum",
        "noise",
    ] {
        assert_eq!(web.fetches(page), 1, "{page}");
    }
    assert!(
        run.notes("process")
            .contains(&format!("{} (HTTP 500)", web.url("broken"))),
        "{}",
        run.notes("process")
    );
    let sources: Vec<&str> = state["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["url"].as_str().unwrap())
        .collect();
    assert!(
        !sources.contains(&web.url("broken").as_str()),
        "{sources:?}"
    );

    // Round 1 left the noise aspect uncovered (2 of 3 < 0.75): reflect wrote
    // a gap query, the cycle searched it (the repeated query was dropped),
    // and round 2 covered everything.
    let asked = std::mem::take(&mut *asked.lock().unwrap());
    assert_eq!(asked.plans, 1);
    assert_eq!(asked.gaps.len(), 1);
    assert!(
        asked.gaps[0].contains(&format!("Not covered yet:\n- {NOISE}")),
        "{}",
        asked.gaps[0]
    );
    assert_eq!(
        engine.searches(GAP_FOUND),
        1,
        "the gap query reached the engine"
    );
    assert_eq!(
        engine.searches(EFFICIENCY),
        1,
        "an old query is not searched again"
    );
    assert!(
        run.notes("reflect").contains("Round 1: coverage 67 %"),
        "{}",
        run.notes("reflect")
    );
    assert_eq!(state["iteration"], 2);
    assert_eq!(state["coverage"], 1.0);
    assert_eq!(state["done"], true);
    assert!(state["gaps"].as_array().unwrap().is_empty());
    let reflect_steps: Vec<u32> = run
        .of("reflect")
        .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
        .map(|e| e.step)
        .collect();
    assert_eq!(reflect_steps.len(), 2, "two rounds");
    // facts and score ran side by side and joined into reflect.
    for node in ["facts", "score"] {
        let steps: Vec<u32> = run
            .of(node)
            .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
            .map(|e| e.step + 1)
            .collect();
        assert_eq!(steps, reflect_steps, "{node}");
    }

    // Synthesis: the primary failed before answering, the fallback answered.
    assert_eq!(down.remaining(), 0);
    assert_eq!(down.requests().len(), 1);
    assert_eq!(asked.syntheses.len(), 1);
    let roles: Vec<&str> = run
        .of("synthesize")
        .filter_map(|e| match &e.event {
            EventKind::LlmStarted { role, .. } => Some(&**role),
            _ => None,
        })
        .collect();
    assert_eq!(roles, ["synthesis", "synthesis_fallback"]);
    assert!(run.notes("synthesize").contains("fallback"));
    let numbered = numbers(&asked.syntheses[0]);
    assert_eq!(
        numbered.len(),
        4,
        "sources with facts are numbered: {numbered:?}"
    );
    assert!(numbered.contains_key(&web.url("overview")));
    let answer = state["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("A modern heat pump reaches a COP of 3 to 4 ["),
        "{answer}"
    );

    // Only the cited sources are `source-url` parts (not the overview, not [9]).
    let cited: BTreeMap<String, String> = [
        (numbered[&web.url("efficiency")], web.url("efficiency")),
        (numbered[&web.url("costs")], web.url("costs")),
        (numbered[&web.url("noise")], web.url("noise")),
    ]
    .into_iter()
    .map(|(n, u)| (n.to_string(), u))
    .collect();
    let (chunks, parts) = run.stream();
    let streamed: BTreeMap<String, String> = chunks
        .iter()
        .filter(|c| c["type"] == "source-url")
        .map(|c| {
            (
                c["sourceId"].as_str().unwrap().to_owned(),
                c["url"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(streamed, cited);
    assert_eq!(
        chunks.iter().filter(|c| c["type"] == "source-url").count(),
        3,
        "each once"
    );
    let noise_part = chunks
        .iter()
        .find(|c| c["type"] == "source-url" && c["url"] == web.url("noise").as_str())
        .unwrap();
    assert_eq!(noise_part["title"], "How loud is a heat pump?");
    let last_text = chunks
        .iter()
        .rposition(|c| c["type"] == "text-delta")
        .unwrap();
    let first_source = chunks
        .iter()
        .position(|c| c["type"] == "source-url")
        .unwrap();
    assert!(first_source > last_text, "sources follow the answer");
    let citations: Vec<u64> = state["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(citations.len(), 3);
    assert!(run.notes("synthesize").contains("[9]"));
    // The assembled message: the answer text, then the three sources.
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, answer);
    assert_eq!(
        parts.iter().filter(|p| p["type"] == "source-url").count(),
        3
    );

    // Related questions, in the state and as a data part.
    assert_eq!(asked.related, 1);
    assert_eq!(state["related"].as_array().unwrap().len(), 3);
    assert!(chunks.iter().any(|c| c["type"] == "data-followups"));

    // Re-executed from its recording: no search, no fetch, no model call
    // (a model with no turns would fail), the same answer and sources — the
    // tool records, the retried search and the fallback call are all
    // served back in order.
    let seen = (
        engine.queries.lock().unwrap().len(),
        web.fetched.lock().unwrap().len(),
    );
    let offline = Services::new(
        Models::single(ScriptedModel::new([]).shared()),
        web_tools(&engine),
    );
    let again = stategraph::replay::reexecute(Arc::clone(&run.graph), offline, &run.events)
        .await
        .unwrap();
    assert!(
        again.divergence.is_none(),
        "parallel searches and fetches interleave differently, yet nothing diverges: {}",
        again.report()
    );
    assert_eq!(
        (
            engine.queries.lock().unwrap().len(),
            web.fetched.lock().unwrap().len()
        ),
        seen
    );
    let answer_and_sources = |events: &[Event]| {
        let mut text = String::new();
        let mut sources = Vec::new();
        for e in events
            .iter()
            .filter(|e| e.node.as_deref() == Some("synthesize"))
        {
            match &e.event {
                EventKind::TextDelta { delta, .. } => text.push_str(delta),
                EventKind::Source { source_id, url, .. } => {
                    sources.push((source_id.clone(), url.clone()))
                }
                _ => {}
            }
        }
        (text, sources)
    };
    assert_eq!(
        answer_and_sources(&again.events),
        answer_and_sources(&run.events)
    );
    assert!(
        matches!(
            again.events.last().map(|e| &e.event),
            Some(EventKind::RunFinished { .. })
        ),
        "{}",
        again.report()
    );
}

#[tokio::test]
async fn the_round_cap_ends_the_loop_when_coverage_stays_low() {
    let web = Web::start().await;
    let engine = Engine::start(&web).await;
    let asked = Arc::new(Mutex::new(Asked::default()));
    let model: Arc<dyn ChatModel> = Arc::new(responder(&web, GAP_EMPTY, Arc::clone(&asked)));
    let run = Run::go(Models::single(model), web_tools(&engine)).await;
    let state = run.state();

    // Round 2 searched the gap query, found nothing new, and reflect stopped
    // at the cap (max_rounds: 2) although coverage is still 2 of 3.
    assert_eq!(engine.searches(GAP_EMPTY), 1);
    let searched: BTreeSet<String> = engine.queries.lock().unwrap().iter().cloned().collect();
    assert_eq!(
        searched,
        [EFFICIENCY, COST, NOISE, GAP_EMPTY]
            .map(String::from)
            .into(),
        "no third round"
    );
    assert_eq!(
        asked.lock().unwrap().gaps.len(),
        1,
        "gap queries asked once"
    );
    assert_eq!(state["iteration"], 2);
    assert_eq!(state["done"], true);
    assert_eq!(state["coverage"], 0.667);
    assert_eq!(strings(&state["gaps"]), [NOISE]);
    assert!(
        run.notes("reflect")
            .contains("the cap of 2 rounds is reached"),
        "{}",
        run.notes("reflect")
    );
    assert!(run.notes("select").contains("Nothing new to read"));
    assert_eq!(web.fetches("noise"), 0);
    assert_eq!(
        run.of("fetch")
            .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
            .count(),
        5,
        "only round 1 fetched"
    );
    // The answer cites what round 1 found; the noise page was never numbered.
    let (chunks, _) = run.stream();
    let urls: BTreeSet<&str> = chunks
        .iter()
        .filter(|c| c["type"] == "source-url")
        .map(|c| c["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        urls,
        [web.url("efficiency"), web.url("costs")]
            .iter()
            .map(String::as_str)
            .collect()
    );
}

#[tokio::test]
async fn without_web_tools_or_a_model_research_ends_gracefully_with_nothing_found() {
    // The offline model and the built-in registry: `web` is declared but no
    // search or fetch tool is configured.
    let run = Run::go(
        Models::single(Arc::new(OfflineModel::default())),
        Arc::clone(&Registries::default().tools),
    )
    .await;
    let state = run.state();
    // The offline planner plans nothing, so the question itself is searched.
    assert_eq!(strings(&state["queries"]), [QUESTION]);
    let record = &state["results"][0];
    assert_eq!(record["error"]["type"], "not_found", "{record}");
    assert!(state["pages"].as_array().unwrap().is_empty());
    assert_eq!(
        state["iteration"], 1,
        "a failing search is not retried with new queries"
    );
    let answer = state["answer"].as_str().unwrap();
    assert!(
        answer.starts_with(
            "I could not research this: the web search failed (no tool named `web_search`)"
        ),
        "{answer}"
    );
    assert!(state["citations"].as_array().unwrap().is_empty());
    assert!(!state["related"].as_array().unwrap().is_empty());
    let (chunks, parts) = run.stream();
    assert!(!chunks.iter().any(|c| c["type"] == "source-url"));
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, answer);
}

#[test]
fn the_research_graph_compiles_with_its_cycle_maps_and_join() {
    let cat = shipped_catalog();
    let g = cat.get("research").expect("graphs/research.yaml compiles");
    assert_eq!(&*g.state.schema.name, "research");
    let kind = |id: &str| g.nodes[g.node_index(id).unwrap() as usize].kind.to_string();
    assert_eq!(kind("search"), "tool");
    assert_eq!(kind("synthesize"), "research_synthesize");
    let node = |id: &str| &g.nodes[g.node_index(id).unwrap() as usize];
    assert_eq!(node("search").retry.attempts, 3);
    assert_eq!(
        node("synthesize").fallback_model.as_deref(),
        Some("synthesis_fallback")
    );
    assert_eq!(g.joins.len(), 1);
    let sources: BTreeSet<&str> = g.joins[0]
        .sources
        .iter()
        .map(|s| &*g.nodes[*s as usize].id)
        .collect();
    assert_eq!(sources, ["facts", "score"].into());
    assert_eq!(&*g.nodes[g.joins[0].target as usize].id, "reflect");
    // The cycle: reflect → requery → search → … → reflect.
    let mermaid = stategraph::graph::mermaid::mermaid(g);
    for edge in [
        "plan ==>|each queries| search",
        "requery ==>|each queries| search",
        "crawl ==>|each urls| fetch",
        "reflect -->|false| requery",
        "reflect -->|true| synthesize",
    ] {
        assert!(mermaid.contains(edge), "{edge}\n{mermaid}");
    }
}
