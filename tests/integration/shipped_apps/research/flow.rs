//! The research graph's whole flow on one question: plan, parallel
//! searches, merge/dedupe/top 5, fetch, facts per page, weighted ranking, a
//! second round on the named gaps, the cited answer, related questions, the
//! progress parts, the stored message and the sources streamed as chosen.
//! One run; each step of the flow is checked by a function of its own.

use super::*;

/// The whole flow: plan, parallel searches, merge/dedupe/top 5, fetch,
/// facts per page, weighted ranking, a second round on the named gaps,
/// the cited answer, related questions and the stored message.
#[tokio::test]
async fn research_plans_searches_in_parallel_reads_ranks_loops_on_gaps_and_cites() {
    let f = HeatPumps::research().await;
    f.planned_and_searched_in_parallel();
    f.read_the_top_five_then_the_gap_pages();
    f.took_the_facts_from_each_page();
    f.looped_once_on_the_noise_gap();
    f.ranked_every_page_by_the_weights();
    let cited = f.cited_the_sources_it_used();
    f.suggested_related_questions();
    f.showed_each_stage_as_it_began();
    f.stored_the_answer_and_its_sources(&cited);
    f.streamed_the_sources_as_they_were_chosen();
    // Re-executed with no search engine, no pages and no model.
    assert!(crate::support::assert_all_reexecute(&f.server.state).await >= 1);
    f.server.shutdown().await;
}

/// The heat-pump question researched over seven pages; the model rates
/// each page by its title, so every page scores differently.
struct HeatPumps {
    web: Web,
    engine: Engine,
    calls: Calls,
    server: TestServer,
    out: Outcome,
    /// The query round 2 searches: the noise aspect's gap.
    gap: String,
}

impl HeatPumps {
    async fn research() -> Self {
        let web = Web::start(vec![
            efficiency_page(),
            costs_page(),
            forum_page(),
            overview_page(),
            Page::ok(
                "running",
                "Running a heat pump",
                &["A heat pump uses about 3,500 kWh of electricity a year in a typical house."],
            )
            .slow(Duration::from_millis(400)),
            Page::ok(
                "myths",
                "Heat pump myths",
                &["Heat pumps work in cold climates too."],
            ),
            noise_page(),
        ])
        .await;
        let u = |n: &str| web.url(n);
        let gap = gap_query(NOISE);
        let lists: BTreeMap<String, Vec<String>> = [
            (EFFICIENCY.to_owned(), vec![u("efficiency"), u("overview")]),
            (
                COST.to_owned(),
                vec![u("costs"), u("overview"), u("running")],
            ),
            (NOISE.to_owned(), vec![u("forum"), u("costs"), u("myths")]),
            (gap.clone(), vec![u("noise"), u("efficiency")]),
        ]
        .into();
        let engine = Engine::start(Duration::from_millis(150), move |q| {
            lists.get(q).cloned().unwrap_or_default()
        })
        .await;
        // Authority by title, so every page scores differently.
        let authority: BTreeMap<&str, f64> = [
            ("Heat pump efficiency explained", 0.9),
            ("What a heat pump costs", 0.6),
            ("Garden forum", 0.1),
            ("Heat pumps: an overview", 0.4),
            ("Running a heat pump", 0.7),
            ("Heat pump myths", 0.2),
            ("How loud is a heat pump?", 0.8),
        ]
        .into();
        let (m, calls) = model::model(Behaviour {
            ratings: Box::new(move |title| {
                authority.get(title).map(|a| Rated {
                    authority: *a,
                    freshness: 0.5,
                    relevance: None,
                    quality: 0.5,
                })
            }),
            ..Behaviour::default()
        });
        let server = server(m, Some(&engine), "2s").await;
        let out = research(&server, "research-1", QUESTION).await;
        Self {
            web,
            engine,
            calls,
            server,
            out,
            gap,
        }
    }

    fn u(&self, name: &str) -> String {
        self.web.url(name)
    }

    /// The items the node's tasks started with in superstep `step`.
    fn items(&self, node: &str, step: u32) -> Vec<Value> {
        self.out
            .started(node)
            .into_iter()
            .filter(|(s, _)| *s == step)
            .filter_map(|(_, item)| item)
            .collect()
    }

    /// Plan: one sub-query per aspect of the question. Parallel searches:
    /// one per sub-query, in one step, at the same time.
    fn planned_and_searched_in_parallel(&self) {
        let state = &self.out.state;
        assert_eq!(strings(&state["sub_queries"]), [EFFICIENCY, COST, NOISE]);
        let searches = self.out.rounds("search");
        assert_eq!(searches.len(), 2, "two rounds of searches: {searches:?}");
        let first = self.items("search", searches[0]);
        assert_eq!(first, [json!(EFFICIENCY), json!(COST), json!(NOISE)]);
        let queries = self.engine.queries();
        assert_eq!(
            queries[..3].iter().collect::<BTreeSet<_>>(),
            [EFFICIENCY, COST, NOISE]
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .iter()
                .collect(),
            "{queries:?}"
        );
        assert!(
            self.engine.max_in_flight() >= 2,
            "the searches ran concurrently (at most {} in flight)",
            self.engine.max_in_flight()
        );
    }

    /// Merge rank by rank, dedupe, top 5: `myths` (6th) waits, and is read
    /// in round 2 with the noise page the gap search found.
    fn read_the_top_five_then_the_gap_pages(&self) {
        let fetched = strings(&self.out.state["fetched"]);
        let u = |n: &str| self.u(n);
        assert_eq!(
            fetched,
            [
                u("efficiency"),
                u("costs"),
                u("forum"),
                u("overview"),
                u("running"),
                u("noise"),
                u("myths"),
            ]
        );
        for page in PAGES {
            assert_eq!(self.web.hits(page), 1, "{page} fetched once");
        }
        let fetch_rounds = self.out.rounds("fetch");
        assert_eq!(fetch_rounds.len(), 2);
        let fetched_in = |step: u32| -> Vec<String> {
            self.out
                .started("fetch")
                .into_iter()
                .filter(|(s, _)| *s == step)
                .map(|(_, i)| i.unwrap().as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(fetched_in(fetch_rounds[0]), fetched[..5]);
        assert_eq!(fetched_in(fetch_rounds[1]), fetched[5..]);
    }

    /// Facts per page, extracted by the model from the page text it was
    /// given (sentences of that page), attributed to the page's URL.
    fn took_the_facts_from_each_page(&self) {
        for name in PAGES {
            let url = self.u(name);
            let call = read_call(&self.calls, &url);
            assert!(
                call.prompt.contains(&self.web.page(name).text()),
                "{name}: the page text reaches the prompt"
            );
            assert!(
                call.prompt.contains(QUESTION),
                "{name}: the question reaches the prompt"
            );
            let facts = strings(&reply(&call)["facts"]);
            assert!(
                facts
                    .iter()
                    .all(|f| sentences(self.web.page(name)).contains(f)),
                "{name}: {facts:?}"
            );
            assert_eq!(self.out.facts_of(&url), facts, "{name}");
        }
        assert!(
            self.out.facts_of(&self.u("forum")).is_empty(),
            "nothing on the forum bears on the question"
        );
        assert_eq!(
            self.out.facts_of(&self.u("noise")),
            ["Heat pump outdoor units produce noise levels of 40 to 60 decibels at one metre."]
        );
    }

    /// Round 1 left the noise aspect uncovered (2 of 3): the model named it
    /// as a gap, and round 2 searched exactly the gaps. Coverage reached
    /// (1.0 ≥ 0.7): no third round.
    fn looped_once_on_the_noise_gap(&self) {
        let (state, gap) = (&self.out.state, &self.gap);
        let reflects = calls_to(&self.calls, "reflect");
        assert_eq!(reflects.len(), 2, "two rounds, no third");
        let r1 = reply(&reflects[0]);
        assert_eq!(r1["coverage"], json!(0.67));
        assert_eq!(strings(&r1["gaps"]), [gap.as_str()]);
        assert!(
            !reflects[0].prompt.contains("decibels"),
            "round 1 found nothing on noise"
        );
        assert!(
            reflects[1].prompt.contains("40 to 60 decibels"),
            "round 2 lists the new facts"
        );
        let second = self.items("search", self.out.rounds("search")[1]);
        assert_eq!(second, [json!(gap)], "round 2 searches are the named gaps");
        let queries = self.engine.queries();
        assert_eq!(queries.len(), 4, "{queries:?}");
        assert_eq!(&queries[3], gap);
        assert_eq!(strings(&state["queries"]), [gap.as_str()]);
        assert_eq!(reply(&reflects[1])["coverage"], json!(1.0));
        assert_eq!(state["coverage"], json!(1.0));
        assert_eq!(state["iteration"], 2);
        assert_eq!(self.out.rounds("reflect").len(), 2);
    }

    /// Ranking: every page read, scored with the document's weights, best
    /// first; the ratings are the model's.
    fn ranked_every_page_by_the_weights(&self) {
        let ranked = self.out.state["ranked"].as_array().unwrap();
        assert_eq!(ranked.len(), 7);
        for s in ranked {
            let url = s["url"].as_str().unwrap();
            let given = reply(&read_call(&self.calls, url));
            for k in ["authority", "freshness", "relevance", "quality"] {
                assert_eq!(s[k], given[k], "{url} {k}");
            }
            assert!(close(s["score"].as_f64().unwrap(), weighted(s)), "{s}");
        }
        let scores: Vec<f64> = ranked
            .iter()
            .map(|s| s["score"].as_f64().unwrap())
            .collect();
        assert!(
            scores.windows(2).all(|w| w[0] > w[1]),
            "best first: {scores:?}"
        );
    }

    /// The answer: the synthesizer saw the sources numbered in ranked
    /// order with their facts, and cited those whose facts it used. Returns
    /// the cited sources, `(number, url)`.
    fn cited_the_sources_it_used(&self) -> Vec<(String, String)> {
        let out = &self.out;
        let synth = calls_to(&self.calls, "synthesize");
        assert_eq!(synth.len(), 1);
        let numbers = numbered(&synth[0].prompt);
        assert_eq!(
            numbers.iter().map(|n| n.url.clone()).collect::<Vec<_>>(),
            out.urls("ranked")
        );
        for n in &numbers {
            assert_eq!(n.facts, out.facts_of(&n.url), "facts under [{}]", n.n);
        }
        let answer = out.state["answer"].as_str().unwrap();
        assert_eq!(answer, synth[0].reply);
        assert_eq!(out.text(), answer);
        let number_of = |name: &str| {
            let url = self.u(name);
            numbers.iter().find(|n| n.url == url).unwrap().n.to_string()
        };
        let expected: Vec<(String, String)> = numbers
            .iter()
            .filter(|n| {
                ["efficiency", "costs", "running", "noise"]
                    .contains(&self.web.name_of(&n.url).as_str())
            })
            .map(|n| (n.n.to_string(), n.url.clone()))
            .collect();
        assert_eq!(expected.len(), 4);
        for (n, _) in &expected {
            assert!(
                answer.contains(&format!("[{n}]")),
                "[{n}] cited in {answer}"
            );
        }
        assert!(answer.contains("[42]"), "a number no source has");
        assert_eq!(
            out.cited(),
            expected,
            "source-url parts exactly for the cited sources"
        );
        for uncited in ["overview", "forum", "myths"] {
            assert!(
                !answer.contains(&format!("[{}]", number_of(uncited))),
                "{uncited}"
            );
            assert!(
                !out.cited().iter().any(|(_, url)| *url == self.u(uncited)),
                "{uncited}"
            );
        }
        let noise_part = out
            .of_type("source-url")
            .find(|c| c["url"] == self.u("noise"))
            .unwrap();
        assert_eq!(noise_part["title"], "How loud is a heat pump?");
        let last_text = out
            .chunks
            .iter()
            .rposition(|c| c["type"] == "text-delta")
            .unwrap();
        assert!(
            out.first("source-url").unwrap() > last_text,
            "sources follow the answer"
        );
        expected
    }

    /// Related questions, in the state and as a data part.
    fn suggested_related_questions(&self) {
        let related = strings(&self.out.state["related"]);
        assert_eq!(related.len(), 3);
        let followups = self
            .out
            .of_type("data-followups")
            .next()
            .expect("data-followups");
        assert_eq!(strings(&followups["data"]["questions"]), related);
    }

    /// Progress: transient data-stage parts, in order, one per phase —
    /// planning, searching, reading, analysing (each round), writing — each
    /// shown as its phase begins: searching before the first search,
    /// reading before the first fetch, analysing before the first page is
    /// read, writing before the answer.
    fn showed_each_stage_as_it_began(&self) {
        let out = &self.out;
        assert_eq!(
            out.stages(),
            [
                PLANNING,
                "Searching the web (3 queries)…",
                "Reading 5 pages…",
                ANALYSING,
                "Searching the web (1 query)…",
                "Reading 2 pages…",
                ANALYSING,
                WRITING,
            ]
        );
        let started_at = |node: &str| {
            out.events
                .iter()
                .find(|e| {
                    e.node.as_deref() == Some(node)
                        && matches!(e.event, EventKind::NodeStarted { .. })
                })
                .unwrap()
                .seq
        };
        let stage_seq = |status: &str| {
            out.events
                .iter()
                .find(|e| matches!(&e.event, EventKind::Custom(c) if c.name == "stage" && c.data["status"] == status))
                .unwrap_or_else(|| panic!("stage {status}"))
                .seq
        };
        assert!(stage_seq("Searching the web (3 queries)…") < started_at("search"));
        assert!(stage_seq("Reading 5 pages…") < started_at("fetch"));
        assert!(stage_seq(ANALYSING) < started_at("read"));
        assert!(stage_seq(WRITING) < started_at("synthesize"));
        assert!(
            out.of_type("data-stage")
                .all(|c| c["transient"] == true && c["id"] == "stage")
        );
        assert!(
            !out.parts.iter().any(|p| p["type"] == "data-stage"),
            "transient parts are not kept"
        );
        assert!(out.stage_at(WRITING) < out.first("text-delta").unwrap());
    }

    /// The assistant message as stored: its parts.
    fn stored_parts(&self) -> &Vec<Value> {
        let messages = self.out.stored["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2, "{}", self.out.stored);
        assert_eq!(messages[1]["role"], "assistant");
        messages[1]["parts"].as_array().unwrap()
    }

    /// The stored message: the answer and its sources, no progress parts.
    fn stored_the_answer_and_its_sources(&self, cited: &[(String, String)]) {
        let stored = self.stored_parts();
        let stored_text: String = stored
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        assert_eq!(stored_text, self.out.state["answer"].as_str().unwrap());
        let stored_sources: Vec<(String, String)> = stored
            .iter()
            .filter(|p| p["type"] == "source-url")
            .map(|p| {
                (
                    p["sourceId"].as_str().unwrap().to_owned(),
                    p["url"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(stored_sources, cited);
        assert!(!stored.iter().any(|p| p["type"] == "data-stage"));
        assert!(stored.iter().any(|p| p["type"] == "data-followups"));
    }

    /// Sources are streamed as soon as they are chosen: the five pages of
    /// round 1, unscored, before any page is fetched; scored once read
    /// (before round 2's search); round 2's two pages added, unscored,
    /// before they are fetched; the final ranking with each score and
    /// the weights before the answer's first text-delta. One part (id
    /// `sources`), updated in place; the stored message keeps one sources
    /// part: the final ranking.
    fn streamed_the_sources_as_they_were_chosen(&self) {
        let out = &self.out;
        let fetched = strings(&out.state["fetched"]);
        let ranked = out.state["ranked"].as_array().unwrap();
        let shown = out.sources_parts();
        assert_eq!(shown.len(), 4, "chosen, scored, chosen, scored: {shown:?}");
        let (at, urls, scores) = &shown[0];
        assert!(*at < out.stage_at("Reading 5 pages…"));
        assert_eq!(urls, &fetched[..5]);
        assert!(
            scores.iter().all(Option::is_none),
            "not scored before reading"
        );
        let (at, urls, scores) = &shown[1];
        assert!(*at < out.stage_at("Searching the web (1 query)…"));
        assert_eq!(urls.len(), 5);
        assert!(scores.iter().all(Option::is_some));
        let (at, urls, scores) = &shown[2];
        assert!(*at < out.stage_at("Reading 2 pages…"));
        assert_eq!(&urls[..5], &shown[1].1[..]);
        assert_eq!(&urls[5..], &fetched[5..]);
        assert!(scores[5..].iter().all(Option::is_none));
        let (at, urls, _) = &shown[3];
        let first_text = out.first("text-delta").unwrap();
        assert!(*at < first_text, "the sources come before the answer");
        assert_eq!(urls, &out.urls("ranked"), "the final ranking");
        let last = &out.chunks[*at]["data"]["sources"];
        for (s, r) in last.as_array().unwrap().iter().zip(ranked) {
            assert_eq!(s["score"], r["score"]);
            for k in ["authority", "freshness", "relevance", "quality", "title"] {
                assert_eq!(s[k], r[k], "{k} shown");
            }
            assert!(close(s["score"].as_f64().unwrap(), weighted(s)), "{s}");
        }
        let kept: Vec<&Value> = self
            .stored_parts()
            .iter()
            .filter(|p| p["type"] == "data-sources")
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0]["data"]["sources"], *last);
        assert_eq!(kept[0]["data"]["weights"], weights());
    }
}

/// Every page of the flow, by name.
const PAGES: [&str; 7] = [
    "efficiency",
    "costs",
    "forum",
    "overview",
    "running",
    "noise",
    "myths",
];
