//! Model calls as OpenTelemetry GenAI spans.
//!
//! Each HTTP model call runs in a `tracing` span named `chat {model}`
//! (kind client) carrying the attributes of the OpenTelemetry semantic
//! conventions for generative AI (`gen_ai.*`, "GenAI client spans"):
//! operation, provider, request and response model, request settings,
//! input and output tokens and finish reasons, and `error.type` when the
//! call fails. It is created where the call starts, so its parent is the
//! span current there — the run's, which carries the run, request and chat
//! ids. The OTLP exporter (`crate::otlp`, with the `server` feature) sends
//! it; without an exporter it costs a disabled span.
//!
//! Prompts and completions (`gen_ai.input.messages`,
//! `gen_ai.output.messages`) are recorded only when content capture is on
//! (`[telemetry] capture_content = true`): they may hold personal data.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use tracing::field::Empty;

use super::{ChatMessage, ChatRequest, LlmChunk, LlmError};

static CAPTURE: AtomicBool = AtomicBool::new(false);

/// Turns content capture on or off for every model call from now on.
#[cfg(feature = "server")]
pub(crate) fn capture_content(on: bool) {
    CAPTURE.store(on, Ordering::Relaxed);
}

/// The span of one model call, fed with its chunks.
#[derive(Debug)]
pub(crate) struct GenAiSpan {
    span: tracing::Span,
    finish: Vec<String>,
    output: Option<String>,
    recorded_model: bool,
}

impl GenAiSpan {
    /// Opens the span of a `chat` call of `model` at `provider`
    /// (`openai`, `azure.ai.openai`, `anthropic`) on `server`.
    pub(crate) fn start(provider: &str, model: &str, server: &str, request: &ChatRequest) -> Self {
        let span = tracing::info_span!(
            "gen_ai",
            otel.name = %format!("chat {model}"),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider,
            gen_ai.request.model = model,
            server.address = server,
            gen_ai.request.max_tokens = Empty,
            gen_ai.request.temperature = Empty,
            gen_ai.response.model = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.response.finish_reasons = Empty,
            "error.type" = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
        );
        if let Some(m) = request.max_tokens {
            span.record("gen_ai.request.max_tokens", u64::from(m));
        }
        if let Some(t) = request.temperature {
            span.record("gen_ai.request.temperature", f64::from(t));
        }
        let capture = CAPTURE.load(Ordering::Relaxed);
        if capture {
            span.record(
                "gen_ai.input.messages",
                input_messages(&request.messages).as_str(),
            );
        }
        Self {
            span,
            finish: Vec::new(),
            output: capture.then(String::new),
            recorded_model: false,
        }
    }

    /// The model the provider says answered.
    pub(crate) fn response_model(&mut self, model: &str) {
        if !self.recorded_model {
            self.recorded_model = true;
            self.span.record("gen_ai.response.model", model);
        }
    }

    /// Records what a chunk says.
    pub(crate) fn chunk(&mut self, item: &Result<LlmChunk, LlmError>) {
        match item {
            Ok(LlmChunk::Usage(u)) => {
                self.span
                    .record("gen_ai.usage.input_tokens", u.prompt_tokens);
                self.span
                    .record("gen_ai.usage.output_tokens", u.completion_tokens);
            }
            Ok(LlmChunk::Finish(reason)) => {
                self.finish.push(reason.clone());
                let list = json!(self.finish).to_string();
                self.span
                    .record("gen_ai.response.finish_reasons", list.as_str());
            }
            Ok(LlmChunk::Text(t)) => {
                if let Some(out) = &mut self.output {
                    out.push_str(t);
                }
            }
            Ok(_) => {}
            Err(e) => {
                let kind = match e {
                    LlmError::Http { status, .. } => status.to_string(),
                    LlmError::Timeout(_) => "timeout".into(),
                    LlmError::Connect(_) => "connect".into(),
                    LlmError::ContentPolicy(_) => "content_policy".into(),
                    _ => "stream".into(),
                };
                self.span.record("error.type", kind.as_str());
            }
        }
    }
}

impl Drop for GenAiSpan {
    fn drop(&mut self) {
        if let Some(out) = &self.output {
            let messages = json!([{"role": "assistant", "parts": [{"type": "text", "content": out}],
                "finish_reason": self.finish.last()}]);
            self.span
                .record("gen_ai.output.messages", messages.to_string().as_str());
        }
    }
}

/// The conversation as the conventions' `gen_ai.input.messages` JSON.
fn input_messages(messages: &[ChatMessage]) -> String {
    let parts: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| match m {
            ChatMessage::System { content } => {
                json!({"role": "system", "parts": [{"type": "text", "content": content}]})
            }
            ChatMessage::User { content } | ChatMessage::UserWithImages { content, .. } => {
                json!({"role": "user", "parts": [{"type": "text", "content": content}]})
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                let mut parts = vec![json!({"type": "text", "content": content})];
                parts.extend(tool_calls.iter().map(|c| {
                    json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments})
                }));
                json!({"role": "assistant", "parts": parts})
            }
            ChatMessage::Tool { call_id, content } => json!({"role": "tool",
                "parts": [{"type": "tool_call_response", "id": call_id, "response": content}]}),
        })
        .collect();
    serde_json::Value::Array(parts).to_string()
}
