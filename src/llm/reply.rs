//! One scripted model reply, as test files and model scripts write it:
//! text, structured JSON, reasoning, tool calls, an HTTP error or a
//! timeout — turned into the chunks a real model would stream.
//!
//! `stategraph test` plays these per node ([`crate::testing`]); a model
//! script (`[llm] script`, [`super::script`]) plays them by request, so a
//! graph's branches can be tried from the command line without writing an
//! OpenAI mock server.
//!
//! ```yaml
//! - text: "France's GDP was …"          # or a bare string
//! - json: { intent: billing }            # structured output (the JSON text is streamed)
//! - reasoning: "The user wants a figure"  # alone, or with text / tool_calls
//!   text: "…"
//! - tool_calls: [{ name: get_data, args: { country: FRA } }]
//! - error: { status: 429, message: "rate limited" }
//! - timeout: true
//! ```

use serde_json::{Map, Value};

use super::scripted::tokens;
use super::{LlmChunk, LlmError};
use crate::events::Usage;

/// A scripted tool call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReplyCall {
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub args: Value,
    /// The call id (generated when not given).
    pub id: Option<String>,
}

/// What a reply does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ReplyBody {
    /// Streams text (JSON text for `json:`), after optional reasoning, and
    /// then asks for tool calls, if any.
    Answer {
        /// Reasoning streamed first.
        reasoning: String,
        /// Answer text.
        text: String,
        /// Tool calls asked for.
        tool_calls: Vec<ReplyCall>,
    },
    /// The endpoint answers with an HTTP error (429 and 5xx are transient:
    /// retries and fallbacks apply as they would).
    Error {
        /// HTTP status.
        status: u16,
        /// Error message.
        message: String,
    },
    /// The call times out (as the client's `first_token` limit reports).
    Timeout,
}

/// One scripted reply, with the token usage it reports.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reply {
    /// What it does.
    pub body: ReplyBody,
    /// Tokens reported (`usage: {prompt, completion}`); estimated from the
    /// request and the answer when absent.
    pub usage: Option<Usage>,
    /// The fingerprint of the request this reply answered when it was
    /// recorded (`request:`, written by `stategraph test --from-run`): a
    /// call whose request differs (a prompt, the graph or the input was
    /// edited) is not answered by it.
    pub request: Option<String>,
}

/// The keys a reply mapping may have.
pub(crate) const REPLY_KEYS: &[&str] = &[
    "text",
    "json",
    "reasoning",
    "tool_calls",
    "error",
    "timeout",
    "usage",
    "request",
];

impl Reply {
    /// A text reply.
    pub(crate) fn text(text: impl Into<String>) -> Self {
        Self {
            body: ReplyBody::Answer {
                reasoning: String::new(),
                text: text.into(),
                tool_calls: Vec::new(),
            },
            usage: None,
            request: None,
        }
    }

    /// Reads a reply: a string (text) or a mapping with the keys of
    /// [`REPLY_KEYS`].
    ///
    /// # Errors
    /// What is wrong with it, as a sentence naming the key.
    pub(crate) fn from_json(v: &Value) -> Result<Self, String> {
        let map = match v {
            Value::String(s) => return Ok(Self::text(s.clone())),
            Value::Object(m) => m,
            other => {
                return Err(format!(
                    "a reply is a string or a mapping with one of `text`, `json`, `tool_calls`, `error`, `timeout`, not {}",
                    json_kind(other)
                ));
            }
        };
        if let Some(k) = map.keys().find(|k| !REPLY_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown reply key `{k}` (a reply has {})",
                REPLY_KEYS.join(", ")
            ));
        }
        let usage = map.get("usage").map(usage).transpose()?;
        let request = match map.get("request") {
            None => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(_) => {
                return Err(
                    "`request` is the recorded request's fingerprint, a string such as \"9f2c41d07ab3e815\""
                        .into(),
                );
            }
        };
        let body = if let Some(e) = map.get("error") {
            only(map, "error")?;
            error(e)?
        } else if let Some(t) = map.get("timeout") {
            only(map, "timeout")?;
            if t != &Value::Bool(true) {
                return Err("`timeout` is `true` (the call times out)".into());
            }
            ReplyBody::Timeout
        } else {
            answer(map)?
        };
        Ok(Self {
            body,
            usage,
            request,
        })
    }

    /// The chunks of this reply, as a model would stream them; the last
    /// item is the error of an error or timeout reply. `prompt_tokens` is
    /// reported when the reply gives no usage; `call` numbers generated
    /// tool-call ids.
    pub(crate) fn chunks(&self, prompt_tokens: u64, call: u32) -> Vec<Result<LlmChunk, LlmError>> {
        let (reasoning, text, calls) = match &self.body {
            ReplyBody::Error { status, message } => {
                return vec![Err(LlmError::Http {
                    status: *status,
                    message: message.clone(),
                })];
            }
            ReplyBody::Timeout => return vec![Err(LlmError::Timeout("first_token"))],
            ReplyBody::Answer {
                reasoning,
                text,
                tool_calls,
            } => (reasoning, text, tool_calls),
        };
        let mut out = Vec::new();
        let mut completion = 0u64;
        for t in tokens(reasoning) {
            completion += 1;
            out.push(Ok(LlmChunk::Reasoning(t)));
        }
        for t in tokens(text) {
            completion += 1;
            out.push(Ok(LlmChunk::Text(t)));
        }
        for (i, c) in calls.iter().enumerate() {
            let index = i as u32;
            let id =
                c.id.clone()
                    .unwrap_or_else(|| format!("call_{call}_{i}_{}", c.name));
            out.push(Ok(LlmChunk::ToolCallStart {
                index,
                id,
                name: c.name.clone(),
            }));
            let args = c.args.to_string();
            completion += 1 + args.len() as u64 / 4;
            out.push(Ok(LlmChunk::ToolCallArgs { index, delta: args }));
        }
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        out.push(Ok(LlmChunk::Finish(finish.into())));
        out.push(Ok(LlmChunk::Usage(self.usage.unwrap_or(Usage {
            prompt_tokens,
            completion_tokens: completion,
            ..Usage::default()
        }))));
        out
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// `error` and `timeout` stand alone (besides `usage`).
fn only(map: &Map<String, Value>, key: &str) -> Result<(), String> {
    match map
        .keys()
        .find(|k| *k != key && *k != "usage" && *k != "request")
    {
        Some(other) => Err(format!(
            "`{key}` stands alone in a reply; remove `{other}` (a failed call streams nothing)"
        )),
        None => Ok(()),
    }
}

fn error(v: &Value) -> Result<ReplyBody, String> {
    let status = v
        .get("status")
        .and_then(Value::as_u64)
        .filter(|s| (400..=599).contains(s))
        .ok_or("`error` needs `status`, an HTTP error status (400–599), e.g. 429 or 503")?;
    let message = match v.get("message") {
        None => "scripted error".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("`error.message` is a string".into()),
    };
    if let Some(k) = v
        .as_object()
        .and_then(|m| m.keys().find(|k| *k != "status" && *k != "message"))
    {
        return Err(format!(
            "unknown key `{k}` in `error` (it has `status` and `message`)"
        ));
    }
    Ok(ReplyBody::Error {
        status: status as u16,
        message,
    })
}

fn answer(map: &Map<String, Value>) -> Result<ReplyBody, String> {
    let text = match (map.get("text"), map.get("json")) {
        (Some(_), Some(_)) => {
            return Err("a reply has `text` or `json`, not both".into());
        }
        (Some(Value::String(s)), None) => s.clone(),
        (Some(_), None) => {
            return Err("`text` is a string (use `json` for structured output)".into());
        }
        (None, Some(j)) => j.to_string(),
        (None, None) => String::new(),
    };
    let reasoning = match map.get("reasoning") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("`reasoning` is a string".into()),
    };
    let tool_calls = match map.get("tool_calls") {
        None => Vec::new(),
        Some(Value::Array(items)) => items.iter().map(call).collect::<Result<_, _>>()?,
        Some(_) => return Err("`tool_calls` is a list of `{name, args}`".into()),
    };
    if text.is_empty() && reasoning.is_empty() && tool_calls.is_empty() && !map.contains_key("text")
    {
        return Err(
            "a reply needs one of `text`, `json`, `reasoning`, `tool_calls`, `error` or `timeout`"
                .into(),
        );
    }
    Ok(ReplyBody::Answer {
        reasoning,
        text,
        tool_calls,
    })
}

fn call(v: &Value) -> Result<ReplyCall, String> {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("a tool call needs `name`")?;
    if let Some(k) = v.as_object().and_then(|m| {
        m.keys()
            .find(|k| !["name", "args", "id"].contains(&k.as_str()))
    }) {
        return Err(format!(
            "unknown key `{k}` in a tool call (it has `name`, `args` and `id`)"
        ));
    }
    let args = match v.get("args") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return Err(format!("the arguments of `{name}` are a mapping")),
    };
    let id = match v.get("id") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("a tool call's `id` is a string".into()),
    };
    Ok(ReplyCall {
        name: name.to_owned(),
        args,
        id,
    })
}

fn usage(v: &Value) -> Result<Usage, String> {
    let get = |k: &str| v.get(k).and_then(Value::as_u64);
    match (get("prompt"), get("completion")) {
        (Some(prompt_tokens), Some(completion_tokens)) => Ok(Usage {
            prompt_tokens,
            completion_tokens,
            ..Usage::default()
        }),
        _ => Err("`usage` is `{prompt: N, completion: N}` (token counts)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_form_reads_and_streams_as_a_model_would() {
        let r = Reply::from_json(&json!("hello there")).unwrap();
        let chunks = r.chunks(10, 0);
        assert_eq!(chunks[0].as_ref().unwrap(), &LlmChunk::Text("hello".into()));
        assert_eq!(
            chunks[2].as_ref().unwrap(),
            &LlmChunk::Finish("stop".into())
        );

        let r = Reply::from_json(&json!({"json": {"intent": "X"}})).unwrap();
        let text: String = r
            .chunks(0, 0)
            .into_iter()
            .filter_map(|c| match c {
                Ok(LlmChunk::Text(t)) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(text, r#"{"intent":"X"}"#);

        let r = Reply::from_json(
            &json!({"reasoning": "think", "tool_calls": [{"name": "get", "args": {"a": 1}}]}),
        )
        .unwrap();
        let c = r.chunks(0, 3);
        assert_eq!(c[0].as_ref().unwrap(), &LlmChunk::Reasoning("think".into()));
        assert!(
            matches!(c[1].as_ref().unwrap(), LlmChunk::ToolCallStart { id, .. } if id == "call_3_0_get")
        );
        assert_eq!(
            c[3].as_ref().unwrap(),
            &LlmChunk::Finish("tool_calls".into())
        );

        let r = Reply::from_json(&json!({"error": {"status": 503, "message": "down"}})).unwrap();
        assert!(matches!(
            r.chunks(0, 0)[0],
            Err(LlmError::Http { status: 503, .. })
        ));
        let r =
            Reply::from_json(&json!({"timeout": true, "usage": {"prompt": 1, "completion": 2}}));
        assert!(matches!(r.unwrap().body, ReplyBody::Timeout));
    }

    #[test]
    fn mistakes_are_named() {
        let err = |v: Value| Reply::from_json(&v).unwrap_err();
        assert!(err(json!({"txt": "a"})).contains("unknown reply key `txt`"));
        assert!(err(json!({"text": "a", "json": {}})).contains("not both"));
        assert!(err(json!({"error": {"status": 200}})).contains("400–599"));
        assert!(err(json!({"error": {"status": 500}, "text": "a"})).contains("stands alone"));
        assert!(err(json!({"tool_calls": [{"args": {}}]})).contains("needs `name`"));
        assert!(err(json!({"timeout": false})).contains("`timeout` is `true`"));
        assert!(err(json!(3)).contains("not a number"));
        assert!(err(json!({})).contains("needs one of"));
    }
}
