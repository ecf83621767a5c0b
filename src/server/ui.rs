//! The `POST /api/chat` request body as `DefaultChatTransport` sends it,
//! checked strictly, and its conversion into a graph's input state.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::error::ApiError;
use crate::graph::ChatIo;

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

/// A UI message from the client.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct UiMessage {
    /// Message id.
    pub id: String,
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// Parts (validated by [`check_part`]).
    #[serde(default)]
    pub parts: Vec<Value>,
    /// Client metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// The request body.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct ChatBody {
    /// Chat id.
    pub id: String,
    /// The whole history, including the new user message.
    pub messages: Vec<UiMessage>,
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
        ApiError::bad_request(
            "invalid_utf8",
            format!(
                "request body is not valid UTF-8 (at byte {})",
                e.valid_up_to()
            ),
        )
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!("request body is not valid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "request body must be a JSON object",
        ));
    }
    let body: ChatBody = serde_json::from_value(value).map_err(|e| {
        ApiError::bad_request("invalid_request", format!("invalid request body: {e}"))
    })?;
    check_id(&body.id, "chat id")?;
    if body.messages.is_empty() {
        return Err(ApiError::bad_request(
            "empty_messages",
            "`messages` must contain at least one message",
        ));
    }
    for (i, m) in body.messages.iter().enumerate() {
        check_id(&m.id, "message id")?;
        if !matches!(m.role.as_str(), "user" | "assistant" | "system") {
            return Err(ApiError::bad_request(
                "invalid_role",
                format!(
                    "messages[{i}].role is `{}`; expected user, assistant or system",
                    m.role
                ),
            ));
        }
        // An assistant message may have no parts yet (stopped before its
        // first one); a user or system message without any says nothing.
        if m.parts.is_empty() && m.role != "assistant" {
            return Err(ApiError::bad_request(
                "empty_parts",
                format!("messages[{i}] ({}) has no parts", m.role),
            ));
        }
        for (j, p) in m.parts.iter().enumerate() {
            check_part(p).map_err(|why| {
                ApiError::bad_request("invalid_part", format!("messages[{i}].parts[{j}]: {why}"))
            })?;
        }
    }
    let trigger = match body.trigger.as_deref() {
        None | Some("submit-message") => Trigger::Submit,
        Some("regenerate-message") => Trigger::Regenerate,
        Some(other) => {
            return Err(ApiError::bad_request(
                "unknown_trigger",
                format!("unknown trigger `{other}`; expected submit-message or regenerate-message"),
            ));
        }
    };
    if !body.messages.iter().any(|m| m.role == "user") {
        return Err(ApiError::bad_request(
            "no_user_message",
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
        return Err(ApiError::bad_request(
            "invalid_id",
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

/// The conversation as the client sent it, as stored messages in order.
pub(super) fn message_records(body: &ChatBody) -> Vec<crate::store::MessageRecord> {
    let now = crate::events::now_micros();
    body.messages
        .iter()
        .enumerate()
        .map(|(i, m)| crate::store::MessageRecord {
            chat_id: body.id.clone(),
            id: m.id.clone(),
            role: m.role.clone(),
            parts: Value::Array(m.parts.clone()),
            metadata: m.metadata.clone().unwrap_or(Value::Null),
            position: i as i64,
            created_at: now,
        })
        .collect()
}

/// The plain text of a message (its text parts).
pub(super) fn text_of(m: &UiMessage) -> String {
    let texts: Vec<&str> = m
        .parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    texts.join("\n")
}

/// A chat title from the first user message: its first line, without
/// control characters (a NUL cannot be stored in a PostgreSQL `TEXT`, and
/// none belongs in a title).
pub(super) fn title(messages: &[UiMessage]) -> String {
    let first = messages
        .iter()
        .find(|m| m.role == "user")
        .map(text_of)
        .unwrap_or_default();
    let first: String = first
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    let line = first.trim();
    if line.chars().count() > 80 {
        format!("{}…", line.chars().take(79).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// Largest text file (decoded bytes) passed to the model; the rest is cut
/// with a note.
const MAX_FILE_TEXT: usize = 100 * 1024;

/// The files attached to a message as the model gets them: text files
/// (`text/*`, JSON, CSV, XML, YAML given as `data:` URLs) as text appended to
/// the message, each under a `[file: NAME (TYPE)]` line; images as image
/// URLs. A file the model cannot read (a PDF, a remote text file) is named
/// in a line, so the model knows it was there.
fn attachments(m: &UiMessage) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut images = Vec::new();
    for p in m.parts.iter().filter(|p| p["type"] == "file") {
        let url = p["url"].as_str().unwrap_or_default();
        let media = p["mediaType"].as_str().unwrap_or_default();
        let name = p["filename"].as_str().unwrap_or("attachment");
        if media.starts_with("image/") {
            images.push(url.to_owned());
            continue;
        }
        let body = is_text(media).then(|| data_url_text(url)).flatten();
        text.push_str(&format!("\n\n[file: {name} ({media})]\n"));
        match body {
            Some(mut body) => {
                if body.len() > MAX_FILE_TEXT {
                    let mut cut = MAX_FILE_TEXT;
                    while !body.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    body.truncate(cut);
                    body.push_str("\n[… file cut at 100 KiB]");
                }
                text.push_str(&body);
            }
            None => text.push_str("(attached; its content cannot be read here)"),
        }
    }
    (text, images)
}

/// Whether a media type is text the model can read.
fn is_text(media: &str) -> bool {
    let media = media.split(';').next().unwrap_or_default().trim();
    media.starts_with("text/")
        || matches!(
            media,
            "application/json"
                | "application/csv"
                | "application/xml"
                | "application/yaml"
                | "application/x-yaml"
        )
}

/// The text a `data:` URL holds (base64 or percent-encoded), if it is one
/// and it is UTF-8.
fn data_url_text(url: &str) -> Option<String> {
    use base64::Engine as _;
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    let bytes = if meta.ends_with(";base64") {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok()?
    } else {
        percent_decode(data)
    };
    String::from_utf8(bytes).ok()
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The graph input, as the graph's `chat:` section maps the request: the
/// conversation (id, role, text) into the history field, the newest user
/// text into the text field, and the body keys `chat.inputs` names into
/// their fields.
pub(super) fn input_state(io: &ChatIo, body: &ChatBody) -> Value {
    let mut input = Map::new();
    if let Some(field) = &io.history {
        let msgs: Vec<Value> = body
            .messages
            .iter()
            .map(|m| {
                let (files, images) = attachments(m);
                let mut msg = json!({"id": m.id, "role": m.role, "content": text_of(m) + &files});
                if !images.is_empty() {
                    msg["images"] = json!(images);
                }
                msg
            })
            .collect();
        input.insert(field.to_string(), Value::Array(msgs));
    }
    if let Some(field) = &io.text {
        let text = body
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(text_of)
            .unwrap_or_default();
        input.insert(field.to_string(), json!(text));
    }
    for (key, field) in &io.inputs {
        if let Some(v) = body.extra.get(key).filter(|v| !v.is_null()) {
            input.insert(field.to_string(), v.clone());
        }
    }
    Value::Object(input)
}

/// Ids of the request's assistant messages, newest first: the answers of
/// earlier turns that the client still shows (a regenerated or edited turn
/// drops its answer and everything after it).
pub(super) fn answered(body: &ChatBody) -> Vec<&str> {
    body.messages
        .iter()
        .rev()
        .filter(|m| m.role == "assistant")
        .map(|m| m.id.as_str())
        .collect()
}

/// Seeds `input` with the `fields` of `previous` (the state the last turn
/// ended with); what the request itself sets wins.
pub(super) fn carry_into(input: &mut Value, previous: &Value, fields: &[std::sync::Arc<str>]) {
    let Value::Object(input) = input else { return };
    for f in fields {
        if input.contains_key(&**f) {
            continue;
        }
        if let Some(v) = previous.get(&**f) {
            input.insert(f.to_string(), v.clone());
        }
    }
}

/// Keeps the conversation's tool turns from one chat turn to the next. A
/// client sends only what it shows (text), but nodes with `messages:`
/// appended more to the history field: assistant tool calls, tool results.
/// When the previous turn's final state holds messages the request does
/// not, the conversation is that state's, then the answer the client shows
/// for that turn (`answer`, when the state does not end with an answer of
/// its own), then the request's newer messages. Otherwise the request's
/// conversation stands as sent.
pub(super) fn continue_conversation(
    input: &mut Value,
    previous: &Value,
    field: &str,
    body: &ChatBody,
    answer: &str,
) {
    let (Some(Value::Array(kept)), Some(Value::Array(sent))) =
        (previous.get(field), input.get(field))
    else {
        return;
    };
    // `input_state` maps the request's messages one to one.
    let Some(at) = body.messages.iter().position(|m| m.id == answer) else {
        return;
    };
    let ids: std::collections::HashSet<&str> =
        sent.iter().filter_map(|m| m["id"].as_str()).collect();
    if kept
        .iter()
        .all(|m| m["id"].as_str().is_some_and(|id| ids.contains(id)))
    {
        return;
    }
    let mut merged = kept.clone();
    let answered = merged.last().is_some_and(|m| {
        m["role"] == "assistant" && m["tool_calls"].as_array().is_none_or(Vec::is_empty)
    });
    if !answered && let Some(shown) = sent.get(at) {
        merged.push(shown.clone());
    }
    merged.extend(sent.iter().skip(at + 1).cloned());
    input[field] = Value::Array(merged);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carried_fields_seed_the_input_but_never_override_the_request() {
        let body: ChatBody = serde_json::from_value(json!({
            "id": "c",
            "messages": [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "find Acme"}]},
                {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "C-1"}]},
                {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "their invoices"}]},
                {"id": "a2", "role": "assistant", "parts": []},
            ]
        }))
        .unwrap();
        assert_eq!(answered(&body), ["a2", "a1"]);
        let io = ChatIo {
            history: Some("messages".into()),
            text: Some("query".into()),
            ..ChatIo::default()
        };
        let mut input = input_state(&io, &body);
        let previous = json!({
            "entities": [{"kind": "customer", "id": "C-1", "name": "Acme"}],
            "query": "find Acme",
            "summary": "",
        });
        let fields: Vec<std::sync::Arc<str>> =
            vec!["entities".into(), "query".into(), "language".into()];
        carry_into(&mut input, &previous, &fields);
        assert_eq!(input["entities"][0]["id"], "C-1");
        assert_eq!(input["query"], "their invoices", "the request wins");
        assert!(input.get("language").is_none(), "absent fields stay absent");
        assert!(input.get("summary").is_none(), "only carried fields");
    }

    fn code(body: &str) -> &'static str {
        parse(body.as_bytes()).err().map_or("ok", |e| e.code)
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
            parse(b"{\"id\":\"\xff\"}").unwrap_err().code,
            "invalid_utf8"
        );
    }
}
