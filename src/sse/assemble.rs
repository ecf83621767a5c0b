//! Chunks → the stored assistant message: the same parts `useChat` builds
//! from the stream (`process-ui-message-stream.ts`), so `GET /api/chat/{id}`
//! returns what the user saw.

use serde_json::{Map, Value, json};

use super::chunk::Chunk;

/// Builds UI message parts and metadata from chunks.
#[derive(Debug, Default)]
pub struct Assembler {
    parts: Vec<Value>,
    metadata: Map<String, Value>,
    id: Option<String>,
    /// Streaming text/reasoning parts by chunk id → part index (the stored
    /// parts carry no id, like the client's).
    open: Vec<(String, usize)>,
}

impl Assembler {
    /// An empty message.
    pub fn new() -> Self {
        Self::default()
    }

    /// The message id from `start`.
    pub fn message_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The parts so far.
    pub fn parts(&self) -> &[Value] {
        &self.parts
    }

    /// The metadata so far (`start` and `finish` metadata merged).
    pub fn metadata(&self) -> Value {
        Value::Object(self.metadata.clone())
    }

    fn open_part(&mut self, id: &str) -> Option<&mut Value> {
        let idx = self
            .open
            .iter()
            .rev()
            .find(|(i, _)| i == id)
            .map(|(_, idx)| *idx)?;
        self.parts.get_mut(idx)
    }

    fn start_part(&mut self, id: &str, ty: &str) {
        self.open.push((id.to_owned(), self.parts.len()));
        self.parts
            .push(json!({"type": ty, "text": "", "state": "streaming"}));
    }

    fn append(&mut self, id: &str, delta: &str) {
        if let Some(p) = self.open_part(id) {
            let text = format!("{}{delta}", p["text"].as_str().unwrap_or_default());
            p["text"] = json!(text);
        }
    }

    fn end_part(&mut self, id: &str) {
        if let Some(p) = self.open_part(id) {
            p["state"] = json!("done");
        }
        self.open.retain(|(i, _)| i != id);
    }

    fn tool(&mut self, call_id: &str) -> Option<&mut Value> {
        self.parts
            .iter_mut()
            .rev()
            .find(|p| p["toolCallId"] == call_id)
    }

    fn merge_metadata(&mut self, v: &Value) {
        if let Value::Object(m) = v {
            for (k, v) in m {
                self.metadata.insert(k.clone(), v.clone());
            }
        }
    }

    /// Applies one chunk.
    pub fn push(&mut self, chunk: &Chunk) {
        match chunk {
            Chunk::Start {
                message_id,
                message_metadata,
            } => {
                self.id = Some(message_id.clone());
                self.merge_metadata(message_metadata);
            }
            Chunk::StartStep => self.parts.push(json!({"type": "step-start"})),
            Chunk::FinishStep => {}
            Chunk::TextStart { id } => self.start_part(id, "text"),
            Chunk::ReasoningStart { id } => self.start_part(id, "reasoning"),
            Chunk::TextDelta { id, delta } | Chunk::ReasoningDelta { id, delta } => {
                self.append(id, delta)
            }
            Chunk::TextEnd { id } | Chunk::ReasoningEnd { id } => self.end_part(id),
            Chunk::ToolInputStart {
                tool_call_id,
                tool_name,
                ..
            } => self.parts.push(json!({
                "type": "dynamic-tool", "toolName": tool_name, "toolCallId": tool_call_id,
                "state": "input-streaming", "input": null,
            })),
            Chunk::ToolInputDelta { .. } => {}
            Chunk::ToolInputAvailable {
                tool_call_id,
                tool_name,
                input,
                ..
            } => match self.tool(tool_call_id) {
                Some(p) => {
                    p["state"] = json!("input-available");
                    p["input"] = input.clone();
                }
                None => self.parts.push(json!({
                    "type": "dynamic-tool", "toolName": tool_name, "toolCallId": tool_call_id,
                    "state": "input-available", "input": input,
                })),
            },
            Chunk::ToolOutputAvailable {
                tool_call_id,
                output,
                ..
            } => {
                if let Some(p) = self.tool(tool_call_id) {
                    p["state"] = json!("output-available");
                    p["output"] = output.clone();
                }
            }
            Chunk::ToolInputError {
                tool_call_id,
                tool_name,
                input,
                error_text,
                ..
            } => match self.tool(tool_call_id) {
                Some(p) => {
                    p["state"] = json!("output-error");
                    p["input"] = input.clone();
                    p["errorText"] = json!(error_text);
                }
                None => self.parts.push(json!({
                    "type": "dynamic-tool", "toolName": tool_name, "toolCallId": tool_call_id,
                    "state": "output-error", "input": input, "errorText": error_text,
                })),
            },
            Chunk::ToolOutputError {
                tool_call_id,
                error_text,
                ..
            } => {
                if let Some(p) = self.tool(tool_call_id) {
                    p["state"] = json!("output-error");
                    p["errorText"] = json!(error_text);
                }
            }
            Chunk::SourceUrl {
                source_id,
                url,
                title,
            } => {
                let mut p = json!({"type": "source-url", "sourceId": source_id, "url": url});
                if let Some(t) = title {
                    p["title"] = json!(t);
                }
                self.parts.push(p);
            }
            Chunk::Data {
                name,
                id,
                data,
                transient,
            } => {
                if *transient {
                    return;
                }
                let ty = format!("data-{name}");
                let existing = id.as_ref().and_then(|id| {
                    self.parts
                        .iter_mut()
                        .find(|p| p["type"] == ty && p["id"] == *id)
                });
                match existing {
                    Some(p) => p["data"] = data.clone(),
                    None => {
                        let mut p = json!({"type": ty, "data": data});
                        if let Some(id) = id {
                            p["id"] = json!(id);
                        }
                        self.parts.push(p);
                    }
                }
            }
            Chunk::Error { error_text } => {
                self.metadata.insert("error".into(), json!(error_text));
            }
            Chunk::Abort { reason } => {
                self.metadata.insert("aborted".into(), json!(reason));
            }
            Chunk::Finish {
                finish_reason,
                message_metadata,
            } => {
                self.metadata
                    .insert("finishReason".into(), json!(finish_reason));
                self.merge_metadata(message_metadata);
            }
        }
    }
}
