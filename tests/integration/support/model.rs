//! The scripted models tests share, and the builder they are made with.
//!
//! A scripted model ([`ScriptedModel`]) answers each request with a
//! [`Turn`] its function picks; [`node_of`] tells which node a request comes
//! from by a marker in its system prompt. [`chat_graph`] builds a model for
//! the shipped chat graph, on which [`chat_model`] and [`long_model`] vary.

use std::sync::Arc;
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
