//! A tool that lives on an MCP server, and the mapping of MCP answers onto
//! the registry's [`ToolError`] kinds.
//!
//! MCP reports a failing tool two ways: as a successful response with
//! `isError: true` (most servers, also for unknown tools and arguments their
//! own validation rejects) or as a JSON-RPC error (`mcp-server-time` answers
//! an unknown tool with `-32602`). Both become the same structured failure a
//! model can correct itself from: `not_found` for an unknown tool,
//! `validation_error` for rejected arguments, `execution_error` otherwise —
//! always with the server's own message.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ErrorCode};
use serde_json::{Value, json};

use super::supervisor::Shared;
use crate::tools::{Tool, ToolError, ToolSpec};

/// One tool of one MCP server, as the registry sees it.
pub(super) struct McpTool {
    pub(super) spec: ToolSpec,
    /// Its name on the server (the registry name may carry a prefix).
    pub(super) remote: String,
    pub(super) server: Arc<Shared>,
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(call(&self.server, &self.remote, args))
    }
}

/// Calls `tool` (its name on the server) on `server`'s current connection.
pub(super) async fn call(server: &Shared, tool: &str, args: Value) -> Result<Value, ToolError> {
    let Some(peer) = server.peer() else {
        return Err(server.unavailable());
    };
    let arguments = match args {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(ToolError::Validation {
                message: "arguments must be a JSON object".into(),
                details: json!({ "arguments": other }),
            });
        }
    };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    match peer.call_tool(params).await {
        Ok(result) => from_result(server.name(), tool, result),
        Err(ServiceError::McpError(e)) => Err(from_code(
            server.name(),
            tool,
            Some(e.code),
            e.message.into_owned(),
            e.data,
        )),
        Err(
            e @ (ServiceError::Timeout { .. }
            | ServiceError::Cancelled { .. }
            | ServiceError::UnexpectedResponse),
        ) => Err(ToolError::Execution(format!(
            "MCP server `{}`: {e}",
            server.name()
        ))),
        Err(e) => {
            // The connection failed under the call: have the supervisor look
            // now rather than at the next refresh.
            server.suspect();
            let why = describe(&e);
            tracing::warn!(server = %server.name(), tool, error = %why, "MCP call lost its connection");
            Err(ToolError::Execution(format!(
                "MCP server `{}` is not reachable ({why}); try again later",
                server.name()
            )))
        }
    }
}

/// An rmcp error in words, without the transport's Rust type name and with
/// the underlying causes (`connection refused`).
pub(super) fn describe(e: &ServiceError) -> String {
    match e {
        ServiceError::TransportSend(t) => {
            with_causes(format!("transport error: {}", t.error), t.error.source())
        }
        other => with_causes(other.to_string(), std::error::Error::source(other)),
    }
}

/// A failed handshake in words (as [`describe`]).
pub(super) fn describe_init(e: &rmcp::service::ClientInitializeError) -> String {
    match e {
        rmcp::service::ClientInitializeError::TransportError { error, context } => with_causes(
            format!("transport error ({context}): {}", error.error),
            error.error.source(),
        ),
        other => with_causes(other.to_string(), std::error::Error::source(other)),
    }
}

/// `text` followed by each cause not already in it.
pub(super) fn with_causes(
    mut text: String,
    mut source: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    while let Some(cause) = source {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        source = cause.source();
    }
    text
}

/// A successful response: `structuredContent` if the server sent one, the
/// content blocks otherwise; an `isError` response becomes a [`ToolError`].
pub(super) fn from_result(
    server: &str,
    tool: &str,
    result: CallToolResult,
) -> Result<Value, ToolError> {
    let structured = result.structured_content.filter(|v| !v.is_null());
    if result.is_error == Some(true) {
        let text = text_of(&result.content);
        let message = match (text.is_empty(), &structured) {
            (false, _) => text,
            (true, Some(v)) => v.to_string(),
            (true, None) => format!("tool `{tool}` reported an error without a message"),
        };
        let (code, message) = split_code(&message);
        return Err(from_code(server, tool, code, message, structured));
    }
    if let Some(v) = structured {
        return Ok(v);
    }
    Ok(content_value(&result.content))
}

/// The content blocks as one value: the text when every block is text
/// (parsed, when it is a JSON object or array), otherwise
/// `{text, content: [non-text blocks as JSON]}`.
pub(super) fn content_value(content: &[ContentBlock]) -> Value {
    let text = text_of(content);
    let others: Vec<Value> = content
        .iter()
        .filter(|b| b.as_text().is_none())
        .filter_map(|b| serde_json::to_value(b).ok())
        .collect();
    match (others.is_empty(), text.is_empty()) {
        (true, true) => Value::Null,
        // JSON text is JSON: the model and the stream get the object, not
        // a string holding it.
        (true, false) => match serde_json::from_str::<Value>(&text) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
            _ => Value::String(text),
        },
        (false, true) => json!({ "content": others }),
        (false, false) => json!({ "text": text, "content": others }),
    }
}

fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| b.as_text())
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Servers built on the TypeScript SDK turn protocol errors into `isError`
/// text `MCP error -32602: …`; the code is worth keeping.
fn split_code(message: &str) -> (Option<ErrorCode>, String) {
    let parsed = message.strip_prefix("MCP error ").and_then(|rest| {
        let (code, msg) = rest.split_once(':')?;
        Some((ErrorCode(code.trim().parse().ok()?), msg.trim().to_owned()))
    });
    match parsed {
        Some((code, msg)) => (Some(code), msg),
        None => (None, message.to_owned()),
    }
}

/// The failure kind for a server's error code and message.
pub(super) fn from_code(
    server: &str,
    tool: &str,
    code: Option<ErrorCode>,
    message: String,
    data: Option<Value>,
) -> ToolError {
    let lower = message.to_ascii_lowercase();
    let unknown_tool =
        lower.contains("unknown tool") || (lower.contains("tool") && lower.contains("not found"));
    let mut details = json!({ "server": server, "tool": tool });
    if let Some(c) = code {
        details["code"] = json!(c.0);
    }
    if let Some(d) = data {
        details["data"] = d;
    }
    match code {
        Some(ErrorCode::METHOD_NOT_FOUND) => ToolError::NotFound { message, details },
        _ if unknown_tool => ToolError::NotFound { message, details },
        Some(ErrorCode::INVALID_PARAMS) => ToolError::Validation { message, details },
        None if lower.contains("validation error") || lower.contains("invalid arguments") => {
            ToolError::Validation { message, details }
        }
        _ => ToolError::Execution(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn results_map_to_structured_content_or_text() {
        let structured = result(
            json!({"content": [{"type": "text", "text": "{\"a\":1}"}], "structuredContent": {"a": 1}}),
        );
        assert_eq!(from_result("s", "t", structured).unwrap(), json!({"a": 1}));
        let text = result(
            json!({"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}),
        );
        assert_eq!(from_result("s", "t", text).unwrap(), json!("one\ntwo"));
        let mixed = result(
            json!({"content": [{"type": "text", "text": "pic"}, {"type": "image", "data": "AAA=", "mimeType": "image/png"}]}),
        );
        let v = from_result("s", "t", mixed).unwrap();
        assert_eq!(v["text"], "pic");
        assert_eq!(v["content"][0]["type"], "image");
        assert_eq!(
            from_result("s", "t", result(json!({"content": []}))).unwrap(),
            Value::Null
        );
    }

    #[test]
    fn errors_keep_the_server_message_and_get_a_kind() {
        let is_error = |text: &str| {
            result(json!({"content": [{"type": "text", "text": text}], "isError": true}))
        };
        let e = from_result(
            "s",
            "get-sum",
            is_error("MCP error -32602: Input validation error: a must be a number"),
        )
        .unwrap_err();
        assert_eq!(e.kind(), "validation_error");
        assert!(e.to_string().contains("a must be a number"), "{e}");
        assert_eq!(e.to_failure().details["code"], -32602);
        let e = from_result("s", "nope", is_error("Unknown tool: nope")).unwrap_err();
        assert_eq!(e.kind(), "not_found");
        let e = from_result("s", "fail", is_error("disk full")).unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string().as_str()),
            ("execution_error", "disk full")
        );
        let e = from_code(
            "time",
            "nope",
            Some(ErrorCode::INVALID_PARAMS),
            "Unknown tool: nope".into(),
            None,
        );
        assert_eq!(e.kind(), "not_found");
        let e = from_code(
            "time",
            "get_current_time",
            Some(ErrorCode::INVALID_PARAMS),
            "bad timezone".into(),
            None,
        );
        assert_eq!(e.kind(), "validation_error");
        let e = from_code(
            "time",
            "x",
            Some(ErrorCode::INTERNAL_ERROR),
            "boom".into(),
            None,
        );
        assert_eq!(e.kind(), "execution_error");
    }
}
