//! The Data360 chat (graphs/chat.yaml) as its users meet it: golden
//! conversations through `POST /api/chat` against the fake Data360 MCP
//! server (tests/fixtures/data360: its 11 data tools in partition `data`,
//! its 3 chart tools in `viz`, each a real stdio MCP server) and a scripted
//! model that tells the nodes apart by their prompts and answers like a
//! well-behaved model would. Each conversation checks the SSE with the AI
//! SDK's own parser, the stored message, and what every node sent to the
//! model.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use stategraph::internals::engine::{Engine, Graphs};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, Models};
use stategraph::internals::nodes::Registries;
use stategraph::internals::runtime::Services;
use stategraph::internals::tools::mcp::{McpConfig, McpManager};

use crate::support::server::TestServer;
use crate::support::{aisdk_validate, chat_body, post_json, root};

/// Which node a request comes from, told by its prompt.
pub(crate) fn node_of(req: &ChatRequest) -> &'static str {
    let system = match req.messages.first() {
        Some(ChatMessage::System { content }) => content.as_str(),
        _ => "",
    };
    const MARKERS: &[(&str, &str)] = &[
        ("You classify the user's latest message", "router"),
        ("fetch the data for a short answer", "quick_answer"),
        (
            "research the user's question in World Bank Data360",
            "research",
        ),
        (
            "explain what a World Bank Data360 indicator means",
            "explain",
        ),
        ("You write the answer the user will read", "narrator"),
        ("You suggest follow-up questions", "followup"),
        ("You maintain a running summary", "summarizer"),
        ("missing something essential", "clarifier"),
        ("outside what Data360", "suggester"),
        ("Data360's chat assistant", "direct"),
    ];
    MARKERS
        .iter()
        .find(|(m, _)| system.contains(m))
        .map_or("unknown", |(_, n)| n)
}

/// The newest user message of a request.
pub(crate) fn question(req: &ChatRequest) -> String {
    req.messages
        .iter()
        .rev()
        .find_map(|m| match m {
            ChatMessage::User { content } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The tool results a request carries so far.
pub(crate) fn tool_messages(req: &ChatRequest) -> Vec<&str> {
    req.messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

/// The router's answers: deliberately untidy JSON (a code fence, a null
/// language, a string where a list belongs, an intent in lower case), which
/// the router must read rather than throw away.
fn route(q: &str) -> Turn {
    let q = q.to_lowercase();
    let raw = if q.contains("hello") {
        "```json\n{\"intent\": \"DIRECT\", \"reasoning\": \"  a greeting \", \"missing_slots\": [], \"detected_language\": null}\n```".to_owned()
    } else if q.contains("recipe") {
        json!({"intent": "OUT_OF_SCOPE", "reasoning": "cooking", "missing_slots": [], "detected_language": "en"}).to_string()
    } else if q.contains("how big") {
        json!({"intent": "CLARIFY", "reasoning": "which country?", "missing_slots": "country", "detected_language": "en"}).to_string()
    } else if q.contains("mean") {
        json!({"intent": "explain", "reasoning": "definition", "missing_slots": null, "detected_language": "en"}).to_string()
    } else if q.contains("chart") {
        json!({"intent": "RESEARCH", "reasoning": "a trend", "missing_slots": [], "detected_language": "en"}).to_string()
    } else {
        json!({"intent": "Quick Answer", "reasoning": "one figure", "missing_slots": [], "language": "en"}).to_string()
    };
    Turn::Raw(raw)
}

/// The quick-answer agent: one lookup, then its packet.
fn quick_answer(req: &ChatRequest) -> Turn {
    let q = question(req).to_lowercase();
    if !tool_messages(req).is_empty() {
        return Turn::text(format!("Packet: {}", tool_messages(req)[0]));
    }
    if q.contains("compare") {
        Turn::tool(
            "data360_compare_countries",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_NY_GDP_MKTP_KD_ZG", "country_codes": "IND;CHN", "year": 2021}),
        )
    } else if q.contains("since") {
        Turn::tool(
            "data360_summarize_data",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_FP_CPI_TOTL_ZG", "country_code": "NGA", "start_year": 2010, "end_year": 2023}),
        )
    } else {
        Turn::tool(
            "data360_get_data",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_SP_POP_TOTL", "country_code": "KEN"}),
        )
    }
}

/// The research agent: find the indicator, fetch the data, report.
fn research(req: &ChatRequest) -> Turn {
    match tool_messages(req).len() {
        0 => Turn::tool(
            "data360_search_indicators",
            json!({"query": "CO2 emissions per capita"}),
        ),
        1 => Turn::tool(
            "data360_get_data",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_EN_ATM_CO2E_PC", "country_code": "KEN;NGA", "start_year": 2010, "end_year": 2020}),
        ),
        _ => {
            Turn::text("Packet: CO2 per capita for KEN and NGA, 2010-2020 (WB_WDI_EN_ATM_CO2E_PC).")
        }
    }
}

/// The explain agent: searches, then tries to answer without the metadata
/// (and is reminded), then reads it and answers.
fn explain(req: &ChatRequest) -> Turn {
    let reminded = matches!(req.messages.last(), Some(ChatMessage::User { content }) if content.contains("data360_get_metadata"));
    if reminded {
        return Turn::tool(
            "data360_get_metadata",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_SP_DYN_LE00_IN"}),
        );
    }
    match tool_messages(req).len() {
        0 => Turn::tool(
            "data360_search_indicators",
            json!({"query": "life expectancy"}),
        ),
        1 => Turn::text("Life expectancy is how long people live."),
        _ => Turn::text("Notes: years a newborn would live at current mortality (UN WPP)."),
    }
}

/// The narrator: a chart when it may and the question asks for one.
fn narrator(req: &ChatRequest) -> Turn {
    let q = question(req).to_lowercase();
    let charted = !tool_messages(req).is_empty();
    if q.contains("chart") && !req.tools.is_empty() && !charted {
        return Turn::tool(
            "data360_get_viz_spec",
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_EN_ATM_CO2E_PC", "country_code": "KEN;NGA", "start_year": 2010, "end_year": 2020}),
        );
    }
    let system = match req.messages.first() {
        Some(ChatMessage::System { content }) => content.as_str(),
        _ => "",
    };
    if system.contains("The data could not be retrieved") {
        Turn::text("Sorry — the data could not be retrieved right now.")
    } else {
        Turn::text("Here is what the data shows. Source: World Bank, WDI.")
    }
}

/// The requests the model received, with the node each came from.
pub(crate) type Log = Arc<Mutex<Vec<(&'static str, ChatRequest)>>>;

fn model() -> (Arc<ScriptedModel>, Log) {
    model_with(|_, _| None)
}

/// The well-behaved model, except where `over` answers for a node.
pub(crate) fn model_with(
    over: impl Fn(&'static str, &ChatRequest) -> Option<Turn> + Send + Sync + 'static,
) -> (Arc<ScriptedModel>, Log) {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    let m = ScriptedModel::from_fn(move |req| {
        let node = node_of(req);
        seen.lock().unwrap().push((node, req.clone()));
        if let Some(turn) = over(node, req) {
            return turn;
        }
        match node {
            "router" => route(&question(req)),
            "quick_answer" => quick_answer(req),
            "research" => research(req),
            "explain" => explain(req),
            "narrator" => narrator(req),
            "followup" => Turn::json(
                json!({"questions": ["And in 2015?", "How does it compare with Nigeria?"]}),
            ),
            "clarifier" => Turn::text("Which country do you mean?"),
            "suggester" => Turn::text(
                "Recipes are outside Data360, but you could ask how food prices changed in Kenya.",
            ),
            "direct" => Turn::text("Hello! Ask me about development data."),
            _ => Turn::text("unexpected"),
        }
    });
    (Arc::new(m), log)
}

/// The test venv's Python (tests/run.sh makes it).
fn python() -> PathBuf {
    std::env::var_os("STATEGRAPH_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/stategraph-tests/venv/bin/python")
        })
}

/// The fixture configured twice, as its README says: the data tools in
/// `data`, the chart tools in `viz`; `mode` is `DATA360_MODE`.
fn mcp_config(mode: &str) -> McpConfig {
    mcp_config_with(&format!("DATA360_MODE = \"{mode}\""), false)
}

/// As [`mcp_config`], with `env` (TOML inline-table entries) for the data
/// server and, with `choices`, the choice-card server in `choices`.
pub(crate) fn mcp_config_with(env: &str, choices: bool) -> McpConfig {
    let py = serde_json::to_string(&python().to_string_lossy()).unwrap();
    let script = serde_json::to_string(
        &root()
            .join("tests/fixtures/data360/server.py")
            .to_string_lossy(),
    )
    .unwrap();
    let mut text = format!(
        "[servers.data360]\ncommand = [{py}, {script}, \"--tools\", \"data\"]\npartition = \"data\"\nenv = {{ {env} }}\n\n\
         [servers.data360_viz]\ncommand = [{py}, {script}, \"--tools\", \"viz\"]\npartition = \"viz\"\n"
    );
    if choices {
        text.push_str(&format!(
            "\n[servers.data360_choices]\ncommand = [{py}, {script}, \"--tools\", \"choices\"]\npartition = \"choices\"\nenv = {{ {env} }}\n"
        ));
    }
    toml::from_str(&text).unwrap()
}

/// A server with the shipped chat graph, the scripted model and, unless
/// `mode` is `None`, the fixture's MCP servers.
async fn start(mode: Option<&str>) -> (TestServer, Log) {
    start_with(mode.map(mcp_config), model()).await
}

/// A server with the shipped chat graph, `model` and the MCP servers of
/// `mcp`, if any.
pub(crate) async fn start_with(
    mcp: Option<McpConfig>,
    (model, log): (Arc<ScriptedModel>, Log),
) -> (TestServer, Log) {
    assert!(
        python().exists(),
        "the test venv is missing — run `bash tests/run.sh`"
    );
    let registries = Registries::default();
    let mcp = mcp.map(|c| McpManager::start(&c, Arc::clone(&registries.tools)));
    let chat = std::fs::read_to_string(root().join("graphs/chat.yaml")).unwrap();
    let cat = registries.from_sources(&[("chat", &chat)], Prompts::load(&root().join("prompts")));
    assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
    if let Some(m) = &mcp {
        assert!(
            m.wait_ready(Duration::from_secs(120)).await,
            "{:?}",
            m.status()
        );
    }
    let services = Services::new(Models::single(model), Arc::clone(&registries.tools));
    let mut config = stategraph::internals::config::Config::default();
    config.server.keep_alive.0 = Duration::from_secs(5);
    let state = stategraph::internals::server::AppState::with_mcp(
        config,
        Arc::new(stategraph::internals::store::memory::MemoryStore::new()),
        &Engine::from_parts(
            registries.clone(),
            Graphs::from_catalog(cat, registries),
            services,
        ),
        mcp,
    );
    (TestServer::serve(state).await, log)
}

/// One turn: the raw SSE (checked by the AI SDK's parser), its chunks, the
/// stored assistant message's parts, and the model requests it made.
pub(crate) struct Turned {
    pub(crate) sse: String,
    pub(crate) chunks: Vec<Value>,
    pub(crate) parts: Vec<Value>,
    pub(crate) calls: Vec<(&'static str, ChatRequest)>,
}

impl Turned {
    pub(crate) fn calls_to(&self, node: &str) -> Vec<&ChatRequest> {
        self.calls
            .iter()
            .filter(|(n, _)| *n == node)
            .map(|(_, r)| r)
            .collect()
    }

    pub(crate) fn system_of(&self, node: &str) -> String {
        match self.calls_to(node).first().and_then(|r| r.messages.first()) {
            Some(ChatMessage::System { content }) => content.clone(),
            _ => panic!("no request from {node}"),
        }
    }

    pub(crate) fn text(&self) -> String {
        self.parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect()
    }

    pub(crate) fn part(&self, ty: &str) -> Option<&Value> {
        self.parts.iter().find(|p| p["type"] == ty)
    }
}

pub(crate) async fn turn(server: &TestServer, log: &Log, chat: &str, text: &str) -> Turned {
    turn_body(server, log, chat, &chat_body(chat, text)).await
}

/// One turn with a whole request body (a longer conversation).
pub(crate) async fn turn_body(server: &TestServer, log: &Log, chat: &str, body: &Value) -> Turned {
    let text = body["messages"].to_string();
    log.lock().unwrap().clear();
    let http = reqwest::Client::new();
    let resp = post_json(&http, &server.url("/api/chat"), body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    let (ok, report) = aisdk_validate(&sse);
    assert!(ok, "{text}: {report}\n{sse}");
    let chunks: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let stored: Value = http
        .get(server.url(&format!("/api/chat/{chat}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let parts = stored["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "assistant"))
        .map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .unwrap_or_else(|| panic!("no stored answer: {stored}"));
    let calls = log.lock().unwrap().clone();
    Turned {
        sse,
        chunks,
        parts,
        calls,
    }
}

pub(crate) fn path_of(t: &Turned) -> Vec<&'static str> {
    let mut nodes: Vec<&'static str> = Vec::new();
    for (n, _) in &t.calls {
        if nodes.last() != Some(n) {
            nodes.push(n);
        }
    }
    nodes
}

#[tokio::test]
async fn golden_conversations_with_the_data360_server() {
    let (server, log) = start(Some("normal")).await;

    // A greeting: code-fenced JSON with a null language is still DIRECT (in
    // English), answered directly, no tools.
    let t = turn(&server, &log, "hello", "hello there").await;
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

    // A single fact: one lookup, the narrator in quick mode (no chart
    // tools), and the card — the latest value, no trend (no start year).
    let t = turn(&server, &log, "fact", "What is the population of Kenya?").await;
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

    // A comparison: the card carries the difference.
    let t = turn(
        &server,
        &log,
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

    // A change since a start year: a fact with its trend.
    let t = turn(
        &server,
        &log,
        "since",
        "How has inflation in Nigeria changed since 2010?",
    )
    .await;
    let card = &t.parts.last().unwrap()["data"];
    assert_eq!(card["trend"]["from_year"], "2010", "{card}");
    assert_eq!(card["trend"]["direction"], "increasing");

    // Research with a chart: the narrator's chart tool call is in the answer
    // (tool parts with the chart URL as JSON); no card.
    let t = turn(
        &server,
        &log,
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

    // Explain: only the three metadata tools; an answer without metadata is
    // reminded once, then it reads the metadata.
    let t = turn(
        &server,
        &log,
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

    // Clarify: a string where the slots list belongs is still CLARIFY.
    let t = turn(&server, &log, "clarify", "How big is it?").await;
    assert_eq!(path_of(&t), ["router", "clarifier"]);
    assert!(t.system_of("clarifier").contains("Missing: country."));
    assert_eq!(t.text(), "Which country do you mean?");

    // Off-topic: the suggester bridges to a data question; no data tools.
    let t = turn(&server, &log, "offtopic", "Give me a pizza recipe").await;
    assert_eq!(path_of(&t), ["router", "suggester"]);
    assert!(t.text().contains("outside Data360"));
    assert!(!t.sse.contains("tool-input"));

    server.shutdown().await;
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
