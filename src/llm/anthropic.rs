//! Anthropic's Messages API, natively: streamed text, `tool_use` with
//! `input_json_delta`, thinking blocks (to the thinking panel as
//! reasoning), the system prompt at the top level, `tool_result` blocks,
//! the required `max_tokens`, prompt caching (`cache_control` on the
//! system prompt and the tools, cache reads and writes in usage) and
//! structured output through a forced tool.
//!
//! A thin client: no crate for the Messages API is as well kept as
//! Anthropic's own SDKs, so the request is built here and sent through the
//! same machinery as the OpenAI client (`OpenAiEndpoint::call`): the
//! same retries (429 `rate_limit_error` and 529 `overloaded_error` are
//! retried, honouring `retry-after`), deadlines and SSE parsing; only the
//! body and the events differ (module `wire`).
//!
//! What the API requires, and how a request meets it (the official SDK's
//! types, `anthropic/types/message_create_params.py` and
//! `thinking_config_enabled_param.py`):
//! - `max_tokens` always (a node's, or 4096); with thinking it must exceed
//!   `budget_tokens` (at least 1024), so the budget is added on top;
//! - `temperature` in 0–1 (a graph's 0–2 is capped at 1), and none with
//!   thinking; thinking is also left off when a tool call is forced
//!   (structured output) and inside a tool loop (its signed blocks are not
//!   kept to send back).

mod wire;

use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};

use super::openai::{OpenAiEndpoint, Prepared};
use super::profile::{ModelRules, Price};
use super::spans::GenAiSpan;
use super::{ChatModel, ChatRequest, ChunkStream, LlmError};

/// The Messages API version every request names (`anthropic-version`).
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when a request sets none (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The smallest thinking budget the API accepts.
const MIN_THINKING: u32 = 1024;

/// Request-body fields this client writes itself.
const OWNED: &[&str] = &[
    "model",
    "messages",
    "system",
    "stream",
    "tools",
    "tool_choice",
    "max_tokens",
    "thinking",
];

/// A model on Anthropic's Messages API.
#[derive(Clone, Debug)]
pub(crate) struct AnthropicModel {
    endpoint: OpenAiEndpoint,
    name: Arc<str>,
    extra: Option<Arc<Map<String, Value>>>,
    max_tokens: Option<u32>,
    thinking: Option<u32>,
    rules: Arc<ModelRules>,
    price: Option<Price>,
}

impl AnthropicModel {
    /// `name` on `endpoint` (an endpoint with `api = "anthropic"`).
    pub(crate) fn new(endpoint: OpenAiEndpoint, name: &str) -> Self {
        Self {
            endpoint,
            rules: Arc::new(ModelRules::new("default", name, None)),
            name: Arc::from(name),
            extra: None,
            max_tokens: None,
            thinking: None,
            price: None,
        }
    }

    /// Prices its calls' usage (see [`Price`]).
    pub(crate) fn with_price(mut self, price: Option<Price>) -> Self {
        self.price = price;
        self
    }

    /// More request-body fields for every call (`top_k`, `metadata`, …);
    /// the fields this client writes are never replaced.
    pub(crate) fn with_extra(mut self, extra: Map<String, Value>) -> Self {
        self.extra = (!extra.is_empty()).then(|| Arc::new(extra));
        self
    }

    /// Caps every call's `max_tokens` at `cap`.
    pub(crate) fn with_max_tokens(mut self, cap: Option<u32>) -> Self {
        self.max_tokens = cap;
        self
    }

    /// Extended thinking with `budget` tokens (at least 1024).
    pub(crate) fn with_thinking(mut self, budget: Option<u32>) -> Self {
        self.thinking = budget.map(|b| b.max(MIN_THINKING));
        self
    }

    /// The role's rules (`reasoning_effort` sets the thinking budget).
    pub(crate) fn with_rules(mut self, rules: ModelRules) -> Self {
        self.rules = Arc::new(rules);
        self
    }

    /// The thinking budget of a call: the node's `reasoning_effort`, else
    /// the role's `thinking_budget`, else the role's `reasoning_effort`.
    fn thinking_budget(&self, request: &ChatRequest) -> Option<u32> {
        let by_effort = |effort: &str| match effort {
            "none" | "minimal" => None,
            "low" => Some(MIN_THINKING),
            "medium" => Some(4096),
            "high" => Some(16_384),
            _ => Some(32_000),
        };
        match &request.reasoning_effort {
            Some(effort) => by_effort(effort),
            None => self
                .thinking
                .or_else(|| self.rules.reasoning_effort.as_deref().and_then(by_effort)),
        }
    }

    /// The request body a call of `request` sends, and what was changed to
    /// meet the API's rules.
    pub(crate) fn body(&self, request: &ChatRequest) -> (Value, Vec<String>) {
        let mut changes = Vec::new();
        let (system, messages) = wire::conversation(&request.messages, true);
        let mut body = Map::new();
        body.insert("model".into(), json!(self.name));
        body.insert("stream".into(), json!(true));
        if !system.is_empty() {
            body.insert("system".into(), Value::Array(system));
        }
        body.insert("messages".into(), Value::Array(messages));
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                let schema = match &*t.parameters {
                    Value::Null => json!({"type": "object", "properties": {}}),
                    other => other.clone(),
                };
                json!({"name": t.name, "description": t.description, "input_schema": schema})
            })
            .collect();
        if let Some(f) = &request.response_format {
            tools.push(json!({
                "name": f.name,
                "description": "Give the answer: its input is the answer.",
                "input_schema": &*f.schema,
            }));
            body.insert(
                "tool_choice".into(),
                json!({"type": "tool", "name": f.name}),
            );
        }
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        if !tools.is_empty() {
            body.insert("tools".into(), Value::Array(tools));
        }
        let mut max_tokens = request
            .max_tokens
            .unwrap_or(DEFAULT_MAX_TOKENS)
            .min(self.max_tokens.unwrap_or(u32::MAX));
        let mut thinking = self.thinking_budget(request);
        if thinking.is_some() && request.response_format.is_some() {
            changes.push("thinking left off for a forced (structured) tool call".into());
            thinking = None;
        } else if thinking.is_some() && wire::in_tool_loop(&request.messages) {
            thinking = None;
        }
        if let Some(budget) = thinking {
            max_tokens = max_tokens.saturating_add(budget);
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        body.insert("max_tokens".into(), json!(max_tokens));
        match request.temperature {
            Some(_) if thinking.is_some() => {
                changes.push("temperature left out (thinking takes none)".into());
            }
            Some(t) if t > 1.0 => {
                changes.push(format!(
                    "temperature {t} capped at 1 (Anthropic's range is 0–1)"
                ));
                body.insert("temperature".into(), json!(1.0));
            }
            Some(t) => {
                body.insert("temperature".into(), json!(t));
            }
            None => {}
        }
        if !request.stop.is_empty() {
            body.insert("stop_sequences".into(), json!(request.stop));
        }
        for (k, v) in self.extra.iter().flat_map(|e| e.iter()) {
            if !OWNED.contains(&k.as_str()) && !body.contains_key(k) {
                body.insert(k.clone(), v.clone());
            }
        }
        (Value::Object(body), changes)
    }
}

impl ChatModel for AnthropicModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> String {
        let thinking = match self.thinking {
            Some(budget) => format!("thinking {budget} tokens"),
            None => "no thinking".into(),
        };
        format!(
            "{} on {} (anthropic, {thinking})",
            self.name,
            self.endpoint.base_url()
        )
    }

    fn adjustments(&self, request: &ChatRequest) -> Vec<String> {
        self.body(request).1
    }

    fn stream(&self, request: &ChatRequest) -> ChunkStream {
        let (body, changes) = self.body(request);
        self.rules.warn_once(&self.name, &changes);
        let body = match serde_json::to_vec(&body) {
            Ok(body) => body,
            Err(e) => {
                let e = LlmError::Stream(format!("failed to serialize the request: {e}"));
                return futures::StreamExt::boxed(futures::stream::once(async move { Err(e) }));
            }
        };
        let mut headers = HeaderMap::new();
        if let Ok(key) = HeaderValue::from_str(self.endpoint.key()) {
            headers.insert("x-api-key", key);
        }
        headers.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let answer: Option<Arc<str>> = request
            .response_format
            .as_ref()
            .map(|f| Arc::from(f.name.as_str()));
        let prepared = Prepared {
            url: format!("{}/messages", self.endpoint.base_url()),
            headers,
            query: Vec::new(),
            body,
            parser: Box::new(move || Box::new(wire::MessageParser::new(answer.clone()))),
        };
        let span = GenAiSpan::start("anthropic", &self.name, self.endpoint.host(), request);
        self.endpoint
            .call(Arc::clone(&self.name), prepared, span, self.price)
    }
}
