//! A turn's input: the conversation as the client has it, mapped into the
//! graph's input state as its `chat:` section says (history, newest user
//! text, extra request keys), seeded with the fields the previous turn
//! carries and continued with that turn's tool messages.
//!
//! The one builder of a chat turn's input: `POST /api/chat` and
//! `stategraph run` both call [`input_state`], so a graph sees the same
//! input from either.

use serde_json::{Map, Value, json};

use super::TurnMessage;
use crate::graph::ChatIo;
use crate::store::MessageRecord;

/// The conversation as the client sent it, as stored messages in order.
pub(crate) fn message_records(chat_id: &str, messages: &[TurnMessage]) -> Vec<MessageRecord> {
    let now = crate::events::now_micros();
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| MessageRecord {
            chat_id: chat_id.to_owned(),
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
pub(crate) fn text_of(m: &TurnMessage) -> String {
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
pub(crate) fn title(messages: &[TurnMessage]) -> String {
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
fn attachments(m: &TurnMessage) -> (String, Vec<String>) {
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
pub(crate) fn input_state(
    io: &ChatIo,
    messages: &[TurnMessage],
    extra: &Map<String, Value>,
) -> Value {
    let mut input = Map::new();
    if let Some(field) = &io.history {
        let msgs: Vec<Value> = messages
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
        let text = messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(text_of)
            .unwrap_or_default();
        input.insert(field.to_string(), json!(text));
    }
    for (key, field) in &io.inputs {
        if let Some(v) = extra.get(key).filter(|v| !v.is_null()) {
            input.insert(field.to_string(), v.clone());
        }
    }
    Value::Object(input)
}

/// Ids of the request's assistant messages, newest first: the answers of
/// earlier turns that the client still shows (a regenerated or edited turn
/// drops its answer and everything after it).
pub(crate) fn answered(messages: &[TurnMessage]) -> Vec<&str> {
    messages
        .iter()
        .rev()
        .filter(|m| m.role == "assistant")
        .map(|m| m.id.as_str())
        .collect()
}

/// Seeds `input` with the `fields` of `previous` (the state the last turn
/// ended with); what the request itself sets wins.
pub(crate) fn carry_into(input: &mut Value, previous: &Value, fields: &[std::sync::Arc<str>]) {
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
pub(crate) fn continue_conversation(
    input: &mut Value,
    previous: &Value,
    field: &str,
    messages: &[TurnMessage],
    answer: &str,
) {
    let (Some(Value::Array(kept)), Some(Value::Array(sent))) =
        (previous.get(field), input.get(field))
    else {
        return;
    };
    // `input_state` maps the request's messages one to one.
    let Some(at) = messages.iter().position(|m| m.id == answer) else {
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
        let messages: Vec<TurnMessage> = serde_json::from_value(json!(
            [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "find Acme"}]},
                {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "C-1"}]},
                {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "their invoices"}]},
                {"id": "a2", "role": "assistant", "parts": []},
            ]
        ))
        .unwrap();
        assert_eq!(answered(&messages), ["a2", "a1"]);
        let io = ChatIo {
            history: Some("messages".into()),
            text: Some("query".into()),
            ..ChatIo::default()
        };
        let mut input = input_state(&io, &messages, &Map::new());
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
}
