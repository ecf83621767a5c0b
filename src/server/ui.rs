//! The `POST /api/chat` request body as `DefaultChatTransport` sends it,
//! checked strictly (its conversion into a graph's input is the turn's:
//! [`crate::runs::turn`]).

use crate::server::Code;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::runs::turn::TurnMessage;

/// Longest chat or message id accepted.
const MAX_ID: usize = 256;

/// `trigger` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trigger {
    /// A new user message.
    Submit,
    /// Regenerate the last assistant message.
    Regenerate,
}

/// The request body.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct ChatBody {
    /// Chat id.
    pub id: String,
    /// The whole history, including the new user message.
    pub messages: Vec<TurnMessage>,
    /// `submit-message` (default) or `regenerate-message`.
    #[serde(default)]
    pub trigger: Option<String>,
    /// The message edited / continued.
    #[serde(default, rename = "messageId")]
    pub message_id: Option<String>,
    /// Graph to run (default `chat`).
    #[serde(default)]
    pub graph: Option<String>,
    /// Where the run pauses between steps: `{before: [node…], after:
    /// [node…]}` (docs/breakpoints.md); checked against the graph.
    #[serde(default)]
    pub breakpoints: Option<Value>,
    /// Any other keys: the graph's `chat.inputs` say which set a field
    /// (e.g. `forced_intent`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Parses and checks a request body.
///
/// # Errors
/// 400 with a code saying what is wrong: `invalid_utf8`, `invalid_json`,
/// `invalid_request`, `empty_messages`, `invalid_role`, `invalid_part`,
/// `invalid_id`, `empty_parts`, `unknown_trigger`, `no_user_message`.
pub(super) fn parse(bytes: &[u8]) -> Result<(ChatBody, Trigger), ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::new(
            Code::InvalidUtf8,
            format!(
                "request body is not valid UTF-8 (at byte {})",
                e.valid_up_to()
            ),
        )
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        ApiError::new(
            Code::InvalidJson,
            format!("request body is not valid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "request body must be a JSON object",
        ));
    }
    let body: ChatBody = serde_json::from_value(value)
        .map_err(|e| ApiError::new(Code::InvalidRequest, format!("invalid request body: {e}")))?;
    check_id(&body.id, "chat id")?;
    if body.messages.is_empty() {
        return Err(ApiError::new(
            Code::EmptyMessages,
            "`messages` must contain at least one message",
        ));
    }
    for (i, m) in body.messages.iter().enumerate() {
        check_id(&m.id, "message id")?;
        if !matches!(m.role.as_str(), "user" | "assistant" | "system") {
            return Err(ApiError::new(
                Code::InvalidRole,
                format!(
                    "messages[{i}].role is `{}`; expected user, assistant or system",
                    m.role
                ),
            ));
        }
        // An assistant message may have no parts yet (stopped before its
        // first one); a user or system message without any says nothing.
        if m.parts.is_empty() && m.role != "assistant" {
            return Err(ApiError::new(
                Code::EmptyParts,
                format!("messages[{i}] ({}) has no parts", m.role),
            ));
        }
        for (j, p) in m.parts.iter().enumerate() {
            check_part(p).map_err(|why| {
                ApiError::new(
                    Code::InvalidPart,
                    format!("messages[{i}].parts[{j}]: {why}"),
                )
            })?;
        }
    }
    let trigger = match body.trigger.as_deref() {
        None | Some("submit-message") => Trigger::Submit,
        Some("regenerate-message") => Trigger::Regenerate,
        Some(other) => {
            return Err(ApiError::new(
                Code::UnknownTrigger,
                format!("unknown trigger `{other}`; expected submit-message or regenerate-message"),
            ));
        }
    };
    if !body.messages.iter().any(|m| m.role == "user") {
        return Err(ApiError::new(
            Code::NoUserMessage,
            "`messages` contains no user message",
        ));
    }
    if let Some(id) = &body.message_id {
        check_id(id, "messageId")?;
    }
    Ok((body, trigger))
}

/// Ids are 1–[`MAX_ID`] bytes of visible characters: no control
/// characters, no whitespace, no invisible (zero-width, bidi, variation)
/// characters — two ids that look the same must be the same id.
fn check_id(id: &str, what: &str) -> Result<(), ApiError> {
    if id.is_empty()
        || id.len() > MAX_ID
        || id
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || invisible(c))
        || id == "."
        || id == ".."
    {
        return Err(ApiError::new(
            Code::InvalidId,
            format!("{what} must be 1–{MAX_ID} bytes of visible characters (no spaces)"),
        ));
    }
    Ok(())
}

/// Characters that render as nothing: soft hyphen, zero-width and joiner
/// characters, bidi controls, word joiners, variation selectors, fillers,
/// the byte-order mark.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{FFF0}'..='\u{FFF8}' | '\u{E0000}'..='\u{E007F}')
}

/// Checks one UI message part against the AI SDK's part types.
fn check_part(p: &Value) -> Result<(), String> {
    let Some(ty) = p.get("type").and_then(Value::as_str) else {
        return Err("a part needs a string `type`".into());
    };
    let need_str = |k: &str| {
        p.get(k)
            .and_then(Value::as_str)
            .map(|_| ())
            .ok_or_else(|| format!("`{ty}` part needs a string `{k}`"))
    };
    match ty {
        "text" | "reasoning" => need_str("text"),
        "step-start" => Ok(()),
        "source-url" => need_str("url").and(need_str("sourceId")),
        "source-document" => need_str("sourceId"),
        "file" => need_str("url").and(need_str("mediaType")),
        "dynamic-tool" => need_str("toolCallId").and(need_str("toolName")),
        t if t.starts_with("tool-") => need_str("toolCallId"),
        t if t.starts_with("data-") => Ok(()),
        other => Err(format!("unknown part type `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> &'static str {
        parse(body.as_bytes())
            .err()
            .map_or("ok", |e| e.code.as_str())
    }

    #[test]
    fn bad_bodies_get_specific_codes() {
        let ok = r#"{"id":"c1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"submit-message"}"#;
        assert_eq!(code(ok), "ok");
        assert_eq!(code("{nope"), "invalid_json");
        assert_eq!(code("[]"), "invalid_request");
        assert_eq!(code(r#"{"id":"c1"}"#), "invalid_request");
        assert_eq!(code(r#"{"id":"c1","messages":[]}"#), "empty_messages");
        assert_eq!(code(&ok.replace("\"user\"", "\"robot\"")), "invalid_role");
        assert_eq!(
            code(&ok.replace("\"text\",\"text\"", "\"bogus\",\"text\"")),
            "invalid_part"
        );
        assert_eq!(
            code(&ok.replace("submit-message", "resubmit")),
            "unknown_trigger"
        );
        assert_eq!(code(&ok.replace("\"c1\"", "\"\"")), "invalid_id");
        assert_eq!(code(&ok.replace("\"c1\"", "\"  \"")), "invalid_id");
        assert_eq!(code(&ok.replace("\"m1\"", "\"\u{200B}\"")), "invalid_id");
        assert_eq!(code(&ok.replace("\"m1\"", "\"m\u{FEFF}1\"")), "invalid_id");
        assert_eq!(
            code(&ok.replace(r#"[{"type":"text","text":"hi"}]"#, "[]")),
            "empty_parts"
        );
        assert_eq!(
            code(&ok.replace("\"user\"", "\"assistant\"")),
            "no_user_message"
        );
        assert_eq!(
            parse(b"{\"id\":\"\xff\"}").unwrap_err().code.as_str(),
            "invalid_utf8"
        );
    }
}
