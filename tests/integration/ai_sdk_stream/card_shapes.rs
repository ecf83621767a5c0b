//! The chat graph's quick-answer card reads the shapes the Data360 API
//! really returns (issue 31, item 3), and a shape it cannot read gives no
//! card, never a failed turn. The shipped `card` node is run as it is in
//! `graphs/chat.yaml`, on tool results of each shape.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::events::EventKind;
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::ScriptedModel;
use stategraph::internals::nodes::Graph;
use stategraph::internals::runtime::{self, RunOptions};

use crate::support::{registries, root, services};

/// The chat graph's state and its `card` node, alone in a graph.
fn card_graph() -> Arc<Graph> {
    let chat = std::fs::read_to_string(root().join("graphs/chat.yaml")).unwrap();
    let state = &chat[chat.find("\nstate:\n").unwrap()..chat.find("\n# Provided by").unwrap()];
    let card = &chat[chat.find("  - id: card\n").unwrap()..chat.find("  - id: direct\n").unwrap()];
    let yaml = format!("entry: card\n{state}\nnodes:\n{card}\nedges: [card -> END]\n");
    let cat = registries().from_sources(&[("card", &yaml)], Prompts::load(&root().join("prompts")));
    assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
    Arc::clone(cat.get("card").unwrap())
}

/// Runs the card on one quick-answer tool result: the card in the state
/// and the `quickAnswerCard` part sent, if any.
async fn card(tool: &str, args: Value, output: Value) -> (Value, Option<Value>) {
    let (card, sent, _) = card_noted(tool, args, output).await;
    (card, sent)
}

/// As [`card`], with the thinking notes.
async fn card_noted(tool: &str, args: Value, output: Value) -> (Value, Option<Value>, String) {
    let input = json!({
        "messages": [{"id": "u1", "role": "user", "content": "q"}],
        "query": "q",
        "tool_results": [{"node": "quick_answer", "tool": tool, "args": args, "output": output}],
    });
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let opts = RunOptions {
        events: Some(tx),
        ..Default::default()
    };
    let model = ScriptedModel::new([]).shared();
    let task = tokio::spawn(runtime::run(card_graph(), services(model), input, opts));
    let (mut sent, mut notes) = (None, String::new());
    while let Some(e) = rx.recv().await {
        match &e.event {
            EventKind::Custom(c) if c.name == "quickAnswerCard" => {
                sent = Some(c.data.clone());
            }
            EventKind::Thinking { text } => notes.push_str(text),
            _ => {}
        }
    }
    let out = task
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the card failed the run: {e}"));
    (
        out.state.to_json()["quick_answer_card"].clone(),
        sent,
        notes,
    )
}

fn rows(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"rank": i + 1, "country_code": format!("C{i}"), "country_name": format!("Country {i}"), "value": 100 - i}))
        .collect()
}

#[tokio::test]
async fn a_ranking_reads_ranking_rankings_and_snapshot_rankings() {
    let args = json!({"indicator_id": "X", "top_n": 8});
    for output in [
        json!({"indicator_name": "GDP", "unit": "USD", "year": "2022", "ranking": rows(8)}),
        json!({"indicator_name": "GDP", "unit": "USD", "year": "2022", "rankings": rows(8)}),
        json!({"indicator_name": "GDP", "unit": "USD", "snapshot": {"year": "2022", "rankings": rows(8)}}),
    ] {
        let (card, sent) = card("data360_rank_countries", args.clone(), output.clone()).await;
        assert_eq!(card["kind"], "ranking", "{output}");
        assert_eq!(card["year"], "2022", "{output}");
        assert_eq!(card["ranking"].as_array().unwrap().len(), 5);
        assert_eq!(card["ranking"][0]["country_name"], "Country 0");
        assert_eq!(sent, Some(card));
    }
}

#[tokio::test]
async fn a_summary_reads_summaries_summary_and_its_own_fields() {
    let s = json!({"country_code": "NGA", "country_name": "Nigeria", "start_year": "2010", "end_year": "2023",
        "first_value": 13.7, "last_value": 24.7, "change": 11.0, "trend": "increasing"});
    let mut flat = s.clone();
    flat["indicator_name"] = json!("Inflation");
    flat["unit"] = json!("%");
    let args = json!({"country_code": "NGA", "start_year": 2010});
    for output in [
        json!({"indicator_name": "Inflation", "unit": "%", "summaries": [s]}),
        json!({"indicator_name": "Inflation", "unit": "%", "summary": s}),
        flat,
    ] {
        let (card, _) = card("data360_summarize_data", args.clone(), output.clone()).await;
        assert_eq!(card["kind"], "fact", "{output}");
        assert_eq!(card["country"], "Nigeria");
        assert_eq!(card["value"], 24.7);
        assert_eq!(card["trend"]["from_year"], "2010");
    }
}

#[tokio::test]
async fn a_comparison_leads_with_the_country_named_first() {
    // Ranked by value, India first; the user named China first.
    let values = json!([
        {"country_code": "IND", "country_name": "India", "value": 9.7, "rank": 1},
        {"country_code": "CHN", "country_name": "China", "value": 8.4, "rank": 2},
    ]);
    for output in [
        json!({"indicator_name": "GDP growth", "unit": "%", "snapshot": {"year": "2021", "values": values}}),
        json!({"indicator_name": "GDP growth", "unit": "%", "year": "2021", "rankings": values}),
    ] {
        let args = json!({"country_codes": "chn; IND", "year": 2021});
        let (card, _) = card("data360_compare_countries", args, output.clone()).await;
        assert_eq!(card["kind"], "comparison", "{output}");
        assert_eq!(card["difference"]["between"], json!(["China", "India"]));
        assert_eq!(card["difference"]["value"], -1.3);
        assert_eq!(card["values"][0]["country_code"], "CHN");
        assert_eq!(card["year"], "2021");
    }
}

#[tokio::test]
async fn a_shape_it_cannot_read_gives_no_card_and_the_turn_goes_on() {
    let cases = [
        // Values that are no list: the template fails outright.
        (
            "data360_compare_countries",
            json!({"snapshot": {"year": "2021", "values": 5}}),
        ),
        // Values that are not numbers: nothing to show or compute with.
        (
            "data360_compare_countries",
            json!({"snapshot": {"year": "2021", "values": [
                {"country_code": "IND", "country_name": "India", "value": "n/a"},
                {"country_code": "CHN", "country_name": "China", "value": "n/a"}]}}),
        ),
        (
            "data360_rank_countries",
            json!({"ranking": [{"country_code": "IND", "country_name": "India", "value": "n/a"}]}),
        ),
        (
            "data360_summarize_data",
            json!({"summaries": [{"country_name": "India", "last_value": "n/a"}]}),
        ),
        // Neither `summaries`, `summary` nor a summary's fields.
        ("data360_summarize_data", json!({"results": [1, 2]})),
        // Nothing a ranking could be read from.
        ("data360_rank_countries", json!({"items": []})),
        // Two summaries: not a single fact.
        (
            "data360_summarize_data",
            json!({"summaries": [{"country_name": "A"}, {"country_name": "B"}]}),
        ),
    ];
    for (i, (tool, output)) in cases.into_iter().enumerate() {
        let (card, sent, notes) = card_noted(tool, json!({}), output.clone()).await;
        assert!(card.is_null(), "{tool} {output}: {card}");
        assert_eq!(sent, None, "{tool} {output}");
        if i == 0 {
            // The template failed outright; `on_error: skip` kept the turn.
            assert!(
                notes.contains("`card` failed") && notes.contains("skipped"),
                "{notes}"
            );
        }
    }
}

// The shapes the real Data360 MCP server answers (its compact serializer),
// as the Data360 chat app's own card reads them: avsolatorio/data-ai-chatbot,
// frontend/components/data360/types.ts (CompactRankingOutput,
// CompactSummarizeOutput, CompactCompareOutput, GetDataOutput) and
// backend/app/ai/graph/nodes/quick_answer.py (`_synthesize_card`).

/// A ranked country as the real server writes it.
fn compact(rank: u64, code: &str, country: &str, value: f64) -> Value {
    json!({"rank": rank, "code": code, "country": country, "value": value, "claim_id": format!("c{rank}")})
}

#[tokio::test]
async fn the_real_rankings_give_a_ranking_in_one_row_shape() {
    let output = json!({
        "year": "2020", "year_selection_note": null, "order": "desc",
        "counts": {"with_data": 10, "requested": 11}, "unit": "metric tons per capita",
        "indicator": "CO2 emissions (metric tons per capita)",
        "rankings": [compact(1, "USA", "United States", 13.0), compact(2, "JPN", "Japan", 8.2)],
        "excluded_count": 1, "excluded_sample": [{"code": "PRK", "name": null}], "error": null,
    });
    let (card, sent) = card("data360_rank_countries", json!({"top_n": 2}), output).await;
    assert_eq!(card["kind"], "ranking");
    assert_eq!(card["indicator"], "CO2 emissions (metric tons per capita)");
    assert_eq!(card["unit"], "metric tons per capita");
    assert_eq!(card["year"], "2020");
    assert_eq!(card["order"], "desc");
    assert_eq!(
        card["ranking"][0],
        json!({"rank": 1, "country_code": "USA", "country_name": "United States", "value": 13.0})
    );
    assert_eq!(card["ranking"][1]["country_name"], "Japan");
    assert_eq!(sent, Some(card));
}

#[tokio::test]
async fn the_real_comparison_leads_with_the_country_named_first() {
    // India ranks first; the user named China first. One row carries its
    // value as `obs_value`, which the app's card reads too.
    let mut china = compact(2, "CHN", "China", 0.0);
    china.as_object_mut().unwrap().remove("value");
    china["obs_value"] = json!(8.41);
    let output = json!({
        "indicator": "GDP growth (annual %)", "unit": "annual %",
        "snapshot": {"year": "2021", "rankings": [compact(1, "IND", "India", 10.48), china], "spread": null},
        "time_series": null, "error": null,
    });
    let args = json!({"country_codes": "CHN;IND", "year": 2021});
    let (card, _) = card("data360_compare_countries", args, output).await;
    assert_eq!(card["kind"], "comparison", "{card}");
    assert_eq!(card["indicator"], "GDP growth (annual %)");
    assert_eq!(card["year"], "2021");
    assert_eq!(
        card["values"][0],
        json!({"rank": 2, "country_code": "CHN", "country_name": "China", "value": 8.41})
    );
    assert_eq!(card["values"][1]["country_code"], "IND");
    assert_eq!(card["difference"]["between"], json!(["China", "India"]));
    assert_eq!(card["difference"]["value"], -2.07);
}

#[tokio::test]
async fn a_comparison_of_one_country_is_a_fact() {
    let output = json!({"indicator": "GDP growth (annual %)", "unit": "annual %",
        "snapshot": {"year": "2021", "rankings": [compact(1, "IND", "India", 10.48)]}});
    let (card, _) = card(
        "data360_compare_countries",
        json!({"country_codes": "IND;XXX"}),
        output,
    )
    .await;
    assert_eq!(
        card,
        json!({"kind": "fact", "indicator": "GDP growth (annual %)", "unit": "annual %", "country": "India", "year": "2021", "value": 10.48})
    );
}

/// A compact summary group.
fn group(key: Value, latest: (f64, &str), earliest: (f64, &str)) -> Value {
    json!({"group": key, "n": 14, "latest": {"value": latest.0, "year": latest.1},
        "earliest": {"value": earliest.0, "year": earliest.1}, "range": "2010-2023",
        "stats": {"min": 9.0, "max": 24.7, "mean": 14.05, "median": 13.15},
        "change": {"abs": latest.0 - earliest.0, "pct": 80.29}, "trend": "increasing", "claim_ids": ["a", "b"]})
}

#[tokio::test]
async fn the_real_summary_groups_give_a_fact_with_its_trend() {
    let output = json!({"indicator": "Inflation, consumer prices (annual %)", "unit": "annual %",
        "ambiguous_dimensions": null, "error": null,
        "groups": [group(json!({"ref_area": "NGA", "ref_area_name": "Nigeria"}), (24.7, "2023"), (13.7, "2010"))]});
    let args = json!({"country_code": "NGA", "start_year": 2010});
    let (card, sent) = card("data360_summarize_data", args, output).await;
    assert_eq!(
        card,
        json!({"kind": "fact", "indicator": "Inflation, consumer prices (annual %)", "unit": "annual %",
            "country": "Nigeria", "year": "2023", "value": 24.7,
            "trend": {"from_year": "2010", "from_value": 13.7, "change": 11.0, "direction": "increasing"}})
    );
    assert_eq!(sent, Some(card));
}

#[tokio::test]
async fn a_countrys_breakdowns_collapse_to_its_total_and_flat_groups_read_too() {
    // By sex (the real server groups an ambiguous dimension): the total.
    let by_sex = json!({"indicator": "Unemployment", "unit": "%", "ambiguous_dimensions": ["SEX"],
    "groups": [
        group(json!({"ref_area": "ZAF", "sex": "F"}), (35.1, "2023"), (30.0, "2010")),
        group(json!({"ref_area": "ZAF", "sex": "_T"}), (32.1, "2023"), (24.7, "2010")),
        group(json!({"ref_area": "ZAF", "sex": "M"}), (29.9, "2023"), (21.0, "2010")),
    ]});
    let (total, _) = card(
        "data360_summarize_data",
        json!({"country_code": "ZAF"}),
        by_sex,
    )
    .await;
    assert_eq!(total["value"], 32.1, "{total}");
    assert_eq!(total["country"], "ZAF");
    // The groups' flat fields (the app's card reads both).
    let flat = json!({"metadata": {"name": "Inflation"}, "unit_measure": "%", "groups": [{
        "ref_area": "NGA", "ref_area_name": "Nigeria", "latest_value": 24.7, "latest_year": "2023",
        "earliest_value": 13.7, "earliest_year": "2010", "total_change": 11.0, "trend_direction": "increasing"}]});
    let (fact, _) = card("data360_summarize_data", json!({"start_year": 2010}), flat).await;
    assert_eq!(fact["indicator"], "Inflation");
    assert_eq!(fact["unit"], "%");
    assert_eq!(fact["country"], "Nigeria");
    assert_eq!(fact["trend"]["change"], 11.0);
    // Two countries: no single fact.
    let two = json!({"groups": [
        group(json!({"ref_area": "NGA"}), (24.7, "2023"), (13.7, "2010")),
        group(json!({"ref_area": "KEN"}), (7.7, "2023"), (4.0, "2010")),
    ]});
    let (none, sent) = card("data360_summarize_data", json!({}), two).await;
    assert!(none.is_null(), "{none}");
    assert_eq!(sent, None);
}

#[tokio::test]
async fn the_apis_own_rows_give_a_fact_from_text_values() {
    // The Data360 API's rows: OBS_VALUE as text, the country as its code,
    // no `metadata` (GetDataOutput in types.ts).
    let row = |y: &str, v: &str| {
        json!({"OBS_VALUE": v, "REF_AREA": "KEN", "TIME_PERIOD": y, "UNIT_MEASURE": "PS",
            "INDICATOR": "WB_WDI_SP_POP_TOTL", "INDICATOR_NAME": "Population, total", "SEX": "_T", "claim_id": y})
    };
    let output = json!({"count": 2, "total_count": 2, "offset": 0, "has_more": false, "next_offset": null,
        "data": [row("2023", "55100000"), row("2020", "51985780")], "error": null});
    let (fact, _) = card(
        "data360_get_data",
        json!({"country_code": "KEN", "start_year": 2020}),
        output,
    )
    .await;
    assert_eq!(fact["kind"], "fact", "{fact}");
    assert_eq!(fact["indicator"], "Population, total");
    assert_eq!(fact["unit"], "PS");
    assert_eq!(fact["country"], "KEN");
    assert_eq!(fact["year"], "2023");
    assert_eq!(fact["value"], 55100000.0);
    assert_eq!(fact["trend"]["from_value"], 51985780.0);
    assert_eq!(fact["trend"]["change"], 3114220.0);
    assert_eq!(fact["trend"]["direction"], "increasing");
    // A value that is no number: no card.
    let odd = json!({"data": [row("2023", "n/a")]});
    let (card, sent) = card("data360_get_data", json!({}), odd).await;
    assert!(card.is_null(), "{card}");
    assert_eq!(sent, None);
}
