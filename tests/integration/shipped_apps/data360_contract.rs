//! The Data360 contract cases of issue 31 as golden conversations: the
//! shipped chat graph through `POST /api/chat`, the fake Data360 MCP server
//! (tests/fixtures/data360, with its choice card in partition `choices` and
//! a call log of what reached it) and the scripted model of `data360.rs`,
//! changed only where a case needs the model to misbehave. Each turn's SSE
//! is checked by the AI SDK's own parser (in `turn`).

use serde_json::{Value, json};
use stategraph::internals::llm::scripted::Turn;
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmChunk, LlmError};

use crate::support::data360::{
    Log, Turned, mcp_config_with, model_with, path_of, question, start_with, tool_messages, turn,
    turn_body,
};
use crate::support::server::TestServer;

/// The half answer of the issue: a figure cut off mid-sentence.
const HALF: &str = "Qatar GDP per capita was 99,999 USD in 2023 and";

/// The summary a long conversation carries.
const SUMMARY: &str = "The user is looking at Kenya's population.";

/// The misbehaviours, by node and question.
fn contract(node: &'static str, req: &ChatRequest) -> Option<Turn> {
    let q = question(req).to_lowercase();
    let system = match req.messages.first() {
        Some(ChatMessage::System { content }) => content.clone(),
        _ => String::new(),
    };
    let tools_back = tool_messages(req).len();
    match node {
        "router" if q.contains("quelle") => Some(Turn::json(
            json!({"intent": "QUICK_ANSWER", "reasoning": "un chiffre", "missing_slots": [], "detected_language": "French"}),
        )),
        "router" if q.contains("how big") || q.contains("that one") => Some(Turn::json(
            json!({"intent": "CLARIFY", "reasoning": "which country?", "missing_slots": ["country"], "detected_language": "en"}),
        )),
        "router" if q.contains("research") => Some(Turn::json(
            json!({"intent": "RESEARCH", "reasoning": "a study", "missing_slots": [], "detected_language": "en"}),
        )),
        "summarizer" => Some(Turn::text(SUMMARY)),
        "clarifier" if system.contains(SUMMARY) => Some(Turn::text("[PROCEED]")),
        "clarifier" if tools_back == 0 => Some(Turn::ToolCalls(vec![
            (
                "data360_interactive_choices".into(),
                json!({"prompt": "Which country?", "options": ["Kenya", "Nigeria"]}),
            ),
            (
                "data360_interactive_choices".into(),
                json!({"prompt": "Which country, again?", "options": ["Brazil", "India"]}),
            ),
        ])),
        "clarifier" => Some(Turn::text("Pick one above.")),
        "quick_answer" if tools_back == 0 && q.contains("latest") => Some(Turn::tool(
            "data360_get_data",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_SP_POP_TOTL", "country_code": "KEN", "limit": 1}),
        )),
        "quick_answer" if tools_back == 0 && q.contains("china and india") => Some(Turn::tool(
            "data360_compare_countries",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_NY_GDP_MKTP_KD_ZG", "country_codes": "CHN;IND", "year": 2021}),
        )),
        "quick_answer" if tools_back == 0 && q.contains("only search") => Some(Turn::tool(
            "data360_search_indicators",
            json!({"query": "GDP per capita"}),
        )),
        "quick_answer" if q.contains("only search") => Some(Turn::text(HALF)),
        "research" if tools_back >= 2 && q.contains("qatar") => Some(Turn::Chunks(
            vec![LlmChunk::Text(HALF.into())],
            Some(LlmError::Stream("connection reset".into())),
        )),
        "narrator" if q.contains("forbidden") => Some(Turn::Fail(LlmError::ContentPolicy(
            "content_filter: the request was blocked".into(),
        ))),
        _ => None,
    }
}

/// The lines of the fixture's call log.
fn call_log(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The SSE chunks of a type.
fn chunks<'a>(t: &'a Turned, ty: &str) -> Vec<&'a Value> {
    t.chunks.iter().filter(|c| c["type"] == ty).collect()
}

fn finish_reason(t: &Turned) -> &str {
    chunks(t, "finish")
        .last()
        .and_then(|c| c["finishReason"].as_str())
        .unwrap_or("")
}

async fn server_with(env: &str) -> (TestServer, Log) {
    start_with(Some(mcp_config_with(env, true)), model_with(contract)).await
}

#[tokio::test]
async fn the_contract_cases_against_the_data360_server() {
    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("calls.jsonl");
    let env = format!(
        "DATA360_MODE = \"normal\", DATA360_CALL_LOG = {}",
        serde_json::to_string(&log_file.to_string_lossy()).unwrap()
    );
    let (server, log) = server_with(&env).await;

    limit_never_reaches_get_data(&server, &log, &log_file).await;
    one_choice_card_per_reply(&server, &log, &log_file).await;
    the_clarifier_reads_the_summary_and_proceeds_quietly(&server, &log).await;
    a_refusal_comes_before_the_follow_ups(&server, &log).await;
    a_language_name_is_kept(&server, &log).await;
    direct_says_it_is_writing(&server, &log).await;
    a_quick_answer_that_only_searched_has_no_data(&server, &log).await;
    the_card_leads_with_the_country_named_first(&server, &log).await;
    a_research_stream_broken_mid_answer(&server, &log).await;
    // Every turn re-executes from its recording without divergence: the
    // quiet [PROCEED], the choice card not run twice, the dropped `limit`.
    let runs = crate::support::assert_all_reexecute(&server.state).await;
    assert!(runs >= 9, "{runs} runs re-executed");
    server.shutdown().await;
}

/// `get_data` is offered without `limit`, and the model's `limit` never
/// reaches the server: the card shows the latest year, not the oldest.
async fn limit_never_reaches_get_data(server: &TestServer, log: &Log, file: &std::path::Path) {
    let t = turn(
        server,
        log,
        "limit",
        "What is the latest population of Kenya?",
    )
    .await;
    let offered = &t.calls_to("quick_answer")[0].tools;
    let get_data = offered
        .iter()
        .find(|d| d.name == "data360_get_data")
        .expect("get_data offered");
    assert!(
        get_data.parameters["properties"].get("limit").is_none(),
        "{}",
        get_data.parameters
    );
    let sent: Vec<Value> = call_log(file)
        .into_iter()
        .filter(|l| l["tool"] == "data360_get_data")
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0]["args"].get("limit").is_none(), "{}", sent[0]);
    assert_eq!(sent[0]["args"]["country_code"], "KEN");
    let card = t.part("data-quickAnswerCard").expect("a card");
    assert_eq!(card["data"]["year"], "2023", "{card}");
}

/// Two choice cards in one reply: the first runs, the second does not,
/// and the model is told why.
async fn one_choice_card_per_reply(server: &TestServer, log: &Log, file: &std::path::Path) {
    let before = call_log(file).len();
    let t = turn(server, log, "choices", "How big is it?").await;
    assert_eq!(path_of(&t), ["router", "clarifier"]);
    let ran: Vec<Value> = call_log(file)[before..]
        .iter()
        .filter(|l| l["tool"] == "data360_interactive_choices")
        .cloned()
        .collect();
    assert_eq!(ran.len(), 1, "only the first call runs: {ran:?}");
    assert_eq!(ran[0]["args"]["options"], json!(["Kenya", "Nigeria"]));
    let shown = chunks(&t, "tool-output-available");
    assert_eq!(shown.len(), 1, "{}", t.sse);
    assert_eq!(shown[0]["output"]["options"], json!(["Kenya", "Nigeria"]));
    let refused = chunks(&t, "tool-output-error");
    assert_eq!(refused.len(), 1, "{}", t.sse);
    assert!(
        refused[0]["errorText"]
            .as_str()
            .unwrap()
            .contains("runs once per turn"),
        "{}",
        refused[0]
    );
    let second = t.calls_to("clarifier")[1];
    let told = tool_messages(second);
    assert_eq!(told.len(), 2);
    assert!(told[1].contains("runs once per turn"), "{told:?}");
    assert_eq!(t.text(), "Pick one above.");
}

/// A long conversation: the clarifier is given the summary; finding
/// nothing missing it answers `[PROCEED]`, which nobody sees, and research
/// answers instead.
async fn the_clarifier_reads_the_summary_and_proceeds_quietly(server: &TestServer, log: &Log) {
    let mut messages: Vec<Value> = (0..22)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"id": format!("m{i}"), "role": role, "parts": [{"type": "text", "text": format!("turn {i} about Kenya")}]})
        })
        .collect();
    messages.push(
        json!({"id": "m22", "role": "user", "parts": [{"type": "text", "text": "And that one?"}]}),
    );
    let body = json!({"id": "proceed", "messages": messages, "trigger": "submit-message"});
    let t = turn_body(server, log, "proceed", &body).await;
    assert_eq!(
        path_of(&t),
        [
            "summarizer",
            "router",
            "clarifier",
            "research",
            "narrator",
            "followup"
        ]
    );
    let clarifier = t.system_of("clarifier");
    assert!(
        clarifier.contains(&format!("Conversation summary (older turns):\n{SUMMARY}")),
        "{clarifier}"
    );
    assert!(!t.sse.contains("PROCEED"), "{}", t.sse);
    assert_eq!(
        t.text(),
        "Here is what the data shows. Source: World Bank, WDI."
    );
}

/// The narrator refused: its refusal is the answer, in the answer's place
/// — before the follow-ups, not after them.
async fn a_refusal_comes_before_the_follow_ups(server: &TestServer, log: &Log) {
    let t = turn(server, log, "refusal", "What is the forbidden figure?").await;
    let refusal = t
        .chunks
        .iter()
        .position(|c| {
            c["type"] == "text-delta" && c["delta"].as_str().unwrap().contains("can't help")
        })
        .unwrap_or_else(|| panic!("no refusal text: {}", t.sse));
    let followups = t
        .chunks
        .iter()
        .position(|c| c["type"] == "data-followups")
        .expect("follow-ups");
    assert!(refusal < followups, "{}", t.sse);
    assert!(t.part("data-refusal").is_some());
    assert_eq!(finish_reason(&t), "content-filter");
    let stored = |ty: &str| t.parts.iter().position(|p| p["type"] == ty).unwrap();
    assert!(stored("text") < stored("data-followups"), "{:?}", t.parts);
}

/// A language name stays as the router gave it, in the prompts too.
async fn a_language_name_is_kept(server: &TestServer, log: &Log) {
    let t = turn(server, log, "french", "Quelle est la population du Kenya ?").await;
    let narrator = t.system_of("narrator");
    assert!(
        narrator.contains("Answer in the user's language (French)"),
        "{narrator}"
    );
    assert!(!narrator.contains("(french)"));
}

/// DIRECT shows "Writing the answer…" like the other answering paths.
async fn direct_says_it_is_writing(server: &TestServer, log: &Log) {
    let t = turn(server, log, "direct", "hello there").await;
    assert_eq!(path_of(&t), ["router", "direct"]);
    assert!(
        chunks(&t, "data-stage")
            .iter()
            .any(|c| c["data"]["status"] == "Writing the answer…"),
        "{}",
        t.sse
    );
}

/// A quick answer that only searched found no figure: NO_DATA, whatever
/// it wrote.
async fn a_quick_answer_that_only_searched_has_no_data(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "searched",
        "GDP per capita of Qatar, only search",
    )
    .await;
    let narrator = t.system_of("narrator");
    assert!(narrator.contains("Research packet:\nNO_DATA"), "{narrator}");
    assert!(!narrator.contains("99,999"));
    assert!(t.part("data-quickAnswerCard").is_none());
}

/// "China and India": the card leads with China, though India's value
/// ranks first.
async fn the_card_leads_with_the_country_named_first(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "first",
        "Compare GDP growth of China and India in 2021",
    )
    .await;
    let card = &t.part("data-quickAnswerCard").expect("a card")["data"];
    assert_eq!(card["kind"], "comparison");
    assert_eq!(card["values"][0]["country_code"], "CHN", "{card}");
    assert_eq!(card["difference"]["between"], json!(["China", "India"]));
}

/// Research's stream breaks after half a sentence, on both attempts: no
/// figure reaches the narrator; the turn still answers.
async fn a_research_stream_broken_mid_answer(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "broken",
        "Please research GDP per capita in Qatar",
    )
    .await;
    assert_eq!(path_of(&t), ["router", "research", "narrator", "followup"]);
    let narrator = t.system_of("narrator");
    assert!(narrator.contains("Research packet:\nNO_DATA"), "{narrator}");
    assert!(!narrator.contains("99,999"), "{narrator}");
    assert!(!t.text().contains("99,999"));
    assert_eq!(
        t.text(),
        "Sorry — the data could not be retrieved right now."
    );
    assert_eq!(finish_reason(&t), "stop");
}

/// The shapes that crashed the card: the API's `rankings`,
/// `snapshot.rankings` and a summary without `summaries` give their card;
/// values it cannot compute with give none. The answer is shown and stored
/// every time, and no turn ends in error.
#[tokio::test]
async fn the_cards_crash_shapes_keep_the_answer() {
    let questions = [
        (
            "Compare GDP growth of India and China in 2021",
            "comparison",
        ),
        ("How has inflation in Nigeria changed since 2010?", "fact"),
        ("Rank the top countries by CO2 emissions", "ranking"),
    ];
    for shape in ["api", "odd"] {
        let (server, log) = start_with(
            Some(mcp_config_with(&format!("DATA360_SHAPE = \"{shape}\""), false)),
            model_with(|node, req| {
                let q = question(req).to_lowercase();
                (node == "quick_answer" && q.contains("rank") && tool_messages(req).is_empty())
                    .then(|| {
                        Turn::tool(
                            "data360_rank_countries",
                            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_EN_ATM_CO2E_PC", "top_n": 3}),
                        )
                    })
            }),
        )
        .await;
        for (i, (q, kind)) in questions.iter().enumerate() {
            let t = turn(&server, &log, &format!("{shape}-{i}"), q).await;
            assert!(chunks(&t, "error").is_empty(), "{shape} {q}: {}", t.sse);
            assert_eq!(finish_reason(&t), "stop", "{shape} {q}");
            assert_eq!(
                t.text(),
                "Here is what the data shows. Source: World Bank, WDI.",
                "{shape} {q}"
            );
            let card = t.part("data-quickAnswerCard");
            if shape == "api" {
                let card = card.unwrap_or_else(|| panic!("{q}: no card in {:?}", t.parts));
                assert_eq!(card["data"]["kind"], *kind, "{card}");
            } else {
                assert!(card.is_none(), "{q}: {card:?}");
            }
        }
        server.shutdown().await;
    }
}

/// The shapes the real Data360 MCP server answers (`DATA360_SHAPE=api`:
/// its compact serializer, as the Data360 chat app reads it —
/// avsolatorio/data-ai-chatbot, frontend/components/data360/types.ts and
/// backend/app/ai/graph/nodes/quick_answer.py), through the whole chat:
/// each data tool's card with its values, the country named first leading
/// a comparison whichever way round it was asked.
#[tokio::test]
async fn the_real_shapes_give_their_cards() {
    let (server, log) = start_with(
        Some(mcp_config_with("DATA360_SHAPE = \"api\"", false)),
        model_with(api_shape_tools),
    )
    .await;

    // get_data: the API's rows (OBS_VALUE as text, the country as its code).
    let fact = card_of(
        &turn(
            &server,
            &log,
            "api-fact",
            "What is the population of Kenya?",
        )
        .await,
    );
    assert_eq!(
        fact,
        json!({"kind": "fact", "indicator": "Population, total", "unit": "PS", "country": "KEN", "year": "2023", "value": 55100000.0})
    );

    comparisons_lead_with_the_first_country_asked(&server, &log).await;

    // summarize_data: `groups` with latest / earliest / change / trend.
    let since = card_of(
        &turn(
            &server,
            &log,
            "api-since",
            "How has inflation in Nigeria changed since 2010?",
        )
        .await,
    );
    assert_eq!(
        since,
        json!({"kind": "fact", "indicator": "Inflation, consumer prices (annual %)", "unit": "annual %",
            "country": "Nigeria", "year": "2023", "value": 24.7,
            "trend": {"from_year": "2010", "from_value": 13.7, "change": 11.0, "direction": "increasing"}})
    );

    a_breakdown_by_sex_shows_the_total(&server, &log).await;

    // rank_countries: `rankings` rows {rank, code, country, value}.
    let ranked = card_of(
        &turn(
            &server,
            &log,
            "api-rank",
            "Rank the top countries by CO2 emissions",
        )
        .await,
    );
    assert_eq!(ranked["kind"], "ranking");
    assert_eq!(ranked["year"], "2020");
    assert_eq!(ranked["order"], "desc");
    assert_eq!(
        ranked["ranking"],
        json!([
            {"rank": 1, "country_code": "USA", "country_name": "United States", "value": 13.0},
            {"rank": 2, "country_code": "JPN", "country_name": "Japan", "value": 8.2},
            {"rank": 3, "country_code": "CHN", "country_name": "China", "value": 7.6},
        ])
    );
    server.shutdown().await;
}

/// The quick-answer agent's tool call for each question of
/// `the_real_shapes_give_their_cards` (the API-shaped fake server).
fn api_shape_tools(node: &'static str, req: &ChatRequest) -> Option<Turn> {
    let q = question(req).to_lowercase();
    if node != "quick_answer" || !tool_messages(req).is_empty() {
        return None;
    }
    let (tool, args) = if q.contains("china and india") {
        (
            "data360_compare_countries",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_NY_GDP_MKTP_KD_ZG", "country_codes": "CHN;IND", "year": 2021}),
        )
    } else if q.contains("unemployment") {
        (
            "data360_summarize_data",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_SL_UEM_TOTL_ZS", "country_code": "ZAF", "start_year": 2010}),
        )
    } else if q.contains("rank") {
        (
            "data360_rank_countries",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_EN_ATM_CO2E_PC", "top_n": 3}),
        )
    } else {
        return None;
    };
    Some(Turn::tool(tool, args))
}

/// The turn's card, after checking the turn ended cleanly.
fn card_of(t: &Turned) -> Value {
    assert!(chunks(t, "error").is_empty(), "{}", t.sse);
    assert_eq!(finish_reason(t), "stop");
    t.part("data-quickAnswerCard")
        .unwrap_or_else(|| panic!("no card in {:?}", t.parts))["data"]
        .clone()
}

/// compare_countries: `snapshot.rankings` rows {rank, code, country, value}. The card leads with the country asked first.
async fn comparisons_lead_with_the_first_country_asked(server: &TestServer, log: &Log) {
    for (chat, q, lead, other) in [
        (
            "api-ic",
            "Compare GDP growth of India and China in 2021",
            "IND",
            "CHN",
        ),
        (
            "api-ci",
            "Compare GDP growth of China and India in 2021",
            "CHN",
            "IND",
        ),
    ] {
        let c = card_of(&turn(server, log, chat, q).await);
        assert_eq!(c["kind"], "comparison", "{c}");
        assert_eq!(c["indicator"], "GDP growth (annual %)");
        assert_eq!(c["year"], "2021");
        let codes: Vec<&str> = c["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["country_code"].as_str().unwrap())
            .collect();
        assert_eq!(codes, [lead, other], "{q}: {c}");
        let value = |code: &str| if code == "IND" { 10.48 } else { 8.41 };
        assert_eq!(c["values"][0]["value"], value(lead), "{c}");
        let diff = ((value(lead) - value(other)) * 100.0_f64).round() / 100.0;
        assert_eq!(c["difference"]["value"], diff, "{c}");
        let name = |code: &str| if code == "IND" { "India" } else { "China" };
        assert_eq!(c["difference"]["between"], json!([name(lead), name(other)]));
    }
}

/// An indicator broken down by sex: one group per sex (F first), the
/// card shows the country's total.
async fn a_breakdown_by_sex_shows_the_total(server: &TestServer, log: &Log) {
    let t = turn(
        server,
        log,
        "api-sex",
        "How has unemployment in South Africa changed since 2010?",
    )
    .await;
    let groups: Vec<Value> = t
        .parts
        .iter()
        .filter(|p| p["type"] == "data-thinking")
        .flat_map(|p| {
            p["data"]["toolCalls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|c| c["toolName"] == "data360_summarize_data")
        .and_then(|c| c["output"]["groups"].as_array().cloned())
        .expect("the summary's groups in the thinking panel");
    let sexes: Vec<&str> = groups
        .iter()
        .map(|g| g["group"]["sex"].as_str().unwrap())
        .collect();
    assert_eq!(sexes, ["F", "_T", "M"]);
    let by_sex = card_of(&t);
    assert_eq!(by_sex["country"], "South Africa", "{by_sex}");
    assert_eq!(by_sex["value"], groups[1]["latest"]["value"], "{by_sex}");
    assert_ne!(by_sex["value"], groups[0]["latest"]["value"]);
    assert_eq!(
        by_sex["trend"]["from_value"],
        groups[1]["earliest"]["value"]
    );
    assert_eq!(by_sex["trend"]["from_year"], "2010");
}
