//! UI message stream chunks (AI SDK v5/v6 `uiMessageChunkSchema`) and their
//! SSE framing.
//!
//! Optional fields are skipped when empty (older strict clients reject
//! unknown keys); keys the schema requires (`data`, `input`, `output`) are
//! always present, `null` if need be. One JSON object per `data:` line.

use std::fmt::Write;

use serde::Serialize;
use serde_json::Value;

/// One chunk of the UI message stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Chunk {
    /// Opens the assistant message.
    #[serde(rename_all = "camelCase")]
    Start {
        /// Fresh per response.
        message_id: String,
        /// Run id, request id, graph, model facts.
        message_metadata: Value,
    },
    /// Opens a step (one model call).
    StartStep,
    /// Closes a step.
    FinishStep,
    /// Opens a text part.
    TextStart {
        /// Part id.
        id: String,
    },
    /// Appends text.
    TextDelta {
        /// Part id.
        id: String,
        /// Text.
        delta: String,
    },
    /// Closes a text part.
    TextEnd {
        /// Part id.
        id: String,
    },
    /// Opens a reasoning part.
    ReasoningStart {
        /// Part id.
        id: String,
    },
    /// Appends reasoning.
    ReasoningDelta {
        /// Part id.
        id: String,
        /// Text.
        delta: String,
    },
    /// Closes a reasoning part.
    ReasoningEnd {
        /// Part id.
        id: String,
    },
    /// A tool call begins (server-executed tools are `dynamic`).
    #[serde(rename_all = "camelCase")]
    ToolInputStart {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool_name: String,
        /// True for tools that run on the server; false for client-side
        /// tools, which the front end executes (`tool-<name>` parts).
        dynamic: bool,
    },
    /// Argument text.
    #[serde(rename_all = "camelCase")]
    ToolInputDelta {
        /// Call id.
        tool_call_id: String,
        /// Fragment.
        input_text_delta: String,
    },
    /// Arguments complete.
    #[serde(rename_all = "camelCase")]
    ToolInputAvailable {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool_name: String,
        /// Parsed arguments.
        input: Value,
        /// Always true.
        dynamic: bool,
    },
    /// The call failed before its arguments were complete or valid (cut
    /// off by the token limit, not JSON): no `tool-input-available` came.
    #[serde(rename_all = "camelCase")]
    ToolInputError {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool_name: String,
        /// The arguments, when known.
        input: Value,
        /// Message.
        error_text: String,
        /// Always true.
        dynamic: bool,
    },
    /// Tool result.
    #[serde(rename_all = "camelCase")]
    ToolOutputAvailable {
        /// Call id.
        tool_call_id: String,
        /// Result.
        output: Value,
        /// Always true.
        dynamic: bool,
        /// `{"stategraph": {"cached": true}}` when the result came from the
        /// tool cache (absent otherwise); the AI SDK keeps it on the tool
        /// part as `resultProviderMetadata`.
        #[serde(skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
    /// A tool call waits for the user's approval (AI SDK v6+): the client
    /// answers with `addToolApprovalResponse` and sends the message back.
    #[serde(rename_all = "camelCase")]
    ToolApprovalRequest {
        /// The approval (an interrupt id).
        approval_id: String,
        /// Call id.
        tool_call_id: String,
    },
    /// A tool call the user denied: it did not run (AI SDK v6+).
    #[serde(rename_all = "camelCase")]
    ToolOutputDenied {
        /// Call id.
        tool_call_id: String,
    },
    /// Tool failure.
    #[serde(rename_all = "camelCase")]
    ToolOutputError {
        /// Call id.
        tool_call_id: String,
        /// Message.
        error_text: String,
        /// Always true.
        dynamic: bool,
    },
    /// A cited source.
    #[serde(rename_all = "camelCase")]
    SourceUrl {
        /// Source id.
        source_id: String,
        /// URL.
        url: String,
        /// Title.
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// Application data (`data-<name>`); serialized by hand, see [`Chunk::to_json`].
    #[serde(skip)]
    Data {
        /// The part type without the `data-` prefix.
        name: String,
        /// Stable id: same type and id replace in place.
        id: Option<String>,
        /// Payload.
        data: Value,
        /// Delivered to `onData` only, never stored.
        transient: bool,
    },
    /// A failure (fatal in `useChat`).
    #[serde(rename_all = "camelCase")]
    Error {
        /// Safe message with a reference id.
        error_text: String,
    },
    /// The message was stopped.
    Abort {
        /// Why.
        reason: String,
    },
    /// Closes the message.
    #[serde(rename_all = "camelCase")]
    Finish {
        /// `stop`, `length`, `content-filter`, `tool-calls`, `error`, `other`.
        finish_reason: String,
        /// Usage and timing.
        message_metadata: Value,
    },
}

#[derive(Serialize)]
struct DataOut<'a> {
    #[serde(rename = "type")]
    ty: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    data: &'a Value,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    transient: bool,
}

impl Chunk {
    /// The chunk as one line of JSON.
    pub fn to_json(&self) -> String {
        let r = match self {
            Chunk::Data {
                name,
                id,
                data,
                transient,
            } => serde_json::to_string(&DataOut {
                ty: format!("data-{name}"),
                id: id.as_deref(),
                data,
                transient: *transient,
            }),
            other => serde_json::to_string(other),
        };
        // Serializing these types cannot fail (string keys, finite data).
        r.unwrap_or_else(|_| r#"{"type":"error","errorText":"internal encoding error"}"#.to_owned())
    }

    /// Whether this is a `finish`, `error` or `abort` chunk.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Chunk::Finish { .. } | Chunk::Abort { .. })
    }
}

/// Appends one SSE event: its id (for `Last-Event-ID`) and `data: <json>`.
/// The id is the event seq for the event's first chunk (`part` 0) and
/// `seq.part` for the others, so every chunk's id is unique (see
/// [`super::After`]).
pub(crate) fn frame(out: &mut String, seq: u64, part: u32, chunk: &Chunk) {
    if part == 0 {
        let _ = write!(out, "id: {seq}\ndata: ");
    } else {
        let _ = write!(out, "id: {seq}.{part}\ndata: ");
    }
    out.push_str(&chunk.to_json());
    out.push_str("\n\n");
}

/// The stream terminator.
pub(crate) const DONE: &str = "data: [DONE]\n\n";

/// A keep-alive comment for idle streams.
#[cfg(feature = "server")]
pub(crate) const KEEP_ALIVE: &str = ": keep-alive\n\n";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunks_serialize_exactly_as_the_ai_sdk_expects() {
        let cases = [
            (
                Chunk::Start {
                    message_id: "m1".into(),
                    message_metadata: json!({"runId": "r"}),
                },
                r#"{"type":"start","messageId":"m1","messageMetadata":{"runId":"r"}}"#,
            ),
            (Chunk::StartStep, r#"{"type":"start-step"}"#),
            (
                Chunk::TextDelta {
                    id: "t".into(),
                    delta: "hi \"x\"\n".into(),
                },
                r#"{"type":"text-delta","id":"t","delta":"hi \"x\"\n"}"#,
            ),
            (
                Chunk::Data {
                    name: "thinking".into(),
                    id: Some("th-1".into()),
                    data: json!({"text": "x"}),
                    transient: false,
                },
                r#"{"type":"data-thinking","id":"th-1","data":{"text":"x"}}"#,
            ),
            (
                Chunk::Data {
                    name: "note".into(),
                    id: None,
                    data: Value::Null,
                    transient: true,
                },
                r#"{"type":"data-note","data":null,"transient":true}"#,
            ),
            (
                Chunk::Error {
                    error_text: "oops".into(),
                },
                r#"{"type":"error","errorText":"oops"}"#,
            ),
            (
                Chunk::Finish {
                    finish_reason: "stop".into(),
                    message_metadata: json!({}),
                },
                r#"{"type":"finish","finishReason":"stop","messageMetadata":{}}"#,
            ),
            (
                Chunk::SourceUrl {
                    source_id: "1".into(),
                    url: "https://x".into(),
                    title: None,
                },
                r#"{"type":"source-url","sourceId":"1","url":"https://x"}"#,
            ),
        ];
        for (chunk, want) in cases {
            assert_eq!(chunk.to_json(), want);
        }
    }

    #[test]
    fn tool_chunks_serialize_exactly_as_the_ai_sdk_expects() {
        let cases = [
            (
                Chunk::ToolInputStart {
                    tool_call_id: "c1".into(),
                    tool_name: "calc".into(),
                    dynamic: true,
                },
                r#"{"type":"tool-input-start","toolCallId":"c1","toolName":"calc","dynamic":true}"#,
            ),
            (
                Chunk::ToolInputAvailable {
                    tool_call_id: "c1".into(),
                    tool_name: "calc".into(),
                    input: Value::Null,
                    dynamic: true,
                },
                r#"{"type":"tool-input-available","toolCallId":"c1","toolName":"calc","input":null,"dynamic":true}"#,
            ),
            (
                Chunk::ToolInputError {
                    tool_call_id: "c1".into(),
                    tool_name: "calc".into(),
                    input: Value::Null,
                    error_text: "cut off".into(),
                    dynamic: true,
                },
                r#"{"type":"tool-input-error","toolCallId":"c1","toolName":"calc","input":null,"errorText":"cut off","dynamic":true}"#,
            ),
            (
                Chunk::ToolOutputError {
                    tool_call_id: "c1".into(),
                    error_text: "boom".into(),
                    dynamic: true,
                },
                r#"{"type":"tool-output-error","toolCallId":"c1","errorText":"boom","dynamic":true}"#,
            ),
        ];
        for (chunk, want) in cases {
            assert_eq!(chunk.to_json(), want);
        }
    }

    #[test]
    fn a_frame_carries_the_event_seq_and_the_chunk_index() {
        let mut out = String::new();
        frame(&mut out, 7, 0, &Chunk::StartStep);
        assert_eq!(out, "id: 7\ndata: {\"type\":\"start-step\"}\n\n");
        out.clear();
        frame(&mut out, 7, 2, &Chunk::StartStep);
        assert_eq!(out, "id: 7.2\ndata: {\"type\":\"start-step\"}\n\n");
    }
}
