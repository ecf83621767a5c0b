//! The parser that turns the streamed chunks of an OpenAI-compatible
//! chat completion into [`LlmChunk`]s.
//!
//! Servers that call themselves OpenAI-compatible differ in small ways:
//! numeric error codes, finish reasons outside OpenAI's list, reasoning in
//! `reasoning_content` or `reasoning`, content sent as a list of parts, tool
//! calls without `index`, error events after HTTP 200. So every incoming
//! field is optional and unknown fields are ignored; a chunk is malformed
//! only when it is not JSON or a field has an impossible type.

use serde::Deserialize;
use serde_json::Value;

use super::error_body::ErrorInfo;
use crate::events::Usage;
use crate::llm::LlmChunk;

/// One streamed event: a `chat.completion.chunk`, or an error object.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireChunk {
    model: Option<String>,
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    /// OpenAI-style `{"error": {...}}`.
    error: Option<Value>,
    /// vLLM-style `{"object": "error", "message": ..., "code": 400}`.
    object: Option<String>,
    message: Option<Value>,
    code: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChoice {
    index: Option<u32>,
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireDelta {
    /// A string, or (some servers) a list of `{type, text}` parts.
    content: Option<Value>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<WireToolFragment>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireToolFragment {
    index: Option<u32>,
    id: Option<String>,
    function: Option<WireFunctionFragment>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunctionFragment {
    name: Option<String>,
    /// A string; a few servers send the arguments as a JSON object.
    arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<WireTokenDetails>,
    completion_tokens_details: Option<WireTokenDetails>,
}

/// `prompt_tokens_details` / `completion_tokens_details`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireTokenDetails {
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
}

/// A stream that went wrong: the server sent an error event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamFault {
    /// What the server said.
    pub(crate) message: String,
    /// Whether a new attempt could succeed.
    pub(crate) retryable: bool,
}

/// Tool call fragments seen so far for one index.
#[derive(Debug)]
struct ToolSlot {
    index: u32,
    id: Option<String>,
    started: bool,
    /// A call of the forced answer tool: its arguments are the answer text.
    answer: bool,
    /// Arguments that arrived before the name (emitted once it does).
    pending_args: String,
}

/// Turns the chunks of one response into [`LlmChunk`]s.
#[derive(Debug, Default)]
pub(super) struct ChunkParser {
    slots: Vec<ToolSlot>,
    finished: bool,
    output: bool,
    /// The tool whose arguments are the answer (structured output through
    /// a forced tool call).
    answer_tool: Option<std::sync::Arc<str>>,
    /// The model the chunks name.
    model: Option<String>,
}

impl ChunkParser {
    /// A parser; calls of `answer_tool` become answer text.
    pub(super) fn new(answer_tool: Option<std::sync::Arc<str>>) -> Self {
        Self {
            answer_tool,
            ..Self::default()
        }
    }

    /// The model the chunks name, once one did.
    pub(super) fn response_model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Whether a `finish_reason` has arrived.
    pub(super) fn finished(&self) -> bool {
        self.finished
    }

    /// Whether any answer (text, reasoning or a tool call) has been produced.
    pub(super) fn produced_output(&self) -> bool {
        self.output
    }

    /// Parses one chunk, appending what it carries to `out`.
    ///
    /// # Errors
    /// The chunk is an error event.
    pub(super) fn push(
        &mut self,
        chunk: WireChunk,
        out: &mut Vec<LlmChunk>,
    ) -> Result<(), StreamFault> {
        if let Some(fault) = chunk_error(&chunk) {
            return Err(fault);
        }
        if self.model.is_none() {
            self.model = chunk.model.filter(|m| !m.is_empty());
        }
        let start = out.len();
        // Only the first choice: requests never ask for `n > 1`.
        for choice in chunk
            .choices
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.index.unwrap_or(0) == 0)
        {
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.flush_nameless(out);
                self.finished = true;
                out.push(LlmChunk::Finish(reason));
            }
        }
        if let Some(u) = chunk.usage {
            out.push(LlmChunk::Usage(Usage {
                prompt_tokens: u.prompt_tokens.unwrap_or(0),
                completion_tokens: u.completion_tokens.unwrap_or(0),
                cached_tokens: u
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                reasoning_tokens: u
                    .completion_tokens_details
                    .and_then(|d| d.reasoning_tokens)
                    .unwrap_or(0),
                cache_write_tokens: 0,
                cost_nano_usd: 0,
            }));
        }
        self.output |= out[start..].iter().any(crate::llm::fallback::is_answer);
        Ok(())
    }

    fn delta(&mut self, delta: WireDelta, out: &mut Vec<LlmChunk>) {
        for r in [delta.reasoning_content, delta.reasoning]
            .into_iter()
            .flatten()
        {
            if !r.is_empty() {
                out.push(LlmChunk::Reasoning(r));
            }
        }
        match delta.content {
            Some(Value::String(s)) if !s.is_empty() => out.push(LlmChunk::Text(s)),
            Some(Value::Array(parts)) => {
                for part in parts {
                    let text = part.get("text").and_then(Value::as_str).unwrap_or_default();
                    if text.is_empty() {
                        continue;
                    }
                    match part.get("type").and_then(Value::as_str) {
                        Some("thinking" | "reasoning") => {
                            out.push(LlmChunk::Reasoning(text.to_owned()))
                        }
                        _ => out.push(LlmChunk::Text(text.to_owned())),
                    }
                }
            }
            _ => {}
        }
        // A refusal is the answer the user gets; there is no separate chunk kind for it.
        if let Some(r) = delta.refusal.filter(|r| !r.is_empty()) {
            out.push(LlmChunk::Text(r));
        }
        for fragment in delta.tool_calls.unwrap_or_default() {
            self.tool_fragment(fragment, out);
        }
    }

    fn tool_fragment(&mut self, f: WireToolFragment, out: &mut Vec<LlmChunk>) {
        let id = f.id.filter(|s| !s.is_empty());
        let index = match f.index {
            Some(i) => i,
            // No index (some servers): a new id opens a new call, anything else continues the last.
            None => match self.slots.last() {
                Some(last) if id.is_some() && last.id.is_some() && last.id != id => last.index + 1,
                Some(last) => last.index,
                None => 0,
            },
        };
        let pos = match self.slots.iter().position(|s| s.index == index) {
            Some(pos) => pos,
            None => {
                self.slots.push(ToolSlot {
                    index,
                    id: None,
                    started: false,
                    answer: false,
                    pending_args: String::new(),
                });
                self.slots.len() - 1
            }
        };
        let (name, args) = match f.function {
            Some(func) => (
                func.name.filter(|n| !n.is_empty()),
                match func.arguments {
                    Some(Value::String(s)) => s,
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                },
            ),
            None => (None, String::new()),
        };
        let slot = &mut self.slots[pos];
        if !slot.started {
            if id.is_some() {
                slot.id = id;
            }
            if let Some(name) = name {
                slot.started = true;
                slot.answer = self.answer_tool.as_deref() == Some(name.as_str());
                if !slot.answer {
                    out.push(LlmChunk::ToolCallStart {
                        index,
                        id: slot.id.clone().unwrap_or_default(),
                        name,
                    });
                }
                if !slot.pending_args.is_empty() {
                    let delta = std::mem::take(&mut slot.pending_args);
                    out.push(args_chunk(slot, delta));
                }
            }
        }
        if !args.is_empty() {
            if slot.started {
                out.push(args_chunk(slot, args));
            } else {
                slot.pending_args.push_str(&args);
            }
        }
    }

    /// Arguments whose call never got a name still reach the caller.
    fn flush_nameless(&mut self, out: &mut Vec<LlmChunk>) {
        for slot in &mut self.slots {
            if !slot.started && !slot.pending_args.is_empty() {
                out.push(LlmChunk::ToolCallArgs {
                    index: slot.index,
                    delta: std::mem::take(&mut slot.pending_args),
                });
            }
        }
    }
}

/// Argument text of a call: the answer itself for the forced answer tool.
fn args_chunk(slot: &ToolSlot, delta: String) -> LlmChunk {
    if slot.answer {
        LlmChunk::Text(delta)
    } else {
        LlmChunk::ToolCallArgs {
            index: slot.index,
            delta,
        }
    }
}

fn chunk_error(chunk: &WireChunk) -> Option<StreamFault> {
    let info = if let Some(err) = chunk.error.as_ref().filter(|e| !e.is_null()) {
        ErrorInfo::from_value(&serde_json::json!({ "error": err }))
    } else if chunk.object.as_deref() == Some("error") {
        ErrorInfo::from_value(&serde_json::json!({
            "message": chunk.message.clone().unwrap_or(Value::Null),
            "code": chunk.code.clone().unwrap_or(Value::Null),
        }))
    } else {
        return None;
    };
    let retryable = info.is_retryable();
    let message = match (&info.kind, info.status) {
        (Some(kind), _) => format!("server sent an error event ({kind}): {}", info.message),
        (None, Some(code)) => format!("server sent an error event (code {code}): {}", info.message),
        (None, None) => format!("server sent an error event: {}", info.message),
    };
    Some(StreamFault { message, retryable })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(lines: &[Value]) -> (Vec<LlmChunk>, Option<StreamFault>) {
        let mut p = ChunkParser::default();
        let mut out = Vec::new();
        for l in lines {
            let chunk: WireChunk = serde_json::from_value(l.clone()).unwrap();
            if let Err(f) = p.push(chunk, &mut out) {
                return (out, Some(f));
            }
        }
        (out, None)
    }

    #[test]
    fn fragments_without_index_and_args_before_name_are_assembled() {
        let (out, fault) = parse(&[
            json!({"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"arguments": "{\"x\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"function": {"name": "f", "arguments": ":1}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": {"y": 2}}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        ]);
        assert_eq!(fault, None);
        assert_eq!(
            out,
            vec![
                LlmChunk::ToolCallStart {
                    index: 0,
                    id: "a".into(),
                    name: "f".into()
                },
                LlmChunk::ToolCallArgs {
                    index: 0,
                    delta: "{\"x\"".into()
                },
                LlmChunk::ToolCallArgs {
                    index: 0,
                    delta: ":1}".into()
                },
                LlmChunk::ToolCallStart {
                    index: 1,
                    id: "b".into(),
                    name: "g".into()
                },
                LlmChunk::ToolCallArgs {
                    index: 1,
                    delta: "{\"y\":2}".into()
                },
                LlmChunk::Finish("tool_calls".into()),
            ]
        );
    }

    #[test]
    fn content_parts_reasoning_refusal_and_odd_finish_reasons_are_accepted() {
        let (out, fault) = parse(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning": "hmm"}}], "usage": null}),
            json!({"choices": [{"delta": {"content": [{"type": "thinking", "text": "so"}, {"type": "text", "text": "Hi"}]}}]}),
            json!({"choices": [{"delta": {"refusal": "no"}}, {"index": 1, "delta": {"content": "other choice"}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "eos"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 1}}}),
        ]);
        assert_eq!(fault, None);
        assert_eq!(
            out,
            vec![
                LlmChunk::Reasoning("hmm".into()),
                LlmChunk::Reasoning("so".into()),
                LlmChunk::Text("Hi".into()),
                LlmChunk::Text("no".into()),
                LlmChunk::Finish("eos".into()),
                LlmChunk::Usage(Usage {
                    prompt_tokens: 3,
                    completion_tokens: 2,
                    cached_tokens: 2,
                    reasoning_tokens: 1,
                    cache_write_tokens: 0,
                    cost_nano_usd: 0,
                }),
            ]
        );
    }

    #[test]
    fn error_events_in_both_styles_say_whether_to_retry() {
        let (_, fault) = parse(&[
            json!({"error": {"message": "overloaded", "type": "server_error", "code": null}}),
        ]);
        let fault = fault.unwrap();
        assert!(fault.retryable);
        assert!(fault.message.contains("overloaded"), "{}", fault.message);
        let (_, fault) = parse(&[json!({"object": "error", "message": "too long", "code": 400})]);
        let fault = fault.unwrap();
        assert!(!fault.retryable);
        assert_eq!(
            fault.message,
            "server sent an error event (code 400): too long"
        );
    }
}
