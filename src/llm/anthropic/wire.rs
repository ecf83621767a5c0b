//! What goes over the wire to Anthropic's Messages API, and the parser
//! that turns its streamed events into [`LlmChunk`]s.
//!
//! The shapes follow the official Python SDK's types, generated from
//! Anthropic's OpenAPI spec (`anthropic/types/message_create_params.py`,
//! `tool_param.py`, `tool_result_block_param.py`,
//! `cache_control_ephemeral_param.py`, `thinking_config_enabled_param.py`,
//! and for the stream `raw_message_stream_event.py` and its members:
//! `message_start`, `content_block_start` / `_delta` / `_stop`,
//! `message_delta` with `stop_reason` and cumulative `usage`,
//! `message_stop`, `ping`, `error`).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::events::Usage;
use crate::llm::openai::{ErrorInfo, EventParser, StreamFault, malformed};
use crate::llm::{ChatMessage, LlmChunk};

/// The Messages API's `system` and `messages` for a conversation.
///
/// System messages go to the top-level `system` (the API has no system
/// role), the last of its blocks marked for prompt caching; tool results
/// become `tool_result` blocks in a user turn; consecutive turns of one
/// role are merged, since the API expects them to alternate and every
/// `tool_result` of a turn's `tool_use`s in the one user turn after it.
pub(super) fn conversation(messages: &[ChatMessage], cache: bool) -> (Vec<Value>, Vec<Value>) {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m {
            ChatMessage::System { content } => {
                if !content.is_empty() {
                    system.push(json!({"type": "text", "text": content}));
                }
                continue;
            }
            ChatMessage::User { content } => ("user", vec![text_block(content)]),
            ChatMessage::UserWithImages { content, images } => {
                let mut blocks = vec![text_block(content)];
                blocks.extend(images.iter().map(|url| image_block(url)));
                ("user", blocks)
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::new();
                if !content.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                for c in tool_calls {
                    let input = serde_json::from_str::<Map<String, Value>>(&c.arguments)
                        .unwrap_or_default();
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                if blocks.is_empty() {
                    continue;
                }
                ("assistant", blocks)
            }
            ChatMessage::Tool { call_id, content } => (
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": content})],
            ),
        };
        match turns.last_mut() {
            Some((last, prev)) if *last == role => {
                // Tool results lead their user turn, as the API requires.
                if role == "user" && blocks.iter().all(|b| b["type"] == "tool_result") {
                    let at = prev
                        .iter()
                        .take_while(|b| b["type"] == "tool_result")
                        .count();
                    prev.splice(at..at, blocks);
                } else {
                    prev.extend(blocks);
                }
            }
            _ => turns.push((role, blocks)),
        }
    }
    if turns.first().is_none_or(|(role, _)| *role != "user") {
        // The conversation has to open with a user turn.
        turns.insert(0, ("user", vec![text_block("(conversation start)")]));
    }
    if cache && let Some(last) = system.last_mut() {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let messages = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    (system, messages)
}

fn text_block(text: &str) -> Value {
    // Empty text blocks are refused ("text content blocks must be non-empty").
    let text = if text.is_empty() { "(empty)" } else { text };
    json!({"type": "text", "text": text})
}

/// An image: `data:` URLs as base64 sources, others by URL.
fn image_block(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media_type, data)) = rest.split_once(";base64,")
    {
        return json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}});
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

/// Whether the conversation is inside a tool loop: its last assistant turn
/// called tools. Extended thinking is then left off, since the API wants
/// that turn to open with its signed thinking block, which is not kept.
pub(super) fn in_tool_loop(messages: &[ChatMessage]) -> bool {
    messages
        .iter()
        .rev()
        .find(|m| !matches!(m, ChatMessage::Tool { .. } | ChatMessage::System { .. }))
        .is_some_and(
            |m| matches!(m, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty()),
        )
}

/// One streamed event (`data:` of every event type; the `event:` name
/// repeats `type`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireEvent {
    r#type: String,
    index: Option<u32>,
    message: Option<WireMessage>,
    content_block: Option<Value>,
    delta: Option<Value>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessage {
    model: Option<String>,
    usage: Option<WireUsage>,
}

/// `usage` of `message_start` and (cumulative) of `message_delta`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    output_tokens_details: Option<WireOutputDetails>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireOutputDetails {
    thinking_tokens: Option<u64>,
}

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text,
    Thinking,
    Tool { args: bool },
    Answer,
    Other,
}

/// Turns the events of one response into [`LlmChunk`]s.
#[derive(Debug, Default)]
pub(super) struct MessageParser {
    blocks: Vec<(u32, Block)>,
    answer_tool: Option<std::sync::Arc<str>>,
    input: u64,
    cache_write: u64,
    cache_read: u64,
    output: u64,
    thinking: u64,
    finished: bool,
    produced: bool,
    model: Option<String>,
}

impl MessageParser {
    /// A parser; a `tool_use` of `answer_tool` is the answer text.
    pub(super) fn new(answer_tool: Option<std::sync::Arc<str>>) -> Self {
        Self {
            answer_tool,
            ..Self::default()
        }
    }

    fn usage(&mut self, u: WireUsage) {
        let keep = |slot: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        keep(&mut self.input, u.input_tokens);
        keep(&mut self.cache_write, u.cache_creation_input_tokens);
        keep(&mut self.cache_read, u.cache_read_input_tokens);
        keep(&mut self.output, u.output_tokens);
        keep(
            &mut self.thinking,
            u.output_tokens_details.and_then(|d| d.thinking_tokens),
        );
    }

    fn block(&mut self, index: u32) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }

    fn start(&mut self, index: u32, block: &Value, out: &mut Vec<LlmChunk>) {
        let kind = match block["type"].as_str() {
            Some("text") => {
                if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                    out.push(LlmChunk::Text(t.to_owned()));
                }
                Block::Text
            }
            Some("thinking") => Block::Thinking,
            Some("tool_use") => {
                let name = block["name"].as_str().unwrap_or_default().to_owned();
                if self.answer_tool.as_deref() == Some(name.as_str()) {
                    Block::Answer
                } else {
                    out.push(LlmChunk::ToolCallStart {
                        index,
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name,
                    });
                    Block::Tool { args: false }
                }
            }
            _ => Block::Other,
        };
        self.blocks.push((index, kind));
    }

    fn delta(&mut self, index: u32, delta: &Value, out: &mut Vec<LlmChunk>) {
        let text = |key: &str| {
            delta[key]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        };
        let Some(block) = self.block(index) else {
            return;
        };
        match (block, delta["type"].as_str()) {
            (Block::Text, Some("text_delta")) => out.extend(text("text").map(LlmChunk::Text)),
            (Block::Thinking, Some("thinking_delta")) => {
                out.extend(text("thinking").map(LlmChunk::Reasoning));
            }
            (Block::Answer, Some("input_json_delta")) => {
                out.extend(text("partial_json").map(LlmChunk::Text));
            }
            (Block::Tool { args }, Some("input_json_delta")) => {
                if let Some(delta) = text("partial_json") {
                    *args = true;
                    out.push(LlmChunk::ToolCallArgs { index, delta });
                }
            }
            _ => {}
        }
    }

    fn stop(&mut self, index: u32, out: &mut Vec<LlmChunk>) {
        // A tool without parameters streams no input: its arguments are `{}`.
        if let Some(Block::Tool { args: false }) = self.block(index) {
            out.push(LlmChunk::ToolCallArgs {
                index,
                delta: "{}".into(),
            });
        }
    }
}

/// Anthropic's `stop_reason` in the OpenAI vocabulary the rest of the
/// runtime reads.
fn finish_reason(stop: &str) -> String {
    match stop {
        "end_turn" | "stop_sequence" | "pause_turn" => "stop",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        other => other,
    }
    .to_owned()
}

impl EventParser for MessageParser {
    fn push(
        &mut self,
        event: &eventsource_stream::Event,
        out: &mut Vec<LlmChunk>,
    ) -> Result<bool, StreamFault> {
        let wire: WireEvent = serde_json::from_str(&event.data).map_err(|e| StreamFault {
            message: malformed(&e, &event.data),
            retryable: true,
        })?;
        let start = out.len();
        let index = wire.index.unwrap_or(0);
        match wire.r#type.as_str() {
            "message_start" => {
                if let Some(m) = wire.message {
                    self.model = m.model;
                    if let Some(u) = m.usage {
                        self.usage(u);
                    }
                }
            }
            "content_block_start" => {
                if let Some(block) = &wire.content_block {
                    self.start(index, block, out);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = &wire.delta {
                    self.delta(index, delta, out);
                }
            }
            "content_block_stop" => self.stop(index, out),
            "message_delta" => {
                if let Some(u) = wire.usage {
                    self.usage(u);
                }
                if let Some(stop) = wire.delta.as_ref().and_then(|d| d["stop_reason"].as_str()) {
                    self.finished = true;
                    out.push(LlmChunk::Finish(finish_reason(stop)));
                    out.push(LlmChunk::Usage(Usage {
                        prompt_tokens: self.input + self.cache_write + self.cache_read,
                        completion_tokens: self.output,
                        cached_tokens: self.cache_read,
                        cache_write_tokens: self.cache_write,
                        reasoning_tokens: self.thinking,
                        cost_nano_usd: 0,
                    }));
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let info = ErrorInfo::from_value(&json!({"error": wire.error}));
                return Err(StreamFault {
                    retryable: info.is_retryable(),
                    message: format!("server sent an error event: {}", info.message),
                });
            }
            // `ping`, and event types added later.
            _ => {}
        }
        self.produced |= out[start..].iter().any(crate::llm::fallback::is_answer);
        Ok(false)
    }

    fn finished(&self) -> bool {
        self.finished
    }

    fn produced_output(&self) -> bool {
        self.produced
    }

    fn response_model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::events::ToolCallRecord;

    #[test]
    fn system_goes_on_top_and_tool_results_follow_their_calls() {
        let messages = vec![
            ChatMessage::System {
                content: "be brief".into(),
            },
            ChatMessage::User {
                content: "weather and time?".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![
                    ToolCallRecord {
                        id: "t1".into(),
                        name: "weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                    ToolCallRecord {
                        id: "t2".into(),
                        name: "time".into(),
                        arguments: String::new(),
                    },
                ],
            },
            ChatMessage::Tool {
                call_id: "t1".into(),
                content: "sunny".into(),
            },
            ChatMessage::Tool {
                call_id: "t2".into(),
                content: "noon".into(),
            },
        ];
        let (system, turns) = conversation(&messages, true);
        assert_eq!(
            system,
            vec![
                json!({"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}})
            ]
        );
        assert_eq!(
            turns,
            vec![
                json!({"role": "user", "content": [{"type": "text", "text": "weather and time?"}]}),
                json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "t2", "name": "time", "input": {}}]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "noon"}]}),
            ]
        );
        assert!(in_tool_loop(&messages));
        assert!(!in_tool_loop(&messages[..2]));
    }
}
