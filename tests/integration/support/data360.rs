//! The Data360 harness: the shipped chat graph served in process with the
//! fake Data360 MCP server (tests/fixtures/data360) and a scripted model
//! that answers each node as a well-behaved model would (changed per case
//! with `model_with`), and a turn's stream read back as its path and parts.

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

use super::server::TestServer;
use super::{aisdk_validate, chat_body, post_json, root};

/// Which node a request comes from, told by its prompt.
fn node_of(req: &ChatRequest) -> &'static str {
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
pub fn question(req: &ChatRequest) -> String {
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
pub fn tool_messages(req: &ChatRequest) -> Vec<&str> {
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
pub type Log = Arc<Mutex<Vec<(&'static str, ChatRequest)>>>;

fn model() -> (Arc<ScriptedModel>, Log) {
    model_with(|_, _| None)
}

/// The well-behaved model, except where `over` answers for a node.
pub fn model_with(
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
pub fn mcp_config_with(env: &str, choices: bool) -> McpConfig {
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
pub async fn start(mode: Option<&str>) -> (TestServer, Log) {
    start_with(mode.map(mcp_config), model()).await
}

/// A server with the shipped chat graph, `model` and the MCP servers of
/// `mcp`, if any.
pub async fn start_with(
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
pub struct Turned {
    pub sse: String,
    pub chunks: Vec<Value>,
    pub parts: Vec<Value>,
    pub calls: Vec<(&'static str, ChatRequest)>,
}

impl Turned {
    pub fn calls_to(&self, node: &str) -> Vec<&ChatRequest> {
        self.calls
            .iter()
            .filter(|(n, _)| *n == node)
            .map(|(_, r)| r)
            .collect()
    }

    pub fn system_of(&self, node: &str) -> String {
        match self.calls_to(node).first().and_then(|r| r.messages.first()) {
            Some(ChatMessage::System { content }) => content.clone(),
            _ => panic!("no request from {node}"),
        }
    }

    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect()
    }

    pub fn part(&self, ty: &str) -> Option<&Value> {
        self.parts.iter().find(|p| p["type"] == ty)
    }
}

pub async fn turn(server: &TestServer, log: &Log, chat: &str, text: &str) -> Turned {
    turn_body(server, log, chat, &chat_body(chat, text)).await
}

/// One turn with a whole request body (a longer conversation).
pub async fn turn_body(server: &TestServer, log: &Log, chat: &str, body: &Value) -> Turned {
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

pub fn path_of(t: &Turned) -> Vec<&'static str> {
    let mut nodes: Vec<&'static str> = Vec::new();
    for (n, _) in &t.calls {
        if nodes.last() != Some(n) {
            nodes.push(n);
        }
    }
    nodes
}
