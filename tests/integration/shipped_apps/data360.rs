//! The Data360 chat (graphs/chat.yaml) as its users meet it: golden
//! conversations through `POST /api/chat` against the fake Data360 MCP
//! server (tests/fixtures/data360: its 11 data tools in partition `data`,
//! its 3 chart tools in `viz`, each a real stdio MCP server) and a scripted
//! model that tells the nodes apart by their prompts and answers like a
//! well-behaved model would. Each conversation checks the SSE with the AI
//! SDK's own parser, the stored message, and what every node sent to the
//! model.

use serde_json::json;

use stategraph::internals::llm::ChatMessage;

use crate::support::data360::{Log, path_of, start, turn};
use crate::support::server::TestServer;

#[tokio::test]
async fn golden_conversations_with_the_data360_server() {
    let (server, log) = start(Some("normal")).await;

    a_greeting(&server, &log).await;
    a_single_fact(&server, &log).await;
    a_comparison(&server, &log).await;
    a_change_since_a_year(&server, &log).await;
    research_with_a_chart(&server, &log).await;
    explain(&server, &log).await;
    clarify(&server, &log).await;
    off_topic(&server, &log).await;

    server.shutdown().await;
}

/// A greeting: code-fenced JSON with a null language is still DIRECT (in
/// English), answered directly, no tools.
async fn a_greeting(server: &TestServer, log: &Log) {
    let t = turn(server, log, "hello", "hello there").await;
    assert_eq!(path_of(&t), ["router", "direct"]);
    assert_eq!(t.text(), "Hello! Ask me about development data.");
    let thinking = t.part("data-thinking").expect("routing reasoning");
    assert_eq!(thinking["data"]["text"], "Intent: DIRECT (llm). a greeting");
    let stage = t
        .chunks
        .iter()
        .position(|c| {
            c["type"] == "data-stage" && c["data"]["status"] == "Understanding your question…"
        })
        .expect("a stage part before the router answers");
    let routed = t
        .chunks
        .iter()
        .position(|c| c["type"] == "data-thinking")
        .unwrap();
    assert!(stage < routed);
}

/// A single fact: one lookup, the narrator in quick mode (no chart
/// tools), and the card — the latest value, no trend (no start year).
async fn a_single_fact(server: &TestServer, log: &Log) {
    let t = turn(server, log, "fact", "What is the population of Kenya?").await;
    assert_eq!(
        path_of(&t),
        ["router", "quick_answer", "narrator", "followup"]
    );
    assert!(t.calls_to("narrator").iter().all(|r| r.tools.is_empty()));
    assert!(t.system_of("narrator").contains("Quick mode"));
    let card = t.parts.last().unwrap();
    assert_eq!(
        card["type"], "data-quickAnswerCard",
        "the card is the last part"
    );
    assert_eq!(card["data"]["kind"], "fact");
    assert_eq!(card["data"]["country"], "Kenya");
    assert_eq!(card["data"]["year"], "2023");
    assert_eq!(card["data"]["indicator"], "Population, total");
    assert!(card["data"]["value"].as_f64().unwrap() > 50e6);
    assert!(card["data"].get("trend").is_none(), "{card}");
    // The tool output is a JSON object in the stream and in the thinking panel.
    let output = t
        .chunks
        .iter()
        .find(|c| c["type"] == "tool-output-available")
        .map(|c| &c["output"]);
    assert!(output.is_none_or(|o| o.is_object()), "{output:?}");
    let thinking_tool = t
        .parts
        .iter()
        .filter(|p| p["type"] == "data-thinking")
        .flat_map(|p| {
            p["data"]["toolCalls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|c| c["toolName"] == "data360_get_data")
        .expect("the lookup in the thinking panel");
    assert!(
        thinking_tool["output"]["data"].is_array(),
        "{thinking_tool}"
    );
    // The narrator got the packet, the raw tool result and the history.
    let narrator = t.system_of("narrator");
    assert!(
        narrator.contains("Research packet:\nPacket: "),
        "{narrator}"
    );
    assert!(narrator.contains("Tool results (newest first, trimmed):"));
    assert!(narrator.contains("\"REF_AREA\":\"KEN\""));
    assert!(narrator.contains("Answer in the user's language (en)"));
    // Follow-ups: the history, then the question, findings and answer, in
    // the user's language.
    let followup = t.calls_to("followup")[0];
    let Some(ChatMessage::User { content: asked }) = followup.messages.last() else {
        panic!("the follow-up prompt")
    };
    assert!(asked.contains("in the user's language (en)"), "{asked}");
    assert!(asked.contains("Findings:\nPacket: "), "{asked}");
    assert!(asked.contains("Here is what the data shows."), "{asked}");
    assert!(followup.messages.iter().any(|m| matches!(m, ChatMessage::User { content } if content == "What is the population of Kenya?")));

    // Usage per node: the model id and the four token counts.
    let usage = &t.part("data-usage").expect("usage")["data"];
    for node in ["router", "quick_answer", "narrator", "followup"] {
        let u = &usage["nodes"][node];
        assert!(
            u["model"].as_str().is_some_and(|m| !m.is_empty()),
            "{usage}"
        );
        for k in [
            "promptTokens",
            "completionTokens",
            "cachedTokens",
            "reasoningTokens",
        ] {
            assert!(u[k].is_u64(), "{node}.{k}: {usage}");
        }
    }
    assert!(usage["total"]["completionTokens"].as_u64().unwrap() > 0);
}

/// A comparison: the card carries the difference.
async fn a_comparison(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "compare",
        "Compare GDP growth of India and China in 2021",
    )
    .await;
    let card = t.parts.last().unwrap();
    assert_eq!(card["type"], "data-quickAnswerCard");
    assert_eq!(card["data"]["kind"], "comparison");
    assert_eq!(card["data"]["year"], "2021");
    assert_eq!(
        card["data"]["difference"]["between"],
        json!(["India", "China"])
    );
    let values = card["data"]["values"].as_array().unwrap();
    let diff = values[0]["value"].as_f64().unwrap() - values[1]["value"].as_f64().unwrap();
    assert!((card["data"]["difference"]["value"].as_f64().unwrap() - diff).abs() < 0.01);
}

/// A change since a start year: a fact with its trend.
async fn a_change_since_a_year(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "since",
        "How has inflation in Nigeria changed since 2010?",
    )
    .await;
    let card = &t.parts.last().unwrap()["data"];
    assert_eq!(card["trend"]["from_year"], "2010", "{card}");
    assert_eq!(card["trend"]["direction"], "increasing");
}

/// Research with a chart: the narrator's chart tool call is in the answer
/// (tool parts with the chart URL as JSON); no card.
async fn research_with_a_chart(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "research",
        "Show a chart of CO2 per capita in Kenya and Nigeria",
    )
    .await;
    assert_eq!(path_of(&t), ["router", "research", "narrator", "followup"]);
    let viz = t
        .chunks
        .iter()
        .find(|c| c["type"] == "tool-output-available" && c["output"]["url"].is_string())
        .expect("the chart in the answer");
    assert!(
        viz["output"]["url"]
            .as_str()
            .unwrap()
            .starts_with("/api/v1/charts/")
    );
    let offered: Vec<String> = t.calls_to("narrator")[0]
        .tools
        .iter()
        .map(|d| d.name.clone())
        .collect();
    assert_eq!(offered.len(), 3, "{offered:?}");
    assert!(
        offered
            .iter()
            .all(|n| n.contains("viz") || n.contains("chart")),
        "{offered:?}"
    );
    assert!(t.parts.iter().all(|p| p["type"] != "data-quickAnswerCard"));
    let research_tools = t.calls_to("research")[0].tools.len();
    assert!(
        research_tools >= 11,
        "the 11 data tools and the basic ones: {research_tools}"
    );
}

/// Explain: only the three metadata tools; an answer without metadata is
/// reminded once, then it reads the metadata.
async fn explain(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "explain",
        "What does life expectancy at birth mean?",
    )
    .await;
    let calls = t.calls_to("explain");
    let mut tools: Vec<&str> = calls[0].tools.iter().map(|d| d.name.as_str()).collect();
    tools.sort_unstable();
    assert_eq!(
        tools,
        [
            "data360_get_metadata",
            "data360_list_indicators",
            "data360_search_indicators"
        ]
    );
    assert_eq!(calls.len(), 4, "search, reminded, metadata, answer");
    assert!(
        matches!(calls[2].messages.last(), Some(ChatMessage::User { content }) if content.contains("official definition"))
    );
    let explained = t.calls_to("narrator")[0];
    assert!(
        matches!(&explained.messages[0], ChatMessage::System { content } if content.contains("Notes: years a newborn"))
    );
}

/// Clarify: a string where the slots list belongs is still CLARIFY.
async fn clarify(server: &TestServer, log: &Log) {
    let t = turn(server, log, "clarify", "How big is it?").await;
    assert_eq!(path_of(&t), ["router", "clarifier"]);
    assert!(t.system_of("clarifier").contains("Missing: country."));
    assert_eq!(t.text(), "Which country do you mean?");
}

/// Off-topic: the suggester bridges to a data question; no data tools.
async fn off_topic(server: &TestServer, log: &Log) {
    let t = turn(server, log, "offtopic", "Give me a pizza recipe").await;
    assert_eq!(path_of(&t), ["router", "suggester"]);
    assert!(t.text().contains("outside Data360"));
    assert!(!t.sse.contains("tool-input"));
}

#[tokio::test]
async fn with_the_data360_api_down_no_figures_are_invented() {
    let (server, log) = start(Some("down")).await;
    let t = turn(&server, &log, "down", "What is the population of Kenya?").await;
    // The agent tried, the tool failed, so its answer is replaced by the
    // no-data packet, and the narrator is told the data could not be
    // retrieved (and gets no tool results to read numbers from).
    assert_eq!(t.calls_to("quick_answer").len(), 2);
    let narrator = t.system_of("narrator");
    assert!(
        narrator.contains("The data could not be retrieved"),
        "{narrator}"
    );
    assert!(narrator.contains("Research packet:\nNO_DATA"));
    assert!(!narrator.contains("Tool results"));
    assert_eq!(
        t.text(),
        "Sorry — the data could not be retrieved right now."
    );
    assert!(t.parts.iter().all(|p| p["type"] != "data-quickAnswerCard"));
    server.shutdown().await;

    // No data server at all: the data nodes do not even ask the model.
    let (server, log) = start(None).await;
    for (chat, q) in [
        ("none-1", "What is the population of Kenya?"),
        ("none-2", "Show a chart of CO2 in Kenya"),
        ("none-3", "What does GDP mean?"),
    ] {
        let t = turn(&server, &log, chat, q).await;
        for node in ["quick_answer", "research", "explain"] {
            assert!(t.calls_to(node).is_empty(), "{q}: {node} asked the model");
        }
        assert!(
            t.system_of("narrator")
                .contains("Research packet:\nNO_DATA"),
            "{q}"
        );
        assert_eq!(
            t.text(),
            "Sorry — the data could not be retrieved right now."
        );
    }
    server.shutdown().await;
}
