//! The chat graph's quick-answer card reads the shapes the Data360 API
//! really returns (issue 31, item 3), and a shape it cannot read gives no
//! card, never a failed turn. The shipped `card` node is run as it is in
//! `graphs/chat.yaml`, on tool results of each shape.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::events::EventKind;
use stategraph::graph::prompts::Prompts;
use stategraph::llm::scripted::ScriptedModel;
use stategraph::nodes::Graph;
use stategraph::runtime::{self, RunOptions};

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
            EventKind::Custom { name, data, .. } if name == "quickAnswerCard" => {
                sent = Some(data.clone());
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
