//! The scripted models tests share, and the builder they are made with.
//!
//! A scripted model ([`ScriptedModel`]) answers each request with a
//! [`Turn`] its function picks; [`node_of`] tells which node a request comes
//! from by a marker in its system prompt. [`chat_graph`] builds a model for
//! the shipped chat graph, on which [`chat_model`] and [`long_model`] vary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmError};

/// Which node a request comes from: the name paired with the first marker
/// its system prompt contains (`unknown` when none does).
pub fn node_of(markers: &[(&str, &'static str)], req: &ChatRequest) -> &'static str {
    let system = match req.messages.first() {
        Some(ChatMessage::System { content }) => content.as_str(),
        _ => "",
    };
    markers
        .iter()
        .find(|(m, _)| system.contains(m))
        .map_or("unknown", |(_, n)| n)
}

/// The chat graph's calls answered plausibly: the router says RESEARCH,
/// an agent offered tools calls `calculator` once, follow-ups are two
/// questions; every other call gets `answer(request)`.
pub fn chat_graph(answer: impl Fn(&ChatRequest) -> Turn + Send + Sync + 'static) -> ScriptedModel {
    ScriptedModel::from_fn(move |req: &ChatRequest| {
        match req.response_format.as_ref().map(|f| f.name.as_str()) {
            Some("intent_classification") => {
                return Turn::json(
                    json!({"intent": "RESEARCH", "reasoning": "needs data", "missing_slots": [], "detected_language": "en"}),
                );
            }
            Some("followups") => return Turn::json(json!({"questions": ["Why?", "How?"]})),
            _ => {}
        }
        if !req.tools.is_empty()
            && !req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }))
        {
            return Turn::tool("calculator", json!({"expression": "6*7"}));
        }
        answer(req)
    })
}

/// [`chat_graph`] answering "The answer is 42 and that is final." — or,
/// with `fail_narrator`, failing the narrator's call with an upstream
/// detail the client must not see — a token every `delay` if given.
pub fn chat_model(fail_narrator: bool, delay: Option<Duration>) -> Arc<ScriptedModel> {
    let m = chat_graph(move |req| {
        let system = match req.messages.first() {
            Some(ChatMessage::System { content }) => content.as_str(),
            _ => "",
        };
        if system.contains("You write the answer") && fail_narrator {
            return Turn::Fail(LlmError::Http {
                status: 400,
                message: "secret upstream detail".into(),
            });
        }
        Turn::text("The answer is 42 and that is final.")
    });
    Arc::new(match delay {
        Some(d) => m.with_token_delay(d),
        None => m,
    })
}

/// [`chat_graph`] with a long answer streamed a word every `delay`: a run
/// that is mid-answer for a few seconds.
pub fn long_model(delay: Duration) -> Arc<ScriptedModel> {
    let answer: String = (0..60).map(|i| format!("word{i} ")).collect();
    Arc::new(chat_graph(move |_| Turn::text(answer.clone())).with_token_delay(delay))
}

/// Which node a request comes from, told by its prompt.
pub fn chat_node(req: &ChatRequest) -> &'static str {
    let system = match req.messages.first() {
        Some(ChatMessage::System { content }) => content.as_str(),
        _ => "",
    };
    const MARKERS: &[(&str, &str)] = &[
        ("You classify the user's latest message", "router"),
        ("running summary", "summarizer"),
        ("fetch the data for a short answer", "quick_answer"),
        ("research the user's question", "research"),
        (
            "explain what a World Bank Data360 indicator means",
            "explain",
        ),
        ("You write the answer the user will read", "narrator"),
        ("You suggest follow-up questions", "followup"),
        ("missing something essential", "clarifier"),
        ("outside what Data360", "suggester"),
        ("Data360's chat assistant", "direct"),
    ];
    MARKERS
        .iter()
        .find(|(m, _)| system.contains(m))
        .map_or("unknown", |(_, n)| n)
}

/// How the scripted model answers.
#[derive(Clone)]
pub struct Script {
    /// The router's reply.
    pub router: Turn,
    /// Agent model calls that ask for a tool before answering.
    pub agent_tool_rounds: usize,
    /// The tool agents ask for.
    pub agent_tool: &'static str,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            router: route("RESEARCH"),
            agent_tool_rounds: 1,
            agent_tool: "indicator_value",
        }
    }
}

pub fn route(intent: &str) -> Turn {
    Turn::json(
        json!({"intent": intent, "reasoning": format!("looks like {intent}"), "missing_slots": [], "detected_language": "en"}),
    )
}

/// The requests a scripted model received, with the node that sent each.
pub type RequestLog = Arc<Mutex<Vec<(String, ChatRequest)>>>;

/// A scripted model following `script`; returns it with the log of (node, request).
pub fn model(script: Script) -> (Arc<ScriptedModel>, RequestLog) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    let m = ScriptedModel::from_fn(move |req| {
        let node = chat_node(req);
        let mut log = seen.lock().unwrap();
        let calls_by_node = log.iter().filter(|(n, _)| n == node).count();
        log.push((node.to_owned(), req.clone()));
        match node {
            "router" => script.router.clone(),
            "summarizer" => Turn::text("Summary: the user asked many things."),
            "quick_answer" | "research" | "explain" => {
                if calls_by_node < script.agent_tool_rounds && !req.tools.is_empty() {
                    let args = if script.agent_tool == "indicator_value" {
                        json!({"country": "KEN", "indicator": "WB_WDI_SP_POP_TOTL"})
                    } else {
                        json!({})
                    };
                    Turn::tool(script.agent_tool, args)
                } else {
                    Turn::text(format!("{node} findings: 42"))
                }
            }
            "narrator" => Turn::text("The answer is 42."),
            "followup" => {
                Turn::json(json!({"questions": ["Why 42?", "What about 43?", "Is 41 close?"]}))
            }
            "clarifier" => Turn::text("Which city do you mean?"),
            "suggester" => Turn::text("1. Try this. 2. Try that. 3. Or this."),
            "direct" => Turn::text("Hello! How can I help?"),
            _ => Turn::Fail(LlmError::Scripted(format!(
                "unexpected request from {node}"
            ))),
        }
    });
    (Arc::new(m), log)
}
