//! Chunks → the stored assistant message: the same parts `useChat` builds
//! from the stream (`process-ui-message-stream.ts`), so `GET /api/chat/{id}`
//! returns what the user saw.
//!
//! One exception, a failed run ([`Assembler::stored_parts`]): live, `useChat`
//! shows the half answer next to its error state and a retry button; a
//! front end reloading the chat has only the stored parts, and would show
//! that half answer as if it were finished. So a failed message is stored
//! without its answer text, with a `data-error` part in its place. A run
//! that failed only after its answer was written is not that case: its
//! stream carries no `error` chunk (see `bridge/failed.rs`), and its
//! message is stored as streamed — what was shown stays.

use serde_json::{Map, Value, json};

use super::chunk::Chunk;

/// The part type a failed message ends with (see [`Assembler::stored_parts`]).
pub(crate) const ERROR_PART: &str = "data-error";

/// Whether stored message metadata is that of a failed run's message: its
/// stream ended in an error (`finishReason` `error`).
#[cfg(feature = "server")]
pub(crate) fn is_failed(metadata: &Value) -> bool {
    metadata["finishReason"] == "error"
}

/// Builds UI message parts and metadata from chunks.
#[derive(Debug, Default)]
pub struct Assembler {
    parts: Vec<Value>,
    metadata: Map<String, Value>,
    id: Option<String>,
    /// Streaming text/reasoning parts by chunk id → part index (the stored
    /// parts carry no id, like the client's).
    open: Vec<(String, usize)>,
    /// An `error` chunk arrived: the run failed.
    failed: bool,
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

    /// Whether the run failed (the stream carried an `error` chunk).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// The parts to store: [`Assembler::parts`], except for a failed run,
    /// whose message must not read as an answer on reload. Its text parts
    /// (the half answer) are dropped; what the run did stays — thinking
    /// notes, tool calls and their results, data, sources, reasoning — with
    /// any part still `streaming` marked `done` (the stream is over); and a
    /// last `data-error` part says what the client was told: `{message,
    /// reference}` (the run id, under which the operator finds the cause).
    /// `useChat` can still regenerate it: the message keeps its id.
    pub fn stored_parts(&self) -> Vec<Value> {
        if !self.failed() {
            return self.parts.clone();
        }
        let mut parts: Vec<Value> = self
            .parts
            .iter()
            .filter(|p| p["type"] != "text")
            .cloned()
            .collect();
        for p in &mut parts {
            if p["state"] == "streaming" {
                p["state"] = json!("done");
            }
        }
        let mut error = json!({ "message": self.metadata["error"] });
        if let Some(reference) = self.metadata.get("reference") {
            error["reference"] = reference.clone();
        }
        if let Some(node) = self.metadata.get("node") {
            error["node"] = node.clone();
        }
        parts.push(json!({ "type": ERROR_PART, "data": error }));
        parts
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
            c @ (Chunk::ToolInputStart { .. }
            | Chunk::ToolInputDelta { .. }
            | Chunk::ToolInputAvailable { .. }
            | Chunk::ToolInputError { .. }
            | Chunk::ToolApprovalRequest { .. }) => self.tool_input(c),
            c @ (Chunk::ToolOutputAvailable { .. }
            | Chunk::ToolOutputDenied { .. }
            | Chunk::ToolOutputError { .. }) => self.tool_output(c),
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
                if !*transient {
                    self.data(name, id.as_deref(), data);
                }
            }
            Chunk::Error { error_text } => {
                self.failed = true;
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

    /// A tool call's input side: its part appears (streaming, then with
    /// its input), fails on bad input, or waits for an approval.
    fn tool_input(&mut self, chunk: &Chunk) {
        match chunk {
            Chunk::ToolInputStart {
                tool_call_id,
                tool_name,
                dynamic,
            } => self.parts.push(tool_part(
                tool_name,
                tool_call_id,
                *dynamic,
                "input-streaming",
            )),
            Chunk::ToolInputAvailable {
                tool_call_id,
                tool_name,
                input,
                dynamic,
            } => match self.tool(tool_call_id) {
                Some(p) => {
                    p["state"] = json!("input-available");
                    p["input"] = input.clone();
                }
                None => {
                    let mut p = tool_part(tool_name, tool_call_id, *dynamic, "input-available");
                    p["input"] = input.clone();
                    self.parts.push(p);
                }
            },
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
            Chunk::ToolApprovalRequest {
                approval_id,
                tool_call_id,
            } => {
                if let Some(p) = self.tool(tool_call_id) {
                    p["state"] = json!("approval-requested");
                    p["approval"] = json!({ "id": approval_id });
                }
            }
            // Input deltas build nothing the stored part keeps.
            _ => {}
        }
    }

    /// A tool call's outcome: its output, a denied approval, or an error.
    fn tool_output(&mut self, chunk: &Chunk) {
        match chunk {
            Chunk::ToolOutputDenied { tool_call_id } => {
                if let Some(p) = self.tool(tool_call_id) {
                    p["state"] = json!("output-denied");
                    if let Some(a) = p.get_mut("approval").and_then(Value::as_object_mut) {
                        a.insert("approved".into(), json!(false));
                    }
                }
            }
            Chunk::ToolOutputAvailable {
                tool_call_id,
                output,
                provider_metadata,
                ..
            } => {
                if let Some(p) = self.tool(tool_call_id) {
                    p["state"] = json!("output-available");
                    if let Some(a) = p.get_mut("approval").and_then(Value::as_object_mut) {
                        a.insert("approved".into(), json!(true));
                    }
                    p["output"] = output.clone();
                    if let Some(m) = provider_metadata {
                        p["resultProviderMetadata"] = m.clone();
                    }
                }
            }
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
            _ => {}
        }
    }

    /// A `data-NAME` part; one with an id replaces the earlier part of the
    /// same name and id (as `useChat` does).
    fn data(&mut self, name: &str, id: Option<&str>, data: &Value) {
        let ty = format!("data-{name}");
        let existing = id.and_then(|id| {
            self.parts
                .iter_mut()
                .find(|p| p["type"] == ty && p["id"] == id)
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
}

/// A new tool part: `dynamic-tool` for server tools, `tool-<name>` for
/// client-side ones (as the AI SDK builds them).
fn tool_part(tool_name: &str, tool_call_id: &str, dynamic: bool, state: &str) -> Value {
    if dynamic {
        json!({"type": "dynamic-tool", "toolName": tool_name, "toolCallId": tool_call_id,
            "state": state, "input": null})
    } else {
        json!({"type": format!("tool-{tool_name}"), "toolCallId": tool_call_id,
            "state": state, "input": null})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assembled(chunks: &[Chunk]) -> Assembler {
        let mut a = Assembler::new();
        chunks.iter().for_each(|c| a.push(c));
        a
    }

    fn half_answer() -> Vec<Chunk> {
        vec![
            Chunk::Start {
                message_id: "m1".into(),
                message_metadata: json!({"runId": "r1"}),
            },
            Chunk::StartStep,
            Chunk::Data {
                name: "thinking".into(),
                id: Some("t1".into()),
                data: json!({"text": "Intent: billing"}),
                transient: false,
            },
            Chunk::ReasoningStart { id: "r".into() },
            Chunk::ReasoningDelta {
                id: "r".into(),
                delta: "hmm".into(),
            },
            Chunk::TextStart { id: "t".into() },
            Chunk::TextDelta {
                id: "t".into(),
                delta: "GDP grew by".into(),
            },
        ]
    }

    #[test]
    fn a_failed_message_is_stored_without_its_half_answer() {
        let mut chunks = half_answer();
        chunks.push(Chunk::Error {
            error_text: "could not finish (reference r1)".into(),
        });
        chunks.push(Chunk::Finish {
            finish_reason: "error".into(),
            message_metadata: json!({"reference": "r1"}),
        });
        let a = assembled(&chunks);
        assert!(a.failed() && is_failed(&a.metadata()));
        let parts = a.stored_parts();
        let types: Vec<&str> = parts.iter().filter_map(|p| p["type"].as_str()).collect();
        assert_eq!(
            types,
            ["step-start", "data-thinking", "reasoning", ERROR_PART],
            "{parts:?}"
        );
        assert_eq!(parts[2]["state"], "done", "nothing is left streaming");
        assert_eq!(parts[3]["data"]["reference"], "r1");
        assert_eq!(
            parts[3]["data"]["message"],
            "could not finish (reference r1)"
        );
        // What the client saw live is unchanged.
        assert!(a.parts().iter().any(|p| p["text"] == "GDP grew by"));
    }

    #[test]
    fn finished_and_stopped_messages_are_stored_as_streamed() {
        let mut stopped = half_answer();
        stopped.push(Chunk::Abort {
            reason: "stop requested".into(),
        });
        let a = assembled(&stopped);
        assert!(!a.failed() && !is_failed(&a.metadata()));
        assert_eq!(a.stored_parts(), a.parts());
        assert!(a.stored_parts().iter().any(|p| p["text"] == "GDP grew by"));
    }
}
